import { createServer, request as httpRequest } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer as createHttpsServer, request as httpsRequest } from "node:https";
import type { RequestOptions as HttpsRequestOptions } from "node:https";
import type { ConnectionOptions } from "node:tls";
import { createRequire } from "node:module";
import { connect } from "node:net";
import { gzipSync } from "node:zlib";
import type { Socket } from "node:net";
import express from "express";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ApprovalChannel, askDigest } from "loopctl/ask";
import type { Approver, AskEnding, AskInbox, AskResolution, PendingAsk } from "loopctl/ask";
import { Grant, GrantScope, MemoryGrantStore, descriptorFingerprint } from "loopctl/grant";
import type { GrantStore } from "loopctl/grant";
import { LoopctlError } from "loopctl";
import {
  ServerConfigError,
  ServerLimitError,
  ServerListenError,
  createApprovalHandler,
  createApprovalServer,
  signAnswerLink,
} from "loopctl/server";
import type { ApprovalServer, ApprovalServerOptions } from "loopctl/server";
import { flush, makeAsk, outcomeNow, outliveEndings, track } from "./support/ask-fixtures.js";
import { startChild } from "./support/child-process.js";
import { bundleGrantBuilds } from "./support/reliability-bundle.js";
import { listen, stopping } from "./support/http-mount.js";
import { openStream, request } from "./support/http-client.js";
import type { Reply } from "./support/http-client.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Started {
  readonly server: ApprovalServer;
  readonly channel: ApprovalChannel;
  readonly approver: Approver;
  readonly auth: Readonly<Record<string, string>>;
  readonly host: string;
  /** Parks an ask and waits until the server lists it. */
  park(ask?: PendingAsk, signal?: AbortSignal): Promise<{ ask: PendingAsk; parked: Promise<AskResolution> }>;
}

async function start(options: Partial<ApprovalServerOptions> = {}): Promise<Started> {
  const [channel, approver] = ApprovalChannel.pair(16);
  const server = await createApprovalServer({ approver, ...options });
  cleanups.push(
    () => approver.close(),
    () => server.close(),
  );
  const auth = { authorization: `Bearer ${server.token}` };
  const host = `127.0.0.1:${server.port}`;
  return {
    server,
    channel,
    approver,
    auth,
    host,
    async park(ask = makeAsk(1), signal = new AbortController().signal) {
      const parked = channel.resolve(ask, { signal });
      parked.catch(() => undefined);
      await until(async () =>
        ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.some(
          (v) => (v as { ask: PendingAsk }).ask.id === ask.id,
        ),
      );
      return { ask, parked };
    },
  };
}

/** A server over `inbox` (an approver's own channel, wrapped), closed after the test, and what its board lists. */
async function serveInbox(
  inbox: AskInbox,
  approver: { close(): void },
): Promise<{ server: ApprovalServer; auth: Record<string, string>; listed: () => Promise<PendingAsk[]> }> {
  const server = await createApprovalServer({ approver: inbox });
  cleanups.push(
    () => approver.close(),
    () => server.close(),
  );
  const auth = { authorization: `Bearer ${server.token}` };
  const listed = async (): Promise<PendingAsk[]> =>
    ((await get(server, "api/asks", auth)).json as { asks: { ask: PendingAsk }[] }).asks.map((v) => v.ask);
  return { server, auth, listed };
}

/**
 * Parks `shown` on `channel`, waits until the board lists it, ends its call, and parks another
 * call under the same id (ids from a seeded generator repeat across runs) once the channel has
 * forgotten the first ending.
 */
async function endThenReuse(
  channel: ApprovalChannel,
  shown: PendingAsk,
  listed: () => Promise<PendingAsk[]>,
): Promise<{ now: PendingAsk; second: Promise<AskResolution> }> {
  const stop = new AbortController();
  const first = channel.resolve(shown, { signal: stop.signal });
  first.catch(() => undefined);
  await until(async () => (await listed()).length === 1);
  stop.abort(new Error("run ended"));
  await expect(first).rejects.toThrow("run ended");
  // A channel refuses an id among its last endings: past them, the id parks again.
  await outliveEndings(channel);
  const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
  const second = channel.resolve(now, { signal: new AbortController().signal });
  second.catch(() => undefined);
  return { now, second };
}

/** What `createApprovalServer(options)` rejects with, checked to be a ServerConfigError naming `option`. */
async function refusedOption(options: ApprovalServerOptions, option: string): Promise<unknown> {
  const error = await createApprovalServer(options).then(
    (server) => server.close().then(() => undefined),
    (e: unknown) => e,
  );
  expect(error, option).toBeInstanceOf(ServerConfigError);
  expect((error as ServerConfigError).option).toBe(option);
  return error;
}

/** A raw connection that records what it receives (so far: `received()`) and when the server closes it. */
function rawClient(port: number): {
  readonly socket: Socket;
  readonly closed: Promise<string>;
  readonly received: () => string;
} {
  const socket = connect(port, "127.0.0.1");
  socket.on("error", () => undefined);
  cleanups.push(() => void socket.destroy());
  let received = "";
  socket.setEncoding("utf8");
  socket.on("data", (chunk: string) => (received += chunk));
  const closed = new Promise<string>((resolve) => socket.once("close", () => resolve(received)));
  return { socket, closed, received: () => received };
}

function get(server: ApprovalServer, path: string, headers: Readonly<Record<string, string>> = {}): Promise<Reply> {
  return request(`${server.url}${path}`, { headers });
}

function answer(
  server: ApprovalServer,
  id: string,
  body: unknown,
  headers: Readonly<Record<string, string>>,
): Promise<Reply> {
  return request(`${server.url}api/asks/${id}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

/** Polls `check` on the event loop (no timing assumption) until it holds. */
async function until(check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (await check()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error("condition never held");
}

/** A GET of `path` sent as written (a URL string would be normalized first). */
function rawGet(
  port: number,
  path: string,
  headers: Readonly<Record<string, string>>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port, path, headers, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (body += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("createApprovalServer", () => {
  it("binds 127.0.0.1 on a free port and prints a ?token= console URL with a random token", async () => {
    const { server } = await start();
    expect(server.url).toBe(`http://127.0.0.1:${server.port}/`);
    expect(server.port).toBeGreaterThan(0);
    expect(server.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(server.consoleUrl).toBe(`${server.url}?token=${server.token}`);
    const other = await start();
    expect(other.server.token).not.toBe(server.token);
  });

  it("serves /healthz without a token", async () => {
    const { server } = await start();
    const reply = await get(server, "healthz");
    expect(reply.status).toBe(200);
    expect(reply.json).toEqual({ ok: true, inbox: "ok" });
  });

  it("answers HEAD as GET without the body (an uptime monitor's probe of /healthz), but never opens an event stream for it", async () => {
    const { server } = await start();
    const auth = { authorization: `Bearer ${server.token}` };
    const health = await request(`${server.url}healthz`, { method: "HEAD" });
    expect(health.status).toBe(200);
    expect(health.text).toBe("");
    expect(health.headers["content-type"]).toMatch(/^application\/json/);
    for (const path of ["", "api/asks", "api/grants", "api/records"]) {
      const head = await request(`${server.url}${path}`, { method: "HEAD", headers: auth });
      const got = await get(server, path, auth);
      expect([path, head.status, head.text]).toEqual([path, got.status, ""]);
      expect(head.headers["content-type"]).toBe(got.headers["content-type"]);
    }
    // Without the token, HEAD is refused as GET is.
    expect((await request(`${server.url}api/asks`, { method: "HEAD" })).status).toBe(401);
    const stream = await request(`${server.url}api/asks/stream`, { method: "HEAD", headers: auth });
    expect(stream.status).toBe(405);
    expect(stream.headers["allow"]).toBe("GET");
  });

  it("refuses unusable options with a ServerConfigError naming the option", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    cleanups.push(() => approver.close());
    const cases: [Partial<ApprovalServerOptions>, string][] = [
      [{ token: "short" }, "token"],
      [{ token: "has spaces in it, sixteen+" }, "token"],
      [{ host: "0.0.0.0" }, "allowedHosts"],
      // Other spellings of every address bind every address too.
      [{ host: "0" }, "allowedHosts"],
      [{ host: "0x0" }, "allowedHosts"],
      [{ host: "::0" }, "allowedHosts"],
      [{ host: "0:0:0:0:0:0:0:0" }, "allowedHosts"],
      [{ port: 70_000 }, "port"],
      [{ linkSecret: "tiny" }, "linkSecret"],
      [{ maxBodyBytes: 0 }, "maxBodyBytes"],
      // Node runs a longer timer after 1 ms: a month's heartbeat would be a busy loop.
      [{ heartbeatMs: 2_147_483_648 }, "heartbeatMs"],
      [{ heartbeatMs: 2_592_000_000 }, "heartbeatMs"],
      [{ askTimeoutMs: -1 }, "askTimeoutMs"],
      [{ streamWriteTimeoutMs: 0 }, "streamWriteTimeoutMs"],
      [{ streamWriteTimeoutMs: 1.5 }, "streamWriteTimeoutMs"],
      [{ streamWriteTimeoutMs: 2_147_483_648 }, "streamWriteTimeoutMs"],
      [{ streamWriteTimeoutMs: "30s" as never }, "streamWriteTimeoutMs"],
      [{ allowedHosts: ["bad host/"] }, "allowedHosts"],
      // A port no client can reach the server on: the console's link would be unusable.
      [{ allowedHosts: ["approvals.example.com:99999"] }, "allowedHosts"],
      [{ allowedHosts: ["approvals.example.com:65536"] }, "allowedHosts"],
      [{ allowedHosts: ["approvals.example.com:0"] }, "allowedHosts"],
      [{ allowedHosts: ["[::1]:00000"] }, "allowedHosts"],
      [{ allowedHosts: ["approvals.example.com:８０"] }, "allowedHosts"],
      // A string is not spread into single-letter host names.
      [{ allowedHosts: "approvals.example.com" as never }, "allowedHosts"],
      [{ host: "0.0.0.0", allowedHosts: "approvals.example.com" as never }, "allowedHosts"],
      // Checked up front, not when the first ask or request finds them unusable.
      [{ approver: {} as never }, "approver"],
      [{ approver: null as never }, "approver"],
      [{ approver: { next: () => undefined, resolve: () => false } as never }, "approver"],
      [{ now: 5 as never }, "now"],
      [{ onError: "console" as never }, "onError"],
      [{ describeTool: {} as never }, "describeTool"],
      [{ grants: {} as never }, "grants"],
      [{ records: [] as never }, "records"],
      [{ records: { recent: () => [], subscribe: true } as never }, "records"],
    ];
    for (const [options, option] of cases) {
      const error = await refusedOption({ approver, ...options }, option);
      expect((error as ServerConfigError).code).toBe("SERVER_CONFIG_INVALID");
      expect(error).toBeInstanceOf(LoopctlError);
    }
    const port = await refusedOption({ approver, allowedHosts: ["approvals.example.com:99999"] }, "allowedHosts");
    expect((port as Error).message).toBe(
      'approval server option allowedHosts: "approvals.example.com:99999" has port 99999: a port is from 1 to 65535',
    );
    const highest = await createApprovalServer({ approver, allowedHosts: ["approvals.example.com:65535", "b:1"] });
    await highest.close();
    const slow = await createApprovalServer({ approver, heartbeatMs: 2_147_483_647 });
    await slow.close();
  });

  it("refuses the resolver half of a pair as the approver, saying which half goes where", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const error = await createApprovalServer({ approver: channel as never }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerConfigError);
    expect((error as Error).message).toBe(
      "approval server option approver: must be an AskInbox; it lacks next(), ended() " +
        "(a resolver, the half the engine takes? pass the approver: the second of ApprovalChannel.pair(), " +
        "a queue's approver(), a WebhookResolver's inbox)",
    );
    approver.close();
  });

  it("refuses a missing options object with a ServerConfigError, server and handler alike", async () => {
    const error = await createApprovalServer(undefined as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerConfigError);
    expect((error as ServerConfigError).option).toBe("options");
    for (const options of [undefined, null, "127.0.0.1"]) {
      expect(() => createApprovalHandler(options as never)).toThrow(ServerConfigError);
    }
    const allowedHosts = ["127.0.0.1:1"];
    expect(() => createApprovalHandler({ allowedHosts, approver: {} as never })).toThrow(/approver/);
    expect(() => createApprovalHandler({ allowedHosts, now: 5 as never })).toThrow(/now/);
  });

  it("refuses a key that is none of its options, naming it and the option it likely misspells, server and handler alike", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    cleanups.push(() => approver.close());
    const cases: [Record<string, unknown>, string, string][] = [
      [{ linksecret: "s".repeat(32) }, "linksecret", "unknown option 'linksecret' (did you mean linkSecret?)"],
      [{ maxConnection: 5 }, "maxConnection", "unknown option 'maxConnection' (did you mean maxConnections?)"],
      [{ askTimeoutMS: 1_000 }, "askTimeoutMS", "unknown option 'askTimeoutMS' (did you mean askTimeoutMs?)"],
      [{ allowedHost: ["a.example"] }, "allowedHost", "unknown option 'allowedHost' (did you mean allowedHosts?)"],
      // Left undefined it is still a key it does not take: the caller meant something by it.
      [{ grant: undefined }, "grant", "unknown option 'grant' (did you mean grants?)"],
    ];
    for (const [extra, option, message] of cases) {
      const error = await refusedOption({ approver, ...extra }, option);
      expect((error as Error).message).toBe(`approval server option ${option}: ${message}`);
      expect((error as ServerConfigError).code).toBe("SERVER_CONFIG_INVALID");
    }
    const far = await refusedOption({ approver, tls: {} } as unknown as ApprovalServerOptions, "tls");
    expect((far as Error).message).toMatch(
      /^approval server option tls: unknown option 'tls' \(the options are approver, grants, /,
    );
    // The handler takes no listening options: each is named, not ignored.
    const allowedHosts = ["127.0.0.1:1"];
    for (const [extra, option] of [
      [{ linksecret: "s".repeat(32) }, "linksecret"],
      [{ port: 8080 }, "port"],
      [{ maxConnections: 10 }, "maxConnections"],
      [{ headersTimeoutMs: 1_000 }, "headersTimeoutMs"],
    ] as const) {
      let thrown: unknown;
      try {
        createApprovalHandler({ allowedHosts, ...extra });
      } catch (error) {
        thrown = error;
      }
      expect(thrown, option).toBeInstanceOf(ServerConfigError);
      expect((thrown as ServerConfigError).option).toBe(option);
      expect((thrown as Error).message).toContain(`unknown option '${option}'`);
    }
  });

  it("refuses an AbortSignal, an array or a proxy it cannot read where its options go, server and handler alike", async () => {
    const unreadable = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error("revoked");
        },
      },
    );
    for (const [given, says] of [
      [new AbortController().signal, "got an AbortSignal"],
      [[], "got an array"],
      [["127.0.0.1"], "got an array"],
      [unreadable, "cannot be read: revoked"],
    ] as const) {
      const error = await createApprovalServer(given as never).then(
        (server) => server.close().then(() => "served"),
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe("options");
      expect((error as Error).message).toContain(says);
      expect(() => createApprovalHandler(given as never)).toThrow(says);
    }
  });

  it("reads each option once: a getter that answers otherwise on a second read is not believed twice", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    cleanups.push(() => approver.close());
    const reads = new Map<string, number>();
    const options = { approver } as Record<string, unknown>;
    const counted = (name: string, first: unknown, later: unknown): void => {
      Object.defineProperty(options, name, {
        enumerable: true,
        configurable: true,
        get() {
          const n = (reads.get(name) ?? 0) + 1;
          reads.set(name, n);
          return n === 1 ? first : later;
        },
      });
    };
    // A strong secret while it is checked, a weak one when it would be used.
    counted("linkSecret", "l".repeat(32), "weak");
    counted("askTimeoutMs", 60_000, -1);
    counted("onError", () => undefined, "not a function");
    counted("allowedHosts", ["approvals.example.com"], "approvals.example.com");
    const server = await createApprovalServer(options);
    cleanups.push(() => server.close());
    expect(Object.fromEntries(reads)).toEqual({ linkSecret: 1, askTimeoutMs: 1, onError: 1, allowedHosts: 1 });
    const reply = await request(`http://127.0.0.1:${server.port}/api/asks`, {
      headers: { authorization: `Bearer ${server.token}`, host: "approvals.example.com" },
    });
    expect(reply.status).toBe(200);
    // The handler alike, given such options directly.
    reads.clear();
    counted("allowedHosts", ["127.0.0.1:1"], "x");
    const handler = createApprovalHandler(options as never);
    cleanups.push(() => handler.close());
    expect(Object.fromEntries(reads)).toEqual({ linkSecret: 1, askTimeoutMs: 1, onError: 1, allowedHosts: 1 });
  });

  it("copies allowedHosts when it is made: the caller's array changed while it starts listening changes nothing", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    cleanups.push(() => approver.close());
    const allowedHosts = ["approvals.example.com"];
    const starting = createApprovalServer({ approver, host: "0.0.0.0", allowedHosts });
    allowedHosts.splice(0, 1, "evil.example");
    const server = await starting;
    cleanups.push(() => server.close());
    expect(server.url).toBe("http://approvals.example.com/");
    const at = `http://127.0.0.1:${server.port}/api/asks`;
    const auth = { authorization: `Bearer ${server.token}` };
    expect((await request(at, { headers: { ...auth, host: "approvals.example.com" } })).status).toBe(200);
    expect((await request(at, { headers: { ...auth, host: "evil.example" } })).status).toBe(421);
  });

  it("listening on another spelling of every address, answers to allowedHosts and gives its URL from them", async () => {
    const { server, auth } = await start({ host: "0", allowedHosts: ["approvals.example.com"] });
    expect(server.url).toBe("http://approvals.example.com/");
    const at = `http://127.0.0.1:${server.port}/api/asks`;
    expect((await request(at, { headers: { ...auth, host: "approvals.example.com" } })).status).toBe(200);
    expect((await request(at, { headers: { ...auth, host: `0:${server.port}` } })).status).toBe(421);
  });

  it("reports a port in use as a ServerListenError naming the address", async () => {
    const { server } = await start();
    const error = await createApprovalServer({ port: server.port }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerListenError);
    expect((error as ServerListenError).code).toBe("SERVER_LISTEN_FAILED");
    expect((error as Error).message).toContain(`127.0.0.1:${server.port}`);
    expect((error as Error).message).toContain("EADDRINUSE");
  });
});

