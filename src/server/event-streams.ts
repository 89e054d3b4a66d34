import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { finished } from "node:stream";
import { writeHead } from "./http.js";

/** A stream that buffers more than this is a reader that stopped reading: it is cut off. */
const MAX_BUFFERED_BYTES = 1_048_576;

/**
 * The open server-sent-event streams: each event is written to every one, and
 * {@link EventStreams.close} ends them all. Each stream starts with a
 * `heartbeat` event and gets one every `heartbeatMs`: it keeps proxies and
 * idle timeouts from closing the stream, and a page, which never sees an SSE
 * comment, can tell a server that went silent from one with nothing to say.
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

  /**
   * Starts a stream on `res`, the response to `req`; `first` are the events
   * it begins with. A response whose connection is already gone is dropped.
   */
  open(req: IncomingMessage, res: ServerResponse, first: readonly (readonly [event: string, data: unknown])[]): void {
    // A handler reached after async middleware may get a response whose 'close' already fired.
    const socket = req.socket as Socket | null;
    if (res.destroyed || res.writableEnded || socket === null || socket.destroyed) {
      if (!res.writableEnded) res.destroy();
      return;
    }
    writeHead(res, 200, {
      "content-type": "text/event-stream; charset=utf-8",
      "x-accel-buffering": "no",
      connection: "keep-alive",
    });
    res.write("retry: 2000\n\n");
    res.write(this.#heartbeat());
    for (const [event, data] of first) res.write(this.#frame(event, data));
    this.#streams.add(res);
    // A pipelined response queued behind another never gets the socket, so it never closes: watch the socket too.
    const drop = (): void => {
      stopWatching();
      socket.off("close", drop);
      this.#streams.delete(res);
      if (this.#streams.size === 0) this.#stopHeartbeat();
    };
    const stopWatching = finished(res, drop);
    socket.once("close", drop);
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

  /** Carries no id: a reconnecting page's Last-Event-ID names the last real event. */
  #heartbeat(): string {
    return `event: heartbeat\ndata: {"heartbeatMs":${this.#heartbeatMs}}\n\n`;
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
    this.#timer = setInterval(() => this.#write(this.#heartbeat()), this.#heartbeatMs);
    this.#timer.unref();
  }

  #stopHeartbeat(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
