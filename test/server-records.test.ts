import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { appendFile, copyFile, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import { AuditSink, auditSealPath } from "loopctl/audit";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import type { GateDecision, Hook } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";
import type { AskInbox, PendingAsk } from "loopctl/ask";
import { RecentRecords, ServerConfigError, auditLogRecords, createApprovalServer } from "loopctl/server";
import type { ApprovalServer, AuditLogCheck, RecordSource, RecordVouch } from "loopctl/server";
import { ChainCheck } from "../src/audit/chain.js";
import { encodeAuditLine } from "../src/audit/line.js";
import { makeAsk } from "./support/ask-fixtures.js";
import { openStream, request } from "./support/http-client.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-server-records-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function decision(n: number, verdict: GateDecision["verdict"] = "allow"): GateDecision {
  return {
    tool: `tool_${n}`,
    argsDigest: "0123456789abcdef",
    verdict,
    ruleId: "hook",
    ruleSource: "context",
    matchedPattern: null,
    reason: null,
    ts: n,
  };
}

async function serve(
  records: RecordSource,
  options: { onError?: (error: unknown) => void } = {},
): Promise<{ server: ApprovalServer; auth: Record<string, string> }> {
  const server = await createApprovalServer({ records, ...options });
  cleanups.push(() => server.close());
  return { server, auth: { authorization: `Bearer ${server.token}` } };
}

/** What `make` throws, or undefined when it returns. */
function thrown(make: () => unknown): unknown {
  try {
    make();
  } catch (e) {
    return e;
  }
  return undefined;
}

/** What a record source's `recent` and `audited` refuse as their options: the option named, and why. */
const CALL_OPTION_REFUSALS = [
  [{ sginal: AbortSignal.abort() }, "sginal", "unknown option 'sginal' (did you mean signal?)"],
  [AbortSignal.abort(), "options", "must be an object: { signal? }, got an AbortSignal (give it as { signal })"],
  [[], "options", "must be an object: { signal? }, got an array"],
  [null, "options", "must be an object: { signal? }, got null"],
  [{ signal: "stop" }, "signal", 'must be an AbortSignal or undefined, got "stop"'],
] as const;

