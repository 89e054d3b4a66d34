import type { FileHandle } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { NEWLINE, lineHash } from "./chain.js";
import type { Chain, ChainCheck, Failure, LineVisitor } from "./chain.js";
import { AUDIT_LINE_MAX_BYTES } from "./line.js";

/**
 * How much of a log is read at a time: what verifying it holds of it, but
 * for a line longer than this (up to {@link AUDIT_LINE_MAX_BYTES}).
 */
export const CHUNK_BYTES = 64 * 1024;

/**
 * How long verification waits for a writer to finish the last line it found
 * cut short. A write reaches the file a page at a time, and the kernel may
 * pause a writer between pages for up to 200 ms when memory is short.
 */
const TAIL_WAIT_MS = 250;

/**
 * What to do with a last line that has no newline:
 * - `"wait"`: wait for a writer to finish it, briefly; one no writer finishes is `"truncated"`.
 * - `"cut"`: leave it out, as a line a writer is still writing.
 * - `"strict"`: it is `"truncated"`.
 */
export type TailRule = "wait" | "cut" | "strict";

export interface CheckFileOptions {
  readonly tail: TailRule;
  readonly signal?: AbortSignal | undefined;
  /** @default CHUNK_BYTES */
  readonly chunkBytes?: number | undefined;
  /** Where the lines to check start: the end of the lines the check continues from. @default 0 */
  readonly from?: number | undefined;
  /** Runs each time, with `tail: "wait"`, before the log is looked at again (tests). */
  readonly whileWaiting?: (() => Promise<void>) | undefined;
  /** Runs each time a read reaches the file's end, before the next read (tests). */
  readonly afterEnd?: (() => Promise<void>) | undefined;
}

/** Where a read of the log has got to: the next byte to read, and the line begun before it. */
class Cursor {
  position: number;
  #pieces: Buffer[] = [];
  /** How many bytes of a line not yet ended were read. */
  partial = 0;
  /** The last whole line handed on (without its newline). */
  #last: Uint8Array | undefined;
  /** When the last read reached the file's end: the last line and the line begun there, as read. */
  #end: { readonly at: number; readonly bytes: Buffer } | undefined;

  constructor(from: number) {
    this.position = from;
  }

  /** Bytes up to the end of the last whole line read. */
  get whole(): number {
    return this.position - this.partial;
  }

