import { canonicalJson } from "./canonical.js";
import { GrantConfigError, GrantRecordError } from "./errors.js";
import { shownValue } from "../errors.js";
import type { Grant } from "./grant.js";
import type { GrantStore, StoreCallOptions } from "./store.js";

/** The allow and deny grant (at most one of each) in one scope slot. */
export interface VerdictSlots {
  allow: Grant | undefined;
  deny: Grant | undefined;
}

/** Every grant that covers one call, by scope and verdict. */
export interface CoveringGrants {
  readonly thisCall: Readonly<VerdictSlots>;
  readonly thisTool: Readonly<VerdictSlots>;
}

interface ToolEntry {
  readonly thisTool: VerdictSlots;
  readonly thisCall: Map<string, VerdictSlots>;
}

const EMPTY: Readonly<VerdictSlots> = Object.freeze({ allow: undefined, deny: undefined });

/**
 * Finds the grants that cover a call in two map lookups (tool, then
 * canonical args), never a scan: a decision costs the same with 10 grants or
 * 100k. Ids are unique per (tool, verdict, scope), so each slot holds at most
 * one grant; when the input repeats an id the later grant wins.
 */
export class GrantIndex {
  readonly #byTool = new Map<string, ToolEntry>();

  constructor(grants: Iterable<Grant>) {
    for (const grant of grants) this.put(grant);
  }

  /** Indexes `grant`, in the place of the grant of its slot (its id's, as ids are unique per slot). */
  put(grant: Grant): void {
    let entry = this.#byTool.get(grant.tool);
    if (entry === undefined) {
      entry = { thisTool: { allow: undefined, deny: undefined }, thisCall: new Map() };
      this.#byTool.set(grant.tool, entry);
    }
    const key = grant.canonicalArgs;
    let slots = entry.thisTool;
    if (key !== null) {
      slots = entry.thisCall.get(key) ?? { allow: undefined, deny: undefined };
      entry.thisCall.set(key, slots);
    }
    slots[grant.verdict] = grant;
  }

  /** Takes `grant` (by its id) out of its slot, if it holds it; what is left empty goes too. */
  remove(grant: Grant): void {
    const entry = this.#byTool.get(grant.tool);
    if (entry === undefined) return;
    const key = grant.canonicalArgs;
    const slots = key === null ? entry.thisTool : entry.thisCall.get(key);
    if (slots === undefined || slots[grant.verdict]?.id !== grant.id) return;
    slots[grant.verdict] = undefined;
    if (key !== null && slots.allow === undefined && slots.deny === undefined) entry.thisCall.delete(key);
    if (entry.thisCall.size === 0 && entry.thisTool.allow === undefined && entry.thisTool.deny === undefined)
      this.#byTool.delete(grant.tool);
  }

  /** The grants covering a call of `tool` whose canonical args text is `canonicalArgs`. */
  lookup(tool: string, canonicalArgs: string): CoveringGrants {
    const entry = this.#byTool.get(tool);
    if (entry === undefined) return { thisCall: EMPTY, thisTool: EMPTY };
    return { thisCall: entry.thisCall.get(canonicalArgs) ?? EMPTY, thisTool: entry.thisTool };
  }
}

/** The covering grants as a list: the denies, then the allows, each this_call before this_tool. */
export function coveringList(covering: CoveringGrants): Grant[] {
  const { thisCall, thisTool } = covering;
  return [thisCall.deny, thisTool.deny, thisCall.allow, thisTool.allow].filter((g): g is Grant => g !== undefined);
}

/**
 * The canonical args text {@link coveringOf} last asked a store about. It was
 * made by canonicalJson, so a text equal to it is canonical: checking it
 * again in the store would cost a decision its canonicalJson twice.
 */
let lastQueried: string | undefined;

