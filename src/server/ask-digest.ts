import type { PendingAsk } from "../ask/types.js";
import { sha256Hex } from "../grant/digest.js";
import { canonicalJson } from "../grant/index.js";

/**
 * sha256 of the ask's canonical JSON: two asks have one digest exactly when
 * they are the same call. An id can come back with another call behind it
 * (ids from a seeded generator repeat across runs), so an answer made for one
 * ask is checked against this, never the id alone.
 */
export function askDigest(ask: PendingAsk): string {
  return sha256Hex(canonicalJson(ask));
}
