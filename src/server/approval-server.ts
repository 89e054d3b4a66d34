import { createServer } from "node:http";
import { everyKey } from "../unknown-option.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { shownValue } from "../errors.js";
import { createApprovalHandler, HANDLER_OPTIONS, sendRefusal } from "./handler.js";
import type { ApprovalHandlerOptions } from "./handler.js";
import { ServerConfigError, ServerLimitError, ServerListenError } from "./errors.js";
import { HttpError, refuseUnreadable } from "./http.js";
import { configFault, positiveInteger, readOptions } from "./options.js";
import { MAX_TIMER_MS } from "./timers.js";

/** Options of {@link createApprovalServer}: the handler's, plus where to listen. */
export interface ApprovalServerOptions extends Omit<ApprovalHandlerOptions, "allowedHosts"> {
  /**
   * The address to listen on. A wildcard (`0.0.0.0`, `::`, or another
   * spelling of every address, such as `0` or `::0`) needs `allowedHosts`:
   * the names clients reach it by.
   * @default "127.0.0.1"
   */
  readonly host?: string;
  /** The port; `0` picks a free one (read it from `url`). @default 0 */
  readonly port?: number;
  /**
   * More `Host` header values to answer to besides the bound address, e.g. a
   * reverse proxy's `"approvals.example.com"`.
   */
  readonly allowedHosts?: readonly string[];
  /**
   * How long a client has to send a request's headers, from when the
   * connection opens or its previous request ends; one still sending them
   * gets 408 and is disconnected. At most `requestTimeoutMs`. @default 10000
   */
  readonly headersTimeoutMs?: number;
  /**
   * How long a client has to send a whole request, headers and body; one
   * still sending gets 408 and is disconnected. An event stream's request is
   * whole once its headers are in, so streams stay open. @default 30000
   */
  readonly requestTimeoutMs?: number;
  /** How long a kept-alive connection may sit idle between requests before it is closed. @default 5000 */
  readonly keepAliveTimeoutMs?: number;
  /**
   * How long a reply may wait on a client that stopped reading it (what was
   * written sits undrained, none of it taken) before the connection is
   * closed, at most 2147483647. Without it a client that sends requests and
   * never reads the replies holds its connection for ever, past every timeout
   * for reading requests. A reply still being made (an answer waiting on the
   * approver) or a quiet event stream is not waiting on the client, and is
   * kept. @default 30000
   */
  readonly writeTimeoutMs?: number;
  /**
   * How many connections may be open at once, event streams and idle
   * kept-alive ones included. One over the cap is closed as soon as it is
   * accepted, before a byte of it is read (Node's `server.maxConnections`);
   * once held ones close, new ones are served again. `onError` is told of
   * the first at once, of the rest together a minute later. @default 1000
   */
  readonly maxConnections?: number;
}

/** A running approval server. */
export interface ApprovalServer {
  /** The server's base URL, e.g. `http://127.0.0.1:41234/`. */
  readonly url: string;
  /** The console's login link, `url` + `?token=…`: print it for the person who answers. */
  readonly consoleUrl: string;
  /** The bearer token the API accepts. */
  readonly token: string;
  /** The port it listens on. */
  readonly port: number;
  /**
   * Stops the server: ends every event stream and open connection, stops
   * taking asks, and resolves once the socket is closed. It neither answers
   * nor closes the approver: asks already taken stay parked with it, for its
   * owner to answer or to deny by closing it. Idempotent.
   */
  close(): Promise<void>;
}

/** The options {@link createApprovalServer} takes: the handler's and its own. */
const SERVER_OPTIONS = everyKey<ApprovalServerOptions>()([
  ...HANDLER_OPTIONS,
  "host",
  "port",
  "headersTimeoutMs",
  "requestTimeoutMs",
  "keepAliveTimeoutMs",
  "writeTimeoutMs",
  "maxConnections",
]);

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);
const WILDCARD = new Set(["0.0.0.0", "::", ""]);
/** What `address()` says of a socket bound to every address, however the host was spelled ("0", "::0", "0x0"). */
const BOUND_EVERYWHERE = new Set(["0.0.0.0", "::", "::ffff:0.0.0.0"]);
/** Every address as the URL parser writes it, however it was spelled ("0", "0x0", "0.0", "::0", "0:0:0:0:0:0:0:0"). */
const EVERY_ADDRESS = new Set(["0.0.0.0", "[::]", "[::ffff:0:0]"]);

/**
 * `host` spells every address (`0.0.0.0`, `::`, `0`, `0x0`, `::0`, `::%lo`…),
 * told from its text alone, with no lookup: a host that must be refused for
 * it is refused before anything is opened. Only digits, dots, colons and
 * `x` (an IPv6 zone after `%` set aside) are read as an address; the socket's
 * bound address is checked again once listening.
 */
