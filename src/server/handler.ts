import { randomBytes } from "node:crypto";
import { everyKey } from "../unknown-option.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import { InvalidAskResolutionError } from "../ask/errors.js";
import { AskResolutionSchema, PendingAskSchema } from "../ask/types.js";
import type { AskEnding, AskInbox, AskResolution, PendingAsk } from "../ask/types.js";
import type { GateDecision } from "../engine/records.js";
import { describeError, shownValue } from "../errors.js";
import type { ToolDescriptor } from "../grant/digest.js";
import type { GrantStore } from "../grant/store.js";
import { GrantRecordError } from "../grant/errors.js";
import { textHead } from "../text-head.js";
import type { Grant } from "../grant/grant.js";
import { isGrantShaped } from "../grant/grant-index.js";
import { Access, headerCount, headersCut } from "./access.js";
import { ANSWER_PATH, checkAnswerLink, SpentLinks } from "./answer-links.js";
import { AskBoard } from "./ask-board.js";
import { boundedCall } from "./bounded-call.js";
import { askDigest } from "../ask/ask-digest.js";
import type { AnswerOutcome, BoardEntry } from "./ask-board.js";
import { consoleAssets, CONSOLE_FILES } from "./console-assets.js";
import { ServerConfigError } from "./errors.js";
import { EventStreams } from "./event-streams.js";
import { grantViews } from "./grant-view.js";
import { configFault, positiveInteger, readOptions } from "./options.js";
import { declaresBody, HttpError, readForm, readJson, sendBody, sendError, sendJson } from "./http.js";
import { confirmPage, endedText, messagePage, PAGE_CSP, refusalTitle, signInPage } from "./pages.js";
import type { AuditedRecords, RecordSource } from "./records.js";
import { isStrongSecret, MIN_SECRET_BYTES, secretBytes } from "./secrets.js";
import { MAX_TIMER_MS } from "./timers.js";

/** How long a request waits on the grant store unless `grantsTimeoutMs` says; `loopctl console` bounds its first read alike. */
export const DEFAULT_GRANTS_TIMEOUT_MS = 10_000;

/** Options of {@link createApprovalHandler}. */
export interface ApprovalHandlerOptions {
  /**
   * Where the asks come from and answers go: an `Approver` from
   * `ApprovalChannel.pair`, a `WebhookResolver`'s `inbox`, a queue's
   * approver: anything with the {@link AskInbox} shape. The handler takes
   * every ask `next()` hands out, so nothing else should call `next()` on
   * it. Without one the console shows grants and records only.
   */
  readonly approver?: AskInbox;
  /**
   * The grant store to list and revoke grants in: the one the engine
   * remembers answers in. Without it the console offers no remember choice
   * (an answer that carries `remember` is still passed on: the engine keeps
   * it if it has a store).
   */
  readonly grants?: GrantStore;
  /** Where recent gate decisions are read from ({@link RecentRecords}, {@link auditLogRecords}). */
  readonly records?: RecordSource;
  /**
   * The current descriptor of a tool by name, so the console can tell a
   * grant whose pin no longer matches its tool. Without it pins show as
   * unchecked.
   */
  readonly describeTool?: (name: string) => ToolDescriptor | undefined;
  /**
   * The bearer token every API request must carry (at least 16 characters
   * of `A-Z a-z 0-9 . _ ~ -`). @default 32 random bytes, base64url
   */
  readonly token?: string;
  /** The secret that signed answer links are checked with (see `signAnswerLink`); without it links are refused. */
  readonly linkSecret?: string | Uint8Array;
  /**
   * The `Host` header values the handler answers to, e.g.
   * `["127.0.0.1:8080", "localhost:8080"]` or a proxy's
   * `["approvals.example.com"]`. Any other Host is refused with 421: a page
   * on another site that rebinds its name to this machine cannot reach it.
   */
  readonly allowedHosts: readonly string[];
  /**
   * The agent's ask deadline (`withAskTimeout`), if known: the console then
   * shows each ask's time left, counted from when it arrived here.
   */
  readonly askTimeoutMs?: number;
  /**
   * The largest request body accepted; a larger one gets 413. An answer may
   * be larger by the size of the ask it carries (`"ask"`, as the console
   * sends it), so that an ask of any size can be answered. @default 16384
   */
  readonly maxBodyBytes?: number;
  /** How often an event stream gets a `heartbeat` event (one at its start too), at most 2147483647 (about 24.8 days). @default 15000 */
  readonly heartbeatMs?: number;
  /** How many event streams may be open at once; more get 503. @default 64 */
  readonly maxStreams?: number;
  /**
   * How long what was written to an event stream may wait undrained (its
   * reader stopped reading and the kernel's buffers are full) before the
   * stream is cut off and its slot freed, at most 2147483647.
   * @default 30000
   */
  readonly streamWriteTimeoutMs?: number;
  /**
   * How long an answer waits for the approver's `resolve` to say whether it
   * reached the call, at most 2147483647. One that has not said by then gets
   * `504 answer_unconfirmed`, and the request ends: the answer may still
   * land, so the ask's ending (the event stream, a 409 on a second try) tells.
   * @default 30000
   */
  readonly answerTimeoutMs?: number;
  /**
   * How long a request that reads or answers the pending asks (`GET
   * /api/asks`, the event stream, an answer, an answer link) waits, while the
   * server starts, for the approver to hand out the asks already pending in
   * it (`AskInbox.caughtUp`, which a Postgres queue's approver has): until
   * then the list would miss them. One still waiting after this gets `503
   * inbox_catching_up`. At most 2147483647. @default 10000
   */
  readonly catchUpTimeoutMs?: number;
  /**
   * How long a request waits on the grant store (`GET /api/grants` for
   * `load`, `DELETE /api/grants/:id` for `revoke`), at most 2147483647. One
   * that has not answered by then gets `503 grants_unavailable` saying so,
   * and the call's `signal` is aborted; so it is once the client goes. A
   * store that never answers (a ledger on a stalled network filesystem, a
   * database that swallows packets) then holds no request, nor its
   * connection, for longer. @default 10000
   */
  readonly grantsTimeoutMs?: number;
  /**
   * How long `GET /api/records` waits on the record source's `recent`, at
   * most 2147483647. One that has not answered by then gets `503
   * records_unavailable` saying so, and the `signal` it was given is
   * aborted; so it is once the client goes. @default 10000
   */
  readonly recordsTimeoutMs?: number;
  /**
   * How long `close()` lets answers already passed to the approver finish:
   * each gets its reply (200, 409…) and `close()` resolves after them. One
   * the approver has not settled by then gets `504 answer_unconfirmed` (it
   * may still land). At most 2147483647. @default 5000
   */
  readonly closeGraceMs?: number;
  /**
   * Receives errors the handler recovers from (an approver or store failing,
   * a bug behind a 500); not a client's own failure, such as hanging up
   * mid-request. @default ignore
   */
  readonly onError?: (error: unknown) => void;
  /**
   * The clock for ages, deadlines and link expiry, epoch ms. While it throws
   * or gives no finite number, ages and deadlines show the system time and
   * links are refused (500); the fault goes to `onError`. @default Date.now
   */
  readonly now?: () => number;
}

