/** The textbook FNV-1a 64 with BigInt over `bytes`, as 16 lowercase hex digits. */
export function referenceFnv1a64(bytes: Uint8Array): string {
  let hash = 0xcbf29ce484222325n;
  for (const byte of bytes) {
    hash ^= BigInt(byte);
    hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash.toString(16).padStart(16, "0");
}

/** The same over the bytes TextEncoder gives for `text`: what digest16 must equal. */
export function referenceDigest16(text: string): string {
  return referenceFnv1a64(new TextEncoder().encode(text));
}