function namesEveryAddress(host: string): boolean {
  if (WILDCARD.has(host)) return true;
  const address = host.replace(/%[^%]*$/, "");
  if (!/^[0-9a-fA-FxX.:]+$/.test(address)) return false;
  try {
    return EVERY_ADDRESS.has(new URL(`http://${address.includes(":") ? `[${address}]` : address}/`).hostname);
  } catch {
    return false;
  }
}

/**
 * Refuses a `host` that spells every address when no `allowedHosts` name
 * the hosts clients reach it by; needs no I/O, so a caller can check it
 * before it opens anything.
 * @throws {ServerConfigError} naming `allowedHosts`.
 */
export function checkListenHost(host: string, allowedHosts: readonly unknown[]): void {
  if (namesEveryAddress(host) && allowedHosts.length === 0) {
    throw new ServerConfigError(
      "allowedHosts",
      `listening on ${host || "every address"} needs allowedHosts: the names clients use to reach it`,
    );
  }
}

/**
 * Starts the approval API and the console (`GET /`) on a server of its own;
 * see `createApprovalHandler` for the routes and checks, and
 * `docs/server.md` for the threat model.
 *
 * @throws {ServerConfigError} for an unusable option.
 * @throws {ServerListenError} when it cannot listen.
 *
 * @example
 * ```ts
 * const [channel, approver] = ApprovalChannel.pair(16);
 * const server = await createApprovalServer({ approver, grants: store, records, askTimeoutMs: 300_000 });
 * console.log(`answer asks at ${server.consoleUrl}`);
 * ```
 */
export async function createApprovalServer(given: ApprovalServerOptions): Promise<ApprovalServer> {
  const options = readOptions(given, SERVER_OPTIONS, configFault());
  const host = options.host ?? "127.0.0.1";
  const port = options.port ?? 0;
  if (typeof host !== "string") throw new ServerConfigError("host", "must be a string");
  if (!Number.isSafeInteger(port) || port < 0 || port > 65_535) {
    throw new ServerConfigError("port", `must be an integer from 0 to 65535, got ${shownValue(port)}`);
  }
  const hosts: unknown = options.allowedHosts ?? [];
  // Checked before it is spread: a string would become one host name per letter.
  if (!Array.isArray(hosts)) {
    throw new ServerConfigError("allowedHosts", "must be an array of host or host:port strings");
  }
  // A copy: the caller's array could change while the server starts listening.
  const extra: readonly string[] = [...(hosts as readonly string[])];
  checkListenHost(host, extra);
  const headersTimeout = positiveInteger("headersTimeoutMs", options.headersTimeoutMs, 10_000, MAX_TIMER_MS);
  const requestTimeout = positiveInteger("requestTimeoutMs", options.requestTimeoutMs, 30_000, MAX_TIMER_MS);
  const keepAliveTimeout = positiveInteger("keepAliveTimeoutMs", options.keepAliveTimeoutMs, 5_000, MAX_TIMER_MS);
  const maxConnections = positiveInteger("maxConnections", options.maxConnections, 1_000);
  const writeTimeout = positiveInteger("writeTimeoutMs", options.writeTimeoutMs, 30_000, MAX_TIMER_MS);
  if (headersTimeout > requestTimeout) {
    throw new ServerConfigError(
      "headersTimeoutMs",
      `must be at most requestTimeoutMs (${requestTimeout}), got ${headersTimeout}`,
    );
  }
  const server = createServer({
    headersTimeout,
    requestTimeout,
    keepAliveTimeout,
    // Node checks the two timeouts only this often (30 s by default), so a bound of 10 s could hold for 40.
    connectionsCheckingInterval: Math.min(1_000, headersTimeout),
  });
  // Idle connections time out, but a client could still open thousands at once: past the cap Node
  // destroys each new one on accept.
  server.maxConnections = maxConnections;
  // Every header line is kept (maxHeaderSize still bounds them): past Node's default count it drops
  // the rest unseen, and a second Host or Authorization among them would escape the handler's check.
  server.maxHeadersCount = 0;
  // A socket with no traffic for this long says so; only one with a reply stuck undrained is cut.
  server.setTimeout(writeTimeout, stalledOrIdle);
  const dropped = dropReports(maxConnections, options.onError);
  server.on("drop", () => dropped.drop());
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error) => reject(new ServerListenError(`${host}:${port}`, { cause: error })));
    server.listen(port, host, () => resolve());
  });
  const { port: bound, address } = server.address() as AddressInfo;
  const everywhere = WILDCARD.has(host) || BOUND_EVERYWHERE.has(address);
  if (everywhere && extra.length === 0) {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    throw new ServerConfigError(
      "allowedHosts",
      `listening on ${host} binds every address (${address}): it needs allowedHosts, the names clients use to reach it`,
    );
  }
  const urlHost = host.includes(":") ? `[${host}]` : host;
  // A browser leaves the default port out of Host and Origin: on port 80 it sends "Host: localhost".
  const hostsOf = (name: string): string[] => (bound === 80 ? [`${name}:80`, name] : [`${name}:${bound}`]);
  const names = LOOPBACK.has(host) ? ["127.0.0.1", "localhost", "[::1]"] : everywhere ? [] : [urlHost];
  let handler;
  try {
    const {
      host: _host,
      port: _port,
      headersTimeoutMs: _headersTimeoutMs,
      requestTimeoutMs: _requestTimeoutMs,
      keepAliveTimeoutMs: _keepAliveTimeoutMs,
      writeTimeoutMs: _writeTimeoutMs,
      maxConnections: _maxConnections,
      ...handlerOptions
    } = options;
    handler = createApprovalHandler({ ...handlerOptions, allowedHosts: [...names.flatMap(hostsOf), ...extra] });
  } catch (error) {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    throw error;
  }
  server.on("request", handler.handle);
  // Without a listener here Node sends 100 Continue before the handler's checks run, and a client
  // uploads a body only to have it refused; the handler sends it once they have passed.
  server.on("checkContinue", handler.handle);
  server.on("clientError", refuseUnreadable);
  server.on("checkExpectation", refuseExpectation);
  const url = everywhere ? `http://${extra[0] as string}/` : `http://${urlHost}${bound === 80 ? "" : `:${bound}`}/`;
  let closing: Promise<void> | undefined;
  return {
    url,
    consoleUrl: `${url}?token=${handler.token}`,
    token: handler.token,
    port: bound,
    close() {
      closing ??= (async () => {
        dropped.stop();
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        await handler.close();
        server.closeAllConnections();
        await closed;
      })();
      return closing;
    },
  };
}