/** A request handler for `node:http` or any framework that passes Node's request and response. */
export interface ApprovalHandler {
  /** The bearer token the handler accepts. */
  readonly token: string;
  /**
   * Serves one request. Mount it at a path of its own: it answers every path
   * under it. Behind a router that cuts the mount path off and keeps the
   * original in `req.originalUrl` (Express does), a request for the mount
   * path without its trailing slash is redirected (308) to the slash form,
   * where the console's relative URLs resolve.
   */
  readonly handle: (req: IncomingMessage, res: ServerResponse) => void;
  /**
   * Stops: ends every event stream, stops taking asks from the approver and
   * answers later requests with 503, as it does an answer whose body was
   * still arriving. It neither answers nor closes the
   * approver: asks already taken stay parked with it, for its owner to
   * answer or to deny by closing it.
   */
  close(): Promise<void>;
}

const STATE_CHANGING = new Set(["POST", "PUT", "PATCH", "DELETE"]);
const ASK_PATH = /^\/api\/asks\/([^/]+)$/;
const GRANT_PATH = /^\/api\/grants\/([^/]+)$/;
const GRANT_ID = /^[0-9a-f]{16}$/;
const DEFAULT_RECORDS = 50;
const MAX_RECORDS = 500;
const DIGITS = /^[0-9]+$/;
/** An error code a reply may name (`LEDGER_CORRUPT`, `EACCES`, a SQLSTATE such as `57P01`). */
const ERROR_CODE = /^[A-Za-z0-9_]{1,64}$/;

/** The options {@link createApprovalHandler} takes: a key that is none of them is refused. */
export const HANDLER_OPTIONS = everyKey<ApprovalHandlerOptions>()([
  "approver",
  "grants",
  "records",
  "describeTool",
  "token",
  "linkSecret",
  "allowedHosts",
  "askTimeoutMs",
  "maxBodyBytes",
  "heartbeatMs",
  "maxStreams",
  "streamWriteTimeoutMs",
  "answerTimeoutMs",
  "catchUpTimeoutMs",
  "grantsTimeoutMs",
  "recordsTimeoutMs",
  "closeGraceMs",
  "onError",
  "now",
]);

/** Where a request is going, for picking how to report an error: pages get HTML, the API gets JSON. */
type Audience = "page" | "api";

/**
 * Makes the approval API, the console and the signed-link pages as one
 * request handler, to mount in an existing `node:http` server or an
 * Express-style app (see `createApprovalServer` for a server of its own).
 *
 * Every request is checked in this order: more header lines than the
 * server keeps (Node's default drops those past about a thousand, unseen) →
 * 431, a `Host` sent twice → 400, a
 * `Host` not in `allowedHosts` → 421; then (except `/healthz` and signed
 * links, which carry their own HMAC) an `Authorization` sent twice → 400, a
 * missing or wrong token → 401; then a state-changing request whose `Origin`
 * is present and not this server's, or that has only the cookie and no
 * `Origin` → 403.
 *
 * Mounted in a server of your own, that server's limits are the ones that
 * hold: set its timeouts (`headersTimeout`, `requestTimeout`, and a socket
 * timeout, `server.setTimeout`, longer than `answerTimeoutMs`,
 * `catchUpTimeoutMs`, `grantsTimeoutMs`, `recordsTimeoutMs` and
 * `heartbeatMs`, for a client that stops reading its
 * replies), its cap on open connections (`server.maxConnections`), which
 * `createApprovalServer` sets from its own options, and
 * `server.maxHeadersCount = 0`, as `createApprovalServer` sets it. Pass it
 * Node's `checkContinue` event as well (`server.on("checkContinue",
 * handler.handle)`) where nothing before it reads the body: it then sends
 * `100 Continue` only once a request has passed every check, so a refused
 * one uploads no body.
 *
 * @throws {ServerConfigError} for an unusable option.
 *
 * @example
 * ```ts
 * const handler = createApprovalHandler({ approver, allowedHosts: ["approvals.example.com"] });
 * app.use("/approvals", handler.handle);
 * ```
 */
export function createApprovalHandler(given: ApprovalHandlerOptions): ApprovalHandler {
  const options = readOptions(given, HANDLER_OPTIONS, configFault()) as ApprovalHandlerOptions;
  checkShapes(options);
  const token = options.token ?? randomBytes(32).toString("base64url");
  const access = new Access(token, options.allowedHosts);
  if (options.linkSecret !== undefined && !isStrongSecret(options.linkSecret)) {
    throw new ServerConfigError("linkSecret", `must be a string or bytes of at least ${MIN_SECRET_BYTES} bytes`);
  }
  if (options.askTimeoutMs !== undefined && (!Number.isSafeInteger(options.askTimeoutMs) || options.askTimeoutMs < 0)) {
    throw new ServerConfigError(
      "askTimeoutMs",
      `must be a non-negative integer, got ${shownValue(options.askTimeoutMs)}`,
    );
  }
  const handler = new Handler(options, access, {
    maxBodyBytes: positiveInteger("maxBodyBytes", options.maxBodyBytes, 16_384),
    heartbeatMs: positiveInteger("heartbeatMs", options.heartbeatMs, 15_000, MAX_TIMER_MS),
    maxStreams: positiveInteger("maxStreams", options.maxStreams, 64),
    streamWriteTimeoutMs: positiveInteger("streamWriteTimeoutMs", options.streamWriteTimeoutMs, 30_000, MAX_TIMER_MS),
    answerTimeoutMs: positiveInteger("answerTimeoutMs", options.answerTimeoutMs, 30_000, MAX_TIMER_MS),
    catchUpTimeoutMs: positiveInteger("catchUpTimeoutMs", options.catchUpTimeoutMs, 10_000, MAX_TIMER_MS),
    closeGraceMs: positiveInteger("closeGraceMs", options.closeGraceMs, 5_000, MAX_TIMER_MS),
    grantsTimeoutMs: positiveInteger(
      "grantsTimeoutMs",
      options.grantsTimeoutMs,
      DEFAULT_GRANTS_TIMEOUT_MS,
      MAX_TIMER_MS,
    ),
    recordsTimeoutMs: positiveInteger("recordsTimeoutMs", options.recordsTimeoutMs, 10_000, MAX_TIMER_MS),
  });
  return {
    token,
    handle: (req, res) => handler.handle(req, res),
    close: () => handler.close(),
  };
}

/**
 * The options object, and each object or function option, has the shape it
 * is used by: otherwise an approver without `next` would be retried through
 * `onError` for ever, and a clock that is not a function would fail every
 * request.
 */
