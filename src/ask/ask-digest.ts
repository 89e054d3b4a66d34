import { canonicalJson } from "../grant/canonical.js";
import { sha256Hex } from "../grant/digest.js";
import type { PendingAsk } from "./types.js";

/**
 * sha256 of the ask's canonical JSON, 64 lowercase hex digits: two asks have
 * one digest exactly when they are the same call. An id can come back with
 * another call behind it (ids from a seeded generator repeat across runs), so
 * an answer made for one ask is checked against this, never the id alone:
 * it is the `askDigest` an approval server passes to an inbox's
 * `resolve()`.
 */
export function askDigest(ask: PendingAsk): string {
  return sha256Hex(canonicalJson(ask));
}
