import { canonicalJson, digest16 } from "../grant/index.js";
import { sha256Hex } from "../grant/digest.js";
import { describeError } from "./errors.js";

/**
 * A call's arguments as the gate reads them, once: `value` is the parse of
 * their canonical JSON, deeply frozen, and the digests are over that same
 * text. Everything after the snapshot (validation, hooks, grants, the ask,
 * the record, `execute`) sees `value`, so nothing the model's object does
 * later (a getter, a mutation, an inherited property, `toJSON`) reaches them.
 */
export interface Snapshot {
  readonly value: unknown;
  readonly argsDigest: string;
  readonly argsSha256: string;
}

/** Arguments that are not a JSON value, and why. */
export interface NotJson {
  readonly problem: string;
}

function deepFreeze(value: unknown): void {
  if (typeof value !== "object" || value === null) return;
  Object.freeze(value);
  for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
}

/** Reads `input` into a {@link Snapshot}, or says why it is not a JSON value. */
export function snapshot(input: unknown): Snapshot | NotJson {
  let text: string;
  try {
    text = canonicalJson(input);
  } catch (error) {
    return { problem: describeError(error) };
  }
  const value: unknown = JSON.parse(text);
  deepFreeze(value);
  return { value, argsDigest: digest16(text), argsSha256: sha256Hex(text) };
}

/**
 * A deeply frozen JSON copy of `value` (its canonical JSON, parsed).
 * @throws {TypeError} when `value` is not a JSON value.
 */
export function frozenJson<T>(value: T): T {
  const read = snapshot(value);
  if (!isSnapshot(read)) throw new TypeError(read.problem);
  return read.value as T;
}

export function isSnapshot(read: Snapshot | NotJson): read is Snapshot {
  return "value" in read;
}