function checkShapes(options: ApprovalHandlerOptions): void {
  const { approver, grants, records } = options as {
    readonly approver?: unknown;
    readonly grants?: unknown;
    readonly records?: unknown;
  };
  if (approver !== undefined) {
    const missing = ["next", "resolve", "ended"].filter((name) => !hasMethod(approver, name));
    if (missing.length > 0) {
      // The engine's half of a pair has resolve() alone: the likely mix-up, so say which half goes here.
      const resolverHalf =
        missing.includes("next") && !missing.includes("resolve")
          ? " (a resolver, the half the engine takes? pass the approver: the second of ApprovalChannel.pair(), " +
            "a queue's approver(), a WebhookResolver's inbox)"
          : "";
      throw new ServerConfigError(
        "approver",
        `must be an AskInbox; it lacks ${missing.map((name) => `${name}()`).join(", ")}${resolverHalf}`,
      );
    }
    const caughtUp = (approver as { caughtUp?: unknown }).caughtUp;
    if (caughtUp !== undefined && typeof caughtUp !== "function") {
      throw new ServerConfigError("approver", `caughtUp must be a method or absent, got ${typeof caughtUp}`);
    }
  }
  if (grants !== undefined && !(hasMethod(grants, "load") && hasMethod(grants, "revoke"))) {
    throw new ServerConfigError("grants", "must be a GrantStore, with load and revoke methods");
  }
  if (
    records !== undefined &&
    !(
      hasMethod(records, "recent") &&
      ["undefined", "function"].includes(typeof (records as Partial<RecordSource>).subscribe)
    )
  ) {
    throw new ServerConfigError("records", "must be a RecordSource: a recent() method, and subscribe() if any");
  }
  for (const name of ["describeTool", "onError", "now"] as const) {
    const value: unknown = options[name];
    if (value !== undefined && typeof value !== "function") throw new ServerConfigError(name, "must be a function");
  }
}

/**
 * Subscribes `listener` to `records`, if it can be followed; returns the
 * function that stops it.
 * @throws {ServerConfigError} naming `records` when `subscribe()` throws or
 * gives no function: `close()` could not stop it.
 */
function follow(records: RecordSource | undefined, listener: (record: GateDecision) => void): (() => void) | undefined {
  if (records?.subscribe === undefined) return undefined;
  let stop: unknown;
  try {
    stop = records.subscribe(listener);
  } catch (error) {
    throw new ServerConfigError("records", `subscribe() threw: ${describeError(error)}`, { cause: error });
  }
  if (typeof stop !== "function") {
    throw new ServerConfigError(
      "records",
      `subscribe() must return the function that stops it, got ${stop === null ? "null" : typeof stop}`,
    );
  }
  return stop as () => void;
}

function hasMethod(value: unknown, name: string): boolean {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as Record<string, unknown>)[name] === "function"
  );
}

interface Limits {
  readonly maxBodyBytes: number;
  readonly heartbeatMs: number;
  readonly maxStreams: number;
  readonly streamWriteTimeoutMs: number;
  readonly answerTimeoutMs: number;
  readonly catchUpTimeoutMs: number;
  readonly closeGraceMs: number;
  readonly grantsTimeoutMs: number;
  readonly recordsTimeoutMs: number;
}

class Handler {
  readonly #access: Access;
  readonly #board: AskBoard | undefined;
  readonly #grants: GrantStore | undefined;
  readonly #records: RecordSource | undefined;
  readonly #describeTool: ((name: string) => ToolDescriptor | undefined) | undefined;
  readonly #linkKey: Buffer | undefined;
  readonly #askTimeoutMs: number | undefined;
  readonly #limits: Limits;
  readonly #streams: EventStreams;
  readonly #now: () => number;
  readonly #onError: (error: unknown) => void;
  readonly #stopRecords: (() => void) | undefined;
  /** Every request being served, until its reply is written (or it failed). */
  readonly #serving = new Map<IncomingMessage, Promise<void>>();
  /** The requests whose answer was passed to the approver: close() lets them finish. */
  readonly #delivering = new Set<IncomingMessage>();
  /** Aborts when close()'s grace runs out: answers still waiting on the approver are replied to at once. */
  readonly #graceOver = new AbortController();
  /** The answer links that answered: each answers once. */
  readonly #spentLinks = new SpentLinks();
  #closing: Promise<void> | undefined;

