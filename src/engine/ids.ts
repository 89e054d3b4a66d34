import { createHash, randomUUID } from "node:crypto";
import { EngineConfigError } from "./errors.js";
import { shownText } from "../shown.js";

/** Produces a fresh UUID string each call (session, run and ask ids). */
export type IdGen = () => string;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True for a UUID string (any version, either case). */
export const isUuid = (value: unknown): value is string => typeof value === "string" && UUID.test(value);

/**
 * `id` as an id generator gave it, once it is known to be a UUID.
 * @throws {EngineConfigError} naming `withIdGen` when it is anything else.
 */
export function checkedId(id: unknown): string {
  if (isUuid(id)) return id;
  // Printed without calling into it: an object whose toString throws is still the generator's fault.
  const got =
    typeof id === "string"
      ? shownText(id)
      : typeof id === "function"
        ? "a function"
        : typeof id === "object" && id !== null
          ? "an object"
          : String(id);
  throw new EngineConfigError("withIdGen", `the id generator must return UUID strings, got ${got}`);
}

/** The default id generator: `crypto.randomUUID()`. */
export const randomIdGen: IdGen = () => randomUUID();

/**
 * A deterministic id generator for reproducible runs and tests: the n-th id
 * is derived from `sha256(seed, n)` and shaped as a version-4 UUID, so two
 * generators with the same seed yield the same sequence.
 *
 * @example
 * ```ts
 * const managers = new LoopManagers().withIdGen(seededIdGen("fixture-1"));
 * ```
 */
export function seededIdGen(seed: string | number): IdGen {
  if (typeof seed !== "string" && !(typeof seed === "number" && Number.isFinite(seed))) {
    throw new EngineConfigError("seededIdGen", "seed must be a string or a finite number");
  }
  let counter = 0;
  return () => {
    const bytes = createHash("sha256")
      .update(`${String(seed)}\u0000${counter}`)
      .digest();
    counter += 1;
    bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x40;
    bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
    const hex = bytes.subarray(0, 16).toString("hex");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
  };
}
