import { createHash, createHmac } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { ServerConfigError } from "./errors.js";
import { MIN_SECRET_BYTES, sameSecret } from "./secrets.js";
import { shownValue } from "../errors.js";

/**
 * How many times `name` (lowercase) appears among the request's headers.
 * Node keeps only the first `Host` or `Authorization` of a request that sends
 * one twice, where a proxy or filter in front may have judged the other.
 */
export function headerCount(req: IncomingMessage, name: string): number {
  let count = 0;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]?.toLowerCase() === name) count++;
  return count;
}

/** The header lines Node's parser keeps of a request by default (`maxHeadersCount` unset: 2000 names and values). */
const NODE_DEFAULT_HEADER_LINES = 1000;

/**
 * How many header lines Node kept of the request, when that is all it
 * keeps: under its default `maxHeadersCount` it drops the lines past about
 * a thousand unseen, where a second `Host` or `Authorization` could hide
 * from the checks. Undefined when the request is under it, or its server
 * keeps every line (`maxHeadersCount: 0`, as `createApprovalServer` sets) or
 * sets a count of its own.
 */
export function headersCut(req: IncomingMessage): number | undefined {
  const server = (req.socket as { readonly server?: { readonly maxHeadersCount?: unknown } } | null)?.server;
  const count = server?.maxHeadersCount;
  if (count !== null && count !== undefined) return undefined;
  return req.rawHeaders.length >= 2 * NODE_DEFAULT_HEADER_LINES ? NODE_DEFAULT_HEADER_LINES : undefined;
}

/** How a request proved it may use the API. */
export type Credential = "bearer" | "cookie";

const TOKEN_TEXT = /^[A-Za-z0-9._~-]+$/;
const HOST_TEXT = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::([0-9]+))?$/;
/** The highest TCP port. */
const MAX_PORT = 65_535;

/**
 * Refuses a token the server cannot take: one its own checks refuse, and
 * one that would need escaping in the URLs and headers it travels in.
 * @throws {ServerConfigError} naming `token`.
 */
export function checkToken(token: unknown): asserts token is string {
  if (typeof token !== "string" || token.length < MIN_SECRET_BYTES || !TOKEN_TEXT.test(token)) {
    throw new ServerConfigError(
      "token",
      `must be at least ${MIN_SECRET_BYTES} characters of A-Z a-z 0-9 . _ ~ - (it travels in URLs and headers)`,
    );
  }
}

/**
 * The Host header values `allowedHosts` lists, lowercase, each checked to
 * be a host or host:port whose port a client could use.
 * @throws {ServerConfigError} naming `allowedHosts`.
 */
export function allowedHostNames(allowedHosts: readonly unknown[]): string[] {
  return allowedHosts.map((host: unknown) => {
    const text = typeof host === "string" ? host.toLowerCase() : "";
    const match = HOST_TEXT.exec(text);
    if (match === null) {
      throw new ServerConfigError("allowedHosts", `${shownValue(host)} is not a host or host:port`);
    }
    // No client reaches a server on another port, so a Host naming one is never sent: the
    // console would print a link nobody can open.
    const port = match[2];
    if (port !== undefined && (port.length > 5 || Number(port) < 1 || Number(port) > MAX_PORT)) {
      throw new ServerConfigError(
        "allowedHosts",
        `${shownValue(host)} has port ${port.length > 12 ? `${port.slice(0, 12)}…` : port}: a port is from 1 to ${MAX_PORT}`,
      );
    }
    return text;
  });
}

/**
 * Who may talk to the server: the Host names it answers to (against DNS
 * rebinding), the bearer token and the session cookie derived from it, and
 * the origins a state-changing request may come from.
 */
export class Access {
  readonly #token: string;
  readonly #session: string;
  readonly #hosts: ReadonlySet<string>;
  readonly #origins: ReadonlySet<string>;
  /** Cookies ignore ports: each server's cookie has a name of its own so two never overwrite each other. */
  readonly cookieName: string;