  constructor(options: ApprovalHandlerOptions, access: Access, limits: Limits) {
    this.#access = access;
    this.#grants = options.grants;
    this.#records = options.records;
    this.#describeTool = options.describeTool;
    this.#linkKey = options.linkSecret === undefined ? undefined : secretBytes(options.linkSecret);
    this.#askTimeoutMs = options.askTimeoutMs;
    this.#limits = limits;
    this.#now = options.now ?? Date.now;
    const onError = options.onError;
    this.#onError = (error) => {
      try {
        onError?.(error);
      } catch {
        // A reporter that throws must not take a request down with it.
      }
    };
    this.#streams = new EventStreams(limits.maxStreams, limits.heartbeatMs, limits.streamWriteTimeoutMs);
    // Before the board: a source refused here must not leave a board behind that takes asks nobody shows.
    this.#stopRecords = follow(this.#records, (record) => this.#streams.send("record", record));
    if (options.approver !== undefined) {
      this.#board = new AskBoard(options.approver, () => this.#shownNow(), this.#onError);
      this.#board.subscribe((event) => {
        if (event.type === "ask") this.#streams.send("ask", this.#askView(event.entry));
        else this.#streams.send("settled", { id: event.id, ending: event.ending });
      });
    }
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    let audience: Audience = "api";
    const served = this.#serve(req, res, (a) => (audience = a))
      .catch((error: unknown) => this.#fail(req, res, error, audience))
      .finally(() => {
        this.#serving.delete(req);
        this.#delivering.delete(req);
      });
    this.#serving.set(req, served);
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#streams.close();
      try {
        this.#stopRecords?.();
      } catch (error) {
        // The source's own failure: the board still lets go of the approver.
        this.#onError(error);
      }
      // At once, not after the answers' grace: an ask taken meanwhile would be shown by no one, its
      // approver having handed it out already.
      const released = this.#board?.close();
      await this.#answersSettled();
      await released;
    })();
    return this.#closing;
  }

  /**
   * Waits for the answers already passed to the approver to be replied to,
   * up to `closeGraceMs`; then those still waiting on it are told it did not
   * confirm (504), which they are at once.
   */
  async #answersSettled(): Promise<void> {
    const replied = (): Promise<unknown> =>
      Promise.all([...this.#delivering].flatMap((req) => this.#serving.get(req) ?? []));
    if (this.#delivering.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<"over">((resolve) => {
      timer = setTimeout(() => resolve("over"), this.#limits.closeGraceMs);
    });
    try {
      if ((await Promise.race([replied(), grace])) !== "over") return;
    } finally {
      clearTimeout(timer);
    }
    this.#graceOver.abort();
    await replied();
  }

  async #serve(req: IncomingMessage, res: ServerResponse, setAudience: (a: Audience) => void): Promise<void> {
    const url = routeTarget(req.url ?? "/");
    setAudience(audienceOf(url));
    const kept = headersCut(req);
    if (kept !== undefined) {
      throw new HttpError(
        431,
        "too_many_headers",
        `the request has more header lines than the ${kept} the server keeps; the rest would go unseen`,
      );
    }
    // RFC 9112, 3.2: a request with two Host header lines is refused (400); Node would answer the first.
    if (headerCount(req, "host") > 1)
      throw new HttpError(400, "bad_request", "the request has more than one Host header");
    if (!this.#access.hostAllowed(req)) {
      throw new HttpError(421, "misdirected_request", "this server does not answer to that Host");
    }
    if (url === undefined) throw new HttpError(400, "bad_request", "the request target is not a valid path");
    const path = url.pathname;
    const method = req.method ?? "GET";
    if (this.#closing !== undefined) throw new HttpError(503, "closing", "the approval server is closing");
    if (path === "/healthz") return this.#health(res, method);
    if (path === `/${ANSWER_PATH}`) return this.#link(req, res, url, method);
    if (path === "/" && method === "GET" && url.searchParams.has("token")) return this.#login(req, res, url);
    if (path === "/") {
      // Mounted at /approvals, a request for /approvals would load the console's relative URLs from the parent.
      const page = mountedPath(req);
      if (!page.endsWith("/")) {
        return sendBody(res, 308, "text/plain; charset=utf-8", "the console is at the path with a trailing slash\n", {
          location: `${page}/${url.search}`,
        });
      }
    }

    // Node keeps the first of two; a proxy in front may have checked, or added, the other.
    if (headerCount(req, "authorization") > 1) {
      throw new HttpError(400, "bad_request", "the request has more than one Authorization header");
    }
    const credential = this.#access.credential(req);
    if (credential === undefined) {
      throw new HttpError(
        401,
        "unauthorized",
        "send the token as Authorization: Bearer <token>, or open the console's ?token= link",
        { headers: { "www-authenticate": 'Bearer realm="loopctl"' } },
      );
    }
    if (STATE_CHANGING.has(method) && !this.#access.originAllowed(req, credential)) {
      throw new HttpError(403, "forbidden_origin", "a state-changing request must come from this server's own page");
    }
    return this.#route(req, res, path, url, method);
  }

  async #route(req: IncomingMessage, res: ServerResponse, path: string, url: URL, method: string): Promise<void> {
    const asset = Object.hasOwn(CONSOLE_FILES, path) ? CONSOLE_FILES[path] : undefined;
    if (asset !== undefined) {
      allow(method, "GET", "HEAD");
      const file = (await consoleAssets()).get(path);
      if (file === undefined) throw new Error(`console file for ${path} not loaded`);
      return sendBody(res, 200, file.type, file.body);
    }
    if (path === "/api/asks") {
      allow(method, "GET", "HEAD");
      await this.#caughtUp();
      return sendJson(res, 200, { asks: (this.#board?.list() ?? []).map((entry) => this.#askView(entry)) });
    }
    if (path === "/api/asks/stream") {
      allow(method, "GET");
      return this.#stream(req, res);
    }
    const askMatch = ASK_PATH.exec(path);
    if (askMatch !== null) {
      allow(method, "POST");
      return this.#answer(req, res, decodePart(askMatch[1] as string));
    }
    if (path === "/api/grants") {
      allow(method, "GET", "HEAD");
      return this.#listGrants(res);
    }
    const grantMatch = GRANT_PATH.exec(path);
    if (grantMatch !== null) {
      allow(method, "DELETE");
      return this.#revoke(res, decodePart(grantMatch[1] as string));
    }
    if (path === "/api/records") {
      allow(method, "GET", "HEAD");
      return this.#listRecords(res, url);
    }
    throw new HttpError(404, "not_found", "no such route");
  }

  /**
   * Waits, while the server starts, until the board holds every ask already
   * pending in the approver: a list read before would leave them out, and a
   * console would drop their cards (and what was typed in them) as ended.
   * @throws {HttpError} 503 `inbox_catching_up` when it has not within `catchUpTimeoutMs`.
   */
  async #caughtUp(): Promise<void> {
    if (this.#board === undefined || this.#board.caughtUp) return;
    if (await this.#board.whenCaughtUp(this.#limits.catchUpTimeoutMs)) return;
    if (this.#closing !== undefined) throw new HttpError(503, "closing", "the approval server is closing");
    throw new HttpError(
      503,
      "inbox_catching_up",
      "the approver has not yet handed out the asks already pending in it, so the list of pending asks " +
        "would be incomplete; try again shortly",
      { headers: { "retry-after": "1" } },
    );
  }

  #health(res: ServerResponse, method: string): void {
    allow(method, "GET", "HEAD");
    const inbox = this.#board?.health ?? "none";
    const ok = inbox === "ok" || inbox === "none";
    sendJson(res, ok ? 200 : 503, { ok, inbox });
  }

  #login(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (!this.#access.tokenMatches(url.searchParams.get("token") ?? "")) {
      throw new HttpError(401, "unauthorized", "this console link's token is wrong or from an earlier server");
    }
    // The token leaves the address bar: back to the page's own path, in its slash form.
    const pathname = mountedPath(req);
    const page = pathname.endsWith("/") ? pathname : `${pathname}/`;
    // Without a router's originalUrl the path here may be what a proxy left of a longer one
    // ("/loopctl/?token=…" seen as "/?token=…"): "./" resolves against the address the browser used.
    const known = typeof (req as { originalUrl?: unknown }).originalUrl === "string";
    const location = known ? page : "./";
    const cookie = this.#access.sessionCookie(req, page);
    if (req.headers["sec-fetch-site"] === "cross-site") {
      // Opened from a chat or mail page: the console is reached by a navigation of this site's own.
      return sendBody(res, 200, "text/html; charset=utf-8", signInPage(location), {
        "set-cookie": cookie,
        "content-security-policy": PAGE_CSP,
      });
    }
    sendBody(res, 303, "text/plain; charset=utf-8", "logged in\n", { location, "set-cookie": cookie });
  }

  async #stream(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Never read, its body would keep the request unfinished, and requestTimeout would cut the stream.
    if (declaresBody(req)) throw new HttpError(400, "body_not_allowed", "the event stream's request takes no body");
    if (this.#streams.full) throw new HttpError(503, "too_many_streams", "too many event streams are open");
    await this.#caughtUp();
    // Checked again: close() may have come, or other streams taken the slots, while this one waited.
    if (this.#streams.full) throw new HttpError(503, "too_many_streams", "too many event streams are open");
    const first = (this.#board?.list() ?? []).map((entry) => ["ask", this.#askView(entry)] as const);
    this.#streams.open(req, res, first);
  }

  async #answer(req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
    // Until then the board may not hold the ask yet, and the answer would be refused as for no such ask.
    await this.#caughtUp();
    // An answer may carry the ask it was made for, as the console's do: an ask whose prompt alone
    // is over the limit must still be answerable, so the limit grows by the ask held under the id.
    const held = this.#board?.get(id)?.ask;
    const allowance = held === undefined ? 0 : Buffer.byteLength(JSON.stringify(held));
    const body = await readJson(req, res, this.#limits.maxBodyBytes + allowance).catch((error: unknown) => {
      // An ask that ended just before its answer came (the run cancelled as Approve was pressed) no
      // longer gives the allowance: its answer, carrying it, is late, not too large.
      const ending = held === undefined ? this.#board?.ending(id) : undefined;
      if (error instanceof HttpError && error.code === "body_too_large" && ending !== undefined) {
        throw new HttpError(409, "ask_ended", "the ask already ended", { body: { ending } });
      }
      throw error;
    });
    const parsed = AskResolutionSchema.safeParse(body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue === undefined || issue.path.length === 0 ? "the body" : issue.path.join(".");
      throw new HttpError(400, "bad_request", `not an answer: ${where}: ${issue?.message ?? "invalid"}`);
    }
    const shown = shownAsk(body, id);
    const outcome = await this.#deliver(req, id, parsed.data, shown === undefined ? undefined : askDigest(shown));
    switch (outcome.type) {
      case "delivered":
        return sendJson(res, 200, { delivered: true });
      case "changed":
        return sendJson(res, 409, {
          error: "ask_changed",
          message: "another call holds this ask id now; nothing was answered",
          ask: this.#askView(outcome.entry),
        });
      case "ended":
        return sendJson(res, 409, {
          error: "ask_ended",
          message: "the ask already ended",
          ending: outcome.ending ?? null,
        });
      case "unknown":
        return sendJson(res, 404, { error: "ask_unknown", message: "no such ask" });
      default:
        return assertNever(outcome);
    }
  }

  /**
   * Passes `req`'s answer to the board, within `answerTimeoutMs`; once it is
   * passed, close() lets the request finish (up to `closeGraceMs`).
   */
  async #deliver(
    req: IncomingMessage,
    id: string,
    resolution: AskResolution,
    madeFor?: string,
  ): Promise<AnswerOutcome> {
    if (this.#board === undefined) return { type: "unknown" };
    // A body still arriving when close() was called: close() promises the asks it leaves are not answered.
    if (this.#closing !== undefined) {
      throw new HttpError(503, "closing", "the approval server is closing; nothing was answered");
    }
    this.#delivering.add(req);
    const answering = this.#board.answer(id, resolution, madeFor);
    let timer: NodeJS.Timeout | undefined;
    const graceOver = this.#graceOver.signal;
    let onGraceOver: (() => void) | undefined;
    // A resolve that never settles must not hold the request open for ever; it may still land, so
    // the reply says the outcome is not known, never that nothing was answered.
    // Unref'd: while the client waits, its connection keeps the process alive; once it went and the
    // server closed, a resolve that never settles must not hold the process for answerTimeoutMs.
    const late = new Promise<"late" | "closed">((resolve) => {
      timer = setTimeout(() => resolve("late"), this.#limits.answerTimeoutMs);
      timer.unref();
      onGraceOver = () => resolve("closed");
      graceOver.addEventListener("abort", onGraceOver, { once: true });
    });
    let outcome: AnswerOutcome | "late" | "closed";
    try {
      outcome = await Promise.race([answering, late]);
      if (outcome !== "late" && outcome !== "closed") return outcome;
    } catch (error) {
      // The answer itself, refused by the approver's own rules (a Postgres queue cannot store U+0000
      // or a lone surrogate): the client's to fix, not the approver failing.
      if (error instanceof InvalidAskResolutionError) {
        throw new HttpError(400, "bad_request", `not an answer: ${error.message}; nothing was answered`);
      }
      // A failure is not a refusal: a database connection lost after the answer committed fails
      // the call as well, so the reply never says the answer did not land.
      this.#onError(error);
      throw new HttpError(
        503,
        "approver_unavailable",
        "the approver failed before saying whether the answer reached the call; it may have: check the ask before answering again",
      );
    } finally {
      clearTimeout(timer);
      if (onGraceOver !== undefined) graceOver.removeEventListener("abort", onGraceOver);
    }
    answering.catch((error: unknown) => this.#onError(error));
    if (outcome === "closed") {
      throw new HttpError(
        504,
        "answer_unconfirmed",
        "the approval server closed before the approver said whether the answer reached the call; it may still: " +
          "check the ask before answering again",
      );
    }
    throw new HttpError(
      504,
      "answer_unconfirmed",
      "the approver did not say in time whether the answer reached the call; it may still: check the ask before answering again",
    );
  }

  async #listGrants(res: ServerResponse): Promise<void> {
    if (this.#grants === undefined) return sendJson(res, 200, { available: false, grants: [] });
    const loaded = await this.#useStore(res, "", (store, signal) => store.load({ signal }));
    if (loaded === undefined) return;
    const grants: unknown = loaded.value;
    if (!Array.isArray(grants))
      throw this.#notGrants(`GrantStore.load resolved to ${shownValue(grants)}, not an array`);
    this.#readGrants("GrantStore.load", () => {
      const stray = grants.findIndex((grant) => !listable(grant));
      if (stray >= 0) {
        throw this.#notGrants(
          `GrantStore.load resolved to an array whose item ${stray} is ${shownValue(grants[stray])}`,
        );
      }
      sendJson(res, 200, {
        available: true,
        grants: (grants as Grant[]).map(grantViews(this.#describeTool, this.#onError)),
      });
    });
  }

  async #revoke(res: ServerResponse, id: string): Promise<void> {
    if (this.#grants === undefined) throw new HttpError(404, "no_grant_store", "this server has no grant store");
    if (!GRANT_ID.test(id)) throw new HttpError(404, "grant_unknown", "no such grant");
    const unsure = "; the grant may be revoked still: list the grants before revoking again";
    const revoked = await this.#useStore(res, unsure, (store, signal) => store.revoke(id, { signal }));
    if (revoked === undefined) return;
    const grant: unknown = revoked.value;
    if (grant === undefined) throw new HttpError(404, "grant_unknown", "no such grant");
    this.#readGrants("GrantStore.revoke", () => {
      if (!listable(grant)) {
        throw this.#notGrants(`GrantStore.revoke resolved to ${shownValue(grant)}, not a Grant or undefined`);
      }
      sendJson(res, 200, { revoked: grantViews(this.#describeTool, this.#onError)(grant) });
    });
  }

  /**
   * Runs `send`, which reads what the store's `method` gave and replies: a
   * grant that cannot be read (a getter that throws, a lazy row whose
   * connection is gone, arguments with no JSON form) is the store's fault,
   * as one that is no grant is, not the server's 500. `send` stringifies the
   * reply before it writes a byte of it.
   */
  #readGrants(method: string, send: () => void): void {
    try {
      send();
    } catch (error) {
      if (error instanceof HttpError) throw error;
      throw this.#notGrants(`${method} resolved to grants that cannot be read: ${describeError(error)}`, error);
    }
  }

  /**
   * A store's answer that is not grants (a store of your own returning rows
   * as they were read): its fault, told to `onError`, not the server's 500.
   */
  #notGrants(detail: string, cause?: unknown): HttpError {
    this.#onError(new GrantRecordError(detail, cause === undefined ? undefined : { cause }));
    return new HttpError(503, "grants_unavailable", "the grant store gave something other than grants");
  }

  /**
   * `work`'s result, within `grantsTimeoutMs`; undefined when the client
   * went first (its reply is dropped). `unsure` is added to the 503 of one
   * that did not answer in time: a change may still be made.
   */
  async #useStore<T>(
    res: ServerResponse,
    unsure: string,
    work: (store: GrantStore, signal: AbortSignal) => Promise<T>,
  ): Promise<{ readonly value: T } | undefined> {
    const outcome = await boundedCall(res, "the grant store", this.#limits.grantsTimeoutMs, (signal) =>
      work(this.#grants as GrantStore, signal),
    );
    switch (outcome.type) {
      case "answered":
        return { value: outcome.value };
      case "gone":
        res.destroy();
        return undefined;
      case "late":
        this.#onError(outcome.reason);
        throw new HttpError(503, "grants_unavailable", `${outcome.reason.message}${unsure}`);
      case "failed": {
        const error = outcome.error;
        this.#onError(error);
        // Only a code that is an identifier: a store of your own may put text, a path or a secret there.
        const given = (error as { code?: unknown } | null)?.code;
        const code = typeof given === "string" && ERROR_CODE.test(given) ? ` (${given})` : "";
        throw new HttpError(503, "grants_unavailable", `the grant store failed${code}`);
      }
      default:
        return assertNever(outcome);
    }
  }

  async #listRecords(res: ServerResponse, url: URL): Promise<void> {
    const text = url.searchParams.get("limit");
    // Decimal digits only: Number() also reads "1e2", "0x10" and " 5" as integers.
    const limit = text === null ? DEFAULT_RECORDS : DIGITS.test(text) ? Number(text) : Number.NaN;
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_RECORDS) {
      throw new HttpError(
        400,
        "bad_request",
        `limit must be a whole number from 1 to ${MAX_RECORDS}, in decimal digits`,
      );
    }
    if (this.#records === undefined) return sendJson(res, 200, { available: false, live: false, records: [] });
    const source = this.#records;
    const live = typeof source.subscribe === "function";
    const outcome = await boundedCall(res, "the record source", this.#limits.recordsTimeoutMs, async (signal) =>
      typeof source.audited === "function"
        ? { method: "audited" as const, value: await source.audited(limit, { signal }) }
        : { method: "recent" as const, value: await source.recent(limit, { signal }) },
    );
    switch (outcome.type) {
      case "answered": {
        const { method, value } = outcome.value;
        const audited = method === "audited" ? (value as Partial<AuditedRecords> | null | undefined) : undefined;
        const records: unknown = method === "audited" ? audited?.records : value;
        if (!Array.isArray(records)) {
          // Sent on, a page could not read it, and would go on showing the decisions it had.
          this.#onError(
            new ServerConfigError(
              "records",
              `RecordSource.${method} resolved to ${shownValue(value)}, not ${method === "audited" ? "{ records: [...], check }" : "an array"}`,
            ),
          );
          throw new HttpError(
            503,
            "records_unavailable",
            "the record source gave something other than a list of records",
          );
        }
        if (audited === undefined) {
          return this.#sendRecords(method, records, () => sendJson(res, 200, { available: true, live, records }));
        }
        // Each entry is spread into the reply: one that is not a decision with its standing would throw there, a 500.
        const stray = records.findIndex((entry) => !isAuditedEntry(entry));
        if (stray >= 0) {
          this.#onError(
            new ServerConfigError(
              "records",
              `RecordSource.audited resolved to records whose item ${stray} is ${shownValue(records[stray])}, not { record, seq, vouched }`,
            ),
          );
          throw new HttpError(
            503,
            "records_unavailable",
            "the record source gave something other than a list of records",
          );
        }
        // Each decision carries its line's standing, so that no client shows a line the log cannot vouch for as one it does.
        return this.#sendRecords(method, records, () =>
          sendJson(res, 200, {
            available: true,
            live,
            records: (records as AuditedRecords["records"]).map(({ record, seq, vouched }) => ({
              ...record,
              audit: { seq, vouched },
            })),
            audit: audited?.check,
          }),
        );
      }
      case "gone":
        return void res.destroy();
      case "late":
        this.#onError(outcome.reason);
        throw new HttpError(503, "records_unavailable", outcome.reason.message);
      case "failed":
        this.#onError(outcome.error);
        throw new HttpError(503, "records_unavailable", "the record source failed");
      default:
        return assertNever(outcome);
    }
  }

  /**
   * Runs `send`, which reads the records the source's `method` gave and
   * replies: a record that cannot be read (a getter that throws, a proxy
   * whose traps throw) is the source's fault, as an answer that is no list of
   * records is: `503 records_unavailable`, and `onError` gets a
   * `ServerConfigError` naming `records`. A record that reads but has no JSON
   * form (a BigInt, a cycle) stays the server's own 500. `send` stringifies
   * the reply before it writes a byte of it.
   */
  #sendRecords(method: string, records: readonly unknown[], send: () => void): void {
    try {
      send();
    } catch (error) {
      const unread = readFault(records);
      if (unread === undefined) throw error;
      this.#onError(
        new ServerConfigError(
          "records",
          `RecordSource.${method} resolved to records that cannot be read: ${describeError(unread.error)}`,
          { cause: unread.error },
        ),
      );
      throw new HttpError(503, "records_unavailable", "the record source gave records that cannot be read");
    }
  }

  async #link(req: IncomingMessage, res: ServerResponse, url: URL, method: string): Promise<void> {
    allow(method, "GET", "POST");
    if (this.#linkKey === undefined)
      throw new HttpError(404, "links_disabled", "this server does not take answer links");
    if (method === "POST" && !this.#access.originAllowed(req, "link")) {
      throw new HttpError(
        403,
        "forbidden_origin",
        "an answer link must be confirmed from its own page, not sent from another site; nothing was answered",
      );
    }
    // Checked before the body is read: a link that is not signed, or no longer current, costs no more than its URL.
    const check = checkAnswerLink(url.searchParams, this.#linkKey, this.#linkNow());
    if (check.type === "invalid") {
      throw new HttpError(
        403,
        "link_invalid",
        "this answer link is not valid: it was altered or signed with another secret; nothing was answered",
      );
    }
    if (check.type === "expired") throw linkExpired();
    await this.#caughtUp();
    if (method === "GET") {
      const refusal = this.#linkRefusal(check);
      if (refusal !== undefined) throw refusal;
      const pending = this.#board?.get(check.askId)?.ask;
      return sendBody(res, 200, "text/html; charset=utf-8", confirmPage(check.verdict, check.askId, pending), {
        "content-security-policy": PAGE_CSP,
      });
    }
    // Else the answer goes to the board, which tells an ended or changed ask as it answers.
    if (this.#spentLinks.has(check)) throw this.#linkRefusal(check) ?? linkSpent();
    const form = await readForm(req, res, this.#limits.maxBodyBytes).catch((error: unknown) => {
      if (error instanceof HttpError && error.code === "unsupported_media_type") {
        throw new HttpError(
          error.status,
          error.code,
          "send the reason as application/x-www-form-urlencoded, as the link's page does; nothing was answered",
          { title: "Not a form" },
        );
      }
      throw error;
    });
    // And again once it is in: a body sent slowly must not carry a link past its expiry.
    if (this.#linkNow() > check.expiresAtMs) throw linkExpired();
    const reason = cutReason((form.get("reason") ?? "").trim());
    const resolution: AskResolution =
      check.verdict === "approve" ? { type: "approve" } : reason === "" ? { type: "deny" } : { type: "deny", reason };
    const outcome = await this.#deliver(req, check.askId, resolution, check.askDigest).catch((error: unknown) => {
      // A person reads this one: where to look, rather than the API's "check the ask".
      if (error instanceof HttpError && error.code === "answer_unconfirmed") {
        throw new HttpError(
          error.status,
          error.code,
          "your answer was sent, but the approver did not confirm in time that it reached the call; it may still. " +
            "The console, or this link opened again, shows whether the ask has ended: answer again only if it " +
            "is still waiting",
        );
      }
      throw error;
    });
    switch (outcome.type) {
      case "delivered":
        this.#spentLinks.add(check, this.#shownNow());
        return sendPage(
          res,
          200,
          check.verdict === "approve" ? "Approved" : "Denied",
          check.verdict === "approve" ? "The call goes ahead." : "The call is refused.",
        );
      case "ended":
        throw askEnded(outcome.ending);
      case "changed":
        throw askChanged();
      case "unknown":
        throw new HttpError(404, "ask_unknown", "this server does not know this ask; nothing was answered");
      default:
        return assertNever(outcome);
    }
  }

  /**
   * Why a signed link, checked, cannot answer now, as far as the board
   * knows: its ask ended, another call holds its id, or it (or its twin)
   * answered already; undefined when it can.
   */
  #linkRefusal(check: {
    readonly askId: string;
    readonly askDigest: string;
    readonly expiresAtMs: number;
  }): HttpError | undefined {
    const ended = this.#board?.ending(check.askId);
    if (ended !== undefined) return askEnded(ended);
    const pending = this.#board?.get(check.askId)?.ask;
    if (pending !== undefined && askDigest(pending) !== check.askDigest) return askChanged();
    return this.#spentLinks.has(check) ? linkSpent() : undefined;
  }

  /**
   * The time a link's expiry is judged by.
   * @throws {ServerConfigError} for a clock that gives no finite number,
   * which would make every link current (NaN is never past an expiry).
   */
  #linkNow(): number {
    const nowMs: unknown = this.#now();
    if (typeof nowMs !== "number" || !Number.isFinite(nowMs)) {
      throw new ServerConfigError(
        "now",
        `now() returned ${typeof nowMs === "number" ? String(nowMs) : typeof nowMs}, not epoch ms: answer links cannot be checked`,
      );
    }
    return nowMs;
  }

  /**
   * The time for ages and deadlines, which are only shown: a clock that
   * throws or gives no finite number is reported and the system time used,
   * so it neither stops the board taking asks nor hides them. Links, which
   * decide, read `now` itself and refuse.
   */
  #shownNow(): number {
    try {
      const ms: unknown = this.#now();
      if (typeof ms === "number" && Number.isFinite(ms)) return ms;
      this.#onError(
        new ServerConfigError("now", `now() returned ${typeof ms === "number" ? String(ms) : typeof ms}, not epoch ms`),
      );
    } catch (error) {
      this.#onError(error);
    }
    return Date.now();
  }

  #askView(entry: BoardEntry): AskView {
    const now = this.#shownNow();
    const expiresAtMs = this.#askTimeoutMs === undefined ? null : entry.receivedAtMs + this.#askTimeoutMs;
    return {
      ask: entry.ask,
      receivedAtMs: entry.receivedAtMs,
      ageMs: Math.max(0, now - entry.receivedAtMs),
      expiresAtMs,
      timeLeftMs: expiresAtMs === null ? null : Math.max(0, expiresAtMs - now),
    };
  }

  #fail(req: IncomingMessage, res: ServerResponse, error: unknown, audience: Audience): void {
    // The request's own stream failed (the client hung up, or Node could not parse the rest of
    // the body and answered it): no fault of the server's, and nobody is left to answer.
    if (error !== undefined && req.errored === error) {
      res.destroy();
      return;
    }
    const known =
      error instanceof HttpError
        ? error
        : new HttpError(500, "internal", "internal error; the server's onError has the details");
    if (!(error instanceof HttpError)) this.#onError(error);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (audience === "page") {
      sendPage(res, known.status, refusalTitle(known), known.message, known.headers);
      return;
    }
    sendError(res, known);
  }
}

