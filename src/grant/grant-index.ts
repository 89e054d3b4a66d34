import { canonicalJson } from "./canonical.js";
import { Grant } from "./grant.js";

/** The allow and deny grant (at most one of each) in one scope slot. */
export interface VerdictSlots {
  /** The allow grant for this slot, if any. */
  readonly allow: Grant | undefined;
  /** The deny grant for this slot, if any. */
  readonly deny: Grant | undefined;
}

/** Every grant that covers one call, by scope and verdict. */
export interface CoveringGrants {
  /** The this_call grants for exactly these arguments. */
  readonly thisCall: VerdictSlots;
  /** The this_tool grants for the tool. */
  readonly thisTool: VerdictSlots;
}

interface MutableSlots {
  allow: Grant | undefined;
  deny: Grant | undefined;
}

interface ToolEntry {
  readonly thisTool: MutableSlots;
  readonly thisCall: Map<string, MutableSlots>;
}

const EMPTY: VerdictSlots = Object.freeze({ allow: undefined, deny: undefined });

/**
 * A lookup structure over a set of grants: tool → this_tool slots, and tool →
 * canonical args → this_call slots. Finding the grants that cover a call is
 * two map lookups, never a scan over `covers`.
 *
 * Grant ids are unique per (tool, verdict, scope), so each slot holds at most
 * one grant; when the input repeats an id the later grant wins.
 */
export class GrantIndex {
  readonly #byTool = new Map<string, ToolEntry>();
  readonly #grants: readonly Grant[];

  /** Indexes `grants` (their order is kept by {@link GrantIndex.grants}). */
  constructor(grants: Iterable<Grant>) {
    const list: Grant[] = [];
    for (const grant of grants) {
      list.push(grant);
      let entry = this.#byTool.get(grant.tool);
      if (entry === undefined) {
        entry = { thisTool: { allow: undefined, deny: undefined }, thisCall: new Map() };
        this.#byTool.set(grant.tool, entry);
      }
      let slots: MutableSlots;
      const key = grant.canonicalArgs;
      if (key === null) {
        slots = entry.thisTool;
      } else {
        let found = entry.thisCall.get(key);
        if (found === undefined) {
          found = { allow: undefined, deny: undefined };
          entry.thisCall.set(key, found);
        }
        slots = found;
      }
      slots[grant.verdict] = grant;
    }
    this.#grants = Object.freeze(list);
  }

  /** The indexed grants, in the order given. */
  get grants(): readonly Grant[] {
    return this.#grants;
  }

  /** How many grants were indexed. */
  get size(): number {
    return this.#grants.length;
  }

  /**
   * The grants covering a call of `tool` whose canonical args text is
   * `canonicalArgs` (from {@link canonicalJson}).
   */
  lookupCanonical(tool: string, canonicalArgs: string): CoveringGrants {
    const entry = this.#byTool.get(tool);
    if (entry === undefined) return { thisCall: EMPTY, thisTool: EMPTY };
    return { thisCall: entry.thisCall.get(canonicalArgs) ?? EMPTY, thisTool: entry.thisTool };
  }

  /**
   * The grants covering a call of `tool` with `args`.
   *
   * @throws {CanonicalJsonError} when `args` has no JSON form.
   */
  lookup(tool: string, args: unknown): CoveringGrants {
    return this.lookupCanonical(tool, canonicalJson(args));
  }
}
