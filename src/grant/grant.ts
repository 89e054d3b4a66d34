import { z } from "zod";
import { everyKey, optionsProblem, shownKey } from "../unknown-option.js";
import { zodIssuesLine } from "../zod-issues.js";
import { canonicalJson } from "./canonical.js";
import { digest16 } from "./digest.js";
import { CanonicalJsonError, GrantRecordError } from "./errors.js";
import { shownValue } from "../errors.js";
import { shownText } from "../shown.js";

/** What a grant remembers: let the call through, or refuse it. */
export type GrantVerdict = "allow" | "deny";

/**
 * What a grant covers: every call of the tool, or calls whose arguments are
 * canonically equal to `args`.
 */
export type GrantScope = { readonly type: "this_tool" } | { readonly type: "this_call"; readonly args: unknown };

/** Builders for {@link GrantScope} values. */
export const GrantScope = {
  /** Covers every call of the tool, whatever its arguments. */
  thisTool(): GrantScope {
    return THIS_TOOL;
  },
  /**
   * Covers calls whose arguments are canonically equal to `args` (key order
   * never matters).
   */
  thisCall(args: unknown): GrantScope {
    return { type: "this_call", args };
  },
} as const;

const THIS_TOOL: GrantScope = Object.freeze({ type: "this_tool" });

/**
 * zod schema of a ledger record (`{"id","tool","verdict","scope",
 * "pinned_descriptor","created_at_ms","note"}`, as the original writes it).
 * Unknown fields are ignored, but a scope object holds `this_call` alone;
 * absent metadata reads as null / 0; `args` must be present (null is a valid
 * argument set).
 */
export const GrantRecordSchema = z.object({
  /** The grant id (16 hex digits). */
  id: z.string(),
  /** The tool name. */
  tool: z.string().min(1),
  /** The verdict, capitalized as in the original. */
  verdict: z.enum(["Allow", "Deny"]),
  /**
   * `"this_tool"`, or the exact argument set. An object holding another member
   * beside `this_call` (`{"this_tool":null,"this_call":…}`) names no one scope:
   * read as its this_call, a deny meant for the whole tool would cover one call.
   */
  scope: z.union([
    z.literal("this_tool"),
    z.strictObject({
      this_call: z.object({ args: z.unknown() }).refine((o) => "args" in o, { message: "args is required" }),
    }),
  ]),
  /** The pin (sha256 fingerprint or legacy 16-hex digest), or null. */
  pinned_descriptor: z.string().nullable().optional().default(null),
  /** Creation time, epoch ms (0 when unknown). */
  created_at_ms: z.number().int().nonnegative().optional().default(0),
  /** A note for people, or null. */
  note: z.string().nullable().optional().default(null),
});

/** The ledger record of one grant, as {@link GrantRecordSchema} parses it. */
export type GrantRecord = Readonly<z.infer<typeof GrantRecordSchema>>;

/** A record's id or tool as an error names it: strings and numbers as they are, anything else as `?`. */
function label(value: unknown): string {
  return typeof value === "string" || typeof value === "number" ? String(value) : "?";
}

function deepFreeze(root: unknown): void {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
      Object.freeze(value);
      for (const child of Object.values(value)) stack.push(child);
    }
  }
}

/** What a grant carries besides its rule; none of it changes the grant's id. */
export interface GrantMetadata {
  /** The descriptor fingerprint (or legacy digest) the grant is pinned to. @default null */
  readonly pinnedDescriptor?: string | null;
  /** When the grant was made, epoch ms (a non-negative safe integer). @default 0 */
  readonly createdAtMs?: number;
  /** Free text for people. @default null */
  readonly note?: string | null;
}

const METADATA_KEYS = everyKey<GrantMetadata>()(["pinnedDescriptor", "createdAtMs", "note"]);

/**
 * A remembered approval: allow or deny for a tool, or for one exact argument
 * set, optionally pinned to the tool's descriptor.
 *
 * Immutable. The `id` is `digest16(canonicalJson({tool, verdict, scope}))`
 * over the ledger spelling (verdict `"Allow"`/`"Deny"`, scope `"this_tool"` or
 * `{"this_call":{"args":…}}`), so re-granting the same rule gives the same id
 * and the `with…` builders never change it.
 *
 * @example
 * const g = new Grant("read", "allow", GrantScope.thisCall({ path: "a.txt" }))
 *   .withPinnedDescriptor(descriptorFingerprint(tool))
 *   .withCreatedAtMs(Date.now());
 */
