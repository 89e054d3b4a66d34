import type { Grant } from "../grant/index.js";

interface Slots {
  allow: Grant | undefined;
  deny: Grant | undefined;
}

interface ToolSlots {
  readonly thisTool: Slots;
  readonly thisCall: Map<string, Slots>;
}

/**
 * A project's grants, indexed by tool and arguments, kept up to date one change at a time. A project's
 * grants change while its workers decide; rebuilding the index after each
 * change would cost every worker time in proportion to the whole project
 * (some 80 ms at 100k grants) for each grant saved anywhere. Here a change
 * costs two map operations.
 */
export class LiveGrantIndex {
  readonly #byTool = new Map<string, ToolSlots>();
  /** Oldest change first: a re-saved grant moves to the end, as in the ledger. */
  readonly #byId = new Map<string, Grant>();
  #list: readonly Grant[] | undefined;

  /** Stores `grant`, replacing the grant with its id and moving it last. */
  put(grant: Grant): void {
    this.remove(grant.id);
    this.#byId.set(grant.id, grant);
    let tool = this.#byTool.get(grant.tool);
    if (tool === undefined) {
      tool = { thisTool: { allow: undefined, deny: undefined }, thisCall: new Map() };
      this.#byTool.set(grant.tool, tool);
    }
    const key = grant.canonicalArgs;
    let slots = key === null ? tool.thisTool : tool.thisCall.get(key);
    if (slots === undefined) {
      slots = { allow: undefined, deny: undefined };
      tool.thisCall.set(key as string, slots);
    }
    slots[grant.verdict] = grant;
    this.#list = undefined;
  }

  /** Removes the grant with `id`, if held. */
  remove(id: string): void {
    const grant = this.#byId.get(id);
    if (grant === undefined) return;
    this.#byId.delete(id);
    this.#list = undefined;
    const tool = this.#byTool.get(grant.tool);
    if (tool === undefined) return;
    const key = grant.canonicalArgs;
    const slots = key === null ? tool.thisTool : tool.thisCall.get(key);
    if (slots === undefined || slots[grant.verdict]?.id !== id) return;
    slots[grant.verdict] = undefined;
    if (key !== null && slots.allow === undefined && slots.deny === undefined) tool.thisCall.delete(key);
    if (tool.thisCall.size === 0 && tool.thisTool.allow === undefined && tool.thisTool.deny === undefined) {
      this.#byTool.delete(grant.tool);
    }
  }

  /** The grants held, oldest change first. */
  get grants(): readonly Grant[] {
    this.#list ??= Object.freeze([...this.#byId.values()]);
    return this.#list;
  }

  /** How many grants are held. */
  get size(): number {
    return this.#byId.size;
  }

  /** The grants covering a call of `tool` whose canonical args text is `canonicalArgs`, as they are now. */
  covering(tool: string, canonicalArgs: string): Grant[] {
    const entry = this.#byTool.get(tool);
    const thisCall = entry?.thisCall.get(canonicalArgs);
    return [thisCall?.deny, entry?.thisTool.deny, thisCall?.allow, entry?.thisTool.allow].filter(
      (grant): grant is Grant => grant !== undefined,
    );
  }
}
