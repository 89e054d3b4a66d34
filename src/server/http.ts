import { maxHeaderSize, STATUS_CODES } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { duplicateMember } from "../duplicate-member.js";
import { shownText } from "../shown.js";
import { textHead } from "../text-head.js";

/**
 * The page may load its own script, style and API and nothing else; no
 * inline script or style, no framing, forms post only to this server.
 */
export const CONTENT_SECURITY_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
  "form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy": CONTENT_SECURITY_POLICY,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  // Not no-referrer: under it a browser sends "Origin: null" with a same-origin form POST, which the Origin check must refuse.
  "referrer-policy": "same-origin",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "cache-control": "no-store",
};

/** What an {@link HttpError} may carry besides its status, code and message. */
export interface HttpErrorOptions {
  /** Headers to send with it (`Allow`, `WWW-Authenticate`). */
  readonly headers?: Readonly<Record<string, string>>;
  /** The heading of its page, where it differs by more than the code (how an ask ended). */
  readonly title?: string;
  /** More fields of its JSON body, besides `error` and `message` (how an ask ended). */
  readonly body?: Readonly<Record<string, unknown>>;
}

/** An expected failure with its status and a stable error code; its message is safe to send. */
export class HttpError extends Error {
  readonly status: number;
  readonly code: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly title: string | undefined;
  readonly body: Readonly<Record<string, unknown>>;

  constructor(status: number, code: string, message: string, options: HttpErrorOptions = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.headers = options.headers ?? {};
    this.title = options.title;
    this.body = options.body ?? {};
  }
}

/**
 * Writes the status, the security headers and `headers`; the body follows.
 * A reply to a request whose body is still arriving (one the route never
 * reads, or a refusal before it was read) closes the connection: kept
 * alive, Node would read that body to its end, however slow or long, before
 * the next request, and a body slower than `requestTimeout` would get a 408
 * after the reply.
 */