export class Grant {
  /** 16 hex digits derived from tool, verdict and scope. */
  readonly id: string;
  /** The tool name, matched exactly (case-sensitive). */
  readonly tool: string;
  /** Allow or deny. */
  readonly verdict: GrantVerdict;
  /** The whole tool, or one argument set (a frozen JSON copy of the args given). */
  readonly scope: GrantScope;
  /** The descriptor digest or fingerprint the grant is pinned to, or null. */
  readonly pinnedDescriptor: string | null;
  /** When the grant was made, epoch ms; 0 when unknown. */
  readonly createdAtMs: number;
  /** Free text for people, or null. */
  readonly note: string | null;
  readonly #canonicalArgs: string | null;
  /** The ledger record's text, made on first use: a grant never changes, and a save writes every grant. */
  #ledgerText: string | undefined = undefined;

  /**
   * @param metadata Pin, creation time and note; the `with…` methods return
   *   copies with one of them changed.
   * @throws {GrantRecordError} when the tool is not a non-empty string, the
   * verdict is not `"allow"`/`"deny"`, the scope is malformed (a this_tool
   * scope with args included), or the metadata is not an object, has a key
   * other than `pinnedDescriptor`, `createdAtMs` and `note` (named, with the
   * one it likely misspells), or one not of its type.
   * @throws {CanonicalJsonError} when this_call args have no JSON form.
   */
  constructor(tool: string, verdict: GrantVerdict, scope: GrantScope, metadata: GrantMetadata = {}) {
    if (typeof tool !== "string" || tool.length === 0) {
      throw new GrantRecordError(`grant tool must be a non-empty string, got ${shownValue(tool)}`);
    }
    if (verdict !== "allow" && verdict !== "deny") {
      throw new GrantRecordError(
        `grant for tool ${shownKey(tool)}: verdict must be "allow" or "deny", got ${shownValue(verdict)}`,
      );
    }
    const kind = (scope as { type?: unknown } | null | undefined)?.type;
    let ledgerScope: GrantRecord["scope"];
    if (kind === "this_tool") {
      // Built by hand, `{ type: "this_tool", args }` reads as "these args", yet would cover every call.
      if ((scope as { args?: unknown }).args !== undefined) {
        throw new GrantRecordError(
          `grant for tool ${shownKey(tool)}: a this_tool scope covers every call and takes no args ` +
            "(for these args only, use GrantScope.thisCall(args))",
        );
      }
      this.scope = THIS_TOOL;
      this.#canonicalArgs = null;
      ledgerScope = "this_tool";
    } else if (kind === "this_call" && "args" in scope) {
      let text: string;
      try {
        text = canonicalJson(scope.args);
      } catch (error) {
        if (error instanceof CanonicalJsonError) {
          throw new CanonicalJsonError(
            error.jsonPath,
            `${error.problem} (args of a grant for tool ${shownKey(tool)})`,
            {
              cause: error,
            },
          );
        }
        throw error;
      }
      this.#canonicalArgs = text;
      // A private parsed copy: the caller mutating its args object cannot change the grant.
      const args = JSON.parse(text) as unknown;
      deepFreeze(args);
      this.scope = Object.freeze({ type: "this_call", args });
      ledgerScope = { this_call: { args } };
    } else {
      throw new GrantRecordError(`grant for tool ${shownKey(tool)}: scope must be this_tool or this_call with args`);
    }
    this.tool = tool;
    this.verdict = verdict;
    this.id = digest16(canonicalJson({ tool, verdict: verdict === "allow" ? "Allow" : "Deny", scope: ledgerScope }));
    const what = `grant ${this.id} for tool ${shownKey(tool)}`;
    // A key not read would be dropped without a word: `pinned_descriptor` (the ledger's spelling)
    // or a misspelt `pinnedDescriptor` would leave the grant unpinned, open to a changed tool.
    const wrong = optionsProblem(metadata, METADATA_KEYS, { shape: "an object or undefined" });
    if (wrong !== undefined) {
      const problem = `metadata ${wrong.key === undefined ? "" : "has "}${wrong.problem}`;
      throw new GrantRecordError(`${what}: ${problem}`, "cause" in wrong ? { cause: wrong.cause } : undefined);
    }
    const { pinnedDescriptor = null, createdAtMs = 0, note = null } = metadata;
    if (pinnedDescriptor !== null && (typeof pinnedDescriptor !== "string" || pinnedDescriptor.length === 0)) {
      throw new GrantRecordError(`${what}: pin must be a non-empty string or null`);
    }
    if (!Number.isSafeInteger(createdAtMs) || createdAtMs < 0) {
      throw new GrantRecordError(`${what}: createdAtMs must be a non-negative integer, got ${shownValue(createdAtMs)}`);
    }
    if (note !== null && typeof note !== "string") {
      throw new GrantRecordError(`${what}: note must be a string or null`);
    }
    this.pinnedDescriptor = pinnedDescriptor;
    this.createdAtMs = createdAtMs;
    this.note = note;
    Object.freeze(this);
  }

  /** A copy pinned to `descriptor` (a fingerprint or legacy digest), or unpinned with null. Same id. */
  withPinnedDescriptor(descriptor: string | null): Grant {
    return this.#with({ pinnedDescriptor: descriptor });
  }

