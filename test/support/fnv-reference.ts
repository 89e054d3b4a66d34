/** The textbook FNV-1a 64 with BigInt, over the bytes TextEncoder gives: what digest16 must equal. */
export function referenceDigest16(text: string): string {
  let hash = 0xcbf29ce484222325n;
  for (const byte of new TextEncoder().encode(text)) {
    hash ^= BigInt(byte);
    hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash.toString(16).padStart(16, "0");
}