  /** @throws {ServerConfigError} naming `token` or `allowedHosts`. */
  constructor(token: string, allowedHosts: readonly string[]) {
    checkToken(token);
    if (!Array.isArray(allowedHosts) || allowedHosts.length === 0) {
      throw new ServerConfigError("allowedHosts", "must list the Host header values the server answers to");
    }
    const hosts = allowedHostNames(allowedHosts);
    this.#token = token;
    this.#session = createHmac("sha256", token).update("loopctl console session/1").digest("base64url");
    this.#hosts = new Set(hosts);
    this.#origins = new Set(hosts.flatMap((host) => [`http://${host}`, `https://${host}`]));
    const id = createHash("sha256")
      .update([...this.#hosts].sort().join(" "))
      .digest("hex")
      .slice(0, 12);
    this.cookieName = `loopctl_session_${id}`;
  }

  /**
   * The Host header names one of the allowed hosts, and so does an
   * absolute-form target (`GET http://name/path`, as clients send to a
   * proxy): such a target, not Host, names the host meant (RFC 9112, 3.2.2).
   */
  hostAllowed(req: IncomingMessage): boolean {
    const host = req.headers.host;
    if (host === undefined || !this.#hosts.has(host.toLowerCase())) return false;
    const target = req.url ?? "/";
    if (target.startsWith("/") || target === "*") return true;
    try {
      return this.#hosts.has(new URL(target).host.toLowerCase());
    } catch {
      return false;
    }
  }

  /** `?token=` of the console's login URL. */
  tokenMatches(given: string): boolean {
    return sameSecret(given, this.#token);
  }

  /**
   * Which credential the request carries, if a valid one. A bearer token is
   * judged alone, a cookie beside it or not. An `Authorization` of another
   * scheme is not for this server (a reverse proxy that asks for a password
   * of its own passes the browser's `Basic` on): the cookie still counts.
   */
  credential(req: IncomingMessage): Credential | undefined {
    const auth = req.headers.authorization;
    if (auth !== undefined && /^Bearer(\s|$)/i.test(auth)) {
      const match = /^Bearer +(\S+)\s*$/i.exec(auth);
      return match !== null && sameSecret(match[1] as string, this.#token) ? "bearer" : undefined;
    }
    for (const value of cookieValues(req, this.cookieName)) {
      if (sameSecret(value, this.#session)) return "cookie";
    }
    return undefined;
  }

  /**
   * A state-changing request may come from this server's own pages or from
   * a client that sends no Origin (curl, a script); one authenticated only by
   * the cookie must carry this server's Origin, since a browser attaches the
   * cookie by itself. A signed link is its own credential, as a bearer token is.
   */
  originAllowed(req: IncomingMessage, credential: Credential | "link"): boolean {
    const origin = req.headers.origin;
    if (origin === undefined) return credential !== "cookie";
    return this.#origins.has(origin.toLowerCase());
  }

  /**
   * The Set-Cookie value that logs a browser in: `HttpOnly` (no script reads
   * it), `SameSite=Strict` (no other site's page or link sends it), and
   * `Secure` when the browser reached the server over HTTPS. Never on plain
   * HTTP, where the browser would drop a `Secure` cookie and never log in.
   * `Path` is the console's own path (`page`, the mount path in its slash
   * form): the browser sends the cookie to the console's pages, API and
   * event stream under it, and not to other apps on the same host.
   */
  sessionCookie(req: IncomingMessage, page: string): string {
    const secure = reachedOverHttps(req) ? "; Secure" : "";
    return `${this.cookieName}=${this.#session}; HttpOnly; SameSite=Strict; Path=${cookiePath(page)}${secure}`;
  }
}

/**
 * The browser reached the server over HTTPS: the request came on a TLS
 * connection (the handler mounted in an `https` server), or a reverse proxy
 * that ended TLS says the first hop was https (`X-Forwarded-Proto: https`,
 * `Forwarded: proto=https`). Only the cookie's `Secure` depends on it, which
 * only narrows where the cookie goes: a client that claims https over plain
 * HTTP loses nothing but its own cookie.
 */
function reachedOverHttps(req: IncomingMessage): boolean {
  if ((req.socket as { readonly encrypted?: unknown } | undefined)?.encrypted === true) return true;
  if (firstHop(req.headers["x-forwarded-proto"]).toLowerCase() === "https") return true;
  for (const pair of firstHop(req.headers.forwarded).split(";")) {
    const [name = "", value = ""] = pair.split("=", 2).map((part) => part.trim());
    if (name.toLowerCase() === "proto") return value.replace(/^"(.*)"$/, "$1").toLowerCase() === "https";
  }
  return false;
}

/**
 * A URL path as a cookie's `Path`. A parsed URL's path has no spaces or
 * control characters, but may hold `;`, which would end the attribute and
 * start another: escaped, it scopes the cookie to a path the browser never
 * asks for, so the console does not log in there, and the cookie goes
 * nowhere else.
 */
function cookiePath(path: string): string {
  return path.replaceAll(";", "%3B");
}

/** The first entry of a header a chain of proxies appends to (comma-separated, or sent more than once). */
function firstHop(header: string | string[] | undefined): string {
  const first = Array.isArray(header) ? header[0] : header;
  return (first ?? "").split(",")[0]?.trim() ?? "";
}

function cookieValues(req: IncomingMessage, name: string): string[] {
  const header = req.headers.cookie;
  if (header === undefined) return [];
  const values: string[] = [];
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) values.push(part.slice(eq + 1).trim());
  }
  return values;
}