export function writeHead(
  res: ServerResponse,
  status: number,
  headers: Readonly<Record<string, string | string[]>>,
): void {
  const req = res.req as IncomingMessage | undefined;
  const close = req !== undefined && bodyArriving(req) ? { connection: "close" } : {};
  res.writeHead(status, { ...SECURITY_HEADERS, ...headers, ...close });
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Readonly<Record<string, string>> = {},
): void {
  const text = JSON.stringify(body);
  writeHead(res, status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}

export function sendBody(
  res: ServerResponse,
  status: number,
  type: string,
  body: string | Buffer,
  headers: Readonly<Record<string, string | string[]>> = {},
): void {
  writeHead(res, status, { "content-type": type, "content-length": String(Buffer.byteLength(body)), ...headers });
  res.end(body);
}

/** Sends an {@link HttpError} as `{ error, message }`, with `headers` besides its own. */
export function sendError(res: ServerResponse, error: HttpError, headers: Readonly<Record<string, string>> = {}): void {
  // The body of a request refused before it was read must not keep the connection busy.
  const close = error.status === 413 ? { connection: "close" } : {};
  sendJson(
    res,
    error.status,
    { error: error.code, message: error.message, ...error.body },
    { ...error.headers, ...headers, ...close },
  );
}

/** The request says it has a body (`Transfer-Encoding`, or a `Content-Length` other than 0), arrived or not. */
export function declaresBody(req: IncomingMessage): boolean {
  const length = req.headers["content-length"];
  return req.headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}

/**
 * What Node's own refusal of a request it could not read (`clientError`:
 * headers over its limit, text that is not HTTP, a request too slow) says,
 * as the handler's refusals say it: `{ error, message }` with the security
 * headers. Node's default sends a bare status line, which names nothing.
 */
function unreadable(error: NodeJS.ErrnoException): HttpError {
  switch (error.code) {
    case "HPE_HEADER_OVERFLOW":
      return new HttpError(
        431,
        "headers_too_large",
        `the request line and headers may be at most ${maxHeaderSize} bytes in all`,
      );
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return new HttpError(413, "body_too_large", "the body's chunk extensions are over Node's limit");
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new HttpError(408, "request_timeout", "the request's headers or body did not arrive in time");
    default: {
      const code = typeof error.code === "string" && /^HPE_[A-Z_]+$/.test(error.code) ? ` (${error.code})` : "";
      return new HttpError(400, "bad_request", `the request is not valid HTTP/1.1${code}`);
    }
  }
}

/**
 * A `clientError` listener for a `node:http` server: answers as Node would
 * (only where no reply has begun on the connection, then closes it), but
 * with a JSON error that names the problem.
 */
export function refuseUnreadable(error: NodeJS.ErrnoException, socket: Duplex): void {
  // Node's own test: a reply already under way on this connection must not get another in its midst.
  const inFlight = (socket as { readonly _httpMessage?: ServerResponse | null })._httpMessage;
  if (socket.writable && error.code !== "ECONNRESET" && inFlight?.headersSent !== true) {
    const refusal = unreadable(error);
    const body = JSON.stringify({ error: refusal.code, message: refusal.message });
    const headers = {
      ...SECURITY_HEADERS,
      "content-type": "application/json; charset=utf-8",
      "content-length": String(Buffer.byteLength(body)),
      connection: "close",
    };
    const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
    socket.write(`HTTP/1.1 ${refusal.status} ${STATUS_CODES[refusal.status] ?? ""}\r\n${head.join("")}\r\n${body}`);
  }
  socket.destroy();
}

/** The request has a body that has not all arrived yet: a reply sent now closes the connection ({@link writeHead}). */
export function bodyArriving(req: IncomingMessage): boolean {
  return declaresBody(req) && !req.complete;
}

/** Escapes text for HTML element content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function tooLarge(limit: number): HttpError {
  return new HttpError(413, "body_too_large", `the body may be at most ${limit} bytes`);
}

/**
 * What a middleware in front of the handler already read of the body, as
 * `req.body` (Express's `express.json()`, `express.urlencoded()`,
 * `express.text()`, `express.raw()`), once it has read the stream to its
 * end: the stream then has nothing left to give.
 */
function readBefore(req: IncomingMessage): { readonly value: unknown } | undefined {
  if (!req.readableEnded) return undefined;
  const value = (req as { readonly body?: unknown }).body;
  return value === undefined ? undefined : { value };
}

/** Node's own test of an `Expect` header for `100-continue`. */
const EXPECTS_CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i;

/**
 * Sends `100 Continue` to a client that waits for it before it sends the
 * body (`Expect: 100-continue`), unless one went already: Node sends it
 * before the `request` event, so before any check, unless the server passes
 * its `checkContinue` event to the handler too, as `createApprovalServer`
 * does. Called once every check has passed, just before the body is read: a
 * request refused gets its refusal instead, and sends no body.
 */
function askForBody(req: IncomingMessage, res: ServerResponse): void {
  if (req.complete || res.headersSent || !EXPECTS_CONTINUE.test(req.headers.expect ?? "")) return;
  // Node's record of a 100 Continue written on this response (ServerResponse.writeContinue sets it).
  if ((res as { readonly _sent100?: unknown })._sent100 === true) return;
  res.writeContinue();
}

/** A header's value as a refusal quotes it: trimmed, and cut short. */
function quoted(value: string): string {
  const text = value.trim();
  return text.length > 64 ? `${text.slice(0, 64)}…` : text;
}

/**
 * Refuses a body in a coding the handler does not decode, which it would
 * otherwise read as it came (compressed bytes as JSON or a form) and refuse
 * as malformed: a `Content-Encoding` other than `identity` (415, RFC 9110,
 * 15.5.16), a `Transfer-Encoding` other than `chunked`, which Node decodes
 * (501, RFC 9112, 6.1).
 */
function checkCodings(req: IncomingMessage): void {
  const content = req.headers["content-encoding"];
  if (content !== undefined && !["", "identity"].includes(content.trim().toLowerCase())) {
    throw new HttpError(
      415,
      "unsupported_content_encoding",
      `the body's Content-Encoding ${quoted(content)} is not decoded here; send the body as it is`,
    );
  }
  const transfer = req.headers["transfer-encoding"];
  if (transfer !== undefined && transfer.trim().toLowerCase() !== "chunked") {
    throw new HttpError(
      501,
      "unsupported_transfer_encoding",
      `the body's Transfer-Encoding ${quoted(transfer)} is not decoded here; send it chunked alone, or with Content-Length`,
    );
  }
}

/**
 * Reads a request body of at most `limit` bytes. A declared or actual size
 * over the limit is a 413; the rest of such a body is not read. A body a
 * middleware already read as text or bytes is taken from `req.body`.
 */
async function readBody(req: IncomingMessage, res: ServerResponse, limit: number): Promise<Buffer> {
  const declared = req.headers["content-length"];
  if (declared !== undefined && Number(declared) > limit) throw tooLarge(limit);
  const before = readBefore(req)?.value;
  if (typeof before === "string" || before instanceof Uint8Array) {
    const bytes = typeof before === "string" ? Buffer.from(before, "utf8") : Buffer.from(before);
    if (bytes.length > limit) throw tooLarge(limit);
    return bytes;
  }
  checkCodings(req);
  askForBody(req, res);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw tooLarge(limit);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Throws on bytes that are not UTF-8 (a broken or overlong sequence, an encoded surrogate); keeps a BOM as text. */
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function notUtf8(): HttpError {
  return new HttpError(400, "body_not_utf8", "the request body is not valid UTF-8");
}

/**
 * `bytes` as text. A lenient decode would turn what is not UTF-8 into
 * U+FFFD, and an answer would land with text nobody wrote: refused instead.
 */
function utf8Text(bytes: Uint8Array): string {
  try {
    return STRICT_UTF8.decode(bytes);
  } catch {
    throw notUtf8();
  }
}

const HEX = /^[0-9A-Fa-f]{2}$/;

/**
 * A form body's bytes with its `%XX` escapes decoded, as URLSearchParams
 * decodes them (a `%` that escapes nothing stays as it is). Separators are
 * ASCII, so this is UTF-8 exactly when every name and value is.
 */
function unescapedForm(bytes: Buffer): Buffer {
  const out = Buffer.alloc(bytes.length);
  let n = 0;
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i] as number;
    if (byte === 0x25 && HEX.test(bytes.toString("latin1", i + 1, i + 3))) {
      out[n++] = Number.parseInt(bytes.toString("latin1", i + 1, i + 3), 16);
      i += 2;
    } else {
      out[n++] = byte;
    }
  }
  return out.subarray(0, n);
}