/**
 * A connection's `timeout` (no byte read or written for `writeTimeoutMs`, or
 * a kept-alive one idle past `keepAliveTimeout`): a listener here replaces
 * Node's own, which closes every such connection. Closed when a reply waits
 * undrained (its reader stopped reading: pipelined requests then go unread,
 * and no request timeout runs) or none is under way (Node's idle keep-alive
 * close); kept while a reply is still being made, or a stream is quiet.
 */
function stalledOrIdle(socket: Socket): void {
  const inFlight = (socket as { readonly _httpMessage?: unknown })._httpMessage;
  if (socket.writableLength > 0 || inFlight === null || inFlight === undefined) socket.destroy();
}

/**
 * A request whose `Expect` is not `100-continue` (Node's `checkExpectation`):
 * refused, as Node would, but as the handler's refusals are, with the
 * security headers, a page on the answer links and the console's page and a
 * JSON error on the API; the connection closes, so its body is
 * never read. Node's own 417 names nothing and keeps reading.
 */
function refuseExpectation(req: IncomingMessage, res: ServerResponse): void {
  sendRefusal(
    req,
    res,
    new HttpError(417, "expectation_failed", "the server meets only Expect: 100-continue", {
      headers: { connection: "close" },
    }),
  );
}

/** How often at most `onError` hears of connections closed over the cap: a flood is one report a minute. */
const DROP_REPORT_MS = 60_000;

/**
 * Tells `onError` of the connections Node closed unread over `maxConnections`
 * (its `drop` event): the first at once, those after it together once a
 * minute has passed, so that a flood of connections is not a flood of reports.
 */
function dropReports(
  maxConnections: number,
  onError: ((error: unknown) => void) | undefined,
): { drop(): void; stop(): void } {
  let unsaid = 0;
  let quiet: NodeJS.Timeout | undefined;
  const report = (message: string): void => {
    try {
      onError?.(new ServerLimitError("maxConnections", message));
    } catch {
      // A reporter that throws must not take the server down with it.
    }
  };
  const nextWindow = (): void => {
    quiet = setTimeout(() => {
      quiet = undefined;
      if (unsaid === 0) return;
      const count = unsaid;
      unsaid = 0;
      report(
        `${count === 1 ? "another connection was" : `${count} more connections were`} closed unread in the last ` +
          `minute: maxConnections (${maxConnections}) were open`,
      );
      nextWindow();
    }, DROP_REPORT_MS);
    quiet.unref();
  };
  return {
    drop() {
      if (quiet !== undefined) {
        unsaid += 1;
        return;
      }
      report(
        `a connection was closed unread: maxConnections (${maxConnections}) were open; more closed in the next ` +
          "minute are told together then",
      );
      nextWindow();
    },
    stop() {
      clearTimeout(quiet);
      quiet = undefined;
    },
  };
}
