import type { ToolDescriptor } from "../engine/index.js";
import { processShared } from "../process-shared.js";

/**
 * Where the process keeps the descriptors of tools that changed on their
 * server after an `mcpTools` toolset first listed them: one set for every
 * copy of loopctl the process loads (its ESM and CommonJS builds, a bundle,
 * another version), since a toolset of one copy may hand its tools to the
 * `mcpAnnotationHook` of another, and a mark the hook cannot see lets a
 * changed tool's new claims decide.
 */
function changed(): WeakSet<object> {
  // Kept by descriptor object (a `Tool`'s own, frozen), so the hook can tell from a hook's context alone.
  return processShared("loopctl.mcp.changedDescriptors", () => new WeakSet<object>());
}

export function markChanged(descriptor: ToolDescriptor): void {
  changed().add(descriptor);
}

/** True when the tool behind `descriptor` changed on its server since it was first listed. */
export function changedSinceListed(descriptor: ToolDescriptor): boolean {
  return changed().has(descriptor);
}
