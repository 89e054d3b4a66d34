import { isAbortSignal } from "./abort-signal.js";
import { describeError, shownValue } from "./errors.js";
import { holdsHidden, shownText } from "./shown.js";

/**
 * Edit distance between `a` and `b` where swapping two neighbours counts as
 * one edit (optimal string alignment): `lsit` is one edit from `list`.
 */
function distance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const above = rows[i - 1] as number[];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min((above[j] as number) + 1, (row[j - 1] as number) + 1, (above[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, ((rows[i - 2] as number[])[j - 2] as number) + 1);
      }
      row.push(best);
    }
    rows.push(row);
  }
  return (rows[a.length] as number[])[b.length] as number;
}

/**
 * The one of `candidates` that `word` most likely misspells: the only one it
 * is a prefix of, or the nearest within an edit per three characters (at
 * least one). `undefined` when none is near enough to name.
 */
export function nearest(word: string, candidates: readonly string[]): string | undefined {
  if (word === "") return undefined;
  const extending = candidates.filter((c) => c.startsWith(word));
  if (extending.length === 1) return extending[0];
  const allowed = Math.max(1, Math.floor(word.length / 3));
  let best: string | undefined;
  let bestDistance = allowed + 1;
  for (const candidate of candidates) {
    const d = distance(word, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/**
 * The option of `known` that the key `key` was likely meant as: the same in
 * another case, with `_`, or in the plural (`leaseMS`, `Schema`, `prefixes`),
 * else a near spelling ({@link nearest}).
 */
export function meantOption(key: string, known: readonly string[]): string | undefined {
  const plain = (name: string): string => name.toLowerCase().replace(/_/g, "").replace(/s$/, "");
  return known.find((option) => plain(option) === plain(key)) ?? nearest(key, known);
}

/** `the options are a, b and c`, or `the only option is a`. */
export function optionList(known: readonly string[]): string {
  return known.length === 1
    ? `the only option is ${known[0] ?? ""}`
    : `the options are ${known.slice(0, -1).join(", ")} and ${known.at(-1) ?? ""}`;
}

/**
 * A key or a name as a text shows it: in single quotes (`'read'`, `'café'`) while it holds no
 * character that would not show as itself (`HIDDEN` in shown.ts: a control, a bidi control, a
 * zero-width character, a separator other than the space), no `'` and no `\`; else in double
 * quotes and escapes ({@link shownText}: `"rm\u202e"`), so it can neither break the line, nor
 * end its quotes early, nor read as another name.
 */
export function shownKey(key: string): string {
  return holdsHidden(key) || key.includes("'") || key.includes("\\") ? shownText(key) : `'${key}'`;
}

/**
 * A name where a plain one is shown without quotes (`'c2' (read)`, `deny read, this_tool`): as it
 * is when it holds no whitespace, character that would not show as itself (`HIDDEN`),
 * quote, backslash, comma or bracket, else in double quotes and escapes ({@link shownText}), so a
 * name can neither start a line of its own, nor read as more of the text around it, nor as
 * another name. `""` for the empty name.
 */
export function shownBare(name: string): string {
  return name !== "" && !holdsHidden(name) && !/[\s"'\\(),[\]{}]/u.test(name) ? name : shownText(name);
}

/**
 * Why the key `key` of an options object is refused (an option never read
 * would be silently ignored, its default standing in for what was meant):
 * `unknown option 'leaseMS' (did you mean leaseMs?)`, with `otherwise`, or
 * the list of `known`, when no option is near.
 */
export function unknownOption(key: string, known: readonly string[], otherwise?: string): string {
  const meant = meantOption(key, known);
  return `unknown option ${shownKey(key)} (${meant === undefined ? (otherwise ?? optionList(known)) : `did you mean ${meant}?`})`;
}

/**
 * What is wrong with `value` where an object of the options `known` goes, or `undefined`: the `key` at fault
 * (`undefined` for `value` itself), why, and what listing its keys threw. Refused: anything but an object (`null`,
 * a string, named but never shown, as it may be a connection string or a key given in the wrong place, an array,
 * an `AbortSignal`, which has no keys: told where it goes, `give it as { signal }` when that is an option),
 * keys that cannot be listed (a proxy), and a key none of `known` (ignored, its default would stand for what was
 * meant), with `hint` when no option is near ({@link unknownOption}).
 */
export function optionsProblem(
  value: unknown,
  known: readonly string[],
  {
    shape = "an object",
    signal = known.includes("signal") ? "give it as { signal }" : undefined,
    hint,
  }: {
    shape?: string | undefined;
    signal?: string | undefined;
    hint?: ((key: string) => string | undefined) | undefined;
  } = {},
): { key: string | undefined; problem: string; cause?: unknown } | undefined {
  let keys: string[];
  try {
    // `Array.isArray` throws on a revoked proxy, as listing its keys does.
    if (typeof value !== "object" || value === null || Array.isArray(value) || isAbortSignal(value)) {
      // A string is named, never shown: where options go, it may be a connection string or a key.
      const kind =
        value === null
          ? "null"
          : Array.isArray(value)
            ? "an array"
            : typeof value === "string"
              ? "a string"
              : undefined;
      const got = kind ?? (isAbortSignal(value) ? `an AbortSignal${signal ? ` (${signal})` : ""}` : shownValue(value));
      return { key: undefined, problem: `must be ${shape}, got ${got}` };
    }
    keys = Object.keys(value);
  } catch (error) {
    return { key: undefined, problem: `cannot be read: ${describeError(error)}`, cause: error };
  }
  const key = keys.find((name) => !known.includes(name));
  return key === undefined ? undefined : { key, problem: unknownOption(key, known, hint?.(key)) };
}

/**
 * `K` when it names every key of `T`; else `K` with a `missing` member naming
 * the keys it leaves out, which no list has: a compile error at the list.
 */
export type EveryKey<T, K extends readonly unknown[]> = K &
  ([Exclude<keyof T, K[number]>] extends [never] ? unknown : { readonly missing: Exclude<keyof T, K[number]> });

/**
 * `keys`, checked at compile time to name every key of `T`: a list of known
 * options that left one out would refuse it as unknown, though its type
 * offers it. `everyKey<Options>()(["a", "b"] as const)`.
 */
export function everyKey<T>() {
  return <const K extends readonly (keyof T & string)[]>(keys: EveryKey<T, K>): K => keys;
}
