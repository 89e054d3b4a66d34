import type { ToolDescriptor } from "../engine/index.js";

/**
 * Descriptors of tools that changed on their server after an `mcpTools`
 * toolset first listed them. Kept by descriptor object (a `Tool`'s own,
 * frozen), so `mcpAnnotationHook` can tell from a hook's context alone.
 */
const changed = new WeakSet<object>();

export function markChanged(descriptor: ToolDescriptor): void {
  changed.add(descriptor);
}

/** True when the tool behind `descriptor` changed on its server since it was first listed. */
export function changedSinceListed(descriptor: ToolDescriptor): boolean {
  return changed.has(descriptor);
}
