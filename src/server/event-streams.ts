import type { ServerResponse } from "node:http";
import { writeHead } from "./http.js";

/** A stream that buffers more than this is a reader that stopped reading: it is cut off. */
const MAX_BUFFERED_BYTES = 1_048_576;

/**
 * The open server-sent-event streams: each event is written to every one, a
 * comment line every `heartbeatMs` keeps proxies and idle timeouts from
 * closing them, and {@link EventStreams.close} ends them all.
 */
export class EventStreams {
  readonly #streams = new Set<ServerResponse>();
  readonly #limit: number;
  readonly #heartbeatMs: number;
  #timer: NodeJS.Timeout | undefined;
  #nextId = 1;
  #closed = false;

  constructor(limit: number, heartbeatMs: number) {
    this.#limit = limit;
    this.#heartbeatMs = heartbeatMs;
  }

  get size(): number {
    return this.#streams.size;
  }

  /** Whether another stream may open now. */
  get full(): boolean {
    return this.#closed || this.#streams.size >= this.#limit;
  }

  /** Starts a stream on `res`; `first` are the events it begins with. */
  open(res: ServerResponse, first: readonly (readonly [event: string, data: unknown])[]): void {
    writeHead(res, 200, {
      "content-type": "text/event-stream; charset=utf-8",
      "x-accel-buffering": "no",
      connection: "keep-alive",
    });
    res.write("retry: 2000\n\n");
    for (const [event, data] of first) res.write(this.#frame(event, data));
    this.#streams.add(res);
    res.on("close", () => {
      this.#streams.delete(res);
      if (this.#streams.size === 0) this.#stopHeartbeat();
    });
    this.#startHeartbeat();
  }

  send(event: string, data: unknown): void {
    if (this.#streams.size === 0) return;
    this.#write(this.#frame(event, data));
  }

  /** Ends every stream; later ones are refused. */
  close(): void {
    this.#closed = true;
    this.#stopHeartbeat();
    for (const res of this.#streams) res.end();
    this.#streams.clear();
  }

  #frame(event: string, data: unknown): string {
    // JSON never holds a raw newline, so one data line carries the whole event.
    return `id: ${this.#nextId++}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
  }

  #write(text: string): void {
    for (const res of this.#streams) {
      if (res.writableLength > MAX_BUFFERED_BYTES) {
        this.#streams.delete(res);
        res.destroy();
        continue;
      }
      res.write(text);
    }
  }

  #startHeartbeat(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => this.#write(": keep-alive\n\n"), this.#heartbeatMs);
    this.#timer.unref();
  }

  #stopHeartbeat(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
