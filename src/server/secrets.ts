import { createHash, createHmac, timingSafeEqual } from "node:crypto";

/** The fewest bytes a token or secret may have: 128 bits. */
export const MIN_SECRET_BYTES = 16;

/** A secret as bytes; strings are taken as UTF-8. */
export function secretBytes(secret: string | Uint8Array): Buffer {
  return typeof secret === "string" ? Buffer.from(secret, "utf8") : Buffer.from(secret);
}

/** True when `secret` is a string or bytes of at least {@link MIN_SECRET_BYTES}. */
export function isStrongSecret(secret: unknown): secret is string | Uint8Array {
  if (typeof secret === "string") return Buffer.byteLength(secret, "utf8") >= MIN_SECRET_BYTES;
  return secret instanceof Uint8Array && secret.byteLength >= MIN_SECRET_BYTES;
}

/**
 * Compares two strings in time that depends on neither's content nor on
 * where they differ: both are hashed first, so even their lengths stay hidden.
 */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash("sha256").update(given, "utf8").digest();
  const b = createHash("sha256").update(expected, "utf8").digest();
  return timingSafeEqual(a, b);
}

/** HMAC-SHA256 of `text` under `key`, as lowercase hex. */
export function hmacHex(key: Uint8Array, text: string): string {
  return createHmac("sha256", key).update(text, "utf8").digest("hex");
}