/** The request's `Content-Type` without its parameters (`charset`), lowercased; "" when it has none. */
function mediaType(req: IncomingMessage): string {
  return (req.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
}

/** A value a middleware parsed the body into (JSON, a form), not text or bytes. */
function parsedBefore(req: IncomingMessage): { readonly value: unknown } | undefined {
  const before = readBefore(req);
  if (before === undefined || typeof before.value === "string" || before.value instanceof Uint8Array) return undefined;
  return before;
}

/**
 * What a middleware parsed, as JSON again, to be measured. JSON.stringify
 * recurses, so a body a parser took (express.json() parses 20 KB of
 * nested brackets) may be too deep for it: that is the client's body, 400.
 */
function parsedJson(value: unknown): string {
  try {
    return JSON.stringify(value) ?? "";
  } catch (error) {
    if (error instanceof RangeError) throw new HttpError(400, "bad_request", "the body is nested too deeply");
    throw error;
  }
}

/**
 * Reads a JSON body: 415 unless it is declared `application/json`, 400 unless
 * it is UTF-8 (`body_not_utf8`) and parses. One a middleware already parsed (`express.json()`) is taken as
 * parsed, held to `limit` as JSON.
 */
export async function readJson(req: IncomingMessage, res: ServerResponse, limit: number): Promise<unknown> {
  if (mediaType(req) !== "application/json") {
    throw new HttpError(415, "unsupported_media_type", "send the body as application/json");
  }
  const parsed = parsedBefore(req);
  if (parsed !== undefined) {
    if (Buffer.byteLength(parsedJson(parsed.value)) > limit) throw tooLarge(limit);
    return parsed.value;
  }
  const text = utf8Text(await readBody(req, res, limit));
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch {
    throw new HttpError(400, "bad_request", "the body is not valid JSON");
  }
  // JSON.parse keeps the last of two members silently: a proxy, filter or log in front that keeps
  // the first would have judged another answer (an approval where a denial lands).
  const twice = duplicateMember(text);
  if (twice !== undefined) {
    const path = twice.path.length > 64 ? `${textHead(twice.path, 64)}…` : twice.path;
    throw new HttpError(400, "bad_request", `the body has the member ${shownText(path)} twice`);
  }
  return value;
}

/**
 * Reads an `application/x-www-form-urlencoded` body (a plain HTML form's):
 * 400 `body_not_utf8` unless its bytes, and its `%XX` escapes once decoded,
 * are UTF-8; 415 for a body of another type (JSON, multipart, text), which
 * read as a form would lose its fields, before it is read when its length
 * is declared. An empty body needs no type.
 * One a middleware already parsed (`express.urlencoded()`) is taken as
 * parsed: its text fields, held to `limit` as a form.
 */
export async function readForm(req: IncomingMessage, res: ServerResponse, limit: number): Promise<URLSearchParams> {
  const parsed = parsedBefore(req);
  if (parsed !== undefined) {
    const form = new URLSearchParams();
    if (typeof parsed.value === "object" && parsed.value !== null) {
      for (const [name, value] of Object.entries(parsed.value)) {
        if (typeof value === "string") form.append(name, value);
      }
    }
    if (Buffer.byteLength(form.toString()) > limit) throw tooLarge(limit);
    return form;
  }
  const notForm = (): HttpError =>
    new HttpError(415, "unsupported_media_type", "send the body as application/x-www-form-urlencoded");
  const isForm = mediaType(req) === "application/x-www-form-urlencoded";
  if (!isForm && Number(req.headers["content-length"] ?? 0) > 0) throw notForm();
  const body = await readBody(req, res, limit);
  if (body.length > 0 && !isForm) throw notForm();
  const text = utf8Text(body);
  // URLSearchParams decodes an escape that is not UTF-8 to U+FFFD as well.
  utf8Text(unescapedForm(body));
  return new URLSearchParams(text);
}