/**
 * @internal Checks the query of a store's `covering`: `tool` a non-empty
 * string, and `canonicalArgs` the canonical JSON text of some arguments. Any
 * other text (`JSON.stringify(args)`, whose key order is the object's) would
 * find none of the this_call grants, a deny among them, and the tool's
 * this_tool allow would answer alone.
 *
 * @throws {GrantConfigError} naming `tool` or `canonicalArgs`.
 */
export function requireCoveringQuery(where: string, tool: unknown, canonicalArgs: unknown): void {
  if (typeof tool !== "string" || tool === "") {
    throw new GrantConfigError(where, "tool", `must be a non-empty string (a tool's name), got ${shownValue(tool)}`);
  }
  if (typeof canonicalArgs !== "string") {
    throw new GrantConfigError(
      where,
      "canonicalArgs",
      `must be a string (canonicalJson of the arguments), got ${shownValue(canonicalArgs)}`,
    );
  }
  if (canonicalArgs === lastQueried) return;
  let canonical: string | undefined;
  try {
    canonical = canonicalJson(JSON.parse(canonicalArgs));
  } catch {
    canonical = undefined;
  }
  if (canonical !== canonicalArgs) {
    throw new GrantConfigError(
      where,
      "canonicalArgs",
      "is not canonical JSON (make it with canonicalJson(args): another text, JSON.stringify's included, " +
        "matches no this_call grant)",
    );
  }
}

/**
 * The grants covering a call of `tool` whose canonical args text is
 * `canonicalArgs`: from the store's own {@link GrantStore.covering} when it
 * has one (indexed again here, so a grant that does not cover the call is
 * ignored rather than trusted), else from everything it loads.
 * `canonicalArgs` must be what canonicalJson made: it is passed on to the
 * store unchecked, as one {@link requireCoveringQuery} takes without a check.
 *
 * @throws {GrantRecordError} when the store resolves to anything but an
 *   array of grants: a record it read but did not make a Grant of (a deny
 *   among them) would otherwise be passed over as if nothing were stored.
 */
export async function coveringOf(
  store: GrantStore,
  tool: string,
  canonicalArgs: string,
  options: StoreCallOptions,
): Promise<CoveringGrants> {
  const method = store.covering === undefined ? "load" : "covering";
  lastQueried = canonicalArgs;
  const grants: unknown =
    store.covering === undefined ? await store.load(options) : await store.covering(tool, canonicalArgs, options);
  return new GrantIndex(storedGrants(grants, method)).lookup(tool, canonicalArgs);
}

/**
 * @internal Whether `value` is a grant by its shape: a `Grant`, or one from
 * another copy of loopctl (the ESM build beside the CommonJS one), which
 * `instanceof` would refuse.
 */
export function isGrantShaped(value: unknown): value is Grant {
  const grant = value as Partial<Record<keyof Grant, unknown>> | null;
  return (
    typeof grant === "object" &&
    grant !== null &&
    typeof grant.id === "string" &&
    typeof grant.tool === "string" &&
    (grant.verdict === "allow" || grant.verdict === "deny") &&
    (grant.canonicalArgs === null || typeof grant.canonicalArgs === "string") &&
    (grant.pinnedDescriptor === null || typeof grant.pinnedDescriptor === "string")
  );
}

/**
 * What a store's `load` or `covering` resolved to, checked to be grants by
 * their shape (a Grant from another copy of loopctl, the ESM build beside
 * the CommonJS one, is one too).
 */
function storedGrants(value: unknown, method: "load" | "covering"): readonly Grant[] {
  if (!Array.isArray(value)) {
    throw new GrantRecordError(`GrantStore.${method} resolved to ${shownValue(value)}, not an array of grants`);
  }
  for (const [i, item] of value.entries()) {
    if (!isGrantShaped(item)) {
      throw new GrantRecordError(
        `GrantStore.${method} resolved to an array whose item ${i} is not a Grant (${shownValue(item)}); ` +
          "build stored records into grants with Grant.fromJSON",
      );
    }
  }
  return value as readonly Grant[];
}