/** Who reads the replies of the route `url` names: people, on the console's page and the answer links, or the API's clients. */
function audienceOf(url: URL | undefined): Audience {
  return url?.pathname === "/" || url?.pathname === `/${ANSWER_PATH}` ? "page" : "api";
}

/**
 * Sends `error` in the form the handler gives the route `req` names: a page
 * on the console's page and the answer links, whose readers are people in a
 * browser, JSON on the API. For the refusals `createApprovalServer` makes
 * before the handler runs (an `Expect` it cannot meet).
 */
export function sendRefusal(req: IncomingMessage, res: ServerResponse, error: HttpError): void {
  if (audienceOf(routeTarget(req.url ?? "/")) === "page") {
    sendPage(res, error.status, refusalTitle(error), error.message, error.headers);
    return;
  }
  sendError(res, error);
}

/** An ask as the API shows it. */
export interface AskView {
  readonly ask: BoardEntry["ask"];
  readonly receivedAtMs: number;
  readonly ageMs: number;
  /** When the agent stops waiting, if the server was told its deadline. */
  readonly expiresAtMs: number | null;
  readonly timeLeftMs: number | null;
}

function sendPage(
  res: ServerResponse,
  status: number,
  title: string,
  text: string,
  headers: Readonly<Record<string, string>> = {},
): void {
  sendBody(res, status, "text/html; charset=utf-8", messagePage(title, text), {
    ...headers,
    "content-security-policy": PAGE_CSP,
    ...(status === 413 ? { connection: "close" } : {}),
  });
}

