import type { Writable } from "node:stream";
import { outputWidth, wrap } from "./layout.js";

/**
 * The demo's standard output: text laid out in its width, and silence once
 * nobody reads it. `npm run demo | head` closes the pipe after ten lines;
 * writes then fail with EPIPE, which is no error of the demo's: `gone`
 * aborts, so the run stops instead of working for nobody, and the demo
 * still cleans up and exits 0.
 */
export class Output {
  /** The widest line to write. */
  readonly width: number;
  /** Aborts when the stream fails; its reason is the error. */
  readonly gone: AbortSignal;
  readonly #stream: Writable;

  constructor(stream: Writable & { columns?: number }) {
    this.#stream = stream;
    this.width = outputWidth(stream);
    const gone = new AbortController();
    this.gone = gone.signal;
    // Stays attached for the life of the process: an error event with no
    // listener would crash it with a stack trace.
    stream.on("error", (error: Error) => {
      if (!gone.signal.aborted) gone.abort(error);
    });
  }

  /** True when the stream failed with something other than a closed pipe. */
  get failed(): boolean {
    return this.gone.aborted && (this.gone.reason as NodeJS.ErrnoException).code !== "EPIPE";
  }

  /** Writes `text` as it is. */
  write(text: string): void {
    if (!this.gone.aborted) this.#stream.write(text);
  }

  /** Writes `text` wrapped after `lead` (see {@link wrap}), each line ending in a newline. */
  line(text = "", lead = "", hang?: string): void {
    this.write(`${wrap(lead, text, this.width, hang).join("\n")}\n`);
  }
}
