import { createInterface } from "node:readline";
import type { Interface } from "node:readline";
import type { Readable } from "node:stream";

/**
 * Reads a stream line by line on demand. Unlike `readline`'s `question()`,
 * `next()` settles with `undefined` when the stream ends, so a caller can fail
 * closed on end-of-input instead of waiting forever.
 */
export class LineReader implements Disposable {
  readonly #rl: Interface;
  readonly #lines: string[] = [];
  readonly #waiters: Array<(line: string | undefined) => void> = [];
  #ended = false;

  constructor(input: Readable) {
    this.#rl = createInterface({ input, terminal: false, crlfDelay: Infinity });
    this.#rl.on("line", (line) => {
      const waiter = this.#waiters.shift();
      if (waiter === undefined) this.#lines.push(line);
      else waiter(line);
    });
    this.#rl.on("close", () => {
      this.#ended = true;
      for (let waiter = this.#waiters.shift(); waiter !== undefined; waiter = this.#waiters.shift()) {
        waiter(undefined);
      }
    });
  }

  /** The next line, or `undefined` once the input has ended (or the reader was closed). */
  next(): Promise<string | undefined> {
    const line = this.#lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.#ended) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Stops reading; pending and later `next()` calls settle with `undefined`. */
  close(): void {
    this.#rl.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