describe("RecentRecords", () => {
  it("keeps the latest `capacity` decisions, oldest first, whatever the limit asked", () => {
    const records = new RecentRecords({ capacity: 3 });
    expect(records.recent(10)).toEqual([]);
    for (let n = 1; n <= 5; n++) records.onGate({ turn: 0, callId: `c${n}`, decision: decision(n) });
    expect(records.size).toBe(3);
    expect(records.recent(10).map((r) => r.ts)).toEqual([3, 4, 5]);
    expect(records.recent(2).map((r) => r.ts)).toEqual([4, 5]);
    expect(records.recent(0)).toEqual([]);
  });

  it("tells subscribers each new decision; a throwing subscriber harms nobody; unsubscribe stops it", () => {
    const records = new RecentRecords();
    const seen: number[] = [];
    records.subscribe(() => {
      throw new Error("bad subscriber");
    });
    const stop = records.subscribe((r) => seen.push(r.ts));
    records.onGate({ turn: 0, callId: "c1", decision: decision(1) });
    stop();
    records.onGate({ turn: 0, callId: "c2", decision: decision(2) });
    expect(seen).toEqual([1]);
    expect(records.size).toBe(2);
  });

  it("refuses a key other than capacity, naming it, and an AbortSignal or an array in place of its options", () => {
    const misspelt = thrown(() => new RecentRecords({ capcity: 10 } as never));
    expect(misspelt).toBeInstanceOf(ServerConfigError);
    expect((misspelt as ServerConfigError).option).toBe("records.capcity");
    expect((misspelt as Error).message).toBe(
      "approval server option records.capcity: unknown option 'capcity' (did you mean capacity?)",
    );
    expect(() => new RecentRecords({ limit: 10 } as never)).toThrow(
      "unknown option 'limit' (the only option is capacity)",
    );
    for (const [options, says] of [
      [new AbortController().signal, "got an AbortSignal"],
      [[], "got an array"],
    ] as const) {
      const error = thrown(() => new RecentRecords(options as never));
      expect(error).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe("options");
      expect((error as Error).message).toContain(says);
    }
  });

  it("refuses call options that are not an object of at most a signal, naming the key, as an audit log's records do", () => {
    const records = new RecentRecords();
    records.onGate({ turn: 0, callId: "c1", decision: decision(1) });
    for (const [options, option, says] of CALL_OPTION_REFUSALS) {
      const error = thrown(() => records.recent(10, options as never));
      expect(error, option).toBeInstanceOf(ServerConfigError);
      expect(error).toMatchObject({ option, message: `approval server option ${option}: ${says}` });
    }
    expect(records.recent(10, { signal: new AbortController().signal }).map((r) => r.ts)).toEqual([1]);
  });

  it("refuses a capacity that is not a positive integer", () => {
    for (const capacity of [0, -1, 1.5, Number.NaN]) {
      expect(() => new RecentRecords({ capacity })).toThrow(ServerConfigError);
    }
  });

  it("refuses options that are not an object with a ServerConfigError naming them", () => {
    for (const options of [null, 5, "capacity"]) {
      const error = ((): unknown => {
        try {
          new RecentRecords(options as never);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error, String(options)).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe("options");
    }
  });

  it("as an engine observer behind the server: GET /api/records and a live record event for every decision of a real run", async () => {
    const records = new RecentRecords();
    const [channel, approver] = ApprovalChannel.pair(4);
    const server = await createApprovalServer({ approver, records });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const auth = { authorization: `Bearer ${server.token}` };
    const stream = await openStream(`${server.url}api/asks/stream`, auth);
    cleanups.push(() => stream.close());

    const echo = defineTool({
      name: "echo",
      description: "Echo",
      input: z.object({ text: z.string() }),
      execute: ({ text }) => text,
    });
    const askForShout: Hook = {
      preToolUse: (call) =>
        (call.input as { text: string }).text === "shout" ? { type: "ask", prompt: "Shout?" } : { type: "allow" },
    };
    const agent = new Agent({
      model: new ScriptedModel([
        { toolCalls: [{ id: "c1", name: "echo", input: { text: "hi" } }] },
        { toolCalls: [{ id: "c2", name: "echo", input: { text: "shout" } }] },
        { text: "done" },
      ]),
      tools: [echo],
      managers: new LoopManagers().withHook(askForShout).withAskResolver(channel).withObserver(records),
    });
    const run = agent.run("go");
    const ask = JSON.parse((await stream.next((e) => e.event === "ask")).data) as { ask: { id: string } };
    const reply = await request(`${server.url}api/asks/${ask.ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ type: "approve" }),
    });
    expect(reply.status).toBe(200);
    const result = await run;

    const live: GateDecision[] = [];
    for (let i = 0; i < result.records.length; i++)
      live.push(JSON.parse((await stream.next((e) => e.event === "record")).data) as GateDecision);
    expect(live).toEqual(result.records);
    const listed = await request(`${server.url}api/records`, { headers: auth });
    expect(listed.json).toEqual({ available: true, live: true, records: result.records });
    expect(result.records.map((r) => r.verdict)).toEqual(["allow", "ask_allowed"]);
  });
});

describe("GET /api/records", () => {
  it("takes ?limit= from 1 to 500 and refuses anything else with 400", async () => {
    const records = new RecentRecords();
    for (let n = 1; n <= 60; n++) records.onGate({ turn: 0, callId: "c", decision: decision(n) });
    const { server, auth } = await serve(records);
    const ts = async (query: string): Promise<number[]> =>
      (
        (await request(`${server.url}api/records${query}`, { headers: auth })).json as { records: GateDecision[] }
      ).records.map((r) => r.ts);
    expect(await ts("")).toHaveLength(50);
    expect(await ts("?limit=3")).toEqual([58, 59, 60]);
    expect(await ts("?limit=003")).toEqual([58, 59, 60]);
    // Decimal digits only: Number() would read these as 100, 16, 5, 5 and 5.
    for (const bad of ["0", "501", "abc", "2.5", "-1", "1e2", "0x10", "%2B5", "%205", "5.0", ""]) {
      expect((await request(`${server.url}api/records?limit=${bad}`, { headers: auth })).status, bad).toBe(400);
    }
  });

  it("says when there is no record source", async () => {
    const server = await createApprovalServer({});
    cleanups.push(() => server.close());
    const reply = await request(`${server.url}api/records`, { headers: { authorization: `Bearer ${server.token}` } });
    expect(reply.json).toEqual({ available: false, live: false, records: [] });
  });

  it("503 when the source fails, 500 for a fault of the server's own; neither sends a stack or a message", async () => {
    const errors: unknown[] = [];
    const failing: RecordSource = { recent: () => Promise.reject(new Error("disk at /srv/secret failed")) };
    const server = await createApprovalServer({ records: failing, onError: (e) => errors.push(e) });
    cleanups.push(() => server.close());
    const auth = { authorization: `Bearer ${server.token}` };
    const reply = await request(`${server.url}api/records`, { headers: auth });
    expect(reply.status).toBe(503);
    expect(reply.text).not.toContain("/srv/secret");

    // A value JSON cannot carry makes the server itself fail: a bare 500.
    const unserializable: RecordSource = { recent: () => [{ ...decision(1), ts: 10n as unknown as number }] };
    const second = await createApprovalServer({ records: unserializable, onError: (e) => errors.push(e) });
    cleanups.push(() => second.close());
    const fault = await request(`${second.url}api/records`, { headers: { authorization: `Bearer ${second.token}` } });
    expect(fault.status).toBe(500);
    expect(fault.json).toEqual({ error: "internal", message: "internal error; the server's onError has the details" });
    expect(fault.text).not.toMatch(/BigInt|at .*:\d+:\d+/);
    expect(errors).toHaveLength(2);
  });
});

describe("a record source whose records cannot be read", () => {
  /** A decision whose `tool` getter throws, as a lazy row whose connection is gone does. */
  function unreadable(n: number): GateDecision {
    const record = decision(n);
    Object.defineProperty(record, "tool", {
      enumerable: true,
      get: () => {
        throw new Error("connection to /srv/secret lost");
      },
    });
    return record;
  }

  it("503 records_unavailable, the source's fault, with a ServerConfigError naming records told to onError", async () => {
    for (const source of [
      { recent: () => [decision(1), unreadable(2)] },
      {
        recent: () => [],
        audited: () => ({ records: [{ record: unreadable(1), seq: 1, vouched: "chain" as const }], check: {} }),
      },
    ] as RecordSource[]) {
      const errors: unknown[] = [];
      const { server, auth } = await serve(source, { onError: (e) => void errors.push(e) });
      const reply = await request(`${server.url}api/records`, { headers: auth });
      expect(reply.status).toBe(503);
      expect(reply.json).toEqual({
        error: "records_unavailable",
        message: "the record source gave records that cannot be read",
      });
      expect(reply.text).not.toContain("/srv/secret");
      const method = source.audited === undefined ? "recent" : "audited";
      expect(errors).toHaveLength(1);
      expect(errors[0]).toBeInstanceOf(ServerConfigError);
      expect(errors[0]).toMatchObject({
        option: "records",
        message: `approval server option records: RecordSource.${method} resolved to records that cannot be read: connection to /srv/secret lost`,
        cause: { message: "connection to /srv/secret lost" },
      });
    }
  });
});

describe("a record source that does not answer (an audit log on a stalled network filesystem)", () => {
  /** A source whose `recent` (and `audited`, with `audited: true`) never settles; it keeps each call's signal. */
  function hungSource(audited = false): { source: RecordSource; signals: (AbortSignal | undefined)[] } {
    const signals: (AbortSignal | undefined)[] = [];
    const hang = <T>(options?: { readonly signal?: AbortSignal }): Promise<T> => {
      signals.push(options?.signal);
      return new Promise<T>(() => undefined);
    };
    const source: RecordSource = audited
      ? { recent: () => [], audited: (_limit, options) => hang(options) }
      : { recent: (_limit, options) => hang(options) };
    return { source, signals };
  }

  it("503 naming the source within recordsTimeoutMs, its signal aborted; onError is told; a burst frees its connections", async () => {
    const errors: unknown[] = [];
    const { source: hung, signals } = hungSource();
    const server = await createApprovalServer({
      records: hung,
      recordsTimeoutMs: 300,
      maxConnections: 3,
      onError: (e) => errors.push(e),
    });
    cleanups.push(() => server.close());
    const auth = { authorization: `Bearer ${server.token}` };
    const all = Promise.all(Array.from({ length: 3 }, () => request(`${server.url}api/records`, { headers: auth })));
    let timer: NodeJS.Timeout | undefined;
    const replies = await Promise.race([
      all,
      new Promise<"no reply">((resolve) => (timer = setTimeout(() => resolve("no reply"), 5_000))),
    ]);
    clearTimeout(timer);
    expect(replies).not.toBe("no reply");
    for (const reply of replies as Awaited<typeof all>) {
      expect(reply.status).toBe(503);
      expect(reply.json).toEqual({
        error: "records_unavailable",
        message: "the record source did not answer within 300 ms",
      });
    }
    expect(signals.map((signal) => signal?.aborted)).toEqual([true, true, true]);
    expect(errors.map((e) => (e as Error).message)).toEqual(
      Array.from({ length: 3 }, () => "the record source did not answer within 300 ms"),
    );
    expect((await request(`${server.url}healthz`)).status).toBe(200);
  });

  it("aborts the source's signal once the client has gone, and tells onError nothing of it", async () => {
    const errors: unknown[] = [];
    const { source: hung, signals } = hungSource();
    const { server, auth } = await serve(hung, { onError: (e) => void errors.push(e) });
    const req = httpRequest(`${server.url}api/records`, { headers: auth, agent: false });
    req.on("error", () => undefined);
    req.end();
    for (let i = 0; signals.length === 0; i++) {
      expect(i).toBeLessThan(2_000);
      await new Promise((resolve) => setImmediate(resolve));
    }
    req.destroy();
    for (let i = 0; signals[0]?.aborted !== true; i++) {
      expect(i).toBeLessThan(2_000);
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(errors).toEqual([]);
  });

  it("bounds an audited source as it bounds recent: 503 within recordsTimeoutMs, the signal it was given aborted", async () => {
    const errors: unknown[] = [];
    const { source: hung, signals } = hungSource(true);
    const server = await createApprovalServer({ records: hung, recordsTimeoutMs: 300, onError: (e) => errors.push(e) });
    cleanups.push(() => server.close());
    const reply = await request(`${server.url}api/records`, { headers: { authorization: `Bearer ${server.token}` } });
    expect([reply.status, reply.json]).toEqual([
      503,
      { error: "records_unavailable", message: "the record source did not answer within 300 ms" },
    ]);
    expect(signals.map((signal) => signal?.aborted)).toEqual([true]);
    expect(errors).toHaveLength(1);
  });

  it("refuses a recordsTimeoutMs that is not a positive integer of at most 2147483647, naming it", async () => {
    for (const recordsTimeoutMs of [0, -1, 1.5, Number.NaN, 2_147_483_648, "1000", null]) {
      const error = await createApprovalServer({ records: new RecentRecords(), recordsTimeoutMs } as never).then(
        (server) => server.close().then(() => undefined),
        (e: unknown) => e,
      );
      expect(error, String(recordsTimeoutMs)).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe("recordsTimeoutMs");
    }
  });
});

describe("a record source that answers with something other than a list", () => {
  /** Each of `answers`, set by `give` in turn, gets the 503 that says the source gave no list of records. */
  async function expectNoList(
    server: ApprovalServer,
    auth: Readonly<Record<string, string>>,
    answers: readonly unknown[],
    give: (answer: unknown) => void,
  ): Promise<void> {
    for (const answer of answers) {
      give(answer);
      const reply = await request(`${server.url}api/records`, { headers: auth });
      expect([JSON.stringify(answer), reply.status, reply.json]).toEqual([
        JSON.stringify(answer),
        503,
        { error: "records_unavailable", message: "the record source gave something other than a list of records" },
      ]);
    }
  }

  it("503 records_unavailable saying so, never a 200 whose records a page cannot read; onError names what came", async () => {
    const errors: unknown[] = [];
    let given: unknown = { records: [] };
    const odd: RecordSource = { recent: () => given as GateDecision[] };
    const { server, auth } = await serve(odd, { onError: (e) => void errors.push(e) });
    await expectNoList(server, auth, [{ records: [] }, null, "[]"], (value) => {
      given = value;
    });
    expect(errors.map((e) => [(e as ServerConfigError).option, (e as Error).message])).toEqual([
      ["records", "approval server option records: RecordSource.recent resolved to an object, not an array"],
      ["records", "approval server option records: RecordSource.recent resolved to null, not an array"],
      ["records", 'approval server option records: RecordSource.recent resolved to "[]", not an array'],
    ]);
    given = [decision(1)];
    expect((await request(`${server.url}api/records`, { headers: auth })).json).toMatchObject({
      records: [{ ts: 1 }],
    });
  });

  it("503 for an audited source whose answer holds no list of records, naming audited", async () => {
    const errors: unknown[] = [];
    let given: unknown = [];
    const odd: RecordSource = { recent: () => [], audited: () => Promise.resolve(given as never) };
    const { server, auth } = await serve(odd, { onError: (e) => void errors.push(e) });
    await expectNoList(server, auth, [[], null, { records: "none" }], (value) => {
      given = value;
    });
    expect(errors.map((e) => (e as Error).message)).toEqual([
      expect.stringContaining("RecordSource.audited resolved to"),
      expect.stringContaining("RecordSource.audited resolved to null"),
      expect.stringContaining("RecordSource.audited resolved to"),
    ]);
  });

  it("503 for an audited source whose list holds an entry that is not one, naming audited and the entry", async () => {
    const errors: unknown[] = [];
    let given: unknown = [];
    const odd: RecordSource = { recent: () => [], audited: () => Promise.resolve(given as never) };
    const { server, auth } = await serve(odd, { onError: (e) => void errors.push(e) });
    await expectNoList(server, auth, [null, "a decision", { seq: 1, vouched: "chain" }], (entry) => {
      given = { records: [{ record: decision(1), seq: 1, vouched: "chain" }, entry], check: {} };
    });
    expect(errors.map((e) => [(e as ServerConfigError).code, (e as Error).message])).toEqual([
      [
        "SERVER_CONFIG_INVALID",
        expect.stringContaining("RecordSource.audited resolved to records whose item 1 is null"),
      ],
      [
        "SERVER_CONFIG_INVALID",
        expect.stringContaining('RecordSource.audited resolved to records whose item 1 is "a decision"'),
      ],
      [
        "SERVER_CONFIG_INVALID",
        expect.stringContaining("RecordSource.audited resolved to records whose item 1 is an object"),
      ],
    ]);
  });
});

describe("following a record source: subscribe()", () => {
  /** The approver of a fresh channel, counting the asks taken from it through next(). */
  function countedApprover(): { inbox: AskInbox; taken: () => number; park: (ask: PendingAsk) => void } {
    const [channel, approver] = ApprovalChannel.pair(16);
    cleanups.push(() => approver.close());
    let taken = 0;
    const inbox: AskInbox = {
      next: (options) => {
        taken++;
        return approver.next(options);
      },
      resolve: (id, resolution) => approver.resolve(id, resolution),
      ended: (id, options) => approver.ended(id, options),
      close: () => approver.close(),
    };
    return {
      inbox,
      taken: () => taken,
      park: (ask) => void channel.resolve(ask, { signal: new AbortController().signal }).catch(() => undefined),
    };
  }

  it("a subscribe() that throws or gives no stop function is refused when the server is made, and nothing is left taking asks", async () => {
    const { inbox, taken, park } = countedApprover();
    const sources: [string, RecordSource][] = [
      [
        "throws",
        {
          recent: () => [],
          subscribe: () => {
            throw new Error("bus down");
          },
        },
      ],
      // An EventEmitter's on() returns the emitter, not a function that stops the listener.
      ["returns an object", { recent: () => [], subscribe: () => ({ off() {} }) as never }],
      ["returns nothing", { recent: () => [], subscribe: () => undefined as never }],
    ];
    for (const [label, records] of sources) {
      const error = await createApprovalServer({ approver: inbox, records }).then(
        (server) => server.close().then(() => undefined),
        (e: unknown) => e,
      );
      expect(error, label).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option, label).toBe("records");
    }
    // No server was made, so none of them took an ask or waits to: the next server gets every one.
    expect(taken()).toBe(0);
    const ask = makeAsk(1);
    park(ask);
    const server = await createApprovalServer({ approver: inbox });
    cleanups.push(() => server.close());
    const auth = { authorization: `Bearer ${server.token}` };
    for (let i = 0; i < 2000; i++) {
      const listed = (await request(`${server.url}api/asks`, { headers: auth })).json as {
        asks: { ask: PendingAsk }[];
      };
      if (listed.asks.some((view) => view.ask.id === ask.id)) return;
    }
    throw new Error("the ask parked after the refused servers never reached the server made next");
  });

  it("close() settles, stops taking asks and reports the error when the source's stop function throws", async () => {
    const { inbox, taken, park } = countedApprover();
    const errors: unknown[] = [];
    const stopFailed = new Error("unsubscribe failed");
    const records: RecordSource = {
      recent: () => [],
      subscribe: () => () => {
        throw stopFailed;
      },
    };
    const server = await createApprovalServer({ approver: inbox, records, onError: (e) => errors.push(e) });
    expect(taken()).toBe(1);
    await server.close();
    expect(errors).toContain(stopFailed);
    // The board let go of the approver: an ask parked now is there for whoever takes it next.
    const ask = makeAsk(2);
    park(ask);
    const next = await inbox.next({ signal: AbortSignal.timeout(5_000) });
    expect(next?.id).toBe(ask.id);
  });
});

describe("auditLogRecords", () => {
  it("reads the latest records of an audit log another sink writes, as they land", async () => {
    const path = join(dir, "gates.jsonl");
    const source = auditLogRecords(path);
    expect(await source.recent(10)).toEqual([]);
    const sink = await AuditSink.open(path);
    for (let n = 1; n <= 30; n++) await sink.append(decision(n, n % 2 === 0 ? "ask_allowed" : "deny"));
    expect((await source.recent(5)).map((r) => r.ts)).toEqual([26, 27, 28, 29, 30]);
    expect(await source.recent(100)).toHaveLength(30);
    await sink.append(decision(31));
    expect((await source.recent(1))[0]).toEqual(decision(31));
    await sink.close();
    expect(source.subscribe).toBeUndefined();
  });

  it("reads only the end of the log: a cut first line and lines that do not parse are skipped", async () => {
    const path = join(dir, "tail.jsonl");
    const sink = await AuditSink.open(path);
    for (let n = 1; n <= 100; n++) await sink.append(decision(n));
    await sink.close();
    await appendFile(path, "not json\n");
    const lineBytes = 300;
    const records = await auditLogRecords(path, { tailBytes: lineBytes * 4 }).recent(100);
    expect(records.length).toBeGreaterThan(0);
    expect(records.length).toBeLessThan(10);
    expect(records.at(-1)?.ts).toBe(100);
    expect(records.map((r) => r.ts)).toEqual(records.map((_, i) => 100 - records.length + 1 + i));
  });

  it("refuses a path that is not a non-empty string, and options that are not an object, naming them", () => {
    // An empty path would be the current folder, read as a log at every request.
    for (const path of [undefined, null, 42, "", new URL("file:///tmp/log.jsonl")]) {
      const error = thrown(() => auditLogRecords(path as never));
      expect(error, String(path)).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe("path");
    }
    for (const options of [null, 5, "tail"]) {
      const error = thrown(() => auditLogRecords("x.jsonl", options as never));
      expect(error, String(options)).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe("options");
    }
  });

  it("refuses a key other than tailBytes and key, naming it, and an AbortSignal or an array in place of its options", () => {
    for (const [options, option, says] of [
      [{ tailbytes: 1024 }, "tailbytes", "unknown option 'tailbytes' (did you mean tailBytes?)"],
      [{ keys: Buffer.alloc(32) }, "keys", "unknown option 'keys' (did you mean key?)"],
      [
        { signal: new AbortController().signal },
        "signal",
        "unknown option 'signal' (the options are tailBytes and key)",
      ],
      [new AbortController().signal, "options", "must be an object of options, got an AbortSignal"],
      [[1024], "options", "must be an object of options, got an array"],
    ] as const) {
      const error = thrown(() => auditLogRecords("x.jsonl", options as never));
      expect(error, option).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe(option);
      expect((error as Error).message).toBe(`approval server option ${option}: ${says}`);
    }
  });

  it("refuses a tailBytes that is not a positive integer, and surfaces an unreadable log as a 503", async () => {
    expect(() => auditLogRecords("x.jsonl", { tailBytes: 0 })).toThrow(ServerConfigError);
    const folder = join(dir, "a-folder.jsonl");
    await writeFile(join(dir, "placeholder"), "");
    await import("node:fs/promises").then((fs) => fs.mkdir(folder));
    const errors: unknown[] = [];
    const { server, auth } = await serve(auditLogRecords(folder), { onError: (e) => void errors.push(e) });
    expect((await request(`${server.url}api/records`, { headers: auth })).status).toBe(503);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(ServerConfigError);
    expect(errors[0]).toMatchObject({
      code: "SERVER_CONFIG_INVALID",
      option: "path",
      message: `approval server option path: the audit log ${folder} is not a regular file`,
    });
  });

  it("stops at the signal it is given: one aborted rejects with its reason, and nothing is read", async () => {
    const path = join(dir, "signalled.jsonl");
    await writeFile(path, `${JSON.stringify({ record: decision(1) })}\n`);
    const source = auditLogRecords(path);
    expect((await source.recent(10)).map((r) => r.ts)).toEqual([1]);
    const reason = new Error("the request went");
    await expect(source.recent(10, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    await expect(source.audited(10, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect((await source.recent(10, { signal: new AbortController().signal })).map((r) => r.ts)).toEqual([1]);
  });

  it("refuses call options that are not an object of at most a signal, naming the key: a misspelt signal would leave the read deaf to its cancel", async () => {
    const path = join(dir, "call-options.jsonl");
    await writeFile(path, `${JSON.stringify({ record: decision(1) })}\n`);
    const source = auditLogRecords(path);
    for (const [options, option, says] of CALL_OPTION_REFUSALS) {
      for (const method of ["recent", "audited"] as const) {
        const error = await source[method](10, options as never).catch((e: unknown) => e);
        expect(error, `${method} ${option}`).toBeInstanceOf(ServerConfigError);
        expect(error).toMatchObject({ option, message: `approval server option ${option}: ${says}` });
      }
    }
    expect((await source.recent(10, {})).map((r) => r.ts)).toEqual([1]);
  });

  it("a FIFO put where the log was, after the server started, is a 503 naming it, not a request that waits for a writer", async () => {
    const path = join(dir, "swapped.jsonl");
    const errors: unknown[] = [];
    const { server, auth } = await serve(auditLogRecords(path), { onError: (e) => void errors.push(e) });
    expect((await request(`${server.url}api/records`, { headers: auth })).status).toBe(200);
    execFileSync("mkfifo", [path]);
    const answered = await Promise.race([
      request(`${server.url}api/records`, { headers: auth }).then((r) => r.status),
      new Promise((done) => setTimeout(() => done("still waiting"), 3_000)),
    ]);
    expect(answered).toBe(503);
    expect(String((errors[0] as Error).message)).toContain(`${path} is not a regular file`);
    expect(errors[0]).toBeInstanceOf(ServerConfigError);
    expect(errors[0]).toMatchObject({ code: "SERVER_CONFIG_INVALID", option: "path" });
  });
});

describe("auditLogRecords: what the log vouches for each decision served", () => {
  type Served = GateDecision & { audit: { seq: number | null; vouched: RecordVouch } };
  async function served(source: RecordSource): Promise<{ records: Served[]; audit: AuditLogCheck }> {
    const { server, auth } = await serve(source);
    const reply = await request(`${server.url}api/records?limit=500`, { headers: auth });
    expect(reply.status).toBe(200);
    return reply.json as { records: Served[]; audit: AuditLogCheck };
  }
  const standing = (records: Served[]): [number, RecordVouch][] => records.map((r) => [r.ts, r.audit.vouched]);

  async function keyedLog(name: string, count: number): Promise<{ path: string; key: Buffer; lines: string[] }> {
    const path = join(dir, name);
    const key = randomBytes(32);
    const sink = await AuditSink.open(path, { key });
    for (let n = 1; n <= count; n++) await sink.append(decision(n, "deny"));
    await sink.close();
    return { path, key, lines: (await readFile(path, "utf8")).split("\n").slice(0, -1) };
  }

  /** A line as one who can write the log but holds no key makes it: the next seq, linked, hashed anew. */
  function forged(lines: string[], record: GateDecision, mac: string | null): string {
    const last = JSON.parse(lines.at(-1) as string) as { seq: number; hash: string };
    const { text } = encodeAuditLine(last.seq + 1, last.hash, record, undefined);
    return mac === null ? text : text.replace(/\}\n$/, `,"mac":"${mac}"}\n`);
  }

  it("with the key: an approval appended by one without it is served as vouched for by nothing, and the log as forged", async () => {
    const { path, key, lines } = await keyedLog("forged.jsonl", 3);
    expect(await served(auditLogRecords(path, { key }))).toMatchObject({
      audit: { by: "key", ok: true, keyed: true, sealed: 3, first: 1, last: 3, whole: true, partial: false },
    });
    for (const mac of [null, "ab".repeat(32)]) {
      await writeFile(path, `${lines.join("\n")}\n${forged(lines, decision(4, "ask_allowed"), mac)}`);
      const { records, audit } = await served(auditLogRecords(path, { key }));
      expect(standing(records)).toEqual([
        [1, "sealed"],
        [2, "sealed"],
        [3, "sealed"],
        [4, "none"],
      ]);
      expect(records[3]).toMatchObject({ verdict: "ask_allowed", audit: { seq: 4, vouched: "none" } });
      expect(audit).toMatchObject({ by: "key", ok: false, problem: "forged", line: 4 });
      expect(audit.message).toContain("line 4");
    }
  });

  it("without a key: the chain is checked and says so; a line edited in place breaks it, and nothing after is vouched for", async () => {
    const path = join(dir, "edited.jsonl");
    const sink = await AuditSink.open(path);
    for (let n = 1; n <= 5; n++) await sink.append(decision(n, "deny"));
    await sink.close();
    const intact = await served(auditLogRecords(path));
    expect(standing(intact.records)).toEqual([1, 2, 3, 4, 5].map((n) => [n, "chain"]));
    expect(intact.audit).toMatchObject({ by: "chain", ok: true, keyed: false, sealBeside: false });
    // A denial turned into an approval by hand, the hash left as it was.
    const text = await readFile(path, "utf8");
    const lines = text.split("\n");
    lines[2] = (lines[2] as string).replace('"verdict":"deny"', '"verdict":"ask_allowed"');
    await writeFile(path, lines.join("\n"));
    const { records, audit } = await served(auditLogRecords(path));
    expect(standing(records)).toEqual([
      [1, "chain"],
      [2, "chain"],
      [3, "none"],
      [4, "none"],
      [5, "none"],
    ]);
    expect(audit).toMatchObject({ by: "chain", ok: false, problem: "edited", line: 3 });
  });

  it("without the key, a keyed log's lines are not taken as authenticated: a line hashed anew without a mac breaks it", async () => {
    const { path, lines } = await keyedLog("keyed-no-key.jsonl", 2);
    await writeFile(path, `${lines.join("\n")}\n${forged(lines, decision(3, "ask_allowed"), null)}`);
    const { records, audit } = await served(auditLogRecords(path));
    expect(standing(records)).toEqual([
      [1, "chain"],
      [2, "chain"],
      [3, "none"],
    ]);
    expect(audit).toMatchObject({ by: "chain", ok: false, problem: "malformed", line: 3, keyed: true });
    // A keyed log written again whole without its MACs passes the chain: a seal beside it says to pass the key.
    const unkeyed = join(dir, "stripped.jsonl");
    let prev = "0".repeat(64);
    let stripped = "";
    for (let n = 1; n <= 2; n++) {
      const line = encodeAuditLine(n, prev, decision(n, n === 2 ? "ask_allowed" : "deny"), undefined);
      stripped += line.text;
      prev = line.hash;
    }
    await writeFile(unkeyed, stripped);
    await copyFile(auditSealPath(path), auditSealPath(unkeyed));
    expect((await served(auditLogRecords(unkeyed))).audit).toMatchObject({ ok: true, keyed: false, sealBeside: true });
  });

  it("lines after the line the seal vouches for rest on their MACs: served as such, not as sealed", async () => {
    const path = join(dir, "behind.jsonl");
    const key = randomBytes(32);
    const sink = await AuditSink.open(path, { key });
    for (let n = 1; n <= 3; n++) await sink.append(decision(n));
    const seal = await readFile(auditSealPath(path), "utf8");
    for (let n = 4; n <= 5; n++) await sink.append(decision(n));
    await sink.close();
    await writeFile(auditSealPath(path), seal);
    const { records, audit } = await served(auditLogRecords(path, { key }));
    expect(standing(records)).toEqual([
      [1, "sealed"],
      [2, "sealed"],
      [3, "sealed"],
      [4, "mac"],
      [5, "mac"],
    ]);
    expect(audit).toMatchObject({ ok: true, sealed: 3, last: 5 });
    // Lines cut off the end under a seal that vouches for them: every line left is the key's, the log is not whole.
    const cut = join(dir, "cut.jsonl");
    const writer = await AuditSink.open(cut, { key });
    for (let n = 1; n <= 5; n++) await writer.append(decision(n));
    await writer.close();
    await writeFile(cut, `${(await readFile(cut, "utf8")).split("\n").slice(0, 3).join("\n")}\n`);
    const after = await served(auditLogRecords(cut, { key }));
    expect(after.audit).toMatchObject({ ok: false, problem: "removed", line: 4, last: 3 });
    expect(after.audit.message).toContain("2 trailing lines removed");
    expect(standing(after.records)).toEqual([
      [1, "mac"],
      [2, "mac"],
      [3, "mac"],
    ]);
    // The log deleted under its seal: no decision to show, and the view says lines were removed.
    await rm(cut);
    expect(await served(auditLogRecords(cut, { key }))).toMatchObject({
      records: [],
      audit: { ok: false, problem: "removed", line: 1, first: 0, last: 0 },
    });
  });

  it("reads only the end of a long log, and checks the lines there: one forged at the end is told, the cut first line skipped", async () => {
    const { path, key, lines } = await keyedLog("long.jsonl", 400);
    const tailBytes = 4_000;
    const source = auditLogRecords(path, { key, tailBytes });
    const intact = await served(source);
    expect(intact.audit).toMatchObject({ ok: true, whole: false, sealed: 400, last: 400 });
    expect(intact.audit.first).toBeGreaterThan(380);
    expect(intact.records.every((r) => r.audit.vouched === "sealed")).toBe(true);
    expect(intact.records.map((r) => r.audit.seq)).toEqual(intact.records.map((_, i) => intact.audit.first + i));
    // The window starts right at a line: that line is read whole, not skipped as a cut one.
    const size = Buffer.byteLength(`${lines.join("\n")}\n`);
    const last = Buffer.byteLength(`${lines.at(-1)}\n`);
    expect((await served(auditLogRecords(path, { key, tailBytes: last }))).records.map((r) => r.ts)).toEqual([400]);
    expect(size).toBeGreaterThan(30 * tailBytes);
    await appendFile(path, forged(lines, decision(401, "ask_allowed"), null));
    const after = await served(source);
    expect(after.audit).toMatchObject({ ok: false, problem: "forged", line: 401 });
    expect(after.records.at(-1)).toMatchObject({ ts: 401, audit: { vouched: "none" } });
    expect(after.records.at(-2)).toMatchObject({ ts: 400, audit: { vouched: "sealed" } });
  });

  it("a request checks only the lines appended since the one before, and still sees any line it read before edited, or the log replaced", async () => {
    const { path, key } = await keyedLog("memo.jsonl", 200);
    const source = auditLogRecords(path, { key });
    const checked = vi.spyOn(ChainCheck.prototype, "line");
    cleanups.push(() => checked.mockRestore());
    expect((await source.audited(10)).check).toMatchObject({ ok: true, sealed: 200 });
    expect(checked).toHaveBeenCalledTimes(200);
    checked.mockClear();
    const sink = await AuditSink.open(path, { key });
    for (let n = 201; n <= 203; n++) await sink.append(decision(n));
    const after = await source.audited(10);
    // Opening the sink checked the log once (200 lines); the request, only the three new ones.
    expect(checked).toHaveBeenCalledTimes(203);
    expect(after.check).toMatchObject({ ok: true, sealed: 203, last: 203 });
    expect(after.records.every((r) => r.vouched === "sealed")).toBe(true);

    // A line read before, edited in place (its length kept): told at the next request, the whole window checked again.
    const text = await readFile(path, "utf8");
    await writeFile(path, text.replace('"tool":"tool_150"', '"tool":"tool_15X"'));
    const edited = await served(source);
    expect(edited.audit).toMatchObject({ ok: false, problem: "edited", line: 150 });
    expect(edited.records.find((r) => r.audit.seq === 150)?.audit.vouched).toBe("none");
    // The seal vouches for line 203, which the lines before 150 no longer link to: they rest on their MACs.
    expect(edited.records.find((r) => r.audit.seq === 149)?.audit.vouched).toBe("mac");
    // Lines appended after a failure stay unvouched, request after request.
    await appendFile(path, "not a line\n");
    expect((await source.audited(1)).records.map((r) => [r.seq, r.vouched])).toEqual([[203, "none"]]);
    expect((await source.audited(500)).check).toMatchObject({ ok: false, problem: "edited", line: 150 });

    // Put back as it was: vouched again. Moved aside and started afresh: the new log is checked as itself.
    await writeFile(path, text);
    expect((await source.audited(500)).check).toMatchObject({ ok: true, sealed: 203 });
    await sink.close();
    await rename(path, `${path}.1`);
    await rename(auditSealPath(path), `${auditSealPath(path)}.1`);
    const fresh = await AuditSink.open(path, { key });
    await fresh.append(decision(1, "ask_allowed"));
    await fresh.close();
    const rotated = await source.audited(500);
    expect(rotated.check).toMatchObject({ ok: true, sealed: 1, first: 1, last: 1, whole: true });
    expect(rotated.records).toEqual([{ record: decision(1, "ask_allowed"), seq: 1, vouched: "sealed" }]);
  });

  it("a line that failed rules the lines after it only while it is among the lines read: once the window has passed it, they are checked as a first request checks them", async () => {
    const { path, key, lines } = await keyedLog("passed.jsonl", 3);
    const bad = forged(lines, decision(4, "ask_allowed"), "ab".repeat(32));
    const written = [...lines, bad.trimEnd()];
    await writeFile(path, `${written.join("\n")}\n`);
    const tailBytes = Buffer.byteLength(bad) * 3;
    const source = auditLogRecords(path, { key, tailBytes });
    expect((await source.audited(50)).check).toMatchObject({ ok: false, problem: "forged", line: 4 });
    // Lines written with the key after it (a writer restarted on the log continues its chain), one per request.
    for (let n = 5; n <= 12; n++) {
      const last = JSON.parse(written.at(-1) as string) as { hash: string };
      const { text } = encodeAuditLine(n, last.hash, decision(n), key);
      await appendFile(path, text);
      written.push(text.trimEnd());
      const held = await source.audited(50);
      expect(held).toEqual(await auditLogRecords(path, { key, tailBytes }).audited(50));
    }
    const end = await source.audited(50);
    expect(end.check).toMatchObject({ ok: true, last: 12 });
    expect(end.check.first).toBeGreaterThan(4);
    expect(end.records.every((r) => r.vouched === "mac")).toBe(true);
  });

  it("a line being written (no newline yet) is not served, and the check says the log ends in one", async () => {
    const { path, key } = await keyedLog("partial.jsonl", 2);
    await appendFile(path, '{"seq":3,"prev":"');
    const { records, audit } = await served(auditLogRecords(path, { key }));
    expect(records).toHaveLength(2);
    expect(audit).toMatchObject({ ok: true, partial: true, sealed: 2 });
  });

  it("refuses a key given as undefined (an unset environment variable) with a ServerConfigError naming key, never taking it for no key", async () => {
    const { path } = await keyedLog("unset-key.jsonl", 2);
    let error: unknown;
    try {
      auditLogRecords(path, { key: undefined } as never);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ServerConfigError);
    expect((error as ServerConfigError).option).toBe("key");
    expect((error as Error).message).toContain("omit key for an unkeyed log");
    // Omitted, the lines are read without their MACs, as the check says.
    expect((await served(auditLogRecords(path, {}))).audit).toMatchObject({ ok: true, by: "chain", last: 2 });
  });

  it("refuses a key that is not one with a ServerConfigError naming key, and never shows it", () => {
    for (const key of [123456789, "short", new Uint8Array(4)]) {
      let error: unknown;
      try {
        auditLogRecords("x.jsonl", { key: key as never });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ServerConfigError);
      expect((error as ServerConfigError).option).toBe("key");
      expect((error as Error).message).not.toContain("123456789");
    }
  });
});