  /** A copy with `createdAtMs` set (a non-negative safe integer). Same id. */
  withCreatedAtMs(ms: number): Grant {
    return this.#with({ createdAtMs: ms });
  }

  /** A copy with `note` set, or cleared with null. Same id. */
  withNote(note: string | null): Grant {
    return this.#with({ note });
  }

  #with(change: GrantMetadata): Grant {
    const metadata = { pinnedDescriptor: this.pinnedDescriptor, createdAtMs: this.createdAtMs, note: this.note };
    return newGrant(this.tool, this.verdict, this.scope, { ...metadata, ...change });
  }

  /**
   * True when the grant applies to a call: the tool name matches exactly and
   * the scope is this_tool, or this_call with canonically equal args. Ignores
   * the verdict and the pin. A this_call grant never covers arguments without
   * a JSON form; a this_tool grant covers them, as it covers any arguments (a
   * deny for the tool must not be passed over for them).
   */
  covers(tool: string, args: unknown): boolean {
    if (tool !== this.tool) return false;
    if (this.#canonicalArgs === null) return true;
    try {
      return canonicalJson(args) === this.#canonicalArgs;
    } catch (error) {
      if (error instanceof CanonicalJsonError) return false;
      throw error;
    }
  }

  /** The canonical JSON text of this_call args, or null for a this_tool grant. */
  get canonicalArgs(): string | null {
    return this.#canonicalArgs;
  }

  /**
   * The ledger record, in the original's field order and spelling:
   * `{"id","tool","verdict","scope","pinned_descriptor","created_at_ms","note"}`.
   */
  toJSON(): GrantRecord {
    return {
      id: this.id,
      tool: this.tool,
      verdict: this.verdict === "allow" ? "Allow" : "Deny",
      scope: this.scope.type === "this_tool" ? "this_tool" : { this_call: { args: this.scope.args } },
      pinned_descriptor: this.pinnedDescriptor,
      created_at_ms: this.createdAtMs,
      note: this.note,
    };
  }

  /**
   * The ledger record as compact JSON text, byte-compatible with the
   * original: fields in its order and `args` in canonical key order (which a
   * JavaScript object cannot hold for integer-like keys).
   */
  toLedgerText(): string {
    if (this.#ledgerText !== undefined) return this.#ledgerText;
    const scope = this.#canonicalArgs === null ? '"this_tool"' : `{"this_call":{"args":${this.#canonicalArgs}}}`;
    this.#ledgerText =
      `{"id":${JSON.stringify(this.id)},"tool":${JSON.stringify(this.tool)},` +
      `"verdict":${this.verdict === "allow" ? '"Allow"' : '"Deny"'},"scope":${scope},` +
      `"pinned_descriptor":${JSON.stringify(this.pinnedDescriptor)},` +
      `"created_at_ms":${String(this.createdAtMs)},"note":${JSON.stringify(this.note)}}`;
    return this.#ledgerText;
  }

  /**
   * Parses one ledger record (untrusted JSON). Unknown fields are ignored;
   * absent `pinned_descriptor`/`note` read as null and `created_at_ms` as 0.
   *
   * The id is always recomputed from tool, verdict and scope; the stored one
   * is not trusted. The id only names a record, and recomputing it keeps "one
   * entry per rule" true even for a hand-edited record, so a stored id that
   * differs is accepted and replaced rather than refused. The original
   * computes ids the same way, so its records keep theirs.
   *
   * @throws {GrantRecordError} naming the record's id and tool when it is not a grant.
   */
  static fromJSON(record: unknown): Grant {
    const parsed = GrantRecordSchema.safeParse(record);
    if (!parsed.success) {
      const r = (typeof record === "object" ? record : null) as { id?: unknown; tool?: unknown } | null;
      throw new GrantRecordError(
        `grant record ${shownText(label(r?.id))} (tool ${shownText(label(r?.tool))}) ` +
          `is invalid: ${zodIssuesLine(parsed.error)}`,
        { cause: parsed.error },
      );
    }
    const data = parsed.data;
    try {
      return newGrant(
        data.tool,
        data.verdict === "Allow" ? "allow" : "deny",
        data.scope === "this_tool" ? GrantScope.thisTool() : GrantScope.thisCall(data.scope.this_call.args),
        { pinnedDescriptor: data.pinned_descriptor, createdAtMs: data.created_at_ms, note: data.note },
      );
    } catch (error) {
      const name = `grant record ${shownText(data.id)} (tool ${shownKey(data.tool)})`;
      throw new GrantRecordError(`${name} is invalid: ${(error as Error).message}`, { cause: error });
    }
  }
}

/**
 * `new Grant(…)` for the class's own methods: a class that names itself in its own body is renamed
 * by the bundler (`var Grant = class _Grant`), and a grant would log as `_Grant {…}`.
 */
function newGrant(...args: ConstructorParameters<typeof Grant>): Grant {
  return new Grant(...args);
}