/** The most of a link's deny reason that is kept, in UTF-16 units, as the page's `maxlength` counts them. */
const MAX_LINK_REASON = 500;

/**
 * A link's deny reason, cut to {@link MAX_LINK_REASON} (a client may ignore
 * the page's `maxlength`), never inside a character: half of a surrogate
 * pair would reach the call and its records as U+FFFD, text nobody wrote,
 * and a Postgres queue would refuse the whole answer for it.
 */
function cutReason(text: string): string {
  return textHead(text, MAX_LINK_REASON);
}

/** A link's refusal for an ask that already ended, saying how, as far as the server saw it. */
function askEnded(ending: AskEnding | undefined): HttpError {
  const { title, text } = endedText(ending);
  return new HttpError(409, "ask_ended", text, { title });
}

/** A link's refusal once it, or its twin, answered: the same call parked anew under the ask's id is not answered by it again. */
function linkSpent(): HttpError {
  return new HttpError(
    409,
    "link_spent",
    "this link, or its twin, already answered this ask; a link answers once, and nothing was answered",
    { title: "Link already used" },
  );
}

function linkExpired(): HttpError {
  return new HttpError(410, "link_expired", "this answer link has expired; nothing was answered");
}

/** A link's refusal for an ask whose id another call holds now: the link was signed for the earlier one. */
function askChanged(): HttpError {
  return new HttpError(
    409,
    "ask_changed",
    "this link was made for an earlier call under this ask's id, and another call holds the id now; " +
      "the link cannot answer it, and nothing was answered",
  );
}

