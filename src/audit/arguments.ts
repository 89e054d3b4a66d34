import { isAbortSignal } from "../abort-signal.js";
import { shownValue } from "../errors.js";
import { optionsProblem, type EveryKey } from "../unknown-option.js";
import { AuditConfigError } from "./errors.js";

/**
 * Refuses a `path` that is not a non-empty string: `resolve()` would take
 * `""` for the current folder, and the file system's own TypeError names
 * no audit function.
 * @throws AuditConfigError naming `path`.
 */
export function assertPathArgument(value: unknown, where: string): asserts value is string {
  if (typeof value !== "string" || value === "") {
    throw new AuditConfigError("path", `${where}: path must be a non-empty string, got ${shownValue(value)}`);
  }
}

/**
 * The options object, `{}` when it is `undefined`. A key it holds that is not
 * one of `known`, every key of its type, is refused: never read, a misspelt
 * `key` would verify a log, or start one, without the key, and say nothing.
 * @throws AuditConfigError naming `options` when it is not an object of
 *   options ({@link optionsProblem}), or the first unknown key.
 */
export function optionsArgument<T extends object, const K extends readonly (keyof T & string)[]>(
  value: T | undefined,
  where: string,
  known: EveryKey<T, K>,
): T {
  if (value === undefined) return {} as T;
  // `keyFile`, `keyPath`: the option takes the key, not where it is kept.
  const hint = (key: string): string | undefined =>
    (known as readonly string[]).includes("key") && /^key/i.test(key)
      ? "key takes the key itself, a string or bytes: read a key file with readAuditKeyFile"
      : undefined;
  const wrong = optionsProblem(value, known, { hint });
  if (wrong === undefined) return value;
  throw new AuditConfigError(
    wrong.key ?? "options",
    `${where}: ${wrong.key === undefined ? "options " : ""}${wrong.problem}`,
  );
}

/**
 * Refuses `options` holding a `key` of its own set to `undefined`, as
 * `{ key: process.env.AUDIT_KEY }` does with the variable unset: taken for no
 * key, it would start an unkeyed log, or verify a keyed one without its MACs
 * and seal, and say nothing. An unkeyed log is one whose options omit `key`.
 * @throws AuditConfigError naming `key`.
 */
export function assertKeyNotUndefined(options: { readonly key?: unknown }, where: string): void {
  if (Object.hasOwn(options, "key") && options.key === undefined) {
    throw new AuditConfigError(
      "key",
      `${where}: options.key is undefined (an unset environment variable?); omit key for an unkeyed log`,
    );
  }
}

/**
 * Refuses an option that is set to something other than `undefined` or a
 * value of its type.
 * @throws AuditConfigError naming the option.
 */
export function assertOptionType(
  value: unknown,
  option: string,
  type: "boolean" | "function" | "AbortSignal",
  where: string,
): void {
  if (value === undefined) return;
  const ok = type === "AbortSignal" ? isAbortSignal(value) : typeof value === type;
  if (!ok) {
    const article = type === "AbortSignal" ? "an" : "a";
    throw new AuditConfigError(
      option,
      `${where}: options.${option} must be ${article} ${type} or undefined, got ${shownValue(value)}`,
    );
  }
}