describe("the checks, in order: Host (421), token (401), Origin (403)", () => {
  it("421 for a Host that is not the bound one, before anything else, /healthz included", async () => {
    const { server, auth } = await start();
    for (const [path, headers] of [
      ["healthz", {}],
      ["api/asks", auth],
      ["api/asks", {}],
      ["", {}],
    ] as const) {
      const reply = await request(`${server.url}${path}`, {
        headers: { ...headers, host: `evil.example:${server.port}` },
      });
      expect(reply.status, path).toBe(421);
    }
    const rebound = await request(`${server.url}api/asks`, { headers: { ...auth, host: "127.0.0.1:1" } });
    expect(rebound.status).toBe(421);
  });

  it("421 for an absolute-form target naming another host: it, not Host, names the host meant", async () => {
    const { server } = await start();
    const send = async (target: string): Promise<string> => {
      const { socket, closed } = rawClient(server.port);
      socket.write(
        `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
          `Authorization: Bearer ${server.token}\r\nConnection: close\r\n\r\n`,
      );
      return (await closed).split("\r\n")[0] ?? "";
    };
    expect(await send("http://evil.example/api/asks")).toBe("HTTP/1.1 421 Misdirected Request");
    expect(await send(`http://evil.example:${server.port}/healthz`)).toBe("HTTP/1.1 421 Misdirected Request");
    expect(await send(`http://localhost:${server.port}/api/asks`)).toBe("HTTP/1.1 200 OK");
    expect(await send(`http://127.0.0.1:${server.port}/healthz`)).toBe("HTTP/1.1 200 OK");
  });

  it("400 for a Host or an Authorization header sent twice: Node keeps the first, a proxy in front may have judged the other", async () => {
    const errors: unknown[] = [];
    const { server, host } = await start({ onError: (e) => errors.push(e) });
    const send = async (headers: string): Promise<{ status: string; body: string }> => {
      const { socket, closed } = rawClient(server.port);
      socket.write(`GET /api/asks HTTP/1.1\r\n${headers}Connection: close\r\n\r\n`);
      const text = await closed;
      return { status: text.split("\r\n")[0] ?? "", body: text.slice(text.indexOf("\r\n\r\n") + 4) };
    };
    const bearer = `Authorization: Bearer ${server.token}\r\n`;
    for (const headers of [
      `Host: ${host}\r\nHost: evil.example\r\n${bearer}`,
      `Host: ${host}\r\nHost: ${host}\r\n${bearer}`,
      `Host: evil.example\r\nHost: ${host}\r\n${bearer}`,
    ]) {
      const reply = await send(headers);
      expect(reply.status, headers).toBe("HTTP/1.1 400 Bad Request");
      expect(JSON.parse(reply.body), headers).toMatchObject({
        error: "bad_request",
        message: expect.stringContaining("Host"),
      });
    }
    for (const headers of [
      `Host: ${host}\r\n${bearer}Authorization: Bearer wrong-token-0123456789\r\n`,
      `Host: ${host}\r\nAuthorization: Bearer wrong-token-0123456789\r\n${bearer}`,
      `Host: ${host}\r\n${bearer}${bearer}`,
    ]) {
      const reply = await send(headers);
      expect(reply.status, headers).toBe("HTTP/1.1 400 Bad Request");
      expect(JSON.parse(reply.body), headers).toMatchObject({
        error: "bad_request",
        message: expect.stringContaining("Authorization"),
      });
    }
    // Once each, as before.
    expect((await send(`Host: ${host}\r\n${bearer}`)).status).toBe("HTTP/1.1 200 OK");
    expect(errors).toEqual([]);
  });

  it("sees a Host or an Authorization sent twice past a thousand other headers, which Node would drop unseen", async () => {
    const { server, host } = await start();
    const send = async (port: number, headers: string): Promise<{ status: string; body: string }> => {
      const { socket, closed } = rawClient(port);
      socket.write(`GET /api/asks HTTP/1.1\r\n${headers}Connection: close\r\n\r\n`);
      const text = await closed;
      return { status: text.split("\r\n")[0] ?? "", body: text.slice(text.indexOf("\r\n\r\n") + 4) };
    };
    // 2000 short headers fit in Node's 16 KiB; by default it keeps about the first thousand.
    const filler = "x-f: 1\r\n".repeat(2000);
    const bearer = `Authorization: Bearer ${server.token}\r\n`;
    const twice = `Host: ${host}\r\n${bearer}${filler}Host: evil.example\r\n`;
    expect((await send(server.port, twice)).status).toBe("HTTP/1.1 400 Bad Request");
    const auth = `Host: ${host}\r\n${bearer}${filler}Authorization: Bearer wrong-token-0123456789\r\n`;
    expect((await send(server.port, auth)).status).toBe("HTTP/1.1 400 Bad Request");
    expect((await send(server.port, `Host: ${host}\r\n${bearer}${filler}`)).status).toBe("HTTP/1.1 200 OK");

    // Mounted in a server of Node's defaults, which drops the headers past its count: what it could
    // not see is refused, not judged by the first ones alone.
    const app = createServer();
    const { port } = await listen(app);
    const token = "a-token-of-twenty-chars";
    const handler = createApprovalHandler({ allowedHosts: [`127.0.0.1:${port}`], token });
    app.on("request", handler.handle);
    cleanups.push(stopping(app, handler));
    const mounted = `Host: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n${filler}`;
    const cut = await send(port, `${mounted}Host: evil.example\r\n`);
    expect(cut.status).toBe("HTTP/1.1 431 Request Header Fields Too Large");
    expect(JSON.parse(cut.body)).toMatchObject({ error: "too_many_headers", message: expect.stringMatching(/1000/) });
    expect((await send(port, `Host: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n`)).status).toBe(
      "HTTP/1.1 200 OK",
    );
  });

  it("on port 80 a browser's Host and Origin leave the port out: the bare loopback names are the server's too", async (context) => {
    let started: Started;
    try {
      started = await start({ port: 80 });
    } catch (error) {
      // Port 80 needs privileges, and must be free: say why the check did not run.
      if (error instanceof ServerListenError)
        return context.skip(`port 80 cannot be bound here: ${String(error.cause)}`);
      throw error;
    }
    const { server, auth, park } = started;
    expect(server.url).toBe("http://127.0.0.1/");
    for (const host of ["127.0.0.1", "localhost", "[::1]", "LOCALHOST", "127.0.0.1:80", "localhost:80"]) {
      expect((await get(server, "healthz", { host })).status, host).toBe(200);
    }
    expect((await get(server, "healthz", { host: "127.0.0.1:8080" })).status).toBe(421);
    const { ask, parked } = await park();
    const own = await answer(server, ask.id, { type: "approve" }, { ...auth, origin: "http://localhost" });
    expect(own.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("a request target that is no path gets 400, after the Host check; nothing reaches onError", async () => {
    const errors: unknown[] = [];
    const { server, auth, host } = await start({ onError: (e) => errors.push(e) });
    const raw = (path: string, headers: Readonly<Record<string, string>>) => rawGet(server.port, path, headers);
    expect(await raw("//", { host: "evil.example" })).toMatchObject({ status: 421 });
    expect(await raw("//", { ...auth, host: "evil.example" })).toMatchObject({ status: 421 });
    for (const headers of [{ host }, { ...auth, host }]) {
      const reply = await raw("//", headers);
      expect(reply.status).toBe(400);
      expect(JSON.parse(reply.body)).toMatchObject({ error: "bad_request" });
    }
    expect(errors).toEqual([]);
  });

  it("a target that a URL parser would read a host from (//name/…, or a backslash for a slash) is refused with 400, not served as the path after that host", async () => {
    const errors: unknown[] = [];
    const { server, auth, host } = await start({ onError: (e) => errors.push(e) });
    const raw = (path: string, headers: Readonly<Record<string, string>>) => rawGet(server.port, path, headers);
    // A router in front of the handler (a proxy's ACL, an Express guard on /api) sees these as other
    // paths than /api/asks and /healthz; the handler must not serve them as those.
    for (const path of [
      "//evil.example/api/asks",
      "/\\evil.example/api/asks",
      "/api\\asks",
      "//x/healthz",
      `http://${host}/api\\asks`,
    ]) {
      const reply = await raw(path, { ...auth, host });
      expect(reply.status, path).toBe(400);
      expect(JSON.parse(reply.body), path).toMatchObject({ error: "bad_request" });
    }
    // A backslash in the query is the query's own.
    expect((await raw("/api/records?limit=5&x=a\\b", { ...auth, host })).status).toBe(200);
    expect(errors).toEqual([]);
  });

  it("a target whose path holds a dot segment (/x/../api/asks, or %2e%2e) is refused with 400, not served as the path it resolves to", async () => {
    const errors: unknown[] = [];
    const { server, auth, host } = await start({ onError: (e) => errors.push(e) });
    const raw = (path: string, headers: Readonly<Record<string, string>>) => rawGet(server.port, path, headers);
    // A guard in front that sees "/public/../api/grants" as written (Express's req.path) lets it by as
    // another route than the one the URL parser resolves it to.
    for (const path of [
      "/public/../api/grants",
      "/public/%2e%2E/api/grants",
      "/public/.%2e/api/grants",
      "/api/./grants",
      "/api/%2e/grants",
      "/x/..",
      "/%2e%2e/healthz",
      `http://${host}/public/../api/grants`,
    ]) {
      const reply = await raw(path, { ...auth, host });
      expect(reply.status, path).toBe(400);
      expect(JSON.parse(reply.body), path).toMatchObject({ error: "bad_request" });
    }
    // Dots within a segment, or in the query, are the segment's and the query's own.
    expect((await raw("/api/records?limit=5&x=/../a", { ...auth, host })).status).toBe(200);
    expect((await raw("/api/asks/..x", { ...auth, host })).status).toBe(405);
    expect((await raw("/...", { ...auth, host })).status).toBe(404);
    expect(errors).toEqual([]);
  });

  it("answers to the loopback names of its port, and to allowedHosts", async () => {
    const { server, auth } = await start({ allowedHosts: ["approvals.example.com"] });
    for (const host of [
      `127.0.0.1:${server.port}`,
      `localhost:${server.port}`,
      `[::1]:${server.port}`,
      "approvals.example.com",
      "APPROVALS.example.com",
    ]) {
      const reply = await request(`${server.url}api/asks`, { headers: { ...auth, host } });
      expect(reply.status, host).toBe(200);
    }
  });

  it("401 without a token, with a wrong one, a wrong scheme or a wrong cookie; the page gets a page", async () => {
    const { server } = await start();
    // This server's own cookie name, with a value that is not its session.
    const session = ((await get(server, `?token=${server.token}`)).headers["set-cookie"]?.[0] ?? "").split(";")[0]!;
    const [name, value] = session.split("=") as [string, string];
    expect(value.length).toBeGreaterThan(8);
    const altered = `${value.slice(0, -1)}${value.endsWith("A") ? "B" : "A"}`;
    for (const headers of [
      {},
      { authorization: "Bearer nope-nope-nope-nope-nope" },
      { authorization: `Basic ${server.token}` },
      { authorization: `Bearer ${server.token}x` },
      { cookie: "loopctl_session_000000000000=forged" },
      { cookie: `${name}=forged` },
      { cookie: `${name}=${altered}` },
      { cookie: `${name}=` },
    ]) {
      const reply = await get(server, "api/asks", headers);
      expect(reply.status).toBe(401);
      expect(reply.json).toMatchObject({ error: "unauthorized" });
      expect(reply.headers["www-authenticate"]).toBe('Bearer realm="loopctl"');
    }
    const page = await get(server, "");
    expect(page.status).toBe(401);
    expect(page.headers["content-type"]).toMatch(/^text\/html/);
    expect(page.text).toContain("?token=");
    for (const path of ["console.js", "console.css", "api/grants", "api/records", "api/asks/stream", "nowhere"]) {
      expect((await get(server, path)).status, path).toBe(401);
    }
    const post = await answer(server, makeAsk(0).id, { type: "approve" }, {});
    expect(post.status).toBe(401);
  });

  it("401 comes before 403: a bad token from a foreign origin is a 401", async () => {
    const { server } = await start();
    const reply = await answer(server, makeAsk(0).id, { type: "approve" }, { origin: "https://evil.example" });
    expect(reply.status).toBe(401);
  });

  it("403 for a state-changing request from a foreign Origin, even with the bearer token, before the body is read", async () => {
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    for (const origin of ["https://evil.example", "null", `http://127.0.0.1:${server.port + 1}`]) {
      const reply = await answer(server, ask.id, { type: "approve" }, { ...auth, origin });
      expect(reply.status, origin).toBe(403);
      expect(reply.json).toMatchObject({ error: "forbidden_origin" });
    }
    const revoke = await request(`${server.url}api/grants/0123456789abcdef`, {
      method: "DELETE",
      headers: { ...auth, origin: "https://evil.example" },
    });
    expect(revoke.status).toBe(403);
    expect((await outcomeNow(parked)).state).toBe("pending");
    // Reading is not state-changing: a GET from elsewhere with the token is served (CORS keeps its reply from a page).
    expect((await get(server, "api/asks", { ...auth, origin: "https://evil.example" })).status).toBe(200);
  });

  it("a refusal sent before the body is read closes the connection: a body that never finishes is not read on", async () => {
    const { server, park } = await start();
    const { ask, parked } = await park();
    const cases: [string, string][] = [
      [`Authorization: Bearer ${server.token}x`, "401 Unauthorized"],
      [`Authorization: Bearer ${server.token}\r\nOrigin: https://evil.example`, "403 Forbidden"],
    ];
    for (const [credential, status] of cases) {
      const socket = connect(server.port, "127.0.0.1");
      let reply = "";
      socket.on("data", (chunk: Buffer) => (reply += chunk.toString("latin1")));
      const closed = new Promise<void>((resolve, reject) => {
        socket.on("error", reject);
        socket.on("end", () => resolve());
      });
      socket.write(
        `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n${credential}\r\n` +
          "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n",
      );
      await closed;
      socket.destroy();
      expect(reply.split("\r\n")[0]).toBe(`HTTP/1.1 ${status}`);
      expect(reply.toLowerCase()).toContain("\r\nconnection: close\r\n");
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("405 with Allow for a known path and the wrong method", async () => {
    const { server, auth } = await start();
    const reply = await request(`${server.url}api/asks`, { method: "PUT", headers: auth });
    expect(reply.status).toBe(405);
    expect(reply.headers["allow"]).toBe("GET, HEAD");
    expect((await get(server, "api/nothing", auth)).status).toBe(404);
  });
});

describe("the console's session cookie", () => {
  it("/?token= opened from another site's page sets the same cookie on a page that moves on to the console by itself", async () => {
    const { server } = await start();
    const plain = await get(server, `?token=${server.token}`);
    const login = await get(server, `?token=${server.token}`, { "sec-fetch-site": "cross-site" });
    expect(login.status).toBe(200);
    expect(login.headers["set-cookie"]).toEqual(plain.headers["set-cookie"]);
    expect(login.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(login.headers["content-security-policy"]).toContain("script-src 'self'");
    expect(login.headers["content-security-policy"]).toContain("frame-ancestors 'none'");
    expect(login.text).toContain('<meta http-equiv="refresh" content="0;url=./">');
    expect(login.text).not.toContain(server.token);
    expect(login.text).not.toContain("<script");
    // A wrong token from another site is still refused.
    expect((await get(server, "?token=wrong-token-0123456789", { "sec-fetch-site": "cross-site" })).status).toBe(401);
  });

  it("/?token= sets an HttpOnly, SameSite=Strict cookie and redirects to / so the token leaves the address bar", async () => {
    const { server, park } = await start();
    const login = await get(server, `?token=${server.token}`);
    expect(login.status).toBe(303);
    expect(new URL(login.headers.location ?? "", `${server.url}?token=${server.token}`).href).toBe(server.url);
    const setCookie = login.headers["set-cookie"]?.[0] ?? "";
    expect(setCookie).toMatch(/^loopctl_session_[0-9a-f]{12}=[A-Za-z0-9_-]+; HttpOnly; SameSite=Strict; Path=\/$/);
    expect(setCookie).not.toContain(server.token);
    const cookie = setCookie.split(";")[0] as string;

    const page = await get(server, "", { cookie });
    expect(page.status).toBe(200);
    expect(page.headers["content-type"]).toBe("text/html; charset=utf-8");
    expect(page.headers["content-security-policy"]).toContain("script-src 'self'");
    expect(page.headers["content-security-policy"]).not.toContain("unsafe-inline");
    expect(page.headers["x-frame-options"]).toBe("DENY");
    expect(page.text).toContain('<script src="console.js" defer></script>');
    expect((await get(server, "console.js", { cookie })).headers["content-type"]).toBe(
      "text/javascript; charset=utf-8",
    );
    expect((await get(server, "console.css", { cookie })).headers["content-type"]).toBe("text/css; charset=utf-8");

    // With the cookie alone, a state-changing request must carry this server's Origin.
    const { ask, parked } = await park();
    expect((await answer(server, ask.id, { type: "approve" }, { cookie })).status).toBe(403);
    expect((await answer(server, ask.id, { type: "approve" }, { cookie, origin: "https://evil.example" })).status).toBe(
      403,
    );
    const own = await answer(
      server,
      ask.id,
      { type: "approve" },
      { cookie, origin: `http://127.0.0.1:${server.port}` },
    );
    expect(own.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("is Secure when the browser reached the server over HTTPS: over TLS, or through a proxy that ended TLS; never over plain HTTP", async () => {
    // Over plain HTTP, loopback or not, a Secure cookie would be dropped and the console never logged in.
    const { server } = await start({ allowedHosts: ["approvals.example.com"] });
    const login = (headers: Readonly<Record<string, string>>): Promise<string> =>
      request(`${server.url}?token=${server.token}`, { headers }).then((reply) => {
        expect(reply.status).toBe(303);
        return reply.headers["set-cookie"]?.[0] ?? "";
      });
    const cookie = /^loopctl_session_[0-9a-f]{12}=[A-Za-z0-9_-]+; HttpOnly; SameSite=Strict; Path=\/$/;
    const secureCookie = /^loopctl_session_[0-9a-f]{12}=[A-Za-z0-9_-]+; HttpOnly; SameSite=Strict; Path=\/; Secure$/;
    expect(await login({})).toMatch(cookie);
    expect(await login({ host: "approvals.example.com" })).toMatch(cookie);
    for (const headers of [
      { "x-forwarded-proto": "http" },
      { "x-forwarded-proto": "http, https" },
      { forwarded: "for=192.0.2.60;proto=http;by=203.0.113.43" },
      { forwarded: 'for="[2001:db8:cafe::17]:4711";host=approvals.example.com' },
    ]) {
      expect(await login(headers), JSON.stringify(headers)).toMatch(cookie);
    }
    // A proxy that ended TLS says so for the first hop.
    for (const headers of [
      { host: "approvals.example.com", "x-forwarded-proto": "https" },
      { "x-forwarded-proto": "HTTPS, http" },
      { forwarded: "for=192.0.2.60;proto=https;by=203.0.113.43" },
      { forwarded: 'for="[2001:db8:cafe::17]:4711"; Proto="https", for=10.0.0.1;proto=http' },
    ]) {
      expect(await login(headers), JSON.stringify(headers)).toMatch(secureCookie);
    }

    // The handler in a server of TLS's own (a pre-shared key stands in for a certificate).
    const key = Buffer.from("a pre-shared key of 32 bytes....");
    const tls = { ciphers: "PSK", maxVersion: "TLSv1.2" } as const;
    const app = createHttpsServer({ ...tls, pskCallback: () => key });
    const { port } = await listen(app);
    const handler = createApprovalHandler({ allowedHosts: [`127.0.0.1:${port}`], token: "a-token-of-twenty-chars" });
    app.on("request", handler.handle);
    cleanups.push(stopping(app, handler));
    const overTls = (path: string, headers: Readonly<Record<string, string>> = {}): Promise<Reply> =>
      new Promise((resolve, reject) => {
        // node:https passes TLS options through, though its RequestOptions type leaves pskCallback out.
        const options: HttpsRequestOptions & Pick<ConnectionOptions, "pskCallback"> = {
          ...tls,
          host: "127.0.0.1",
          port,
          path,
          headers,
          agent: false,
          pskCallback: () => ({ psk: key, identity: "console" }),
          checkServerIdentity: () => undefined,
        };
        const req = httpsRequest(options, (res) => {
          let text = "";
          res.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: undefined }));
        });
        req.on("error", reject);
        req.end();
      });
    const tlsLogin = await overTls("/?token=a-token-of-twenty-chars");
    expect(tlsLogin.status).toBe(303);
    const set = tlsLogin.headers["set-cookie"]?.[0] ?? "";
    expect(set).toMatch(secureCookie);
    // The cookie logs the browser in there.
    expect((await overTls("/", { cookie: set.split(";")[0] as string })).status).toBe(200);
  });

  it("signs in behind a proxy that asks for a password of its own: an Authorization of another scheme is the proxy's, and the cookie still counts", async () => {
    // nginx's auth_basic passes the browser's "Authorization: Basic …" on to the server behind it, on every request.
    const { server, park } = await start();
    const basic = { authorization: `Basic ${Buffer.from("ops:proxy-password").toString("base64")}` };
    const login = await get(server, `?token=${server.token}`, basic);
    expect(login.status).toBe(303);
    const cookie = (login.headers["set-cookie"]?.[0] ?? "").split(";")[0] as string;
    for (const path of ["", "console.js", "api/asks", "api/grants", "api/records"]) {
      expect((await get(server, path, { ...basic, cookie })).status, path).toBe(200);
    }
    // Still the cookie's rules: a state-changing request must carry this server's Origin.
    const { ask, parked } = await park();
    expect((await answer(server, ask.id, { type: "approve" }, { ...basic, cookie })).status).toBe(403);
    const own = { ...basic, cookie, origin: `http://127.0.0.1:${server.port}` };
    expect((await answer(server, ask.id, { type: "approve" }, own)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
    // Without the cookie another scheme proves nothing; a Bearer token is judged alone, the cookie beside it or not.
    expect((await get(server, "api/asks", basic)).status).toBe(401);
    expect((await get(server, "api/asks", { authorization: `Bearer ${server.token}x`, cookie })).status).toBe(401);
  });

  it("behind a proxy that cuts a path prefix off without saying so, the login leads back to the page the browser asked for, not to the proxy's root", async () => {
    // nginx: location /loopctl/ { proxy_pass http://127.0.0.1:<port>/; }: the server sees "/?token=…", and no originalUrl.
    const { server } = await start({ allowedHosts: ["approvals.example.com"] });
    const login = await get(server, `?token=${server.token}`, {
      host: "approvals.example.com",
      "x-forwarded-proto": "https",
    });
    expect(login.status).toBe(303);
    const asked = `https://approvals.example.com/loopctl/?token=${server.token}`;
    expect(new URL(login.headers.location ?? "", asked).href).toBe("https://approvals.example.com/loopctl/");
  });

  it("refuses a wrong ?token= with 401 and sets no cookie", async () => {
    const { server } = await start();
    const reply = await get(server, `?token=${server.token.slice(1)}`);
    expect(reply.status).toBe(401);
    expect(reply.headers["set-cookie"]).toBeUndefined();
  });

  it("gives each server its own cookie name (cookies ignore ports)", async () => {
    const a = await start();
    const b = await start();
    const name = async (s: Started): Promise<string> =>
      ((await get(s.server, `?token=${s.server.token}`)).headers["set-cookie"]?.[0] ?? "").split("=")[0] as string;
    expect(await name(a)).not.toBe(await name(b));
  });
});

describe("answers: POST /api/asks/:id", () => {
  it("200 when the answer reaches the parked call, with remember passed on; the ask leaves the list", async () => {
    // A server without a grant store passes remember on: the engine keeps it, if it has a store.
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    const listed = (await get(server, "api/asks", auth)).json as {
      asks: { ask: PendingAsk; ageMs: number; timeLeftMs: null }[];
    };
    expect(listed.asks).toHaveLength(1);
    expect(listed.asks[0]?.ask).toEqual(ask);
    expect(listed.asks[0]?.timeLeftMs).toBeNull();
    const reply = await answer(server, ask.id, { type: "approve", remember: "this_tool", extra: "dropped" }, auth);
    expect(reply.status).toBe(200);
    expect(reply.json).toEqual({ delivered: true });
    await expect(parked).resolves.toEqual({ type: "approve", remember: "this_tool" });
    expect(((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks).toEqual([]);
  });

  it("shows the time left when told the agent's deadline", async () => {
    const clock = { now: 1_000_000 };
    const { server, auth, park } = await start({ askTimeoutMs: 60_000, now: () => clock.now });
    await park();
    clock.now += 15_000;
    const listed = (await get(server, "api/asks", auth)).json as {
      asks: { receivedAtMs: number; ageMs: number; expiresAtMs: number; timeLeftMs: number }[];
    };
    expect(listed.asks[0]).toMatchObject({
      receivedAtMs: 1_000_000,
      ageMs: 15_000,
      expiresAtMs: 1_060_000,
      timeLeftMs: 45_000,
    });
  });

  it("a clock that throws or gives no number neither stops the server taking asks nor hides them: ages take the system time, onError is told", async () => {
    for (const [label, now] of [
      [
        "throws",
        (): number => {
          throw new Error("clock unplugged");
        },
      ],
      ["NaN", (): number => Number.NaN],
    ] as const) {
      const errors: unknown[] = [];
      const { server, auth, park } = await start({ now, askTimeoutMs: 60_000, onError: (e) => errors.push(e) });
      const { ask, parked } = await park();
      const listed = (await get(server, "api/asks", auth)).json as {
        asks: { ask: PendingAsk; receivedAtMs: number; ageMs: number; timeLeftMs: number }[];
      };
      expect(
        listed.asks.map((v) => v.ask),
        label,
      ).toEqual([ask]);
      expect(Number.isFinite(listed.asks[0]?.receivedAtMs), label).toBe(true);
      expect(Number.isFinite(listed.asks[0]?.timeLeftMs), label).toBe(true);
      expect(errors.length, label).toBeGreaterThan(0);
      expect((await answer(server, ask.id, { type: "approve", ask }, auth)).status, label).toBe(200);
      await expect(parked, label).resolves.toEqual({ type: "approve" });
    }
  });

  it("409 once the ask ended: answered, or withdrawn by the engine, with how it ended", async () => {
    const { server, auth, park } = await start();
    const first = await park(makeAsk(1));
    expect((await answer(server, first.ask.id, { type: "deny", reason: "no" }, auth)).status).toBe(200);
    const again = await answer(server, first.ask.id, { type: "approve" }, auth);
    expect(again.status).toBe(409);
    expect(again.json).toMatchObject({ error: "ask_ended", ending: { type: "answered", verdict: "deny" } });
    await expect(first.parked).resolves.toEqual({ type: "deny", reason: "no" });

    const stop = new AbortController();
    const second = await park(makeAsk(2), stop.signal);
    stop.abort(new Error("deadline"));
    await expect(second.parked).rejects.toThrow("deadline");
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 0);
    const late = await answer(server, second.ask.id, { type: "approve" }, auth);
    expect(late.status).toBe(409);
    expect(late.json).toMatchObject({ ending: { type: "withdrawn", reason: "unknown" } });
  });

  it("an answer carrying the ask it was given for is refused (409 ask_changed) when another call holds that id now", async () => {
    const { server, auth, park, channel } = await start();
    // Ids from a seeded generator repeat across runs: the same id, another call.
    const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    const stop = new AbortController();
    const first = await park(shown, stop.signal);
    stop.abort(new Error("run ended"));
    await expect(first.parked).rejects.toThrow("run ended");
    // A channel refuses an id among its last endings: past them, the id parks again.
    await outliveEndings(channel);
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 0);
    const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = await park(now);

    const refused = await answer(server, shown.id, { type: "approve", ask: shown }, auth);
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({ error: "ask_changed", ask: { ask: now } });
    expect((await outcomeNow(second.parked)).state).toBe("pending");
    // Every field counts, the optional argsSha256 too.
    const withSha = { ...now, argsSha256: "a".repeat(64) };
    expect((await answer(server, now.id, { type: "approve", ask: withSha }, auth)).status).toBe(409);
    expect((await outcomeNow(second.parked)).state).toBe("pending");
    // The ask as it is now, or none at all, answers.
    expect((await answer(server, now.id, { type: "deny", ask: now }, auth)).status).toBe(200);
    await expect(second.parked).resolves.toEqual({ type: "deny" });
  });

  it("400 for an answer whose ask is not a PendingAsk or names another id; the ask stays parked", async () => {
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    for (const [label, shown] of [
      ["not an object", "yes"],
      ["a malformed ask", { ...ask, turn: -1 }],
      ["another ask's id", makeAsk(2)],
    ] as const) {
      const reply = await answer(server, ask.id, { type: "approve", ask: shown }, auth);
      expect(reply.status, label).toBe(400);
      expect(reply.json, label).toMatchObject({ error: "bad_request" });
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("400 for an answer whose body has a member twice, at any depth and however the key is escaped; the ask stays parked", async () => {
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    const shown = JSON.stringify(ask);
    for (const [body, path] of [
      // JSON.parse keeps the last: a proxy or log in front that reads the first sees an approval.
      ['{"type":"approve","type":"deny"}', "type"],
      ['{"type":"deny","\\u0074ype":"approve"}', "type"],
      [`{"type":"deny","reason":"a","reason":"b"}`, "reason"],
      [`{"type":"approve","ask":${shown.slice(0, -1)},"tool":"other"}}`, "ask.tool"],
    ] as const) {
      const reply = await answer(server, ask.id, body, auth);
      expect(reply.status, body).toBe(400);
      expect(reply.json, body).toEqual({
        error: "bad_request",
        message: `the body has the member ${JSON.stringify(path)} twice`,
      });
    }
    // A key that does not show as itself is named in escapes, so it cannot reorder the message around it.
    const hidden = await answer(server, ask.id, '{"type":"deny","x\\u202e":1,"x\\u202e":2}', auth);
    expect(hidden.json).toEqual({ error: "bad_request", message: 'the body has the member "x\\u202e" twice' });
    expect((await outcomeNow(parked)).state).toBe("pending");
    // The same keys in separate objects are not twice.
    expect((await answer(server, ask.id, `{"type":"approve","ask":${shown}}`, auth)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("404 for an ask it never saw, a malformed id, or a server without an approver", async () => {
    const { server, auth } = await start();
    expect((await answer(server, makeAsk(0).id, { type: "approve" }, auth)).status).toBe(404);
    expect((await answer(server, "not-a-uuid", { type: "approve" }, auth)).status).toBe(404);
    expect((await answer(server, "%E0%A4%A", { type: "approve" }, auth)).status).toBe(404);
    const bare = await createApprovalServer({});
    cleanups.push(() => bare.close());
    const reply = await answer(bare, makeAsk(0).id, { type: "approve" }, { authorization: `Bearer ${bare.token}` });
    expect(reply.status).toBe(404);
    expect(reply.json).toMatchObject({ error: "ask_unknown" });
  });

  it("400 for a body that is not JSON or not an answer; 415 for another content type; the ask stays parked", async () => {
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    for (const body of [
      "{",
      "null",
      "[]",
      JSON.stringify({ type: "maybe" }),
      JSON.stringify({ type: "approve", remember: "forever" }),
      JSON.stringify({ type: "deny", reason: 7 }),
    ]) {
      const reply = await answer(server, ask.id, body, auth);
      expect(reply.status, body).toBe(400);
      expect(reply.json).toMatchObject({ error: "bad_request" });
    }
    const form = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/x-www-form-urlencoded" },
      body: "type=approve",
    });
    expect(form.status).toBe(415);
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect((await answer(server, ask.id, { type: "approve" }, auth)).status).toBe(200);
  });

  it("refuses a body in a coding it does not decode, saying so: 415 for a Content-Encoding, 501 for a transfer coding besides chunked", async () => {
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    const zipped = gzipSync(JSON.stringify({ type: "approve" }));
    const headers = { ...auth, "content-type": "application/json" };
    const encoded = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...headers, "content-encoding": "gzip" },
      body: zipped,
    });
    expect([encoded.status, encoded.json]).toEqual([
      415,
      { error: "unsupported_content_encoding", message: expect.stringMatching(/Content-Encoding gzip/) as unknown },
    ]);
    const transferred = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...headers, "transfer-encoding": "gzip, chunked" },
      chunks: [zipped],
    });
    expect([transferred.status, transferred.json]).toEqual([
      501,
      {
        error: "unsupported_transfer_encoding",
        message: expect.stringMatching(/Transfer-Encoding gzip, chunked/) as unknown,
      },
    ]);
    expect((await outcomeNow(parked)).state).toBe("pending");
    // The codings that change nothing are taken.
    const plain = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...headers, "content-encoding": "identity", "transfer-encoding": "Chunked" },
      chunks: [JSON.stringify({ type: "approve" })],
    });
    expect(plain.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("413 for a body over the limit, declared or streamed, without reading it all", async () => {
    const { server, auth, park } = await start({ maxBodyBytes: 1024 });
    const { ask, parked } = await park();
    const big = JSON.stringify({ type: "deny", reason: "x".repeat(2048) });
    const declared = await answer(server, ask.id, big, auth);
    expect(declared.status).toBe(413);
    expect(declared.json).toMatchObject({ error: "body_too_large" });
    const streamed = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      chunks: [big.slice(0, 600), big.slice(600)],
    });
    expect(streamed.status).toBe(413);
    // A body declared too large is refused before any of it arrives: the client need not send it.
    const socket = connect(server.port, "127.0.0.1");
    socket.on("error", () => undefined);
    let reply = "";
    const replied = new Promise<void>((resolve) =>
      socket.on("data", (chunk: Buffer) => {
        reply += chunk.toString("latin1");
        if (reply.includes("\r\n\r\n")) resolve();
      }),
    );
    socket.write(
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${server.token}\r\n` +
        "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{",
    );
    await replied;
    socket.destroy();
    expect(reply).toMatch(/^HTTP\/1\.1 413 /);
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("an answer carrying its ask, as the console sends it, is taken whatever the ask's size; the allowance is that ask, no more", async () => {
    const { server, auth, park } = await start();
    // A hook that shows a whole patch, or text that takes three bytes a character: over the 16384-byte default.
    for (const prompt of [`Apply this patch?\n${"+ a line of the patch\n".repeat(1200)}`, "確認".repeat(4000)]) {
      const { ask, parked } = await park(makeAsk(1, { prompt }));
      expect(Buffer.byteLength(JSON.stringify({ type: "approve", ask }))).toBeGreaterThan(16_384);
      const tooMuch = await answer(server, ask.id, { type: "deny", reason: "x".repeat(17_000), ask }, auth);
      expect(tooMuch.status).toBe(413);
      expect((await outcomeNow(parked)).state).toBe("pending");
      const reply = await answer(server, ask.id, { type: "approve", ask }, auth);
      expect(reply.status).toBe(200);
      await expect(parked).resolves.toEqual({ type: "approve" });
    }
    // Without an ask of that size waiting under the id, the limit is maxBodyBytes.
    const unknown = await answer(server, makeAsk(2).id, { type: "deny", reason: "x".repeat(17_000) }, auth);
    expect(unknown.status).toBe(413);
  });

  it("an answer carrying a large ask that ended just before it arrived gets 409 ask_ended, not 413", async () => {
    const { server, auth, park } = await start();
    const run = new AbortController();
    const { ask } = await park(makeAsk(1, { prompt: `Apply this patch?\n${"+ a line\n".repeat(3000)}` }), run.signal);
    // The agent's run is cancelled as the person presses Approve: the console's answer carries the ask it shows.
    run.abort();
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 0);
    for (const body of [
      { type: "approve", ask },
      { type: "deny", reason: "x".repeat(17_000), ask },
    ]) {
      const reply = await answer(server, ask.id, body, auth);
      expect(reply.status).toBe(409);
      expect(reply.json).toEqual({
        error: "ask_ended",
        message: "the ask already ended",
        ending: { type: "withdrawn", reason: "unknown" },
      });
    }
    // An ask the server never saw keeps the plain limit.
    const unknown = await answer(
      server,
      makeAsk(2).id,
      { type: "approve", ask: makeAsk(2, { prompt: ask.prompt }) },
      auth,
    );
    expect(unknown.status).toBe(413);
  });

  it("200 concurrent answers racing for one ask: exactly one 200, every other a 409", async () => {
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    const replies = await Promise.all(
      Array.from({ length: 200 }, (_, n) =>
        answer(server, ask.id, n % 2 === 0 ? { type: "approve" } : { type: "deny" }, auth),
      ),
    );
    const statuses = replies.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(199);
    const winner = replies.findIndex((r) => r.status === 200);
    await expect(parked).resolves.toEqual(winner % 2 === 0 ? { type: "approve" } : { type: "deny" });
  });

  it("400 body_not_utf8 for a body that is not valid UTF-8, sent as raw bytes over the socket; nothing is answered", async () => {
    const { server, auth, park } = await start();
    const { ask, parked } = await park();
    const watched = track(parked);
    const bad: [string, Buffer][] = [
      ["a broken two-byte sequence", Buffer.from([0xc3, 0x28])],
      ["a lone 0xFF", Buffer.from([0xff])],
      ["an overlong '/'", Buffer.from([0xc0, 0xaf])],
      ["an overlong three-byte '/'", Buffer.from([0xe0, 0x80, 0xaf])],
      ["a surrogate encoded as UTF-8", Buffer.from([0xed, 0xa0, 0x80])],
      ["a sequence cut short", Buffer.from([0xe2, 0x82])],
    ];
    for (const [label, bytes] of bad) {
      const body = Buffer.concat([Buffer.from('{"type":"deny","reason":"no '), bytes, Buffer.from('"}')]);
      for (const framing of ["length", "chunked"] as const) {
        const reply = await request(`${server.url}api/asks/${ask.id}`, {
          method: "POST",
          headers: { ...auth, "content-type": "application/json" },
          ...(framing === "length" ? { body } : { chunks: [body.subarray(0, 27), body.subarray(27)] }),
        });
        expect([label, framing, reply.status, reply.json]).toEqual([
          label,
          framing,
          400,
          { error: "body_not_utf8", message: "the request body is not valid UTF-8" },
        ]);
        await flush();
        expect(watched.outcome.state, label).toBe("pending");
      }
    }
    // Still pending and answerable: a reason in valid UTF-8 arrives as it was written.
    const reply = await answer(server, ask.id, { type: "deny", reason: "no, café ☕ closed" }, auth);
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "no, café ☕ closed" });
  });
});

describe("the event stream: GET /api/asks/stream", () => {
  it("starts with every pending ask, then sends ask and settled events as they happen, and keeps alive", async () => {
    const { server, auth, park } = await start({ heartbeatMs: 20 });
    const first = await park(makeAsk(1));
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    expect(stream.status).toBe(200);
    expect(stream.headers["content-type"]).toBe("text/event-stream; charset=utf-8");
    const snapshot = await stream.next((e) => e.event === "ask");
    expect((JSON.parse(snapshot.data) as { ask: PendingAsk }).ask).toEqual(first.ask);

    const second = await park(makeAsk(2, { prompt: "line one\nline two" }));
    const arrived = await stream.next((e) => e.event === "ask");
    expect((JSON.parse(arrived.data) as { ask: PendingAsk }).ask).toEqual(second.ask);

    expect((await answer(server, second.ask.id, { type: "approve" }, auth)).status).toBe(200);
    const settled = await stream.next((e) => e.event === "settled");
    expect(JSON.parse(settled.data)).toEqual({ id: second.ask.id, ending: { type: "answered", verdict: "approve" } });

    const heartbeat = await stream.next((e) => e.event === "heartbeat");
    expect(JSON.parse(heartbeat.data)).toEqual({ heartbeatMs: 20 });
  });

  it("begins with a heartbeat event naming the interval, then sends one every heartbeatMs, so a page can tell a silent server", async () => {
    const { server, auth } = await start({ heartbeatMs: 40 });
    const raw: string[] = [];
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    const first = await stream.next();
    expect(first).toEqual({ event: "heartbeat", data: '{"heartbeatMs":40}' });
    const opened = Date.now();
    for (let i = 0; i < 3; i++) raw.push((await stream.next()).event);
    // Three more with nothing else to say: about 120 ms, and none of them a bare comment.
    expect(raw).toEqual(["heartbeat", "heartbeat", "heartbeat"]);
    expect(Date.now() - opened).toBeGreaterThanOrEqual(80);
  });

  it("sends settled for an ask the approver's owner answered or withdrew elsewhere", async () => {
    const { server, auth, park, approver } = await start();
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    const { ask } = await park();
    await stream.next((e) => e.event === "ask");
    approver.resolve(ask.id, { type: "deny" });
    const settled = await stream.next((e) => e.event === "settled");
    expect(JSON.parse(settled.data)).toEqual({ id: ask.id, ending: { type: "answered", verdict: "deny" } });
  });

  it("refuses streams beyond maxStreams with 503", async () => {
    const { server, auth } = await start({ maxStreams: 1 });
    const one = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => one.close());
    expect((await get(server, "api/asks/stream", auth)).status).toBe(503);
  });

  it("a stream whose client left before the handler was reached takes no slot", async () => {
    const app = createServer();
    const { port } = await listen(app);
    const token = "a-token-of-twenty-chars";
    const handler = createApprovalHandler({ allowedHosts: [`127.0.0.1:${port}`], token, maxStreams: 1 });
    let arrived!: () => void;
    let handed!: () => void;
    const received = new Promise<void>((resolve) => (arrived = resolve));
    const reached = new Promise<void>((resolve) => (handed = resolve));
    let requests = 0;
    // Middleware whose own async work (auth, a lookup) ends only after the first client has gone.
    app.on("request", (req, res) => {
      if (requests++ > 0) return handler.handle(req, res);
      res.once("close", () => {
        handler.handle(req, res);
        handed();
      });
      arrived();
    });
    cleanups.push(stopping(app, handler));
    const url = `http://127.0.0.1:${port}/api/asks/stream`;
    const auth = { authorization: `Bearer ${token}` };
    const gone = httpRequest(url, { headers: auth, agent: false });
    gone.on("error", () => undefined);
    gone.end();
    await received;
    gone.destroy();
    await reached;
    const fresh = await openStream(url, auth);
    cleanups.push(() => fresh.close());
    expect(fresh.status).toBe(200);
  });

  it("pipelined stream requests give their slots back when their connection closes", async () => {
    const { server, auth } = await start({ maxStreams: 2 });
    const stream = `${server.url}api/asks/stream`;
    const status = async (): Promise<number> => {
      const reader = await openStream(stream, auth);
      if (reader.status === 200) cleanups.push(() => reader.close());
      else reader.close();
      return reader.status;
    };
    const socket = connect(server.port, "127.0.0.1");
    socket.on("error", () => undefined);
    const answered = new Promise<void>((resolve) => socket.once("data", () => resolve()));
    const head = `GET /api/asks/stream HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${server.token}\r\n\r\n`;
    socket.write(head + head);
    await answered;
    // Both are open: the second waits behind the first, which never ends.
    expect(await status()).toBe(503);
    socket.destroy();
    await until(async () => (await status()) === 200);
    expect(await status()).toBe(200);
  });
});

describe("many requests pipelined on one connection", () => {
  it("a dozen event streams on one connection watch its close without a listener each: no leak warning, and every slot comes back", async () => {
    const { server, auth } = await start({ maxStreams: 12 });
    const warnings: Error[] = [];
    const warned = (warning: Error): void => void warnings.push(warning);
    process.on("warning", warned);
    cleanups.push(() => void process.off("warning", warned));
    const { socket, closed } = rawClient(server.port);
    const answered = new Promise<void>((resolve) => socket.once("data", () => resolve()));
    const head = `GET /api/asks/stream HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${server.token}\r\n\r\n`;
    socket.write(head.repeat(12));
    await answered;
    // Every slot is taken: eleven wait behind the first, which never ends.
    await until(
      async () => (await openStream(`${server.url}api/asks/stream`, auth).then((r) => (r.close(), r.status))) === 503,
    );
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.map((warning) => warning.name)).not.toContain("MaxListenersExceededWarning");
    socket.destroy();
    await closed;
    await until(async () => {
      const reader = await openStream(`${server.url}api/asks/stream`, auth);
      reader.close();
      return reader.status === 200;
    });
  });
});

describe("a reader that stops reading", () => {
  /** A handler on a server of the test's own, so the test can see how much its stream socket holds unsent. */
  async function stalled(streamWriteTimeoutMs: number | undefined): Promise<{
    readonly url: string;
    readonly auth: Readonly<Record<string, string>>;
    readonly socket: Promise<Socket>;
    push(record: unknown): void;
  }> {
    let push: ((record: unknown) => void) | undefined;
    const records = {
      recent: () => Promise.resolve([]),
      subscribe(listener: (record: never) => void) {
        push = listener as (record: unknown) => void;
        return () => undefined;
      },
    };
    const app = createServer();
    const { port } = await listen(app);
    const token = "a-token-of-twenty-chars";
    const handler = createApprovalHandler({
      allowedHosts: [`127.0.0.1:${port}`],
      token,
      maxStreams: 1,
      records,
      heartbeatMs: 3_600_000,
      ...(streamWriteTimeoutMs === undefined ? {} : { streamWriteTimeoutMs }),
    });
    let opened!: (socket: Socket) => void;
    const socket = new Promise<Socket>((resolve) => (opened = resolve));
    app.on("request", (req: IncomingMessage, res: ServerResponse) => {
      opened(req.socket);
      handler.handle(req, res);
    });
    cleanups.push(stopping(app, handler));
    return {
      url: `http://127.0.0.1:${port}/api/asks/stream`,
      auth: { authorization: `Bearer ${token}` },
      socket,
      push: (record) => (push as (record: unknown) => void)(record),
    };
  }

  /** Sends records of 64 KiB until the kernel's buffers are full and the server holds some of them unsent. */
  async function fill(socket: Socket, push: (record: unknown) => void): Promise<void> {
    const padding = "x".repeat(65_536);
    for (let i = 0; i < 2000; i++) {
      push({ padding });
      await new Promise((resolve) => setTimeout(resolve, 2));
      if (socket.writableLength > 0) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        if (socket.writableLength > 0) return;
      }
    }
    throw new Error("the stream never backed up");
  }

  async function statusAfter(url: string, auth: Readonly<Record<string, string>>): Promise<number> {
    const reader = await openStream(url, auth);
    if (reader.status === 200) cleanups.push(() => reader.close());
    else reader.close();
    return reader.status;
  }

  it("loses its stream once what was written has not drained for streamWriteTimeoutMs, and its slot is taken again", async () => {
    const { url, auth, socket, push } = await stalled(150);
    // A raw client that sends its request and never reads a byte of the reply.
    const client = connect(Number(new URL(url).port), "127.0.0.1");
    client.on("error", () => undefined);
    cleanups.push(() => void client.destroy());
    client.pause();
    client.write(
      `GET /api/asks/stream HTTP/1.1\r\nHost: ${new URL(url).host}\r\nAuthorization: ${auth["authorization"]}\r\n\r\n`,
    );
    const held = await socket;
    await fill(held, push);
    // Less than the 1 MiB that cuts off a stream on the next write is waiting: only the deadline frees it.
    expect(held.writableLength).toBeLessThan(1_048_576);
    const stuckAt = Date.now();
    expect(await statusAfter(url, auth)).toBe(503);
    for (let i = 0; i < 200 && !held.destroyed; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(held.destroyed).toBe(true);
    expect(Date.now() - stuckAt).toBeGreaterThanOrEqual(100);
    expect(await statusAfter(url, auth)).toBe(200);
  });

  it("loses its stream once it is behind by over 1 MiB more than its largest write, long before streamWriteTimeoutMs", async () => {
    const { url, auth, socket, push } = await stalled(600_000);
    const client = connect(Number(new URL(url).port), "127.0.0.1");
    client.on("error", () => undefined);
    cleanups.push(() => void client.destroy());
    client.pause();
    client.write(
      `GET /api/asks/stream HTTP/1.1\r\nHost: ${new URL(url).host}\r\nAuthorization: ${auth["authorization"]}\r\n\r\n`,
    );
    const held = await socket;
    const padding = "x".repeat(65_536);
    let most = 0;
    for (let i = 0; i < 4000 && !held.destroyed; i++) {
      most = Math.max(most, held.writableLength);
      push({ padding });
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(held.destroyed).toBe(true);
    // Cut at the first event past the cap: what the server held never grew far past it.
    expect(most).toBeLessThan(1_048_576 + 3 * 65_600);
    expect(await statusAfter(url, auth)).toBe(200);
  });

  it("keeps the stream of a reader still taking a large ask when the next event comes: one event's bytes are not a reader that stopped", async () => {
    const { server, channel, auth } = await start();
    // Larger than the kernel's buffers hold, so that much of it waits in the server's.
    const large = { ...makeAsk(1), prompt: "x".repeat(8_000_000) };
    channel.resolve(large, { signal: new AbortController().signal }).catch(() => undefined);
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 1);
    const reader = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => reader.close());
    // A reader on a slow link: it takes the opening asks for a while, far within streamWriteTimeoutMs.
    reader.pause();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const next = makeAsk(2);
    channel.resolve(next, { signal: new AbortController().signal }).catch(() => undefined);
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 2);
    reader.resume();
    const event = await reader.next((e) => e.event === "ask" && e.data.includes(next.id));
    expect(JSON.parse(event.data)).toMatchObject({ ask: { id: next.id } });
    // Once taken, a second large ask is one event more, not a reason to cut the stream either.
    const again = { ...makeAsk(3), prompt: "y".repeat(8_000_000) };
    channel.resolve(again, { signal: new AbortController().signal }).catch(() => undefined);
    reader.pause();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const last = makeAsk(4);
    channel.resolve(last, { signal: new AbortController().signal }).catch(() => undefined);
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 4);
    reader.resume();
    await reader.next((e) => e.event === "ask" && e.data.includes(last.id));
  });

  it("keeps the stream of a reader that pauses for less than streamWriteTimeoutMs", async () => {
    const { url, auth, socket, push } = await stalled(2_000);
    const reader = await openStream(url, auth);
    cleanups.push(() => reader.close());
    const held = await socket;
    await reader.next((e) => e.event === "heartbeat");
    reader.pause();
    await fill(held, push);
    await new Promise((resolve) => setTimeout(resolve, 300));
    reader.resume();
    push({ last: true });
    const last = await reader.next((e) => e.data === '{"last":true}');
    expect(last.event).toBe("record");
    expect(held.destroyed).toBe(false);
  });
});

describe("slow clients of createApprovalServer", () => {
  /** Writes `text` a byte every 10 ms, then keeps sending one more header byte, until the socket closes. */
  function trickle(socket: Socket, text: string, forever: string): void {
    let i = 0;
    const timer = setInterval(() => {
      if (socket.destroyed) return clearInterval(timer);
      socket.write(i < text.length ? (text[i] as string) : forever);
      i++;
    }, 10);
    cleanups.push(() => clearInterval(timer));
  }

  it("cuts off a client that sends its headers a byte at a time for ever, after headersTimeoutMs", async () => {
    const { server } = await start({ headersTimeoutMs: 200, requestTimeoutMs: 400 });
    const { socket, closed } = rawClient(server.port);
    const began = Date.now();
    trickle(socket, `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nX-Slow: `, "a");
    const received = await closed;
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    expect(Date.now() - began).toBeGreaterThanOrEqual(200);
    expect(Date.now() - began).toBeLessThan(2_000);
  });

  it("cuts off a client that sends its body a byte at a time, after requestTimeoutMs", async () => {
    const { server, park } = await start({ headersTimeoutMs: 100, requestTimeoutMs: 300 });
    const { ask, parked } = await park();
    const { socket, closed } = rawClient(server.port);
    const body = JSON.stringify({ type: "approve" }).padEnd(1_000, " ");
    socket.write(
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
        `Authorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\n\r\n`,
    );
    const began = Date.now();
    trickle(socket, body, "");
    const received = await closed;
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    expect(Date.now() - began).toBeLessThan(2_000);
    // Nothing was answered: the ask waits for a whole answer.
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("closes the connection once it has answered a request whose body, on a route that reads none, is still arriving", async () => {
    const { server, auth } = await start({ headersTimeoutMs: 5_000, requestTimeoutMs: 10_000 });
    const routes: [method: string, path: string, headers: Readonly<Record<string, string>>, status: number][] = [
      ["GET", "/healthz", {}, 200],
      ["HEAD", "/healthz", {}, 200],
      ["GET", "/api/asks", auth, 200],
      ["GET", "/api/grants", auth, 200],
      ["GET", "/api/records", auth, 200],
      ["DELETE", "/api/grants/0123456789abcdef", auth, 404],
    ];
    for (const [method, path, headers, status] of routes) {
      const { socket, closed } = rawClient(server.port);
      const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
      socket.write(
        `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n${lines.join("")}Content-Length: 100000\r\n\r\n`,
      );
      const began = Date.now();
      trickle(socket, "", "a");
      const received = await closed;
      // One reply, its own, then the connection ends: not held, reading the body, until requestTimeoutMs.
      expect([path, received.match(/HTTP\/1\.1 \d{3}/g)]).toEqual([path, [`HTTP/1.1 ${status}`]]);
      expect(received).toMatch(/\r\nconnection: close\r\n/i);
      expect(Date.now() - began).toBeLessThan(3_000);
    }
  });

  it("refuses an event stream whose request carries a body, and closes its connection", async () => {
    const { server } = await start();
    const { socket, closed } = rawClient(server.port);
    socket.write(
      `GET /api/asks/stream HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
        `Authorization: Bearer ${server.token}\r\nContent-Length: 100000\r\n\r\n`,
    );
    trickle(socket, "", "a");
    const received = await closed;
    expect(received).toMatch(/^HTTP\/1\.1 400 /);
    expect(received).toMatch(/\r\nconnection: close\r\n/i);
    expect(received).toContain('"error":"body_not_allowed"');
  });

  it("keeps an event stream open past requestTimeoutMs: its request is whole once its headers are in", async () => {
    const { server, auth } = await start({ headersTimeoutMs: 100, requestTimeoutMs: 150, heartbeatMs: 50 });
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    const began = Date.now();
    while (Date.now() - began < 600) await stream.next((e) => e.event === "heartbeat");
  });

  it("cuts off a client that sends requests and never reads the replies, once they have waited undrained for writeTimeoutMs", async () => {
    const { server, park } = await start({
      headersTimeoutMs: 100,
      requestTimeoutMs: 200,
      keepAliveTimeoutMs: 60_000,
      writeTimeoutMs: 300,
    });
    await park({ ...makeAsk(1), prompt: "x".repeat(1_000_000) });
    const { socket, closed, received } = rawClient(server.port);
    // Pipelined requests, read by Node whole, whose replies fill the kernel's buffers: Node stops
    // reading more, every timeout for reading a request is behind it, and without a bound on the
    // replies the connection is held for ever, one of maxConnections. (Without the token, many
    // more requests for small refusals do the same.)
    socket.pause();
    const sent = 20;
    socket.write(
      `GET /api/asks HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${server.token}\r\n\r\n`.repeat(
        sent,
      ),
    );
    // Ten times writeTimeoutMs: on a busy machine, making twenty 1 MB replies takes a while.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    // A paused socket hears nothing of the close until it reads what came before it.
    socket.resume();
    const outcome = await Promise.race([
      closed.then(() => "closed"),
      new Promise((resolve) => setTimeout(resolve, 5_000)).then(() => "still open"),
    ]);
    expect(outcome).toBe("closed");
    expect(received().match(/HTTP\/1\.1 200 /g)?.length ?? 0).toBeLessThan(sent);
  });

  it("keeps a connection whose reply waits on the approver, or whose stream is quiet, past writeTimeoutMs: nothing waits undrained", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    let catchUp!: () => void;
    const caught = new Promise<void>((resolve) => (catchUp = resolve));
    const inbox: AskInbox = {
      next: (options) => approver.next(options),
      resolve: (id, resolution, options) => approver.resolve(id, resolution, options),
      ended: (id, options) => approver.ended(id, options),
      caughtUp: () => caught,
      close: () => approver.close(),
    };
    const server = await createApprovalServer({ approver: inbox, writeTimeoutMs: 100, heartbeatMs: 60_000 });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const auth = { authorization: `Bearer ${server.token}` };
    const ask = makeAsk(1);
    channel.resolve(ask, { signal: new AbortController().signal }).catch(() => undefined);
    const list = get(server, "api/asks", auth);
    await new Promise((resolve) => setTimeout(resolve, 400));
    catchUp();
    expect((await list).status).toBe(200);
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    await stream.next((e) => e.event === "ask");
    await new Promise((resolve) => setTimeout(resolve, 400));
    const settled = stream.next((e) => e.event === "settled");
    expect((await answer(server, ask.id, { type: "approve" }, auth)).status).toBe(200);
    expect(JSON.parse((await settled).data)).toMatchObject({ id: ask.id });
  });

  it("refuses timeouts that are not positive integers, or headersTimeoutMs over requestTimeoutMs", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    cleanups.push(() => approver.close());
    const cases: [Partial<ApprovalServerOptions>, string][] = [
      [{ headersTimeoutMs: 0 }, "headersTimeoutMs"],
      [{ headersTimeoutMs: Number.NaN }, "headersTimeoutMs"],
      [{ requestTimeoutMs: -1 }, "requestTimeoutMs"],
      [{ requestTimeoutMs: 2_147_483_648 }, "requestTimeoutMs"],
      [{ keepAliveTimeoutMs: 0.5 }, "keepAliveTimeoutMs"],
      [{ keepAliveTimeoutMs: "5s" as never }, "keepAliveTimeoutMs"],
      [{ writeTimeoutMs: 0 }, "writeTimeoutMs"],
      [{ writeTimeoutMs: 2_147_483_648 }, "writeTimeoutMs"],
      [{ headersTimeoutMs: 20_000, requestTimeoutMs: 10_000 }, "headersTimeoutMs"],
      // The default headersTimeoutMs is more than this.
      [{ requestTimeoutMs: 1_000 }, "headersTimeoutMs"],
    ];
    for (const [options, option] of cases) await refusedOption({ approver, ...options }, option);
  });
});

describe("maxConnections: the cap on open connections of createApprovalServer", () => {
  /** Sends a kept-alive `GET /healthz` on `client` and waits for its `count`th reply (or the connection's close). */
  async function probe(client: ReturnType<typeof rawClient>, port: number, count = 1): Promise<void> {
    const replied = new Promise<void>((resolve) => {
      const check = (): void => {
        if ((client.received().match(/\{"ok":true/g) ?? []).length >= count) resolve();
      };
      client.socket.on("data", check);
      client.socket.once("close", () => resolve());
    });
    client.socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
    await replied;
    expect(client.received().match(/HTTP\/1\.1 200 /g)).toHaveLength(count);
  }

  /** A raw connection that has had one kept-alive `GET /healthz` answered: the server holds it open. */
  async function held(port: number): Promise<ReturnType<typeof rawClient>> {
    const client = rawClient(port);
    await probe(client, port);
    return client;
  }

  it("closes every connection over the cap at once, unread, and serves again once held ones close", async () => {
    const { server, auth } = await start({ maxConnections: 3 });
    const kept = [await held(server.port), await held(server.port), await held(server.port)];
    const over = Array.from({ length: 5 }, () => rawClient(server.port));
    for (const client of over) {
      client.socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`);
    }
    // Each is closed by the server without a byte of reply; the held ones stay open.
    expect(await Promise.all(over.map((client) => client.closed))).toEqual(["", "", "", "", ""]);
    expect(kept.map((client) => client.socket.destroyed)).toEqual([false, false, false]);
    await probe(kept[0] as ReturnType<typeof rawClient>, server.port, 2);
    for (const client of kept) client.socket.destroy();
    await Promise.all(kept.map((client) => client.closed));
    // The server counts a connection gone once it sees it close: from then on it serves again.
    for (let tries = 0; ; tries++) {
      const client = rawClient(server.port);
      client.socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nConnection: close\r\n\r\n`);
      if ((await client.closed).startsWith("HTTP/1.1 200 ")) break;
      expect(tries).toBeLessThan(100);
    }
    expect((await get(server, "api/asks", auth)).status).toBe(200);
  });

  it("tells onError that connections were closed over the cap: at once, and a burst in one report, not one a connection", async () => {
    const errors: unknown[] = [];
    const { server } = await start({ maxConnections: 1, onError: (error) => errors.push(error) });
    const kept = await held(server.port);
    // The minute between reports on a clock of the test's own; the sockets run on the real one.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const over = Array.from({ length: 5 }, () => rawClient(server.port));
      expect(await Promise.all(over.map((client) => client.closed))).toEqual(["", "", "", "", ""]);
      const said = (): string[] => errors.map((error) => (error as Error).message);
      const typed = (): void => {
        for (const error of errors) {
          expect(error).toBeInstanceOf(ServerLimitError);
          expect(error).toBeInstanceOf(LoopctlError);
          expect(error).toMatchObject({ code: "SERVER_LIMIT_REACHED", limit: "maxConnections" });
        }
      };
      // Said once, at the first: the other four go into the next report, a minute on.
      expect(said()).toEqual([
        "a connection was closed unread: maxConnections (1) were open; more closed in the next minute are told together then",
      ]);
      vi.advanceTimersByTime(59_999);
      expect(said()).toHaveLength(1);
      vi.advanceTimersByTime(1);
      expect(said().slice(1)).toEqual([
        "4 more connections were closed unread in the last minute: maxConnections (1) were open",
      ]);
      // A quiet minute says nothing; the next drop is said at once again.
      vi.advanceTimersByTime(60_000);
      expect(said()).toHaveLength(2);
      expect(await rawClient(server.port).closed).toBe("");
      expect(said().slice(2)).toEqual([
        "a connection was closed unread: maxConnections (1) were open; more closed in the next minute are told together then",
      ]);
      typed();
    } finally {
      vi.useRealTimers();
    }
    kept.socket.destroy();
    await kept.closed;
  });

  it("allows 1000 connections by default", async () => {
    const { server } = await start();
    const kept = await Promise.all(Array.from({ length: 1000 }, () => held(server.port)));
    const over = rawClient(server.port);
    over.socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n\r\n`);
    expect(await over.closed).toBe("");
    for (const client of kept) client.socket.destroy();
  });

  it("refuses a maxConnections that is not a positive integer, naming it", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    cleanups.push(() => approver.close());
    for (const maxConnections of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, "1000", null]) {
      const error = await refusedOption({ approver, maxConnections: maxConnections as never }, "maxConnections");
      expect((error as Error).message).toMatch(/^approval server option maxConnections: must be a positive integer/);
    }
  });
});

describe("requests Node cannot parse, refused by createApprovalServer", () => {
  /** The status line, headers (lower-cased names) and body of the one reply in `received`. */
  function parseReply(received: string): { status: string; headers: Map<string, string>; json: unknown } {
    const end = received.indexOf("\r\n\r\n");
    expect(end, received).toBeGreaterThan(0);
    const [status = "", ...lines] = received.slice(0, end).split("\r\n");
    const headers = new Map(
      lines.map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]),
    );
    const body = received.slice(end + 4);
    expect(Buffer.byteLength(body)).toBe(Number(headers.get("content-length")));
    return { status, headers, json: JSON.parse(body) as unknown };
  }

  /** A refusal as the server's own: JSON with a code and message, the security headers, and the connection closed. */
  function expectRefusal(received: string, status: number, error: string, message: RegExp): void {
    const reply = parseReply(received);
    expect(reply.status).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
    expect(reply.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(reply.headers.get("connection")).toBe("close");
    expect(reply.headers.get("x-content-type-options")).toBe("nosniff");
    expect(reply.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
    expect(reply.json).toEqual({ error, message: expect.stringMatching(message) as unknown });
  }

  it("answers headers over Node's limit with 431 and a JSON error that names the limit", async () => {
    const { server } = await start();
    const { socket, closed } = rawClient(server.port);
    socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`);
    expectRefusal(await closed, 431, "headers_too_large", /at most 16384 bytes/);
  });

  it("answers an Expect it cannot meet with 417 and a JSON error, with the security headers, and answers nothing", async () => {
    const { server, park } = await start();
    const { ask, parked } = await park();
    const { socket, closed } = rawClient(server.port);
    const body = JSON.stringify({ type: "approve" });
    socket.write(
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
        `Authorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n` +
        `Expect: 200-ok\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    expectRefusal(await closed, 417, "expectation_failed", /only Expect: 100-continue/);
    expect((await outcomeNow(parked)).state).toBe("pending");

    // The one it meets, as before: the body is asked for, then answers.
    const client = rawClient(server.port);
    client.socket.write(
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
        `Authorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n` +
        `Expect: 100-continue\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
    );
    await until(() => Promise.resolve(client.received().startsWith("HTTP/1.1 100 Continue\r\n")));
    client.socket.write(body);
    expect(await client.closed).toMatch(/HTTP\/1\.1 200 OK/);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("answers an Expect it cannot meet on an answer link or the console's page with the 417 page, as their other refusals, and on the API with JSON", async () => {
    const { server, park } = await start({ linkSecret: "l".repeat(32) });
    const { ask, parked } = await park();
    const links = signAnswerLink(ask, { secret: "l".repeat(32), baseUrl: server.url, ttlMs: 60_000 });
    const approve = new URL(links.approve);
    for (const [method, target] of [
      ["GET", `${approve.pathname}${approve.search}`],
      ["POST", `${approve.pathname}${approve.search}`],
      ["GET", "/"],
    ] as const) {
      const { socket, closed } = rawClient(server.port);
      const body = method === "POST" ? "reason=" : "";
      socket.write(
        `${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
          (method === "POST" ? `Content-Type: application/x-www-form-urlencoded\r\n` : "") +
          `Expect: 200-ok\r\nContent-Length: ${body.length}\r\n\r\n`,
      );
      const received = await closed;
      const end = received.indexOf("\r\n\r\n");
      const head = received.slice(0, end).toLowerCase();
      expect(received, target).toMatch(/^HTTP\/1\.1 417 /);
      expect(head).toContain("content-type: text/html; charset=utf-8");
      expect(head).toContain("connection: close");
      expect(head).toContain("x-content-type-options: nosniff");
      expect(head).toMatch(/content-security-policy: [^\r]*style-src 'sha256-/);
      const page = received.slice(end + 4);
      expect(page).toContain("<h1>Expectation not met</h1>");
      expect(page).toContain("the server meets only Expect: 100-continue");
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
    // The API's routes keep their JSON refusal.
    for (const target of ["/api/asks", "/api/grants", "/healthz"]) {
      const { socket, closed } = rawClient(server.port);
      socket.write(
        `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
          `Authorization: Bearer ${server.token}\r\nExpect: 200-ok\r\n\r\n`,
      );
      expectRefusal(await closed, 417, "expectation_failed", /only Expect: 100-continue/);
    }
  });

  it("answers a request that is not HTTP with 400 and a JSON error naming the parser's complaint", async () => {
    const { server } = await start();
    const { socket, closed } = rawClient(server.port);
    socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nX-Bad: a\u0001b\r\n\r\n`);
    expectRefusal(await closed, 400, "bad_request", /not valid HTTP\/1\.1 \(HPE_INVALID_HEADER_TOKEN\)/);
  });

  it("answers an answer whose chunked body breaks off into garbage with 400 JSON, and answers nothing", async () => {
    const { server, park } = await start();
    const { ask, parked } = await park();
    const { socket, closed } = rawClient(server.port);
    socket.write(
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
        `Authorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n` +
        `Transfer-Encoding: chunked\r\n\r\n5\r\n{"typ\r\n`,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket.write("zz\r\nnot a chunk\r\n");
    expectRefusal(await closed, 400, "bad_request", /HPE_INVALID_CHUNK_SIZE/);
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("answers a request whose headers never finish with 408 JSON", async () => {
    const { server } = await start({ headersTimeoutMs: 100, requestTimeoutMs: 200 });
    const { socket, closed } = rawClient(server.port);
    socket.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n`);
    expectRefusal(await closed, 408, "request_timeout", /did not arrive in time/);
  });

  it("a client that hangs up mid-answer, or whose body breaks off into garbage, is no fault to report to onError", async () => {
    const errors: unknown[] = [];
    const { server, park, auth } = await start({ onError: (e) => errors.push(e) });
    const { ask, parked } = await park();
    const head =
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
      `Authorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n`;
    const gone = rawClient(server.port);
    gone.socket.write(`${head}Content-Length: 100\r\n\r\n{"type":`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    gone.socket.destroy();
    const garbled = rawClient(server.port);
    garbled.socket.write(`${head}Transfer-Encoding: chunked\r\n\r\n5\r\n{"typ\r\n`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    garbled.socket.write("zz\r\n");
    await Promise.all([gone.closed, garbled.closed]);
    // The server still serves, and the ask waits for a whole answer.
    expect((await get(server, "api/asks", auth)).status).toBe(200);
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect(errors).toEqual([]);
  });

  it("writes nothing more on a connection whose reply has begun, and goes on serving", async () => {
    const { server, auth } = await start();
    const { socket, closed } = rawClient(server.port);
    // A 413 goes out while the body is on its way; the garbage after it must not add a second reply.
    socket.write(
      `POST /api/asks/x HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
        `Authorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n` +
        `Content-Length: 100000\r\n\r\n`,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket.write("\r\nGARBAGE\r\n\r\n");
    const received = await closed;
    expect(received.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    expect(received).toMatch(/^HTTP\/1\.1 413 /);
    expect((await get(server, "api/asks", auth)).status).toBe(200);
  });
});

describe("Expect: 100-continue: the body is asked for only once every check has passed", () => {
  /** Sends `head` (request line and headers, without the blank line) with `Expect: 100-continue`, holding the body back. */
  function expecting(port: number, head: string, length: number): ReturnType<typeof rawClient> {
    const client = rawClient(port);
    client.socket.write(`${head}\r\nExpect: 100-continue\r\nContent-Length: ${length}\r\n\r\n`);
    return client;
  }

  it("refuses a request it will refuse without asking for its body: Host, token, Origin, method, route, size, type, link", async () => {
    const secret = "link-secret-of-at-least-32-bytes!";
    const { server, park } = await start({ linkSecret: secret, maxBodyBytes: 1_000 });
    const { ask, parked } = await park();
    const host = `Host: 127.0.0.1:${server.port}`;
    const bearer = `Authorization: Bearer ${server.token}`;
    const json = "Content-Type: application/json";
    const signed = new URL(signAnswerLink(ask, { secret, baseUrl: server.url, ttlMs: 60_000 }).approve);
    const forged = `${signed.pathname}${signed.search.replace(/sig=[^&]+/, "sig=AAAA")}`;
    const cases: [head: string, length: number, status: number][] = [
      [`POST /api/asks/${ask.id} HTTP/1.1\r\nHost: evil.example\r\n${bearer}\r\n${json}`, 20, 421],
      [`POST /api/asks/${ask.id} HTTP/1.1\r\n${host}\r\n${json}`, 20, 401],
      [`POST /api/asks/${ask.id} HTTP/1.1\r\n${host}\r\nAuthorization: Bearer wrong-token-000000\r\n${json}`, 20, 401],
      [`POST /api/asks/${ask.id} HTTP/1.1\r\n${host}\r\n${bearer}\r\n${json}\r\nOrigin: http://evil.example`, 20, 403],
      [`PUT /api/asks/${ask.id} HTTP/1.1\r\n${host}\r\n${bearer}\r\n${json}`, 20, 405],
      [`POST /api/nothing-here HTTP/1.1\r\n${host}\r\n${bearer}\r\n${json}`, 20, 404],
      [`POST /api/asks/${ask.id} HTTP/1.1\r\n${host}\r\n${bearer}\r\n${json}`, 100_000, 413],
      [`POST /api/asks/${ask.id} HTTP/1.1\r\n${host}\r\n${bearer}\r\nContent-Type: text/plain`, 20, 415],
      [`POST /api/asks/${ask.id} HTTP/1.1\r\n${host}\r\n${bearer}\r\n${json}\r\nContent-Encoding: br`, 20, 415],
      [`POST ${forged} HTTP/1.1\r\n${host}\r\nContent-Type: application/x-www-form-urlencoded`, 20, 403],
      [`POST ${signed.pathname}${signed.search} HTTP/1.1\r\n${host}\r\nContent-Type: text/plain`, 20, 415],
    ];
    for (const [head, length, status] of cases) {
      const received = await expecting(server.port, head, length).closed;
      // The refusal is the first thing sent, not 100 Continue: the client never uploads the body.
      expect([head, received.slice(0, 12)]).toEqual([head, `HTTP/1.1 ${status}`]);
      expect(received).toMatch(/\r\nconnection: close\r\n/i);
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("asks for the body of a request that passed, then answers; a signed link's answer too", async () => {
    const secret = "link-secret-of-at-least-32-bytes!";
    const { server, park } = await start({ linkSecret: secret });
    const host = `Host: 127.0.0.1:${server.port}`;
    const first = await park(makeAsk(1));
    const body = JSON.stringify({ type: "deny", reason: "not now" });
    const client = expecting(
      server.port,
      `POST /api/asks/${first.ask.id} HTTP/1.1\r\n${host}\r\nAuthorization: Bearer ${server.token}\r\n` +
        "Content-Type: application/json\r\nConnection: close",
      body.length,
    );
    await until(() => client.received() === "HTTP/1.1 100 Continue\r\n\r\n");
    client.socket.write(body);
    expect(await client.closed).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
    await expect(first.parked).resolves.toEqual({ type: "deny", reason: "not now" });

    const second = await park(makeAsk(2));
    const link = new URL(signAnswerLink(second.ask, { secret, baseUrl: server.url, ttlMs: 60_000 }).approve);
    const viaLink = expecting(
      server.port,
      `POST ${link.pathname}${link.search} HTTP/1.1\r\n${host}\r\n` +
        "Content-Type: application/x-www-form-urlencoded\r\nConnection: close",
      0,
    );
    expect(await viaLink.closed).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    await expect(second.parked).resolves.toEqual({ type: "approve" });
  });

  /** `createApprovalHandler` in a server of the test's own, passed `checkContinue` or not, with one ask listed. */
  async function handlerWithAsk(options: { readonly checkContinue: boolean }) {
    const [channel, approver] = ApprovalChannel.pair(4);
    const app = createServer();
    const { port } = await listen(app);
    const handler = createApprovalHandler({ approver, allowedHosts: [`127.0.0.1:${port}`] });
    app.on("request", handler.handle);
    if (options.checkContinue) app.on("checkContinue", handler.handle);
    cleanups.push(() => approver.close(), stopping(app, handler));
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    const auth = { authorization: `Bearer ${handler.token}` };
    await until(
      async () =>
        ((await request(`http://127.0.0.1:${port}/api/asks`, { headers: auth })).json as { asks: unknown[] }).asks
          .length === 1,
    );
    return { port, handler, ask, parked };
  }

  it("does the same for createApprovalHandler in a server that passes it checkContinue", async () => {
    const { port, handler, ask, parked } = await handlerWithAsk({ checkContinue: true });
    const head = `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json`;
    expect((await expecting(port, head, 20).closed).slice(0, 12)).toBe("HTTP/1.1 401");
    const body = JSON.stringify({ type: "approve" });
    const client = expecting(
      port,
      `${head}\r\nAuthorization: Bearer ${handler.token}\r\nConnection: close`,
      body.length,
    );
    await until(() => client.received() === "HTTP/1.1 100 Continue\r\n\r\n");
    client.socket.write(body);
    expect(await client.closed).toMatch(/\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("in a server that leaves checkContinue to Node, sends no second 100 Continue after Node's own", async () => {
    const { port, handler, ask, parked } = await handlerWithAsk({ checkContinue: false });
    const body = JSON.stringify({ type: "approve" });
    const client = expecting(
      port,
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n` +
        `Authorization: Bearer ${handler.token}\r\nConnection: close`,
      body.length,
    );
    await until(() => client.received() === "HTTP/1.1 100 Continue\r\n\r\n");
    client.socket.write(body);
    expect(await client.closed).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });
});

describe("close()", () => {
  it("ends every stream and connection, settles its own work, and leaves the asks parked with their owner", async () => {
    const { server, auth, park, approver } = await start();
    const a = await park(makeAsk(1));
    const b = await park(makeAsk(2));
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    await server.close();
    await stream.ended;
    await server.close();
    await expect(request(`${server.url}healthz`)).rejects.toThrow(/ECONNREFUSED/);
    // The server answered nothing: its asks wait for the approver's owner.
    expect((await outcomeNow(a.parked)).state).toBe("pending");
    expect(approver.pending).toBe(2);
    expect(approver.resolve(a.ask.id, { type: "approve" })).toBe(true);
    await expect(a.parked).resolves.toEqual({ type: "approve" });
    // Closing the approver denies the rest: no ask is left parked.
    approver.close();
    await expect(b.parked).resolves.toMatchObject({ type: "deny" });
    expect(approver.pending).toBe(0);
  });

  it("answers nothing for an answer whose body was still arriving when close() was called: 503", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    cleanups.push(() => approver.close());
    const app = createServer();
    const { port } = await listen(app);
    const token = "a-token-of-twenty-chars";
    const handler = createApprovalHandler({ approver, allowedHosts: [`127.0.0.1:${port}`], token });
    app.on("request", handler.handle);
    cleanups.push(stopping(app, handler));
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    const auth = { authorization: `Bearer ${token}` };
    await until(
      async () =>
        ((await request(`http://127.0.0.1:${port}/api/asks`, { headers: auth })).json as { asks: unknown[] }).asks
          .length === 1,
    );
    const { socket, received } = rawClient(port);
    const body = JSON.stringify({ type: "approve" });
    socket.write(
      `POST /api/asks/${ask.id} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`,
    );
    // The request has reached the handler, which is reading its body.
    await new Promise((resolve) => setTimeout(resolve, 50));
    await handler.close();
    socket.write(body.slice(5));
    await until(() => received().includes("\r\n\r\n{"));
    expect(received()).toMatch(/^HTTP\/1\.1 503 /);
    expect(received()).toContain('"error":"closing"');
    // The ask stays parked with the approver's owner, as close() promises.
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect(approver.pending).toBe(1);
  });

  /** A server over a channel's approver whose resolve waits until the test lets it go on. */
  async function heldAnswers(): Promise<{
    server: ApprovalServer;
    ask: PendingAsk;
    parked: Promise<AskResolution>;
    resolving: () => number;
    release: () => void;
  }> {
    const [channel, approver] = ApprovalChannel.pair(4);
    let resolving = 0;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const inbox: AskInbox = {
      next: (o) => approver.next(o),
      resolve: async (id, resolution, o) => {
        resolving += 1;
        await held;
        return approver.resolve(id, resolution, o);
      },
      ended: (id, o) => approver.ended(id, o),
      close: () => approver.close(),
    };
    const { server, listed } = await serveInbox(inbox, approver);
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    parked.catch(() => undefined);
    await until(async () => (await listed()).length === 1);
    return { server, ask, parked, resolving: () => resolving, release };
  }

  it("lets an answer already passed to the approver finish: it gets its 200, and close() resolves after it", async () => {
    const { server, ask, parked, resolving, release } = await heldAnswers();
    const auth = { authorization: `Bearer ${server.token}` };
    const replying = answer(server, ask.id, { type: "approve" }, auth);
    await until(() => resolving() === 1);
    let released = false;
    const closing = server.close().then(() => released);
    const watched = track(closing);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(watched.settlements).toBe(0);
    // New connections are refused meanwhile.
    await expect(get(server, "api/asks", auth)).rejects.toThrow(/ECONNREFUSED|ECONNRESET/);
    released = true;
    release();
    const reply = await replying;
    expect(reply.status).toBe(200);
    expect(reply.json).toEqual({ delivered: true });
    // Resolved only once the answer had settled and been replied to.
    await expect(closing).resolves.toBe(true);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("takes no ask from the approver once close() is called, though an answer passed to it is still settling", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    let resolving = 0;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const inbox: AskInbox = {
      next: (o) => approver.next(o),
      resolve: async (id, resolution, o) => {
        resolving += 1;
        await held;
        return approver.resolve(id, resolution, o);
      },
      ended: (id, o) => approver.ended(id, o),
      close: () => approver.close(),
    };
    const { server, auth, listed } = await serveInbox(inbox, approver);
    const first = makeAsk(1);
    channel.resolve(first, { signal: new AbortController().signal }).catch(() => undefined);
    await until(async () => (await listed()).length === 1);
    const replying = answer(server, first.id, { type: "approve" }, auth);
    await until(() => resolving === 1);
    const closing = server.close();
    // An ask that comes while the answer settles stays with the approver's owner, to hand to whoever serves it next.
    const later = makeAsk(2);
    const parked = channel.resolve(later, { signal: new AbortController().signal });
    parked.catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 50));
    release();
    expect((await replying).status).toBe(200);
    await closing;
    await expect(approver.next({ signal: AbortSignal.timeout(1_000) })).resolves.toEqual(later);
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("gives an answer the approver has not settled within closeGraceMs 504 answer_unconfirmed, then resolves", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    let resolving = 0;
    const inbox: AskInbox = {
      next: (o) => approver.next(o),
      resolve: () => {
        resolving += 1;
        return new Promise<boolean>(() => undefined);
      },
      ended: (id, o) => approver.ended(id, o),
      close: () => approver.close(),
    };
    const server = await createApprovalServer({ approver: inbox, closeGraceMs: 100 });
    cleanups.push(() => approver.close());
    const auth = { authorization: `Bearer ${server.token}` };
    const ask = makeAsk(1);
    channel.resolve(ask, { signal: new AbortController().signal }).catch(() => undefined);
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 1);
    const replying = answer(server, ask.id, { type: "approve" }, auth);
    await until(() => resolving === 1);
    const started = performance.now();
    await server.close();
    expect(performance.now() - started).toBeGreaterThanOrEqual(90);
    const reply = await replying;
    expect(reply.status).toBe(504);
    expect(reply.json).toEqual({
      error: "answer_unconfirmed",
      message: expect.stringContaining("closed before the approver said") as string,
    });
  });

  it("stops asking the approver for asks: the pump's wait is released", async () => {
    let nextCalls = 0;
    let released = 0;
    const inbox: AskInbox = {
      next: ({ signal } = {}) => {
        nextCalls += 1;
        return new Promise((_, reject) =>
          signal?.addEventListener("abort", () => {
            released += 1;
            reject(signal.reason);
          }),
        );
      },
      resolve: () => false,
      ended: () => Promise.resolve({ type: "withdrawn", reason: "unknown" }),
      close: () => undefined,
    };
    const server = await createApprovalServer({ approver: inbox });
    await until(() => nextCalls === 1);
    await server.close();
    expect(released).toBe(1);
  });

  it("does not wait on an approver that ignores the signal: close() still settles", async () => {
    const never = new Promise<never>(() => undefined);
    let watched = false;
    const deaf: AskInbox = {
      next: () => (watched ? never : Promise.resolve(makeAsk(1))),
      resolve: () => false,
      ended: () => {
        watched = true;
        return never;
      },
      close: () => undefined,
    };
    const server = await createApprovalServer({ approver: deaf });
    await until(
      async () =>
        ((await get(server, "api/asks", { authorization: `Bearer ${server.token}` })).json as { asks: unknown[] }).asks
          .length === 1,
    );
    await server.close();
  });
});

describe("an approver that catches up after the server starts: AskInbox.caughtUp", () => {
  /** An inbox over a channel's approver whose caughtUp() resolves when the test says. */
  function lateInbox(approver: Approver): { inbox: AskInbox; catchUp: () => void } {
    let catchUp!: () => void;
    const caught = new Promise<void>((resolve) => (catchUp = resolve));
    return {
      inbox: {
        next: (options) => approver.next(options),
        resolve: (id, resolution, options) => approver.resolve(id, resolution, options),
        ended: (id, options) => approver.ended(id, options),
        caughtUp: () => caught,
        close: () => approver.close(),
      },
      catchUp,
    };
  }

  it("answers GET /api/asks and opens the event stream only once the approver has caught up", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const { inbox, catchUp } = lateInbox(approver);
    const { server, auth } = await serveInbox(inbox, approver);
    const ask = makeAsk(1);
    channel.resolve(ask, { signal: new AbortController().signal }).catch(() => undefined);
    const list = get(server, "api/asks", auth);
    const stream = openStream(`${server.url}api/asks/stream`, auth);
    const listed = track(list);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(listed.settlements).toBe(0);
    catchUp();
    const reply = await list;
    expect(reply.status).toBe(200);
    expect((reply.json as { asks: { ask: PendingAsk }[] }).asks.map((v) => v.ask.id)).toEqual([ask.id]);
    const opened = await stream;
    expect(JSON.parse((await opened.next((e) => e.event === "ask")).data)).toMatchObject({ ask: { id: ask.id } });
    opened.close();
  });

  it("gives 503 inbox_catching_up when the approver has not caught up within catchUpTimeoutMs", async () => {
    const [, approver] = ApprovalChannel.pair(4);
    const { inbox } = lateInbox(approver);
    const server = await createApprovalServer({ approver: inbox, catchUpTimeoutMs: 100 });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const auth = { authorization: `Bearer ${server.token}` };
    for (const reply of [
      await get(server, "api/asks", auth),
      await get(server, "api/asks/stream", auth),
      await answer(server, makeAsk(1).id, { type: "approve" }, auth),
    ]) {
      expect(reply.status).toBe(503);
      expect(reply.headers["retry-after"]).toBe("1");
      expect(reply.json).toEqual({
        error: "inbox_catching_up",
        message: expect.stringContaining("has not yet handed out the asks already pending") as string,
      });
    }
  });

  it("says catching_up on /healthz (503) until the approver has caught up, then ok", async () => {
    const [, approver] = ApprovalChannel.pair(4);
    const { inbox, catchUp } = lateInbox(approver);
    const { server } = await serveInbox(inbox, approver);
    const waiting = await get(server, "healthz");
    expect(waiting.status).toBe(503);
    expect(waiting.json).toEqual({ ok: false, inbox: "catching_up" });
    catchUp();
    await until(async () => (await get(server, "healthz")).status === 200);
    expect((await get(server, "healthz")).json).toEqual({ ok: true, inbox: "ok" });
  });

  it("refuses an approver whose caughtUp is not a method", async () => {
    const [, approver] = ApprovalChannel.pair(4);
    cleanups.push(() => approver.close());
    const inbox = { ...lateInbox(approver).inbox, caughtUp: true } as unknown as AskInbox;
    await expect(createApprovalServer({ approver: inbox })).rejects.toMatchObject({
      code: "SERVER_CONFIG_INVALID",
      option: "approver",
    });
  });
});

describe("any approver with the AskInbox shape", () => {
  /** An inbox whose resolve is async, as a database-backed queue's is. */
  function asyncInbox(approver: Approver): AskInbox {
    return {
      next: (options) => approver.next(options),
      resolve: async (id, resolution) => {
        await new Promise((r) => setImmediate(r));
        return approver.resolve(id, resolution);
      },
      ended: (id, options): Promise<AskEnding> => approver.ended(id, options),
      close: () => approver.close(),
    };
  }

  it("serves an inbox whose resolve returns Promise<boolean>: 200 once, then 409", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = await createApprovalServer({ approver: asyncInbox(approver) });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const auth = { authorization: `Bearer ${server.token}` };
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 1);
    const replies = await Promise.all([1, 2, 3].map(() => answer(server, ask.id, { type: "approve" }, auth)));
    expect(replies.map((r) => r.status).sort()).toEqual([200, 409, 409]);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("an answer carrying its ask answers nothing the server does not hold: not another call under that id that the inbox has not handed out yet", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    // A queue that hands asks out late, as one read from a database does: the new call sits in the inbox first.
    let hold: Promise<void> | undefined;
    let handedOut = 0;
    const late: AskInbox = {
      ...asyncInbox(approver),
      next: async (options) => {
        const ask = await approver.next(options);
        handedOut += 1;
        await hold;
        return ask;
      },
    };
    const { server, auth, listed } = await serveInbox(late, approver);
    // Ids from a seeded generator repeat across runs: the same id, another call.
    const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    const stop = new AbortController();
    const first = channel.resolve(shown, { signal: stop.signal });
    first.catch(() => undefined);
    await until(async () => (await listed()).length === 1);
    stop.abort(new Error("run ended"));
    await until(async () => (await listed()).length === 0);
    // A channel refuses an id among its last endings: past them, the id parks again.
    await outliveEndings(channel);
    await until(async () => (await listed()).length === 0);
    const before = handedOut;

    let release!: () => void;
    hold = new Promise<void>((resolve) => (release = resolve));
    const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = channel.resolve(now, { signal: new AbortController().signal });
    await until(() => handedOut === before + 1);
    const refused = await answer(server, shown.id, { type: "approve", ask: shown }, auth);
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({ error: "ask_ended", ending: { type: "withdrawn" } });
    expect((await outcomeNow(second)).state).toBe("pending");

    release();
    await until(async () => (await listed()).length === 1);
    expect((await answer(server, now.id, { type: "deny", ask: now }, auth)).status).toBe(200);
    await expect(second).resolves.toEqual({ type: "deny" });
  });

  it("an answer whose inbox replies late settles only the ask it answered, not another call that took the id meanwhile", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    let reply: Promise<void> = Promise.resolve();
    // A remote queue: the answer lands at once, its reply comes back later.
    const slow: AskInbox = {
      ...asyncInbox(approver),
      resolve: async (id, resolution) => {
        const delivered = approver.resolve(id, resolution);
        await reply;
        return delivered;
      },
    };
    const { server, auth, listed } = await serveInbox(slow, approver);
    const first = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    const parked = channel.resolve(first, { signal: new AbortController().signal });
    await until(async () => (await listed()).length === 1);

    let send!: () => void;
    reply = new Promise<void>((resolve) => (send = resolve));
    const answered = answer(server, first.id, { type: "approve", ask: first }, auth);
    await expect(parked).resolves.toEqual({ type: "approve" });
    // A channel refuses an id among its last endings: past them, the id parks again.
    await outliveEndings(channel);
    // Ids from a seeded generator repeat across runs: the same id, another call, handed out before the reply.
    const next = { ...first, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = channel.resolve(next, { signal: new AbortController().signal });
    await until(async () => (await listed())[0]?.tool === "delete_file");
    send();
    expect((await answered).status).toBe(200);

    // The second call still waits, and the console still shows it.
    expect(await listed()).toEqual([next]);
    expect((await outcomeNow(second)).state).toBe("pending");
    expect((await answer(server, next.id, { type: "deny", ask: next }, auth)).status).toBe(200);
    await expect(second).resolves.toEqual({ type: "deny" });
  });

  it("a call handed out under an id the board still shows for an earlier call replaces it, so an answer made for the earlier one answers nothing", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    let heard: Promise<void> = Promise.resolve();
    // A remote inbox that learns of the first call's ending late (it polls), and hands out new calls at once.
    const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    const lagging: AskInbox = {
      ...asyncInbox(approver),
      ended: async (id, options) => {
        const ending = await approver.ended(id, options);
        if (id === shown.id) await heard;
        return ending;
      },
    };
    const { server, auth, listed } = await serveInbox(lagging, approver);
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    let hear!: () => void;
    heard = new Promise<void>((resolve) => (hear = resolve));
    // The same id, another call, before the inbox heard the first end.
    const { now, second } = await endThenReuse(channel, shown, listed);
    await until(async () => (await listed())[0]?.tool === "delete_file");

    const refused = await answer(server, shown.id, { type: "approve", ask: shown }, auth);
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({ error: "ask_changed", ask: { ask: now } });
    expect((await outcomeNow(second)).state).toBe("pending");
    // The stream said the first ended, then showed the second.
    expect((await stream.next((e) => e.event === "settled" && e.data.includes(shown.id))).data).toBe(
      JSON.stringify({ id: shown.id, ending: { type: "withdrawn", reason: "unknown" } }),
    );
    expect(
      (
        JSON.parse((await stream.next((e) => e.event === "ask" && e.data.includes("delete_file"))).data) as {
          ask: PendingAsk;
        }
      ).ask,
    ).toEqual(now);

    // The first call's late ending takes nothing off the board.
    hear();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await listed()).toEqual([now]);
    expect((await answer(server, now.id, { type: "deny", ask: now }, auth)).status).toBe(200);
    await expect(second).resolves.toEqual({ type: "deny" });
  });

  it("an inbox that heard of neither the ending nor the new call under the id is passed the ask's digest, and the channel's approver refuses an answer made for the ended call (409)", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    // A remote inbox that learns of endings late and hands the next call out late (it polls), and
    // passes the server's answer on as it came, options and all.
    let heard: Promise<void> = new Promise(() => undefined);
    let handOut!: () => void;
    const handedOut = new Promise<void>((resolve) => (handOut = resolve));
    const given: unknown[] = [];
    const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    const lagging: AskInbox = {
      next: async (options) => {
        const ask = await approver.next(options);
        if (ask?.tool === "delete_file") await handedOut;
        return ask;
      },
      resolve: (id, resolution, options) => {
        given.push(options);
        return approver.resolve(id, resolution, options);
      },
      ended: async (id, options) => {
        const ending = await approver.ended(id, options);
        if (id === shown.id) await heard;
        return ending;
      },
      close: () => approver.close(),
    };
    const { server, auth, listed } = await serveInbox(lagging, approver);
    // The same id, another call, not yet handed out.
    const { now, second } = await endThenReuse(channel, shown, listed);
    expect(await listed()).toEqual([shown]);

    const refused = await answer(server, shown.id, { type: "approve", ask: shown }, auth);
    expect(given).toEqual([{ askDigest: askDigest(shown) }]);
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({ error: "ask_ended" });
    expect((await outcomeNow(second)).state).toBe("pending");

    // Once the inbox hands the new call out, an answer made for it reaches it.
    heard = Promise.resolve();
    handOut();
    await until(async () => (await listed())[0]?.tool === "delete_file");
    expect((await answer(server, now.id, { type: "deny", ask: now }, auth)).status).toBe(200);
    expect(given.at(-1)).toEqual({ askDigest: askDigest(now) });
    await expect(second).resolves.toEqual({ type: "deny" });
  });

  it("an answer that names no ask passes no digest: an inbox that takes two arguments is served as before", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const given: unknown[][] = [];
    const inbox: AskInbox = {
      ...asyncInbox(approver),
      resolve: (...args: unknown[]) => {
        given.push(args.slice(2));
        return approver.resolve(args[0] as string, args[1] as AskResolution);
      },
    };
    const { server, auth, listed } = await serveInbox(inbox, approver);
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    await until(async () => (await listed()).length === 1);
    expect((await answer(server, ask.id, { type: "approve" }, auth)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
    expect(given).toEqual([[]]);
  });

  it("504 answer_unconfirmed once answerTimeoutMs passes with the approver's resolve unsettled; the request ends", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const stuck: AskInbox = { ...asyncInbox(approver), resolve: () => new Promise<boolean>(() => undefined) };
    const server = await createApprovalServer({ approver: stuck, answerTimeoutMs: 200 });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const auth = { authorization: `Bearer ${server.token}` };
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    parked.catch(() => undefined);
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 1);
    const reply = await answer(server, ask.id, { type: "approve" }, auth);
    expect(reply.status).toBe(504);
    expect(reply.json).toEqual({ error: "answer_unconfirmed", message: expect.any(String) as string });
    expect((await outcomeNow(parked)).state).toBe("pending");
    await refusedOption({ answerTimeoutMs: 0 }, "answerTimeoutMs");
  });

  it("an answer whose client went while the approver's resolve hangs does not keep the process alive once the server closed", async () => {
    // answerTimeoutMs is 10 minutes there: a timer for it would hold the process that long.
    const child = startChild("test/support/server-hung-answer.ts", []);
    await child.waitForLine((line) => line === "closed");
    let timer: NodeJS.Timeout | undefined;
    const exit = await Promise.race([
      child.exited,
      new Promise<"still running">((resolve) => (timer = setTimeout(() => resolve("still running"), 5_000))),
    ]);
    clearTimeout(timer);
    if (exit === "still running") child.kill("SIGKILL");
    expect(exit).toMatchObject({ code: 0 });
  });

  it("503 without details when the approver fails to take an answer, and reports the error to onError", async () => {
    const errors: unknown[] = [];
    const [channel, approver] = ApprovalChannel.pair(4);
    const failing: AskInbox = {
      ...asyncInbox(approver),
      resolve: () => Promise.reject(new Error("connection to db at 10.0.0.5 lost")),
    };
    const server = await createApprovalServer({ approver: failing, onError: (e) => errors.push(e) });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const auth = { authorization: `Bearer ${server.token}` };
    const ask = makeAsk(1);
    void channel.resolve(ask, { signal: new AbortController().signal }).catch(() => undefined);
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 1);
    const reply = await answer(server, ask.id, { type: "approve" }, auth);
    expect(reply.status).toBe(503);
    expect(reply.json).toEqual({ error: "approver_unavailable", message: expect.any(String) as string });
    expect(reply.text).not.toContain("10.0.0.5");
    expect(reply.text).not.toMatch(/at .*\.ts:\d+/);
    expect(errors.map(String)).toEqual(["Error: connection to db at 10.0.0.5 lost"]);
  });

  /**
   * An inbox of someone's own: it hands out one ask per ending given, and its
   * `ended()` for each resolves with that value (an ending or not) once
   * `release` is called; `resolve` records what it is asked and delivers nothing.
   */
  function endingInbox(endings: readonly unknown[]): {
    inbox: AskInbox;
    asks: PendingAsk[];
    resolved: string[];
    release: () => void;
  } {
    const asks = endings.map((_, i) => makeAsk(i + 1));
    const resolved: string[] = [];
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const queue = [...asks];
    const never = new Promise<never>(() => undefined);
    const inbox: AskInbox = {
      next: () => {
        const ask = queue.shift();
        return ask === undefined ? never : Promise.resolve(ask);
      },
      resolve: (id) => {
        resolved.push(id);
        return false;
      },
      ended: async (id) => {
        await released;
        return endings[asks.findIndex((ask) => ask.id === id)] as AskEnding;
      },
      close: () => undefined,
    };
    return { inbox, asks, resolved, release };
  }

  it("reports something handed out that is not a PendingAsk in one line naming the field at fault, and skips it", async () => {
    const good = makeAsk(2);
    const queue: unknown[] = [{ ...makeAsk(1), turn: -1 }, good];
    const never = new Promise<never>(() => undefined);
    const inbox: AskInbox = {
      next: () => (queue.length === 0 ? never : Promise.resolve(queue.shift() as PendingAsk)),
      resolve: () => false,
      ended: () => never,
      close: () => undefined,
    };
    const errors: unknown[] = [];
    const server = await createApprovalServer({ approver: inbox, onError: (e) => errors.push(e) });
    cleanups.push(() => server.close());
    const auth = { authorization: `Bearer ${server.token}` };
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 1);
    expect(errors.map(String)).toEqual([
      "ServerConfigError: approval server option approver: next() handed out something that is not a PendingAsk: " +
        "turn: Too small: expected number to be >=0",
    ]);
    expect(errors[0]).toBeInstanceOf(ServerConfigError);
    expect(errors[0]).toMatchObject({ code: "SERVER_CONFIG_INVALID", option: "approver" });
  });

  it("reports something handed out that cannot be read (a getter that throws, a proxy), skips it, and goes on taking asks", async () => {
    const good = makeAsk(3);
    const thrown = new Error("getter at /srv/inbox.ts:12");
    const throwing = {
      ...makeAsk(1),
      get prompt(): string {
        throw thrown;
      },
    };
    // Not thenable (a value whose `then` throws is a next() that rejects): its other fields throw.
    const hostile = new Proxy(makeAsk(2), {
      get: (target, key) => {
        if (key === "then") return undefined;
        throw thrown;
      },
    });
    const queue: unknown[] = [throwing, hostile, good];
    const never = new Promise<never>(() => undefined);
    const inbox: AskInbox = {
      next: () => (queue.length === 0 ? never : Promise.resolve(queue.shift() as PendingAsk)),
      resolve: () => false,
      ended: () => never,
      close: () => undefined,
    };
    const errors: unknown[] = [];
    const server = await createApprovalServer({ approver: inbox, onError: (e) => errors.push(e) });
    cleanups.push(() => server.close());
    const auth = { authorization: `Bearer ${server.token}` };
    await until(async () => ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length === 1);
    expect(((await get(server, "api/asks", auth)).json as { asks: { ask: PendingAsk }[] }).asks[0]?.ask).toEqual(good);
    expect(errors).toHaveLength(2);
    for (const error of errors) {
      expect(error).toBeInstanceOf(ServerConfigError);
      expect(String(error)).toBe(
        "ServerConfigError: approval server option approver: next() handed out something that cannot be read",
      );
      expect((error as Error).cause).toBe(thrown);
    }
  });

  it("shows an ending it cannot read as ended for a reason not known, on the stream and in the API, and reports it", async () => {
    const throwing = {
      type: "answered",
      get verdict(): string {
        throw new Error("getter at /srv/inbox.ts:12");
      },
    };
    const hostile = new Proxy(
      {},
      {
        ownKeys: () => {
          throw new Error("trap");
        },
        get: () => "answered",
      },
    );
    const junk: [string, unknown][] = [
      ["a string", "answered"],
      ["null", null],
      ["undefined", undefined],
      ["an array", [{ type: "answered", verdict: "approve" }]],
      ["extra fields", { type: "answered", verdict: "approve", note: "<img src=x onerror=alert(1)>" }],
      ["an unknown type", { type: "approved" }],
      ["an unknown verdict", { type: "answered", verdict: "maybe" }],
      ["an unknown reason", { type: "withdrawn", reason: "<script>" }],
      ["a throwing getter", throwing],
      ["a proxy that throws", hostile],
    ];
    const readable: AskEnding = { type: "answered", verdict: "deny" };
    const { inbox, asks, resolved, release } = endingInbox([...junk.map(([, value]) => value), readable]);
    const errors: unknown[] = [];
    const server = await createApprovalServer({ approver: inbox, onError: (e) => errors.push(e) });
    cleanups.push(() => server.close());
    const auth = { authorization: `Bearer ${server.token}` };
    const listed = async (): Promise<number> =>
      ((await get(server, "api/asks", auth)).json as { asks: unknown[] }).asks.length;
    await until(async () => (await listed()) === asks.length);
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    release();

    const settled = new Map<string, unknown>();
    for (let i = 0; i < asks.length; i++) {
      const event = JSON.parse((await stream.next((e) => e.event === "settled")).data) as {
        id: string;
        ending: unknown;
      };
      settled.set(event.id, event.ending);
    }
    const unknown = { type: "withdrawn", reason: "unknown" };
    for (const [i, [label]] of junk.entries()) {
      const ask = asks[i] as PendingAsk;
      expect(settled.get(ask.id), label).toEqual(unknown);
      const late = await answer(server, ask.id, { type: "approve", ask }, auth);
      expect(late.status, label).toBe(409);
      expect(late.json, label).toEqual({ error: "ask_ended", message: "the ask already ended", ending: unknown });
    }
    const last = asks[junk.length] as PendingAsk;
    expect(settled.get(last.id)).toEqual(readable);
    expect((await answer(server, last.id, { type: "approve", ask: last }, auth)).json).toMatchObject({
      ending: readable,
    });
    expect(await listed()).toBe(0);
    // Nothing was answered on the inbox's behalf.
    expect(resolved).toEqual([]);

    expect(errors).toHaveLength(junk.length);
    for (const [i, [label]] of junk.entries()) {
      const error = errors.find((e) => String(e).includes((asks[i] as PendingAsk).id));
      expect(String(error), label).toMatch(
        /^ServerConfigError: approval server option approver: ended\("[0-9a-f-]{36}"\) gave something that is not an AskEnding/,
      );
      expect(error, label).toMatchObject({ code: "SERVER_CONFIG_INVALID", option: "approver" });
    }
    const fromGetter = errors.find((e) => String(e).includes(asks[8]?.id ?? "?")) as Error;
    expect(String(fromGetter.cause)).toBe("Error: getter at /srv/inbox.ts:12");
    expect(String(errors.find((e) => String(e).includes(asks[4]?.id ?? "?")))).toContain('Unrecognized key: "note"');
  });

  it("keeps an ask whose ended() rejects on the board, reports the error, and retries; the rejection reaches no client", async () => {
    const ask = makeAsk(1);
    let calls = 0;
    const never = new Promise<never>(() => undefined);
    let handedOut = false;
    const inbox: AskInbox = {
      next: () => {
        if (handedOut) return never;
        handedOut = true;
        return Promise.resolve(ask);
      },
      resolve: () => false,
      ended: () => {
        calls += 1;
        return calls === 1
          ? Promise.reject(new Error("connection to db at 10.0.0.5 lost"))
          : Promise.resolve({ type: "answered", verdict: "approve", by: "10.0.0.5" } as AskEnding);
      },
      close: () => undefined,
    };
    const errors: unknown[] = [];
    const server = await createApprovalServer({ approver: inbox, onError: (e) => errors.push(e) });
    cleanups.push(() => server.close());
    const auth = { authorization: `Bearer ${server.token}` };
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());
    await until(() => calls === 1);
    await until(() => errors.length === 1);
    const listedNow = await get(server, "api/asks", auth);
    expect((listedNow.json as { asks: { ask: PendingAsk }[] }).asks.map((v) => v.ask)).toEqual([ask]);
    expect(String(errors[0])).toBe("Error: connection to db at 10.0.0.5 lost");

    // The retry reads an ending with a field too many: ended, how is not known.
    const settled = await stream.next((e) => e.event === "settled");
    expect(calls).toBe(2);
    expect(settled.data).not.toContain("10.0.0.5");
    expect(JSON.parse(settled.data)).toEqual({ id: ask.id, ending: { type: "withdrawn", reason: "unknown" } });
    expect(errors).toHaveLength(2);
  });

  it("reports a failing next() on /healthz (503) and keeps retrying", async () => {
    let calls = 0;
    let retried!: () => void;
    const retry = new Promise<void>((resolve) => (retried = resolve));
    const inbox: AskInbox = {
      next: () => {
        calls += 1;
        if (calls === 2) retried();
        return Promise.reject(new Error("queue down"));
      },
      resolve: () => false,
      ended: () => Promise.resolve({ type: "withdrawn", reason: "unknown" }),
      close: () => undefined,
    };
    const server = await createApprovalServer({ approver: inbox });
    cleanups.push(() => server.close());
    await until(() => calls >= 1);
    const reply = await get(server, "healthz");
    expect(reply.status).toBe(503);
    expect(reply.json).toEqual({ ok: false, inbox: "failing" });
    await retry;
  });

  it("says the inbox closed on /healthz once next() returns undefined", async () => {
    const { server, approver } = await start();
    approver.close();
    await until(async () => (await get(server, "healthz")).status === 503);
    expect((await get(server, "healthz")).json).toEqual({ ok: false, inbox: "closed" });
  });
});

describe("grants: GET /api/grants, DELETE /api/grants/:id", () => {
  const deploy = { name: "deploy", description: "Deploy the site", inputSchema: { type: "object" } };
  const changed = { ...deploy, description: "Deploy the site, and also wipe the database" };

  async function withGrants(
    grants: GrantStore,
    describeTool?: (name: string) => typeof deploy | undefined,
  ): Promise<Started> {
    return start({ grants, ...(describeTool === undefined ? {} : { describeTool }) });
  }

  it("lists grants with their pin checked against the tool's current descriptor", async () => {
    const store = new MemoryGrantStore();
    const pinned = await store.save(
      new Grant("deploy", "allow", GrantScope.thisTool())
        .withPinnedDescriptor(descriptorFingerprint(deploy))
        .withCreatedAtMs(5),
    );
    const call = await store.save(new Grant("deploy", "deny", GrantScope.thisCall({ env: "production" })));
    const other = await store.save(
      new Grant("read", "allow", GrantScope.thisTool()).withPinnedDescriptor(descriptorFingerprint(deploy)),
    );
    let current = deploy;
    const { server, auth } = await withGrants(store, (name) => (name === "deploy" ? current : undefined));
    const list = async (): Promise<{ id: string; pin: unknown; scope: string; args: unknown; verdict: string }[]> =>
      ((await get(server, "api/grants", auth)).json as { available: boolean; grants: never[] }).grants;
    const byId = (grants: { id: string }[], id: string): unknown => grants.find((g) => g.id === id);
    let grants = await list();
    expect(byId(grants, pinned.id)).toMatchObject({
      verdict: "allow",
      scope: "this_tool",
      args: null,
      pin: { type: "match", kind: "fingerprint" },
      createdAtMs: 5,
    });
    expect(byId(grants, call.id)).toMatchObject({
      verdict: "deny",
      scope: "this_call",
      args: { env: "production" },
      pin: { type: "unpinned" },
    });
    expect(byId(grants, other.id)).toMatchObject({ pin: { type: "unchecked" } });
    current = changed;
    grants = await list();
    expect(byId(grants, pinned.id)).toMatchObject({ pin: { type: "mismatch", kind: "fingerprint" } });
  });

  it("a tool whose descriptor cannot be checked (a describeTool that throws, or gives a schema with no JSON form) shows its grants unchecked; the list still loads, onError is told", async () => {
    const store = new MemoryGrantStore();
    const pin = descriptorFingerprint(deploy);
    const good = await store.save(new Grant("deploy", "allow", GrantScope.thisTool()).withPinnedDescriptor(pin));
    const odd = await store.save(new Grant("search", "allow", GrantScope.thisTool()).withPinnedDescriptor(pin));
    const broken = await store.save(new Grant("upload", "allow", GrantScope.thisTool()).withPinnedDescriptor(pin));
    const unpinned = await store.save(new Grant("upload", "deny", GrantScope.thisCall({ path: "/" })));
    const errors: unknown[] = [];
    const { server, auth } = await start({
      grants: store,
      onError: (e) => errors.push(e),
      describeTool: (name) => {
        if (name === "deploy") return deploy;
        // A schema object of a validation library, not JSON Schema: it has no canonical JSON form.
        if (name === "search") return { ...deploy, name, inputSchema: { size: 10n } };
        throw new Error("tool registry unavailable");
      },
    });
    const reply = await get(server, "api/grants", auth);
    expect(reply.status).toBe(200);
    const grants = (reply.json as { grants: { id: string; pin: unknown }[] }).grants;
    const pinOf = (id: string): unknown => grants.find((g) => g.id === id)?.pin;
    expect(pinOf(good.id)).toEqual({ type: "match", kind: "fingerprint" });
    expect(pinOf(odd.id)).toEqual({ type: "unchecked" });
    expect(pinOf(broken.id)).toEqual({ type: "unchecked" });
    expect(pinOf(unpinned.id)).toEqual({ type: "unpinned" });
    expect(errors).toHaveLength(2);
  });

  it("checks each tool's pin once a listing, not once a grant: thousands of grants of one tool ask describeTool once", async () => {
    const store = new MemoryGrantStore();
    const pin = descriptorFingerprint(deploy);
    for (let n = 0; n < 2_000; n++) {
      await store.save(new Grant("deploy", "allow", GrantScope.thisCall({ n })).withPinnedDescriptor(pin));
    }
    await store.save(new Grant("read", "allow", GrantScope.thisTool()).withPinnedDescriptor(pin));
    const asked: string[] = [];
    let current = deploy;
    const { server, auth } = await withGrants(store, (name) => {
      asked.push(name);
      return name === "deploy" ? current : undefined;
    });
    const list = async (): Promise<{ tool: string; pin: unknown }[]> =>
      ((await get(server, "api/grants", auth)).json as { grants: { tool: string; pin: unknown }[] }).grants;
    let grants = await list();
    expect(asked.sort()).toEqual(["deploy", "read"]);
    expect(grants.filter((g) => g.tool === "deploy").every((g) => (g.pin as { type: string }).type === "match")).toBe(
      true,
    );
    // Each listing asks again: the tool may have changed since.
    current = changed;
    grants = await list();
    expect(asked).toHaveLength(4);
    expect(
      grants.filter((g) => g.tool === "deploy").every((g) => (g.pin as { type: string }).type === "mismatch"),
    ).toBe(true);
  });

  it("revokes by id: 200 with the grant, then 404; 404 for a malformed id; the store really lost it", async () => {
    const store = new MemoryGrantStore();
    const grant = await store.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    const { server, auth } = await withGrants(store);
    const del = (id: string): Promise<Reply> =>
      request(`${server.url}api/grants/${id}`, { method: "DELETE", headers: auth });
    const first = await del(grant.id);
    expect(first.status).toBe(200);
    expect(first.json).toMatchObject({ revoked: { id: grant.id, tool: "deploy" } });
    expect(await store.load()).toEqual([]);
    expect((await del(grant.id)).status).toBe(404);
    expect((await del("../../etc")).status).toBe(404);
    expect((await del("ZZZZ")).status).toBe(404);
  });

  it("says when there is no grant store", async () => {
    const { server, auth } = await start();
    expect((await get(server, "api/grants", auth)).json).toEqual({ available: false, grants: [] });
    expect(
      (await request(`${server.url}api/grants/0123456789abcdef`, { method: "DELETE", headers: auth })).status,
    ).toBe(404);
  });

  it("503 naming only the error code when the store fails; no path, message or stack reaches the client", async () => {
    const errors: unknown[] = [];
    const broken: GrantStore = {
      load: () =>
        Promise.reject(
          Object.assign(new Error("ledger /home/alice/.local/state/x corrupt"), { code: "LEDGER_CORRUPT" }),
        ),
      save: (g) => Promise.resolve(g),
      revoke: () => Promise.reject(new TypeError("boom")),
      clear: () => Promise.resolve(0),
    };
    const { server, auth } = await start({ grants: broken, onError: (e) => errors.push(e) });
    const listed = await get(server, "api/grants", auth);
    expect(listed.status).toBe(503);
    expect(listed.json).toEqual({ error: "grants_unavailable", message: "the grant store failed (LEDGER_CORRUPT)" });
    const revoked = await request(`${server.url}api/grants/0123456789abcdef`, { method: "DELETE", headers: auth });
    expect(revoked.status).toBe(503);
    expect(revoked.text).not.toContain("boom");
    expect(errors).toHaveLength(2);
  });

  it("names no code that is not an identifier: a store's code holding text, a path or a secret does not reach the client", async () => {
    const errors: unknown[] = [];
    const codes = ["open /home/alice/.local/state/x failed", "token=sk-live-0123456789", "E".repeat(65), "ENO\nENT"];
    let failures = 0;
    const broken: GrantStore = {
      load: () => Promise.reject(Object.assign(new Error("failed"), { code: codes[failures++ % codes.length] })),
      save: (g) => Promise.resolve(g),
      revoke: () => Promise.reject(Object.assign(new Error("failed"), { code: "/srv/ledger.json" })),
      clear: () => Promise.resolve(0),
    };
    const { server, auth } = await start({ grants: broken, onError: (e) => errors.push(e) });
    for (const code of codes) {
      const listed = await get(server, "api/grants", auth);
      expect(listed.status, code).toBe(503);
      expect(listed.json, code).toEqual({ error: "grants_unavailable", message: "the grant store failed" });
    }
    const revoked = await request(`${server.url}api/grants/0123456789abcdef`, { method: "DELETE", headers: auth });
    expect(revoked.json).toEqual({ error: "grants_unavailable", message: "the grant store failed" });
    // Its code goes to onError with the rest of it.
    expect(errors.map((e) => (e as { code: unknown }).code)).toEqual([...codes, "/srv/ledger.json"]);
  });
});

describe("a grant store that answers with something other than grants", () => {
  it("503 grants_unavailable saying so, not a 500 as the server's own fault; onError names what came", async () => {
    const errors: unknown[] = [];
    let loaded: unknown = { grants: [] };
    let revoked: unknown = "ok";
    const odd: GrantStore = {
      load: () => Promise.resolve(loaded as Grant[]),
      save: (g) => Promise.resolve(g),
      revoke: () => Promise.resolve(revoked as Grant),
      clear: () => Promise.resolve(0),
    };
    const { server, auth } = await start({ grants: odd, onError: (e) => errors.push(e) });
    for (const value of [{ grants: [] }, null, [{ id: "0123456789abcdef", tool: "deploy", verdict: "allow" }]]) {
      loaded = value;
      const reply = await get(server, "api/grants", auth);
      expect([JSON.stringify(value), reply.status, reply.json]).toEqual([
        JSON.stringify(value),
        503,
        { error: "grants_unavailable", message: "the grant store gave something other than grants" },
      ]);
    }
    for (const value of ["ok", { id: "0123456789abcdef" }, null]) {
      revoked = value;
      const reply = await request(`${server.url}api/grants/0123456789abcdef`, { method: "DELETE", headers: auth });
      expect([JSON.stringify(value), reply.status, reply.json]).toEqual([
        JSON.stringify(value),
        503,
        { error: "grants_unavailable", message: "the grant store gave something other than grants" },
      ]);
    }
    expect(errors).toHaveLength(6);
    expect((errors[0] as Error).message).toContain("GrantStore.load");
    expect((errors[3] as Error).message).toContain("GrantStore.revoke");
    // A store that answers with grants is served as before.
    loaded = [new Grant("deploy", "allow", GrantScope.thisTool())];
    revoked = undefined;
    expect((await get(server, "api/grants", auth)).status).toBe(200);
    expect(
      (await request(`${server.url}api/grants/0123456789abcdef`, { method: "DELETE", headers: auth })).status,
    ).toBe(404);
  });
  it("503 grants_unavailable, not a 500, for grants that cannot be read (a lazy row whose field throws once its connection is gone)", async () => {
    const errors: unknown[] = [];
    const thrown = new Error("connection terminated");
    const lazy = (): Grant => {
      const grant = new Grant("deploy", "allow", GrantScope.thisCall({ env: "prod" }));
      return new Proxy(grant, {
        get: (target, key) => {
          if (key === "scope" || key === "createdAtMs") throw thrown;
          return Reflect.get(target, key, target) as unknown;
        },
      });
    };
    const store: GrantStore = {
      load: () => Promise.resolve([lazy()]),
      save: (g) => Promise.resolve(g),
      revoke: () => Promise.resolve(lazy()),
      clear: () => Promise.resolve(0),
    };
    const { server, auth } = await start({ grants: store, onError: (e) => errors.push(e) });
    const listed = await get(server, "api/grants", auth);
    const revoked = await request(`${server.url}api/grants/0123456789abcdef`, { method: "DELETE", headers: auth });
    for (const reply of [listed, revoked]) {
      expect(reply.status).toBe(503);
      expect(reply.json).toEqual({
        error: "grants_unavailable",
        message: "the grant store gave something other than grants",
      });
    }
    expect(errors).toHaveLength(2);
    expect((errors[0] as Error).message).toContain("GrantStore.load");
    expect((errors[1] as Error).message).toContain("GrantStore.revoke");
    for (const error of errors) expect((error as Error).cause).toBe(thrown);
  });

  it("lists and revokes grants made by another copy of loopctl (the CommonJS build beside this one), as the engine takes them", async () => {
    const builds = await bundleGrantBuilds();
    try {
      const cjs = createRequire(import.meta.url)(builds.cjs) as typeof import("loopctl/grant");
      expect(cjs.Grant).not.toBe(Grant);
      const grant = new cjs.Grant("deploy", "allow", cjs.GrantScope.thisCall({ env: "staging" }));
      const store: GrantStore = {
        load: () => Promise.resolve([grant]),
        save: (g) => Promise.resolve(g),
        revoke: () => Promise.resolve(grant),
        clear: () => Promise.resolve(0),
      };
      const { server, auth } = await start({ grants: store });
      const listed = await get(server, "api/grants", auth);
      expect([listed.status, listed.json]).toMatchObject([
        200,
        { available: true, grants: [{ id: grant.id, tool: "deploy", scope: "this_call", args: { env: "staging" } }] },
      ]);
      const revoked = await request(`${server.url}api/grants/${grant.id}`, { method: "DELETE", headers: auth });
      expect([revoked.status, revoked.json]).toMatchObject([200, { revoked: { id: grant.id } }]);
    } finally {
      builds.dispose();
    }
  });
});

describe("a grant store that does not answer (a stalled network filesystem, a database that swallows packets)", () => {
  /** A store whose `load` and `revoke` never settle; it keeps the signal of each call. */
  function hungStore(): { store: GrantStore; signals: (AbortSignal | undefined)[] } {
    const signals: (AbortSignal | undefined)[] = [];
    const hang = <T>(options?: { signal?: AbortSignal | undefined }): Promise<T> => {
      signals.push(options?.signal);
      return new Promise<T>(() => undefined);
    };
    const store: GrantStore = {
      load: (options) => hang(options),
      save: (g) => Promise.resolve(g),
      revoke: (_id, options) => hang(options),
      clear: () => Promise.resolve(0),
    };
    return { store, signals };
  }

  /** `reply`, or "no reply" once `ms` pass without one. */
  function within<T>(reply: Promise<T>, ms: number): Promise<T | "no reply"> {
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      reply,
      new Promise<"no reply">((resolve) => (timer = setTimeout(() => resolve("no reply"), ms))),
    ]).finally(() => clearTimeout(timer));
  }

  it("a burst of grants requests gets 503 naming the store within grantsTimeoutMs, each call aborted, so answers still get in under maxConnections", async () => {
    const errors: unknown[] = [];
    const { store, signals } = hungStore();
    const { server, auth, park } = await start({
      grants: store,
      grantsTimeoutMs: 300,
      maxConnections: 4,
      onError: (e) => errors.push(e),
    });
    const { ask, parked } = await park();
    // As many as the cap allows, less one for the answer: a console polling a hung store opens more every few seconds.
    const listings = Array.from({ length: 3 }, () => get(server, "api/grants", auth));
    const revoking = request(`${server.url}api/grants/0123456789abcdef`, { method: "DELETE", headers: auth });
    const replies = await within(Promise.all([...listings, revoking]), 5_000);
    expect(replies).not.toBe("no reply");
    const [listed, , , revoked] = replies as Reply[];
    expect(listed?.status).toBe(503);
    expect(listed?.json).toEqual({
      error: "grants_unavailable",
      message: "the grant store did not answer within 300 ms",
    });
    expect(revoked?.status).toBe(503);
    expect(revoked?.json).toEqual({
      error: "grants_unavailable",
      message:
        "the grant store did not answer within 300 ms; the grant may be revoked still: list the grants before revoking again",
    });
    // Each call was given a signal, aborted when the request stopped waiting.
    expect(signals).toHaveLength(4);
    expect(signals.every((signal) => signal?.aborted === true)).toBe(true);
    expect(errors.map((e) => (e as Error).message)).toContain("the grant store did not answer within 300 ms");
    // The connections are free again: the parked ask can be answered.
    const answered = await within(answer(server, ask.id, { type: "approve" }, auth), 5_000);
    expect(answered).not.toBe("no reply");
    expect((answered as Reply).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("answers a parked ask while a grants request waits on the store", async () => {
    const { store } = hungStore();
    const { server, auth, park } = await start({ grants: store });
    const { ask, parked } = await park();
    const listing = get(server, "api/grants", auth);
    listing.catch(() => undefined);
    expect((await answer(server, ask.id, { type: "deny", reason: "no" }, auth)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "no" });
  });

  it("aborts the store's call once the client has gone, and tells onError nothing of it", async () => {
    const errors: unknown[] = [];
    const { store, signals } = hungStore();
    const { server, auth } = await start({ grants: store, onError: (e) => errors.push(e) });
    for (const [method, path] of [
      ["GET", "api/grants"],
      ["DELETE", "api/grants/0123456789abcdef"],
    ] as const) {
      const before = signals.length;
      const req = httpRequest(`${server.url}${path}`, { method, headers: auth, agent: false });
      req.on("error", () => undefined);
      req.end();
      await until(() => signals.length > before);
      req.destroy();
      await until(() => signals[before]?.aborted === true);
    }
    expect(errors).toEqual([]);
  });

  it("aborts the store's calls of pipelined requests too once their connection closes, though their replies were queued behind the first", async () => {
    const { store, signals } = hungStore();
    const { server } = await start({ grants: store });
    const warnings: Error[] = [];
    const warned = (warning: Error): void => void warnings.push(warning);
    process.on("warning", warned);
    cleanups.push(() => void process.off("warning", warned));
    const { socket, closed } = rawClient(server.port);
    const listing = `GET /api/grants HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\nAuthorization: Bearer ${server.token}\r\n\r\n`;
    socket.write(listing.repeat(12));
    await until(() => signals.length === 12);
    socket.destroy();
    await closed;
    await until(() => signals.every((signal) => signal?.aborted === true));
    // Twelve waiting on one socket is not a leak of listeners on it.
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.map((warning) => warning.name)).not.toContain("MaxListenersExceededWarning");
  });

  it("refuses a grantsTimeoutMs that is not a positive integer of at most 2147483647, naming it", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    cleanups.push(() => approver.close());
    for (const grantsTimeoutMs of [0, -1, 1.5, Number.NaN, 2_147_483_648, "1000", null]) {
      await refusedOption({ approver, grantsTimeoutMs } as unknown as ApprovalServerOptions, "grantsTimeoutMs");
    }
  });
});

describe("createApprovalHandler in an existing node:http app", () => {
  it("serves under a mount path, answers to the app's Host, and logs in to the mounted page", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const app = createServer();
    const { port } = await listen(app);
    const handler = createApprovalHandler({
      approver,
      allowedHosts: [`127.0.0.1:${port}`],
      token: "a-token-of-twenty-chars",
    });
    // What an Express-style router does: strip the mount path, keep the original URL.
    app.on("request", (req, res) => {
      const url = req.url ?? "/";
      if (url === "/approvals" || url.startsWith("/approvals/") || url.startsWith("/approvals?")) {
        Object.assign(req, { originalUrl: url, url: url.slice("/approvals".length) || "/" });
        if ((req.url ?? "").startsWith("?")) req.url = `/${req.url ?? ""}`;
        handler.handle(req, res);
      } else {
        res.writeHead(200).end("the app");
      }
    });
    cleanups.push(() => approver.close(), stopping(app, handler));
    const base = `http://127.0.0.1:${port}`;
    const login = await request(`${base}/approvals?token=a-token-of-twenty-chars`);
    expect(login.status).toBe(303);
    expect(login.headers.location).toBe("/approvals/");
    // Scoped to the console: another app on this host never receives it.
    expect(login.headers["set-cookie"]?.[0]).toMatch(/; Path=\/approvals\/$/);
    const auth = { authorization: "Bearer a-token-of-twenty-chars" };
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    await until(
      async () =>
        ((await request(`${base}/approvals/api/asks`, { headers: auth })).json as { asks: unknown[] }).asks.length ===
        1,
    );
    const reply = await request(`${base}/approvals/api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ type: "approve" }),
    });
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
    expect((await request(`${base}/elsewhere`)).text).toBe("the app");
    expect(() => createApprovalHandler({ allowedHosts: [] })).toThrow(ServerConfigError);
  });
});

describe("mounted under a path", () => {
  /** An app that mounts the handler as an Express-style router does: the mount path cut off `url`, kept in `originalUrl`. */
  async function mountedApp(
    mount: (url: string) => boolean,
    strip: (url: string) => string,
  ): Promise<{ base: string; handler: ReturnType<typeof createApprovalHandler> }> {
    const app = createServer();
    const { port } = await listen(app);
    const handler = createApprovalHandler({ allowedHosts: [`127.0.0.1:${port}`], token: "a-token-of-twenty-chars" });
    app.on("request", (req, res) => {
      const url = req.url ?? "/";
      if (!mount(url)) return void res.writeHead(200).end("the app");
      const rest = strip(url);
      Object.assign(req, { originalUrl: url, url: rest.startsWith("/") ? rest : `/${rest}` });
      handler.handle(req, res);
    });
    cleanups.push(stopping(app, handler));
    return { base: `http://127.0.0.1:${port}`, handler };
  }

  it("redirects the mount path without its trailing slash to the slash form (308), so the page's relative URLs resolve under it", async () => {
    const { base } = await mountedApp(
      (url) => url === "/approvals" || url.startsWith("/approvals/") || url.startsWith("/approvals?"),
      (url) => url.slice("/approvals".length),
    );
    const auth = { authorization: "Bearer a-token-of-twenty-chars" };
    for (const [path, location] of [
      ["/approvals", "/approvals/"],
      ["/approvals?view=compact", "/approvals/?view=compact"],
    ] as const) {
      // Before the token check: the redirect tells nothing, and the page it leads to asks for the token itself.
      for (const headers of [auth, {}]) {
        const reply = await request(`${base}${path}`, { headers });
        expect(reply.status, path).toBe(308);
        expect(reply.headers.location, path).toBe(location);
      }
    }
    const page = await request(`${base}/approvals/`, { headers: auth });
    expect(page.status).toBe(200);
    expect(page.text).toContain('src="console.js"');
    // A foreign Host is still refused first, and the API's own paths are not redirected.
    expect((await request(`${base}/approvals`, { headers: { host: "evil.example" } })).status).toBe(421);
    expect((await request(`${base}/approvals/api/grants`, { headers: auth })).status).toBe(200);
  });

  it("never redirects off the server, whatever the original path", async () => {
    const { base } = await mountedApp(
      () => true,
      (url) => (url.includes("?") ? `/${url.slice(url.indexOf("?"))}` : "/"),
    );
    // Sent as written (a URL string would be normalized first): the server's URL parser makes "//evil.example" of it.
    const raw = (path: string): Promise<{ status: number; location: string | undefined }> =>
      new Promise((resolve, reject) => {
        const url = new URL(base);
        const req = httpRequest({ host: url.hostname, port: url.port, path, agent: false }, (res) => {
          res.resume();
          res.on("end", () => resolve({ status: res.statusCode ?? 0, location: res.headers.location }));
        });
        req.on("error", reject);
        req.end();
      });
    expect(await raw("/.//evil.example")).toEqual({ status: 308, location: "/evil.example/" });
    // An original path that is no URL path at all: 400, never a 500.
    expect(await raw("//")).toEqual({ status: 400, location: undefined });
    expect(await raw("/.//evil.example?token=a-token-of-twenty-chars")).toEqual({
      status: 303,
      location: "/evil.example/",
    });
    // A ";" in the path cannot end the cookie's Path and start an attribute of the client's choosing.
    const login = await request(`${base}/a;Domain=example.com;Path=/?token=a-token-of-twenty-chars`);
    expect(login.status).toBe(303);
    expect(login.headers["set-cookie"]?.[0]).toMatch(/; SameSite=Strict; Path=\/a%3BDomain=example\.com%3BPath=\/$/);
  });

  it("works mounted in a real Express app: app.use('/approvals', handler.handle)", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = createServer();
    const { port } = await listen(server);
    const handler = createApprovalHandler({
      approver,
      allowedHosts: [`127.0.0.1:${port}`],
      token: "a-token-of-twenty-chars",
    });
    const app = express();
    app.get("/", (_req, res) => res.send("the app"));
    app.use("/approvals", handler.handle);
    server.on("request", app);
    cleanups.push(() => approver.close(), stopping(server, handler));
    const base = `http://127.0.0.1:${port}`;
    const bare = await request(`${base}/approvals`);
    expect(bare.status).toBe(308);
    expect(bare.headers.location).toBe("/approvals/");
    const login = await request(`${base}/approvals/?token=a-token-of-twenty-chars`);
    expect(login.status).toBe(303);
    expect(login.headers.location).toBe("/approvals/");
    const setCookie = login.headers["set-cookie"]?.[0] ?? "";
    expect(setCookie).toMatch(
      /^loopctl_session_[0-9a-f]{12}=[A-Za-z0-9_-]+; HttpOnly; SameSite=Strict; Path=\/approvals\/$/,
    );
    // Either form of the login URL scopes the cookie to the console's slash form, where its pages and API are.
    expect((await request(`${base}/approvals?token=a-token-of-twenty-chars`)).headers["set-cookie"]?.[0]).toBe(
      setCookie,
    );
    const cookie = setCookie.split(";")[0] as string;
    const page = await request(`${base}/approvals/`, { headers: { cookie } });
    expect(page.status).toBe(200);
    expect((await request(`${base}/approvals/console.js`, { headers: { cookie } })).headers["content-type"]).toBe(
      "text/javascript; charset=utf-8",
    );
    expect((await request(`${base}/approvals/console.css`, { headers: { cookie } })).status).toBe(200);
    for (const path of ["api/asks", "api/grants", "api/records"]) {
      expect((await request(`${base}/approvals/${path}`, { headers: { cookie } })).status, path).toBe(200);
    }
    const stream = await openStream(`${base}/approvals/api/asks/stream`, { cookie });
    stream.close();
    expect(stream.status).toBe(200);
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    const auth = { authorization: "Bearer a-token-of-twenty-chars" };
    await until(
      async () =>
        ((await request(`${base}/approvals/api/asks`, { headers: auth })).json as { asks: unknown[] }).asks.length ===
        1,
    );
    const reply = await request(`${base}/approvals/api/asks/${ask.id}`, {
      method: "POST",
      headers: { cookie, origin: base, "content-type": "application/json" },
      body: JSON.stringify({ type: "deny", reason: "not today" }),
    });
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "not today" });
    expect((await request(`${base}/`)).text).toBe("the app");
  });

  it("mounted bare, or behind express.raw(), which hands it the bytes, refuses a body that is not UTF-8 and answers nothing", async () => {
    for (const mount of ["node:http", "express.raw()"] as const) {
      const [channel, approver] = ApprovalChannel.pair(4);
      const server = createServer();
      const { port } = await listen(server);
      const handler = createApprovalHandler({
        approver,
        allowedHosts: [`127.0.0.1:${port}`],
        token: "a-token-of-twenty-chars",
      });
      if (mount === "node:http") {
        server.on("request", handler.handle);
      } else {
        const app = express();
        app.use(express.raw({ type: "application/json" }));
        app.use(handler.handle);
        server.on("request", app);
      }
      cleanups.push(() => approver.close(), stopping(server, handler));
      const auth = { authorization: "Bearer a-token-of-twenty-chars" };
      const ask = makeAsk(1);
      const parked = channel.resolve(ask, { signal: new AbortController().signal });
      const watched = track(parked);
      await until(
        async () =>
          ((await request(`http://127.0.0.1:${port}/api/asks`, { headers: auth })).json as { asks: unknown[] }).asks
            .length === 1,
      );
      const send = (body: Buffer): Promise<Reply> =>
        request(`http://127.0.0.1:${port}/api/asks/${ask.id}`, {
          method: "POST",
          headers: { ...auth, "content-type": "application/json" },
          body,
        });
      const reply = await send(
        Buffer.from([...Buffer.from('{"type":"deny","reason":"no '), 0xff, ...Buffer.from('"}')]),
      );
      expect([mount, reply.status, reply.json]).toEqual([
        mount,
        400,
        { error: "body_not_utf8", message: "the request body is not valid UTF-8" },
      ]);
      await flush();
      expect(watched.outcome.state, mount).toBe("pending");
      expect((await send(Buffer.from('{"type":"deny","reason":"no ☕"}'))).status, mount).toBe(200);
      await expect(parked, mount).resolves.toEqual({ type: "deny", reason: "no ☕" });
    }
  });

  it("in an Express app whose express.json() and express.urlencoded() read bodies first, takes what they read: an answer, a link's reason", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = createServer();
    const { port } = await listen(server);
    const linkSecret = "a-link-secret-of-enough-length";
    const handler = createApprovalHandler({
      approver,
      grants: new MemoryGrantStore(),
      allowedHosts: [`127.0.0.1:${port}`],
      token: "a-token-of-twenty-chars",
      linkSecret,
    });
    const app = express();
    // An app's usual first lines: every body the app gets is parsed before any route sees it.
    app.use(express.json());
    app.use(express.urlencoded({ extended: false }));
    app.use("/approvals", handler.handle);
    server.on("request", app);
    cleanups.push(() => approver.close(), stopping(server, handler));
    const base = `http://127.0.0.1:${port}`;
    const auth = { authorization: "Bearer a-token-of-twenty-chars" };
    const parkListed = async (ask: PendingAsk): Promise<{ parked: Promise<AskResolution> }> => {
      const parked = channel.resolve(ask, { signal: new AbortController().signal });
      await until(async () =>
        (
          (await request(`${base}/approvals/api/asks`, { headers: auth })).json as { asks: { ask: PendingAsk }[] }
        ).asks.some((view) => view.ask.id === ask.id),
      );
      return { parked };
    };

    const ask = makeAsk(1);
    const { parked } = await parkListed(ask);
    const reply = await request(`${base}/approvals/api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ type: "deny", reason: "not today", remember: "this_call", ask }),
    });
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "not today", remember: "this_call" });

    // Still an answer's checks: a body that is no answer is a 400, and the ask stays parked.
    const second = makeAsk(2);
    const { parked: secondParked } = await parkListed(second);
    const bad = await request(`${base}/approvals/api/asks/${second.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ type: "maybe" }),
    });
    expect(bad.status).toBe(400);
    expect((await outcomeNow(secondParked)).state).toBe("pending");

    // A link's confirmation form posts its reason urlencoded: the reason reaches the call.
    const links = signAnswerLink(second, { secret: linkSecret, baseUrl: `${base}/approvals/`, ttlMs: 60_000 });
    const denied = await request(links.deny, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: base },
      body: "reason=the+numbers+are+wrong",
    });
    expect(denied.status).toBe(200);
    await expect(secondParked).resolves.toEqual({ type: "deny", reason: "the numbers are wrong" });
  });

  it("behind express.json(), a body nested deeper than it can be measured is a 400, not a fault of the server's", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = createServer();
    const { port } = await listen(server);
    const errors: unknown[] = [];
    const handler = createApprovalHandler({
      approver,
      allowedHosts: [`127.0.0.1:${port}`],
      token: "a-token-of-twenty-chars",
      onError: (e) => errors.push(e),
    });
    const app = express();
    app.use(express.json());
    app.use("/approvals", handler.handle);
    server.on("request", app);
    cleanups.push(() => approver.close(), stopping(server, handler));
    const base = `http://127.0.0.1:${port}`;
    const auth = { authorization: "Bearer a-token-of-twenty-chars" };
    const ask = makeAsk(1);
    const parked = channel.resolve(ask, { signal: new AbortController().signal });
    parked.catch(() => undefined);
    await until(
      async () =>
        ((await request(`${base}/approvals/api/asks`, { headers: auth })).json as { asks: unknown[] }).asks.length ===
        1,
    );
    // 20 KB, within express.json()'s 100 KB: it parses, and JSON.stringify runs out of stack on it.
    const deep = `${"[".repeat(10_000)}${"]".repeat(10_000)}`;
    const reply = await request(`${base}/approvals/api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: `{"type":"approve","x":${deep}}`,
    });
    expect(reply.status).toBe(400);
    expect(reply.json).toMatchObject({ error: "bad_request" });
    expect(errors).toEqual([]);
    expect((await outcomeNow(parked)).state).toBe("pending");
  });
});
