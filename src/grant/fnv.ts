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

/**
 * The high half of the state after one byte, from the old high half and `x`,
 * the low half xor the byte: the carry out of the low product (x * 0x1b3
 * >>> 32, from 16-bit halves so it stays exact), plus the low 24 bits of x
 * shifted up by 40 - 32 = 8.
 */
function nextHigh(hi: number, x: number): number {
  const carry = ((x >>> 16) * 0x1b3 + (((x & 0xffff) * 0x1b3) >>> 16)) >>> 16;
  return (Math.imul(hi, 0x1b3) + carry + (x << 8)) | 0;
}

/**
 * FNV-1a 64 of the UTF-8 bytes of `text`, as 16 lowercase hex digits.
 *
 * Text below U+0080 is its own UTF-8, one byte per code unit, so it is hashed
 * straight from the string; the rest, from the first unit above, is encoded
 * first. Canonical JSON is mostly ASCII, and `TextEncoder.encode` costs more
 * than hashing a few hundred bytes.
 */
export function fnv1a64(text: string): string {
  let lo = 0x84222325 | 0;
  let hi = 0xcbf29ce4 | 0;
  let i = 0;
  for (; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0x80) break;
    const x = lo ^ unit;
    lo = Math.imul(x, 0x1b3);
    hi = nextHigh(hi, x);
  }
  return i === text.length ? hex8(hi) + hex8(lo) : hashBytes(encoder.encode(text.slice(i)), lo, hi);
}

/** Goes on from the state `lo`, `hi` over `bytes`; the digest as 16 hex digits. */
function hashBytes(bytes: Uint8Array, lo: number, hi: number): string {
  for (let k = 0; k < bytes.length; k++) {
    const x = lo ^ (bytes[k] as number);
    lo = Math.imul(x, 0x1b3);
    hi = nextHigh(hi, x);
  }
  return hex8(hi) + hex8(lo);
}
