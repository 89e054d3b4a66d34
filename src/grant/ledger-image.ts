import type { Grant } from "./grant.js";

const OPEN = 0x5b; // [
const COMMA = 0x2c; // ,
const CLOSE = 0x5d; // ]

/**
 * A buffer of at least `size` bytes: `spare` when it is large enough (its
 * bytes are overwritten), else a new one with room to grow, so a ledger that
 * grows by a record per save is not reallocated on every save.
 */
function room(size: number, spare: Buffer | undefined): Buffer {
  if (spare !== undefined && spare.length >= size) return spare;
  return Buffer.allocUnsafeSlow(size + (size >> 3) + 256);
}

/**
 * The bytes of a ledger file, `[record,record,…]` in UTF-8, with the offset
 * where each record ends. A save or a revoke changes one record, so the next
 * image is made from this one by copying the runs of records around it (two
 * copies) instead of encoding every record again; in a ledger of 10k grants
 * that is the difference between milliseconds and a fraction of one. The
 * offsets are a typed array and the bytes may be written into the buffer of
 * an image no longer needed, so a save leaves the collector little to do.
 */
export class LedgerImage {
  /** The grants, in file order. */
  readonly grants: readonly Grant[];
  /** `storage.subarray(0, length)`: the file's bytes. */
  readonly bytes: Buffer;
  /** The whole buffer `bytes` lies at the start of, for {@link edit} to reuse once this image is dropped. */
  readonly storage: Buffer;
  /** `ends[i]`: the offset just past record `i`; record `i` starts at `ends[i - 1] + 1`, record 0 at 1. */
  readonly #ends: Float64Array;

  private constructor(grants: readonly Grant[], storage: Buffer, length: number, ends: Float64Array) {
    this.grants = grants;
    this.storage = storage;
    this.bytes = storage.subarray(0, length);
    this.#ends = ends;
  }

  /** The image of a ledger holding `grants`, encoded from scratch. */
  static of(grants: readonly Grant[], spare?: Buffer): LedgerImage {
    const texts = grants.map((grant) => grant.toLedgerText());
    let total = 2 + Math.max(texts.length - 1, 0);
    for (const text of texts) total += Buffer.byteLength(text, "utf8");
    const out = room(total, spare);
    const ends = new Float64Array(texts.length);
    let at = 0;
    out[at++] = OPEN;
    for (let i = 0; i < texts.length; i++) {
      if (i > 0) out[at++] = COMMA;
      at += out.write(texts[i] as string, at, "utf8");
      ends[i] = at;
    }
    out[at++] = CLOSE;
    return new LedgerImage([...grants], out, at, ends);
  }

  /**
   * This ledger without the record at `remove` (`-1`: none) and, when `add`
   * is given, with its record appended: what a revoke (or a save that moves
   * a grant to the end) writes next. `spare`, when given, is a buffer no
   * longer read by anyone (the storage of an image before this one), which
   * the new image may overwrite and keep.
   */
  edit(remove: number, add: Grant | undefined, spare?: Buffer): LedgerImage {
    const n = this.grants.length;
    if (remove < -1 || remove >= n) throw new RangeError(`no record ${remove} in a ledger of ${n}`);
    if (spare !== undefined && spare.buffer === this.storage.buffer) throw new RangeError("the spare buffer is this image's own");
    const ends = this.#ends;
    const endOf = (i: number): number => ends[i] as number;
    // The kept records are two runs, before and after the removed one, each contiguous in `bytes`.
    const beforeCount = remove === -1 ? n : remove;
    const beforeEnd = beforeCount === 0 ? 1 : endOf(beforeCount - 1);
    const afterStart = remove === -1 || remove === n - 1 ? 0 : endOf(remove) + 1;
    const afterEnd = afterStart === 0 ? 0 : endOf(n - 1);
    const text = add?.toLedgerText();
    const textBytes = text === undefined ? 0 : Buffer.byteLength(text, "utf8");
    const hasBefore = beforeCount > 0;
    const hasAfter = afterEnd > afterStart;
    // Each run carries the commas between its own records; these are the ones that join the pieces.
    const joins = (hasBefore && hasAfter ? 1 : 0) + (text !== undefined && (hasBefore || hasAfter) ? 1 : 0);
    const total = 2 + joins + (beforeEnd - 1) + (afterEnd - afterStart) + textBytes;
    const out = room(total, spare);
    const kept = n - (remove === -1 ? 0 : 1);
    const nextEnds = new Float64Array(kept + (text === undefined ? 0 : 1));
    let at = 0;
    out[at++] = OPEN;
    if (hasBefore) {
      at += this.bytes.copy(out, at, 1, beforeEnd);
      nextEnds.set(ends.subarray(0, beforeCount));
    }
    if (hasAfter) {
      if (at > 1) out[at++] = COMMA;
      const shift = at - afterStart;
      at += this.bytes.copy(out, at, afterStart, afterEnd);
      for (let i = remove + 1, k = beforeCount; i < n; i++, k++) nextEnds[k] = endOf(i) + shift;
    }
    const grants = remove === -1 ? [...this.grants] : this.grants.filter((_, i) => i !== remove);
    if (text !== undefined && add !== undefined) {
      if (at > 1) out[at++] = COMMA;
      at += out.write(text, at, "utf8");
      nextEnds[kept] = at;
      grants.push(add);
    }
    out[at++] = CLOSE;
    if (at !== total) throw new Error(`ledger image: wrote ${at} of ${total} bytes`);
    return new LedgerImage(grants, out, at, nextEnds);
  }
}
