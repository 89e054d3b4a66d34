import type { FileHandle } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { NEWLINE, lineHash } from "./chain.js";
import type { Chain, ChainCheck, Failure } from "./chain.js";

/** How much of a log is read at a time: what verifying it holds of it, but for a line longer than this. */
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
}

/** Where a read of the log has got to: the next byte to read, and the line begun before it. */
class Cursor {
  position = 0;
  #pieces: Buffer[] = [];
  /** How many bytes of a line not yet ended were read. */
  partial = 0;

  /** Bytes up to the end of the last whole line read. */
  get whole(): number {
    return this.position - this.partial;
  }

  /**
   * Reads from `position` to the file's end, calling `each` with every whole
   * line (without its newline) until it returns `false`; a line split across
   * reads is joined first. Resolves whether `each` stopped it, and how many
   * lines it was given.
   */
  async read(
    handle: FileHandle,
    chunkBytes: number,
    signal: AbortSignal | undefined,
    each: (line: Buffer) => boolean,
  ): Promise<{ readonly stopped: boolean; readonly lines: number }> {
    let lines = 0;
    for (;;) {
      signal?.throwIfAborted();
      const buffer = Buffer.allocUnsafe(chunkBytes);
      const { bytesRead } = await handle.read(buffer, 0, chunkBytes, this.position);
      if (bytesRead === 0) return { stopped: false, lines };
      this.position += bytesRead;
      const chunk = buffer.subarray(0, bytesRead);
      let start = 0;
      for (let i = chunk.indexOf(NEWLINE); i !== -1; i = chunk.indexOf(NEWLINE, start)) {
        let line = chunk.subarray(start, i);
        if (this.partial > 0) {
          line = Buffer.concat([...this.#pieces, line]);
          this.#pieces = [];
          this.partial = 0;
        }
        start = i + 1;
        lines += 1;
        if (!each(line)) return { stopped: true, lines };
      }
      if (start < chunk.length) {
        this.#pieces.push(chunk.subarray(start));
        this.partial += chunk.length - start;
      }
    }
  }

  /** Forgets all but the first `keep` bytes of the line begun, the file having been cut back there. */
  cutPartial(keep: number): void {
    this.#pieces = keep === 0 ? [] : [Buffer.concat(this.#pieces).subarray(0, keep)];
    this.position -= this.partial - keep;
    this.partial = keep;
  }
}

/**
 * Verifies the log open at `handle` from its first byte, a chunk at a time,
 * with the checks `newCheck` makes: what it holds of the file is a chunk and
 * the line under way, however long the log. Resolves the outcome and how
 * many bytes of whole lines it covers. File system errors are thrown as they
 * come, an abort as the signal's reason.
 *
 * With `tail: "wait"`, a last line found cut short is waited for, up to
 * {@link TAIL_WAIT_MS}: the lines a writer finishes meanwhile are taken (a
 * line begun after them is still being written too). A writer whose write
 * failed cuts the log back to where its write began instead: when that takes
 * away lines already checked, the log is checked again from the start, as it
 * is then.
 */
export async function checkLogFile(
  handle: FileHandle,
  newCheck: () => ChainCheck,
  options: CheckFileOptions,
): Promise<{ readonly outcome: Chain | Failure; readonly bytes: number }> {
  const { signal, tail } = options;
  const chunkBytes = options.chunkBytes ?? CHUNK_BYTES;
  let check = newCheck();
  let cursor = new Cursor();
  const readOn = (): Promise<{ readonly stopped: boolean; readonly lines: number }> =>
    cursor.read(handle, chunkBytes, signal, (line) => check.line(line));
  const finish = async (): Promise<{ readonly outcome: Chain | Failure; readonly bytes: number }> => {
    const outcome = check.end(tail === "cut" ? 0 : cursor.partial);
    if (!("type" in outcome)) return { outcome, bytes: cursor.whole };
    // Which of a duplicated or a forked line it is, the earlier line's hash
    // tells; it is read again rather than every hash kept on the way.
    let earlier: string | undefined;
    let index = 0;
    await new Cursor().read(handle, chunkBytes, signal, (line) => {
      index += 1;
      if (index === outcome.index) earlier = lineHash(line);
      return index < outcome.index;
    });
    return { outcome: check.repeated(earlier), bytes: cursor.whole };
  };

  const first = await readOn();
  if (first.stopped || cursor.partial === 0 || tail !== "wait") return finish();
  for (let delay = 1, waited = 0; waited < TAIL_WAIT_MS; waited += delay, delay *= 2) {
    await sleep(delay, undefined, signal ? { signal } : {});
    const size = (await handle.stat()).size;
    if (size < cursor.position) {
      if (size >= cursor.whole) {
        cursor.cutPartial(size - cursor.whole);
        if (cursor.partial === 0) return finish();
        continue;
      }
      check = newCheck();
      cursor = new Cursor();
      const again = await readOn();
      if (again.stopped || cursor.partial === 0) return finish();
      continue;
    }
    const more = await readOn();
    if (more.stopped) return finish();
    if (more.lines > 0) {
      cursor.cutPartial(0);
      return finish();
    }
  }
  return finish();
}
