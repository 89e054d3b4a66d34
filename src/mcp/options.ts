import { isAbortSignal } from "../abort-signal.js";
import { unknownOption } from "../unknown-option.js";
import { McpConfigError } from "./errors.js";

/**
 * Refuses the first own key of `options` that is not one of `known`, with an `McpConfigError`
 * naming it: ignored, a misspelt `prefix`, `trusted` or `signal` would do other than the caller meant.
 */
export function refuseUnknown(options: object, known: readonly string[]): void {
  // It has no key of its own: read as options, it would be no options at all, its abort never heard.
  if (isAbortSignal(options)) {
    throw new McpConfigError(
      "options",
      known.includes("signal") ? "is an AbortSignal; pass it as { signal }" : "is an AbortSignal, not options",
    );
  }
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    throw new McpConfigError(key, unknownOption(key, known));
  }
}
