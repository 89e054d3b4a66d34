import { z } from "zod";
import { zodIssuesLine } from "../zod-issues.js";
import { canonicalJson } from "./canonical.js";
import { digest16 } from "./digest.js";
import { CanonicalJsonError, GrantRecordError } from "./errors.js";

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

/** The ledger record of one grant, as the original writes it. */
export interface GrantRecord {
  /** The grant id (16 hex digits). */
  readonly id: string;
  /** The tool name. */
  readonly tool: string;
  /** The verdict, capitalized as in the original. */
  readonly verdict: "Allow" | "Deny";
  /** `"this_tool"`, or the exact argument set. */
  readonly scope: "this_tool" | { readonly this_call: { readonly args: unknown } };
  /** The pin (sha256 fingerprint or legacy 16-hex digest), or null. */
  readonly pinned_descriptor: string | null;
  /** Creation time, epoch ms (0 when unknown). */
  readonly created_at_ms: number;
  /** A note for people, or null. */
  readonly note: string | null;
}

/**
 * zod schema of a ledger record. Unknown fields are ignored; absent metadata
 * reads as null / 0; `args` must be present (null is a valid argument set).
 */
export const GrantRecordSchema = z.object({
  id: z.string(),
  tool: z.string().min(1),
  verdict: z.enum(["Allow", "Deny"]),
  scope: z.union([
    z.literal("this_tool"),
    z.object({
      this_call: z.object({ args: z.unknown() }).refine((o) => "args" in o, { message: "args is required" }),
    }),
  ]),
  pinned_descriptor: z.string().nullable().optional().default(null),
  created_at_ms: z.number().int().nonnegative().optional().default(0),
  note: z.string().nullable().optional().default(null),
});

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

function checkCreatedAt(ms: number, what: string): void {
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw new GrantRecordError(`${what}: createdAtMs must be a non-negative integer, got ${String(ms)}`);
  }
}

interface GrantInit {
  readonly pinnedDescriptor: string | null;
  readonly createdAtMs: number;
  readonly note: string | null;
}

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
 * const g = new Grant("read", "allow", GrantScope.thisCall({ path: "a.rs" }))
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

  /** Set by #copy just before it constructs, so a copy skips re-canonicalizing. */
  static #seed: { readonly from: Grant; readonly init: GrantInit } | undefined;

  /**
   * @throws {GrantRecordError} when the tool is not a non-empty string, the
   * verdict is not `"allow"`/`"deny"` or the scope is malformed.
   * @throws {CanonicalJsonError} when this_call args have no JSON form.
   */
  constructor(tool: string, verdict: GrantVerdict, scope: GrantScope) {
    const seed = Grant.#seed;
    Grant.#seed = undefined;
    if (seed !== undefined) {
      this.id = seed.from.id;
      this.tool = seed.from.tool;
      this.verdict = seed.from.verdict;
      this.scope = seed.from.scope;
      this.#canonicalArgs = seed.from.#canonicalArgs;
      this.pinnedDescriptor = seed.init.pinnedDescriptor;
      this.createdAtMs = seed.init.createdAtMs;
      this.note = seed.init.note;
      Object.freeze(this);
      return;
    }
    if (typeof tool !== "string" || tool.length === 0) {
      throw new GrantRecordError(`grant tool must be a non-empty string, got ${JSON.stringify(String(tool))}`);
    }
    if (verdict !== "allow" && verdict !== "deny") {
      throw new GrantRecordError(`grant for tool '${tool}': verdict must be "allow" or "deny", got ${String(verdict)}`);
    }
    const kind = (scope as { type?: unknown } | null | undefined)?.type;
    let ledgerScope: GrantRecord["scope"];
    if (kind === "this_tool") {
      this.scope = THIS_TOOL;
      this.#canonicalArgs = null;
      ledgerScope = "this_tool";
    } else if (kind === "this_call" && "args" in scope) {
      let text: string;
      try {
        text = canonicalJson(scope.args);
      } catch (error) {
        if (error instanceof CanonicalJsonError) {
          throw new CanonicalJsonError(error.jsonPath, `${error.problem} (args of a grant for tool '${tool}')`, {
            cause: error,
          });
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
      throw new GrantRecordError(`grant for tool '${tool}': scope must be this_tool or this_call with args`);
    }
    this.tool = tool;
    this.verdict = verdict;
    this.id = digest16(
      canonicalJson({ tool, verdict: verdict === "allow" ? "Allow" : "Deny", scope: ledgerScope }),
    );
    this.pinnedDescriptor = null;
    this.createdAtMs = 0;
    this.note = null;
    Object.freeze(this);
  }

  /** A copy pinned to `descriptor` (a fingerprint or legacy digest), or unpinned with null. Same id. */
  withPinnedDescriptor(descriptor: string | null): Grant {
    if (descriptor !== null && (typeof descriptor !== "string" || descriptor.length === 0)) {
      throw new GrantRecordError(`grant ${this.id} for tool '${this.tool}': pin must be a non-empty string or null`);
    }
    return this.#copy({ pinnedDescriptor: descriptor, createdAtMs: this.createdAtMs, note: this.note });
  }

  /** A copy with `createdAtMs` set (a non-negative safe integer). Same id. */
  withCreatedAtMs(ms: number): Grant {
    checkCreatedAt(ms, `grant ${this.id} for tool '${this.tool}'`);
    return this.#copy({ pinnedDescriptor: this.pinnedDescriptor, createdAtMs: ms, note: this.note });
  }

  /** A copy with `note` set, or cleared with null. Same id. */
  withNote(note: string | null): Grant {
    if (note !== null && typeof note !== "string") {
      throw new GrantRecordError(`grant ${this.id} for tool '${this.tool}': note must be a string or null`);
    }
    return this.#copy({ pinnedDescriptor: this.pinnedDescriptor, createdAtMs: this.createdAtMs, note });
  }

  /**
   * True when the grant applies to a call: the tool name matches exactly and
   * the scope is this_tool, or this_call with canonically equal args. Ignores
   * the verdict and the pin; arguments without a JSON form are never covered.
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
    const scope =
      this.#canonicalArgs === null ? '"this_tool"' : `{"this_call":{"args":${this.#canonicalArgs}}}`;
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
        `grant record ${JSON.stringify(String(r?.id ?? "?"))} (tool ${JSON.stringify(String(r?.tool ?? "?"))}) ` +
          `is invalid: ${zodIssuesLine(parsed.error)}`,
        { cause: parsed.error },
      );
    }
    const data = parsed.data;
    const name = `grant record ${JSON.stringify(data.id)} (tool '${data.tool}')`;
    if (!Number.isSafeInteger(data.created_at_ms)) {
      throw new GrantRecordError(`${name}: created_at_ms is beyond 2^53`);
    }
    let grant: Grant;
    try {
      grant = new Grant(
        data.tool,
        data.verdict === "Allow" ? "allow" : "deny",
        data.scope === "this_tool" ? GrantScope.thisTool() : GrantScope.thisCall(data.scope.this_call.args),
      );
    } catch (error) {
      throw new GrantRecordError(`${name} is invalid: ${(error as Error).message}`, { cause: error });
    }
    return grant.#copy({
      pinnedDescriptor: data.pinned_descriptor,
      createdAtMs: data.created_at_ms,
      note: data.note,
    });
  }

  #copy(init: GrantInit): Grant {
    Grant.#seed = { from: this, init };
    return new Grant(this.tool, this.verdict, this.scope);
  }
}
