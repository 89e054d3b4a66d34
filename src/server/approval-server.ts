import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { createApprovalHandler } from "./handler.js";
import type { ApprovalHandlerOptions } from "./handler.js";
import { ServerConfigError, ServerListenError } from "./errors.js";

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

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);
const WILDCARD = new Set(["0.0.0.0", "::", ""]);
/** What `address()` says of a socket bound to every address, however the host was spelled ("0", "::0", "0x0"). */
const BOUND_EVERYWHERE = new Set(["0.0.0.0", "::", "::ffff:0.0.0.0"]);

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
export async function createApprovalServer(options: ApprovalServerOptions): Promise<ApprovalServer> {
  if (typeof options !== "object" || (options as unknown) === null) {
    throw new ServerConfigError("options", "must be an object");
  }
  const host = options.host ?? "127.0.0.1";
  const port = options.port ?? 0;
  if (typeof host !== "string") throw new ServerConfigError("host", "must be a string");
  if (!Number.isSafeInteger(port) || port < 0 || port > 65_535) {
    throw new ServerConfigError("port", `must be an integer from 0 to 65535, got ${String(port)}`);
  }
  const given: unknown = options.allowedHosts ?? [];
  // Checked before it is spread: a string would become one host name per letter.
  if (!Array.isArray(given)) {
    throw new ServerConfigError("allowedHosts", "must be an array of host or host:port strings");
  }
  const extra = given as readonly string[];
  if (WILDCARD.has(host) && extra.length === 0) {
    throw new ServerConfigError(
      "allowedHosts",
      `listening on ${host || "every address"} needs allowedHosts: the names clients use to reach it`,
    );
  }
  const server = createServer();
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
    handler = createApprovalHandler({
      ...options,
      allowedHosts: [...names.flatMap(hostsOf), ...extra],
    });
  } catch (error) {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    throw error;
  }
  server.on("request", handler.handle);
  const url = everywhere ? `http://${extra[0] as string}/` : `http://${urlHost}${bound === 80 ? "" : `:${bound}`}/`;
  let closing: Promise<void> | undefined;
  return {
    url,
    consoleUrl: `${url}?token=${handler.token}`,
    token: handler.token,
    port: bound,
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        await handler.close();
        server.closeAllConnections();
        await closed;
      })();
      return closing;
    },
  };
}
