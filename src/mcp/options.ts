import { optionsProblem } from "../unknown-option.js";
import { McpConfigError } from "./errors.js";

/**
 * Refuses `options` unless an object of the options `known` ({@link optionsProblem}), with an
 * `McpConfigError` naming the key at fault, or `options`: ignored, a misspelt `prefix`, `trusted`
 * or `signal` would do other than the caller meant.
 */
export function refuseUnknown(options: unknown, known: readonly string[], shape?: string): void {
  const wrong = optionsProblem(options, known, { shape });
  if (wrong === undefined) return;
  throw new McpConfigError(
    wrong.key ?? "options",
    wrong.problem,
    "cause" in wrong ? { cause: wrong.cause } : undefined,
  );
}
