/**
 * FNV-1a 64 over the UTF-8 bytes of a string, in plain JavaScript. The 64-bit
 * state is kept as two 32-bit halves, so no BigInt is made per byte. The
 * prime is 2^40 + 0x1b3, so `h * prime` is `h * 0x1b3` plus the low half
 * shifted into the high one: the low half's new value is one `Math.imul`,
 * and the high half (which never feeds the low one) takes the carry of that
 * product. A lone surrogate has no UTF-8 form; `TextEncoder` encodes it as
 * U+FFFD, and so it is hashed.
 */

const encoder = new TextEncoder();

const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, "0"));
const hex8 = (word: number): string =>
  `${HEX[word >>> 24]}${HEX[(word >>> 16) & 0xff]}${HEX[(word >>> 8) & 0xff]}${HEX[word & 0xff]}`;

/** FNV-1a 64 of the UTF-8 bytes of `text`, as 16 lowercase hex digits. */
export function fnv1a64(text: string): string {
  const bytes = encoder.encode(text);
  let lo = 0x84222325 | 0;
  let hi = 0xcbf29ce4 | 0;
  for (let i = 0; i < bytes.length; i++) {
    const x = lo ^ (bytes[i] as number);
    lo = Math.imul(x, 0x1b3);
    // The carry out of the low product (x * 0x1b3 >>> 32, from 16-bit halves
    // so it stays exact), plus the low 24 bits of x shifted up by 40 - 32 = 8.
    const carry = ((x >>> 16) * 0x1b3 + (((x & 0xffff) * 0x1b3) >>> 16)) >>> 16;
    hi = (Math.imul(hi, 0x1b3) + carry + (x << 8)) | 0;
  }
  return hex8(hi) + hex8(lo);
}