/**
 * The path the client asked for: mounted in an Express-style app, the
 * original one (`req.originalUrl`, before the router cut the mount path off),
 * else `req.url`'s. Never starts with two slashes, so a redirect to it stays
 * on this server.
 */
function mountedPath(req: IncomingMessage): string {
  const original = (req as { originalUrl?: unknown }).originalUrl;
  const target = parseTarget(typeof original === "string" ? original : (req.url ?? "/"));
  if (target === undefined) throw new HttpError(400, "bad_request", "the request target is not a valid path");
  return target.pathname.replace(/^[/\\]+/, "/");
}

/**
 * Whether a store's answer is a grant the API can list: by its shape, as the
 * engine takes grants, so one from another copy of loopctl (the ESM build
 * beside the CommonJS one) is listed too, where `instanceof` would refuse it.
 */
function listable(grant: unknown): grant is Grant {
  return isGrantShaped(grant) && typeof (grant.scope as Partial<Grant["scope"]> | undefined)?.type === "string";
}

/**
 * What reading `value` through, as `JSON.stringify` and a spread do, throws
 * (a getter, a proxy's trap, a `toJSON`): `{ error }`, or `undefined` when
 * every part of it reads. Each object is read once, so a cycle ends the walk.
 */
function readFault(value: unknown): { readonly error: unknown } | undefined {
  const seen = new Set<object>();
  const pending: unknown[] = [value];
  try {
    while (pending.length > 0) {
      let next = pending.pop();
      if (typeof next !== "object" || next === null || seen.has(next)) continue;
      seen.add(next);
      const toJSON: unknown = (next as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === "function") next = (toJSON as (key: string) => unknown).call(next, "");
      if (typeof next !== "object" || next === null) continue;
      for (const key of Object.keys(next)) pending.push((next as Record<string, unknown>)[key]);
    }
  } catch (error) {
    return { error };
  }
  return undefined;
}

