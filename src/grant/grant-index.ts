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

// The built-in stores keep an index cached while their grants are unchanged
// and register it here, so that GrantPolicy can use it without it becoming
// part of the GrantStore interface.
const cachedIndexes = new WeakMap<GrantStore, (options: StoreCallOptions) => Promise<GrantIndex>>();

/** Registers `store`'s cached index. */
export function offerIndex(store: GrantStore, index: (options: StoreCallOptions) => Promise<GrantIndex>): void {
  cachedIndexes.set(store, index);
}

/** `store`'s cached index, or one built from `store.load()`. */
export async function indexOf(store: GrantStore, options: StoreCallOptions): Promise<GrantIndex> {
  const cached = cachedIndexes.get(store);
  return cached === undefined ? new GrantIndex(await store.load(options)) : cached(options);
}
