import { isAbortSignal } from "../abort-signal.js";
import { McpConfigError } from "./errors.js";

/** Edits (insertions, deletions, substitutions) between `a` and `b`. */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++)
      row.push(Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    previous = row;
  }
  return previous[b.length]!;
}

/** The option `key` was likely meant as: in another case or number, cut short or run on, or a letter or two off. */
function meantOf(key: string, options: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  const plain = (option: string): string => option.toLowerCase().replace(/s$/, "");
  return (
    options.find((option) => plain(option) === plain(key)) ??
    options.find((option) => {
      const other = option.toLowerCase();
      return Math.min(lower.length, other.length) >= 4 && (other.startsWith(lower) || lower.startsWith(other));
    }) ??
    options.find((option) => distance(lower, option.toLowerCase()) <= 2)
  );
}

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
    const meant = meantOf(key, known);
    const list =
      known.length === 1
        ? `the only option is ${known[0]!}`
        : `the options are ${known.slice(0, -1).join(", ")} and ${known.at(-1)!}`;
    throw new McpConfigError(key, `unknown option '${key}' (${meant === undefined ? list : `did you mean ${meant}?`})`);
  }
}
