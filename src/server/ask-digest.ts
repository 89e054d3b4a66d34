import { createHash } from "node:crypto";
import type { PendingAsk } from "../ask/types.js";

/**
 * SHA-256, hex, over every field of an ask in key order: two asks have one
 * digest exactly when they are the same call. An id can come back with
 * another call behind it (ids from a seeded generator repeat across runs), so
 * an answer made for one ask is checked against this, never the id alone.
 */
export function askDigest(ask: PendingAsk): string {
  const fields = Object.keys(ask)
    .sort()
    .map((key) => [key, ask[key as keyof PendingAsk]]);
  return createHash("sha256").update(JSON.stringify(fields)).digest("hex");
}
