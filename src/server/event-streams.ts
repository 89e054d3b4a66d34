import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { finished } from "node:stream";
import { writeHead } from "./http.js";
import { onClose } from "./socket-close.js";

/**
 * A stream that buffers more than this beyond its largest write (see
 * {@link Stream.largest}) is a reader that stopped reading: it is cut off.
 */
const MAX_BUFFERED_BYTES = 1_048_576;

/** What is kept of one open stream. */
interface Stream {
  /** Writes handed to the socket that it has not yet passed to the kernel. */
  unflushed: number;
  /** Runs out when no write has drained for the write timeout while some are waiting. */
  deadline: NodeJS.Timeout | undefined;
  /**
   * The bytes of its largest write: the asks it opened with, or one event.
   * A reader still taking one such (an ask with a prompt of megabytes, on a
   * slow link) is behind by that much without having stopped.
   */
  largest: number;
  /** Stops watching the stream and gives its slot back. */
  readonly drop: () => void;
}

/**
 * The open server-sent-event streams: each event is written to every one, and
 * {@link EventStreams.close} ends them all. Each stream starts with a
 * `heartbeat` event and gets one every `heartbeatMs`: it keeps proxies and
 * idle timeouts from closing the stream, and a page, which never sees an SSE
 * comment, can tell a server that went silent from one with nothing to say.
 *
 * A stream whose writes do not drain for `writeTimeoutMs` is cut off: its
 * reader stopped reading and the kernel's buffers are full, and heartbeats
 * alone would take days to reach the 1 MiB cap that otherwise frees its slot.
 */
export class EventStreams {
  readonly #streams = new Map<ServerResponse, Stream>();
  readonly #limit: number;
  readonly #heartbeatMs: number;
  readonly #writeTimeoutMs: number;
  #timer: NodeJS.Timeout | undefined;
  #nextId = 1;
  #closed = false;

  constructor(limit: number, heartbeatMs: number, writeTimeoutMs: number) {
    this.#limit = limit;
    this.#heartbeatMs = heartbeatMs;
    this.#writeTimeoutMs = writeTimeoutMs;
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
    // A pipelined response queued behind another never gets the socket, so it never closes: watch the socket too.
    const drop = (): void => {
      stopWatching();
      unwatch();
      const stream = this.#streams.get(res);
      if (stream === undefined) return;
      clearTimeout(stream.deadline);
      stream.deadline = undefined;
      this.#streams.delete(res);
      if (this.#streams.size === 0) this.#stopHeartbeat();
    };
    const stopWatching = finished(res, drop);
    const unwatch = onClose(socket, drop);
    const stream: Stream = { unflushed: 0, deadline: undefined, drop, largest: 0 };
    this.#streams.set(res, stream);
    this.#writeTo(res, stream, "retry: 2000\n\n");
    this.#writeTo(res, stream, this.#heartbeat());
    const opening = first.map(([event, data]) => this.#frame(event, data));
    stream.largest = opening.reduce((sum, frame) => sum + Buffer.byteLength(frame), 0);
    for (const frame of opening) this.#writeTo(res, stream, frame);
    this.#startHeartbeat();
  }

  /** Writes the event to every open stream; after {@link EventStreams.close}, nothing (the streams are ending). */
  send(event: string, data: unknown): void {
    if (this.#closed || this.#streams.size === 0) return;
    this.#write(this.#frame(event, data));
  }

  /** Ends every stream; later ones are refused. One whose end does not drain in time is cut off. */
  close(): void {
    this.#closed = true;
    this.#stopHeartbeat();
    for (const [res, stream] of this.#streams) {
      this.#arm(res, stream);
      res.end();
    }
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
    // Encoded once for every stream: a stream's unsent bytes then share one buffer, not a copy each.
    const chunk = Buffer.from(text);
    const bytes = chunk.length;
    for (const [res, stream] of this.#streams) {
      if (res.writableLength > MAX_BUFFERED_BYTES + stream.largest) {
        this.#cut(res, stream);
        continue;
      }
      stream.largest = Math.max(stream.largest, bytes);
      this.#writeTo(res, stream, chunk);
    }
  }

  #writeTo(res: ServerResponse, stream: Stream, text: string | Buffer): void {
    stream.unflushed++;
    this.#arm(res, stream);
    // Called once the socket has passed the text to the kernel (or failed): the reader is keeping up.
    res.write(text, () => {
      stream.unflushed--;
      if (stream.unflushed > 0) stream.deadline?.refresh();
      else {
        clearTimeout(stream.deadline);
        stream.deadline = undefined;
      }
    });
  }

  #arm(res: ServerResponse, stream: Stream): void {
    if (stream.deadline !== undefined) return;
    stream.deadline = setTimeout(() => this.#cut(res, stream), this.#writeTimeoutMs);
    stream.deadline.unref();
  }

  /** Frees the slot itself: a response that never got its socket (pipelined) emits nothing when destroyed. */
  #cut(res: ServerResponse, stream: Stream): void {
    stream.drop();
    res.destroy();
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