/** Whether an entry of `audited`'s records can be served: an object holding its decision as an object. */
function isAuditedEntry(entry: unknown): boolean {
  const record = (entry as { record?: unknown } | null)?.record;
  return typeof entry === "object" && entry !== null && typeof record === "object" && record !== null;
}

/** A path segment a URL parser resolves away: `.` or `..`, either dot written as itself or as `%2e`. */
const DOT_SEGMENT = /(?:^|\/)(?:\.|%2e){1,2}(?:\/|$)/i;

/**
 * The target a request is routed by, as {@link parseTarget} reads it, or
 * undefined when it is none; nor is one whose path holds a dot segment:
 * `/public/../api/grants` resolves to `/api/grants` (and `%2e%2e` is `..`
 * to the parser), another route than the one a proxy or router in front of
 * the handler saw.
 */
function routeTarget(target: string): URL | undefined {
  return DOT_SEGMENT.test(target.split("?", 1)[0] as string) ? undefined : parseTarget(target);
}

/**
 * A request target as a URL, or undefined when it is none (`//` is a
 * host-relative URL with no host). Nor is a path that begins with two
 * slashes or holds a backslash (a slash to a URL parser): `//name/api/asks`
 * would be read as host `name` and path `/api/asks`, another route than the
 * one the request names, and than a proxy or router in front of the handler
 * saw.
 */
function parseTarget(target: string): URL | undefined {
  const path = target.split("?", 1)[0] as string;
  if (path.startsWith("//") || path.includes("\\")) return undefined;
  try {
    return new URL(target, "http://localhost");
  } catch {
    return undefined;
  }
}

/**
 * The ask an answer says it was made for (its optional `ask` field), so that
 * it answers only that ask: a PendingAsk with the id the answer is posted to.
 * @throws {HttpError} 400 for one that is not.
 */
function shownAsk(body: unknown, id: string): PendingAsk | undefined {
  const value = (body as { ask?: unknown }).ask;
  if (value === undefined) return undefined;
  const parsed = PendingAskSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = ["ask", ...(issue?.path ?? [])].join(".");
    throw new HttpError(400, "bad_request", `not an answer: ${where}: ${issue?.message ?? "invalid"}`);
  }
  if (parsed.data.id !== id) {
    throw new HttpError(400, "bad_request", "not an answer: ask.id: names another ask than the one answered");
  }
  return parsed.data;
}

/** A path segment, decoded; one that does not decode names nothing (and then matches no ask or grant). */
function decodePart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return "";
  }
}

/**
 * Refuses `method` with 405 unless it is one of `methods`. A route that reads
 * takes HEAD as GET (Node sends no body for it): an uptime monitor probes
 * with HEAD. The event stream does not, lest a HEAD open one.
 */
function allow(method: string, ...methods: string[]): void {
  if (!methods.includes(method)) {
    throw new HttpError(405, "method_not_allowed", `use ${methods.join(" or ")}`, {
      headers: { allow: methods.join(", ") },
    });
  }
}

function assertNever(value: never): never {
  throw new Error(`unexpected value ${JSON.stringify(value)}`);
}
