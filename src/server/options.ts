import { shownValue } from "../errors.js";
import { ServerConfigError } from "./errors.js";

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
