import { isAbortSignal } from "../abort-signal.js";
import { describeError, shownValue } from "../errors.js";
import { optionsProblem, type EveryKey } from "../unknown-option.js";
import { ServerConfigError, ServerInputError } from "./errors.js";

/**
 * `value` as a positive integer of at most `max`, or `fallback` when it is not given.
 * @throws {ServerConfigError} naming `option` for anything else.
 */
export function positiveInteger(option: string, value: number | undefined, fallback: number, max?: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new ServerConfigError(option, `must be a positive integer, got ${shownValue(value)}`);
  }
  if (max !== undefined && value > max) {
    throw new ServerConfigError(option, `must be at most ${max} (the longest timer delay), got ${value}`);
  }
  return value;
}

/** How an options object is refused: the option at fault (`options` for the object itself) and why. */
export type OptionFault = (option: string, problem: string, cause?: unknown) => Error;

/** A fault as a `ServerConfigError`, an option (not the object, `options`) named under `prefix` (`records.`) when given. */
export function configFault(prefix = ""): OptionFault {
  return (option, problem, cause) =>
    new ServerConfigError(
      option === "options" ? option : `${prefix}${option}`,
      problem,
      cause === undefined ? undefined : { cause },
    );
}

/**
 * A fault as a `ServerInputError` of `where`, its option named under `prefix`
 * (`links.`) when given. An unknown key is worded as the rest of loopctl words
 * it: `WebhookResolver: unknown option 'timeoutMS' (did you mean timeoutMs?)`.
 */
export function inputFault(where: string, prefix = ""): OptionFault {
  return (option, problem) => {
    const name = option === "options" && prefix !== "" ? prefix.slice(0, -1) : `${prefix}${option}`;
    // "<where>: <option> <problem>" would name an unknown key twice.
    if (!problem.startsWith("unknown option ")) return new ServerInputError(where, name, problem);
    return new ServerInputError(
      where,
      name,
      problem,
      `${where}: ${prefix === "" ? "" : `${prefix.slice(0, -1)}: `}${problem}`,
    );
  };
}

/**
 * What `value`, given where an options object goes, holds of the options
 * `known`, every key of its type: each read exactly once, into a plain object the caller reads
 * from then on (a getter could otherwise give one value to the check and
 * another to the use). Refused, through `fault`: anything but an object
 * (`null`, an array, an `AbortSignal`, which has no keys and would read as
 * no options at all), a key that is none of `known` (ignored, a misspelt
 * option would leave its default standing for what was meant), and an
 * option that cannot be read (a getter that throws, a proxy).
 */
export function readOptions<T extends object, const K extends readonly (keyof T & string)[]>(
  value: T,
  known: EveryKey<T, K>,
  fault: OptionFault,
  what = "an object of options",
): Partial<T> {
  const wrong = optionsProblem(value, known, { shape: what });
  if (wrong !== undefined) throw fault(wrong.key ?? "options", wrong.problem, wrong.cause);
  const read: Partial<T> = {};
  for (const key of known) {
    let option: unknown;
    try {
      option = (value as Record<string, unknown>)[key];
    } catch (error) {
      throw fault(key, `cannot be read: ${describeError(error)}`, error);
    }
    if (option !== undefined) (read as Record<string, unknown>)[key] = option;
  }
  return read;
}

/**
 * The `signal` of a record source call's `options` (`recent`, `audited`), refused with a `ServerConfigError` unless
 * left out or an object of at most a `signal`, an AbortSignal: a misspelt `sginal` would leave a read deaf to it.
 */
export function callSignal(options: { readonly signal?: AbortSignal } | undefined): AbortSignal | undefined {
  if (options === undefined) return undefined;
  const { signal } = readOptions(options, ["signal"], configFault(), "an object: { signal? }");
  if (signal === undefined || isAbortSignal(signal)) return signal;
  throw new ServerConfigError("signal", `must be an AbortSignal or undefined, got ${shownValue(signal)}`);
}