  /**
   * Reads from `position` to the file's end, handing every whole line
   * (without its newline) to `visitor` until it returns `false`; a line split
   * across reads is joined first. A line that grows past
   * {@link AUDIT_LINE_MAX_BYTES} goes to `visitor.oversized` and ends the
   * read, with or without a newline after it: no more of it is held. Resolves
   * whether the read was stopped, and how many lines it handed on.
   *
   * A file found grown after a read reached its end may no longer hold what
   * was read there: a writer whose write failed cuts it back, and another
   * writer may have written other lines in its place, which read on from
   * the old end would be joined to lines no longer there. The read then
   * stops, `changed`, before it hands on any of the new bytes.
   */
  async read(
    handle: FileHandle,
    chunkBytes: number,
    signal: AbortSignal | undefined,
    visitor: LineVisitor,
    afterEnd?: () => Promise<void>,
  ): Promise<{ readonly stopped: boolean; readonly lines: number; readonly changed?: true }> {
    let lines = 0;
    for (;;) {
      if (this.#end !== undefined) await afterEnd?.();
      signal?.throwIfAborted();
      const buffer = Buffer.allocUnsafe(chunkBytes);
      const { bytesRead } = await handle.read(buffer, 0, chunkBytes, this.position);
      if (bytesRead === 0) {
        this.#end ??= this.#tail();
        return { stopped: false, lines };
      }
      // Checked after the new bytes were read: what was read at the end is still there then.
      if (this.#end !== undefined && !(await holds(handle, this.#end))) return { stopped: true, lines, changed: true };
      const at = this.position;
      this.position += bytesRead;
      const chunk = buffer.subarray(0, bytesRead);
      let start = 0;
      for (let i = chunk.indexOf(NEWLINE); i !== -1; i = chunk.indexOf(NEWLINE, start)) {
        if (this.partial + i - start > AUDIT_LINE_MAX_BYTES) {
          visitor.oversized(at + start - this.partial);
          return { stopped: true, lines };
        }
        let line = chunk.subarray(start, i);
        if (this.partial > 0) {
          line = Buffer.concat([...this.#pieces, line]);
          this.#pieces = [];
          this.partial = 0;
        }
        start = i + 1;
        lines += 1;
        this.#last = line;
        if (!visitor.line(line)) return { stopped: true, lines };
      }
      if (start < chunk.length) {
        if (this.partial + chunk.length - start > AUDIT_LINE_MAX_BYTES) {
          visitor.oversized(at + start - this.partial);
          return { stopped: true, lines };
        }
        this.#pieces.push(chunk.subarray(start));
        this.partial += chunk.length - start;
      }
      this.#end = bytesRead < chunkBytes ? this.#tail() : undefined;
    }
  }

  /** The last whole line read, its newline and the line begun after it: where they start, and their bytes. */
  #tail(): { readonly at: number; readonly bytes: Buffer } {
    const bytes = Buffer.concat(this.#last === undefined ? this.#pieces : [this.#last, NEWLINE_BYTE, ...this.#pieces]);
    return { at: this.position - bytes.length, bytes };
  }

  /** Forgets all but the first `keep` bytes of the line begun, the file having been cut back there. */
  cutPartial(keep: number): void {
    this.#pieces = keep === 0 ? [] : [Buffer.concat(this.#pieces).subarray(0, keep)];
    this.position -= this.partial - keep;
    this.partial = keep;
    if (this.#end !== undefined) this.#end = this.#tail();
  }
}

const NEWLINE_BYTE = Buffer.from([NEWLINE]);

/** Whether the file at `handle` still holds `part.bytes` at `part.at`. */
export async function holds(
  handle: FileHandle,
  part: { readonly at: number; readonly bytes: Buffer },
): Promise<boolean> {
  const found = Buffer.alloc(part.bytes.length);
  const { bytesRead } = await handle.read(found, 0, found.length, part.at);
  return bytesRead === found.length && found.equals(part.bytes);
}

/**
 * Verifies the log open at `handle` from byte `from` (its first, by default)
 * to its end, a chunk at a time, with the checks `newCheck` makes: what it
 * holds of the file is a chunk and the line under way (a line longer than
 * {@link AUDIT_LINE_MAX_BYTES} is reported at that, and not read further),
 * however long the log. Resolves the outcome and the byte where the whole
 * lines it covers end. File system errors are thrown as they come, an abort
 * as the signal's reason.
 *
 * With `tail: "wait"`, a last line found cut short is waited for, up to
 * {@link TAIL_WAIT_MS}: the lines a writer finishes meanwhile are taken (a
 * line begun after them is still being written too). A writer whose write
 * failed cuts the log back to where its write began instead: when that takes
 * away lines already checked, or what was read at the end is no longer
 * there once the log has grown (another writer wrote other lines in its
 * place meanwhile; see {@link Cursor.read}), the log is checked again from
 * `from`, as it is then, whatever the `tail` rule.
 */
export async function checkLogFile(
  handle: FileHandle,
  newCheck: () => ChainCheck,
  options: CheckFileOptions,
): Promise<{ readonly outcome: Chain | Failure; readonly bytes: number }> {
  const { signal, tail } = options;
  const chunkBytes = options.chunkBytes ?? CHUNK_BYTES;
  const from = options.from ?? 0;
  let check = newCheck();
  let cursor = new Cursor(from);
  const readOn = (): Promise<{ readonly stopped: boolean; readonly lines: number; readonly changed?: true }> =>
    cursor.read(handle, chunkBytes, signal, check, options.afterEnd);
  const finish = async (): Promise<{ readonly outcome: Chain | Failure; readonly bytes: number }> => {
    const outcome = check.end(tail === "cut" ? 0 : cursor.partial);
    if (!("type" in outcome)) return { outcome, bytes: cursor.whole };
    // Which of a duplicated or a forked line it is, the earlier line's hash
    // tells; it is read again rather than every hash kept on the way.
    let earlier: string | undefined;
    let index = 0;
    await new Cursor(from).read(handle, chunkBytes, signal, {
      line(line) {
        index += 1;
        if (index === outcome.index) earlier = lineHash(line);
        return index < outcome.index;
      },
      oversized: () => undefined,
    });
    return { outcome: check.repeated(earlier), bytes: cursor.whole };
  };

  /**
   * Checks the log again from `from`, as it is now; whether it ends in a line
   * cut short to wait for. Changed again meanwhile, it is taken as it was
   * before that change.
   */
  const readAgain = async (): Promise<boolean> => {
    check = newCheck();
    cursor = new Cursor(from);
    const again = await readOn();
    return !again.stopped && cursor.partial > 0;
  };

  const first = await readOn();
  const waiting = first.changed ? await readAgain() : !first.stopped && cursor.partial > 0;
  if (!waiting || tail !== "wait") return finish();
  for (let delay = 1, waited = 0; waited < TAIL_WAIT_MS; waited += delay, delay *= 2) {
    await sleep(delay, undefined, signal ? { signal } : {});
    await options.whileWaiting?.();
    const size = (await handle.stat()).size;
    if (size < cursor.position) {
      if (size >= cursor.whole) {
        cursor.cutPartial(size - cursor.whole);
        if (cursor.partial === 0) return finish();
        continue;
      }
      if (!(await readAgain())) return finish();
      continue;
    }
    const more = await readOn();
    if (more.changed) {
      if (!(await readAgain())) return finish();
      continue;
    }
    if (more.stopped) return finish();
    if (more.lines > 0) {
      cursor.cutPartial(0);
      return finish();
    }
  }
  return finish();
}
