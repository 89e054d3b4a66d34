import { request as httpRequest } from "node:http";
import type { IncomingHttpHeaders } from "node:http";

/** A reply read whole. */
export interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: unknown;
}

/** A request as a raw client sends it: any Host, any headers, a body in one piece or in chunks. */
export interface RawRequest {
  readonly method?: string;
  readonly headers?: Readonly<Record<string, string | number>>;
  readonly body?: string | Buffer;
  /** Sent with chunked encoding (no Content-Length), chunk by chunk. */
  readonly chunks?: readonly (string | Buffer)[];
}

/**
 * One request over a fresh connection with node:http, which (unlike fetch)
 * lets a test send any Host and Origin header. Resolves with the reply; a
 * connection the server closes while the body is still being sent still
 * yields the reply it sent first.
 */
export function request(url: string, options: RawRequest = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? "GET", headers: { ...options.headers }, agent: false });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", reject);
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
      });
    });
    // A server that refuses a body may close before all of it is written; the reply already came.
    req.on("error", (error: NodeJS.ErrnoException) => {
      if (error.code !== "EPIPE" && error.code !== "ECONNRESET") reject(error);
    });
    if (options.chunks !== undefined) {
      for (const chunk of options.chunks) req.write(chunk);
      req.end();
    } else {
      req.end(options.body);
    }
  });
}

/** One server-sent event, or a comment line (`event: ""`, the comment as `data`). */
export interface SseEvent {
  readonly event: string;
  readonly data: string;
}

/** An open event stream read with node:http, event by event. */
export interface SseReader {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** The first unread event (or comment) that satisfies `match`; others stay unread. Rejects if the stream ends first. */
  next(match?: (event: SseEvent) => boolean): Promise<SseEvent>;
  /** Resolves when the server ends the stream. */
  readonly ended: Promise<void>;
  /** Stops reading from the socket, as a reader that hangs does: what the server sends waits in the buffers. */
  pause(): void;
  /** Reads again after {@link SseReader.pause}. */
  resume(): void;
  close(): void;
}

/** Opens `url` as an event stream with `headers`. */
export function openStream(url: string, headers: Readonly<Record<string, string>>): Promise<SseReader> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers: { accept: "text/event-stream", ...headers }, agent: false });
    req.on("error", reject);
    req.on("response", (res) => {
      const events: SseEvent[] = [];
      const waiters: (() => void)[] = [];
      let buffer = "";
      let done = false;
      const wake = (): void => {
        for (const w of waiters.splice(0)) w();
      };
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        buffer += chunk;
        for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = "message";
          const data: string[] = [];
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) events.push({ event: "", data: line.slice(1).trim() });
            else if (line.startsWith("event: ")) event = line.slice(7);
            else if (line.startsWith("data: ")) data.push(line.slice(6));
          }
          if (data.length > 0) events.push({ event, data: data.join("\n") });
        }
        wake();
      });
      const ended = new Promise<void>((resolveEnd) => {
        const finish = (): void => {
          done = true;
          wake();
          resolveEnd();
        };
        res.on("end", finish);
        res.on("close", finish);
      });
      resolve({
        status: res.statusCode ?? 0,
        headers: res.headers,
        ended,
        close: () => req.destroy(),
        pause: () => void res.pause(),
        resume: () => void res.resume(),
        async next(match = () => true) {
          for (;;) {
            const index = events.findIndex(match);
            if (index >= 0) return events.splice(index, 1)[0] as SseEvent;
            if (done) throw new Error("the event stream ended before the event came");
            await new Promise<void>((wakeUp) => waiters.push(wakeUp));
          }
        },
      });
    });
    req.end();
  });
}

/** Base URLs for links that carry a user name or password (which every link would then carry). */
export const BASE_URLS_WITH_CREDENTIALS: readonly (string | URL)[] = [
  "https://bot:hunter2-secret@approvals.example.com/",
  "https://hunter2-secret@approvals.example.com/",
  "https://:hunter2-secret@approvals.example.com/",
  new URL("https://bot:hunter2-secret@approvals.example.com/"),
];
