import type { ToolDescriptor } from "../engine/index.js";

/**
 * Where the process keeps the descriptors of tools that changed on their
 * server after an `mcpTools` toolset first listed them: one set for every
 * copy of loopctl the process loads (its ESM and CommonJS builds, a bundle,
 * another version), since a toolset of one copy may hand its tools to the
 * `mcpAnnotationHook` of another, and a mark the hook cannot see lets a
 * changed tool's new claims decide.
 */
const CHANGED = Symbol.for("loopctl.mcp.changedDescriptors");

/**
 * The set, made by the first copy that needs it. Kept by descriptor object
 * (a `Tool`'s own, frozen), so the hook can tell from a hook's context alone;
 * defined read-only, so no copy replaces the set the others mark.
 */
function changed(): WeakSet<object> {
  const holder = globalThis as { readonly [CHANGED]?: WeakSet<object> };
  let set = holder[CHANGED];
  if (set === undefined) {
    set = new WeakSet();
    Object.defineProperty(globalThis, CHANGED, { value: set });
  }
  return set;
}

export function markChanged(descriptor: ToolDescriptor): void {
  changed().add(descriptor);
}

/** True when the tool behind `descriptor` changed on its server since it was first listed. */
export function changedSinceListed(descriptor: ToolDescriptor): boolean {
  return changed().has(descriptor);
}
