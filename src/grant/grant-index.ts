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
    for (const grant of grants) {
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
  }

  /** The grants covering a call of `tool` whose canonical args text is `canonicalArgs`. */
  lookup(tool: string, canonicalArgs: string): CoveringGrants {
    const entry = this.#byTool.get(tool);
    if (entry === undefined) return { thisCall: EMPTY, thisTool: EMPTY };
    return { thisCall: entry.thisCall.get(canonicalArgs) ?? EMPTY, thisTool: entry.thisTool };
  }
}

/** The covering grants as a list: this_call before this_tool, deny before allow. */
export function coveringList(covering: CoveringGrants): Grant[] {
  const { thisCall, thisTool } = covering;
  return [thisCall.deny, thisTool.deny, thisCall.allow, thisTool.allow].filter((g): g is Grant => g !== undefined);
}

/**
 * The grants covering a call of `tool` whose canonical args text is
 * `canonicalArgs`: from the store's own {@link GrantStore.covering} when it
 * has one (indexed again here, so a grant that does not cover the call is
 * ignored rather than trusted), else from everything it loads.
 */
export async function coveringOf(
  store: GrantStore,
  tool: string,
  canonicalArgs: string,
  options: StoreCallOptions,
): Promise<CoveringGrants> {
  const grants =
    store.covering === undefined ? await store.load(options) : await store.covering(tool, canonicalArgs, options);
  return new GrantIndex(grants).lookup(tool, canonicalArgs);
}
