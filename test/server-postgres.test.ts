import { afterEach, describe, expect, it } from "vitest";
import type { AskResolution, PendingAsk } from "loopctl/ask";
import { Grant, GrantScope } from "loopctl/grant";
import { PostgresAskQueue, PostgresGrantStore } from "loopctl/postgres";
import { createApprovalServer, signAnswerLink } from "loopctl/server";
import type { ApprovalServer, ApprovalServerOptions } from "loopctl/server";
import { makeAsk, track } from "./support/ask-fixtures.js";
import { request } from "./support/http-client.js";
import { DATABASE_URL, usePostgres } from "./support/postgres.js";
import { startProxy } from "./support/tcp-proxy.js";

const db = usePostgres();
const SECRET = "link-secret-of-at-least-32-bytes!";
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function queue(): PostgresAskQueue {
  const q = new PostgresAskQueue(db.newPool(4), { schema: db.schema, onError: () => undefined });
  cleanups.push(() => q.close());
  return q;
}

/** A server over a Postgres queue's approver, with one ask parked by a worker elsewhere and listed. */
async function serveQueue(options: Partial<ApprovalServerOptions> = {}): Promise<{
  server: ApprovalServer;
  ask: PendingAsk;
  parked: Promise<AskResolution>;
  errors: unknown[];
}> {
  const worker = queue();
  const errors: unknown[] = [];
  const server = await createApprovalServer({
    approver: queue().approver(),
    linkSecret: SECRET,
    onError: (error) => errors.push(error),
    ...options,
  });
  cleanups.push(() => server.close());
  const ask = makeAsk(1);
  const parked = worker.resolver.resolve(ask, { signal: new AbortController().signal });
  parked.catch(() => undefined);
  for (let i = 0; ; i++) {
    const reply = await request(`${server.url}api/asks`, { headers: { authorization: `Bearer ${server.token}` } });
    if ((reply.json as { asks: unknown[] }).asks.length === 1) break;
    if (i > 500) throw new Error("the ask never reached the server");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return { server, ask, parked, errors };
}

describe("an approval server over a Postgres queue", () => {
  it("refuses an answer whose reason the queue cannot store with 400 naming it, not as the approver failing", async () => {
    const { server, ask, parked, errors } = await serveQueue();
    const watched = track(parked);
    const reply = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" },
      body: JSON.stringify({ type: "deny", reason: "no\u0000", ask }),
    });
    expect(reply.status).toBe(400);
    expect(reply.json).toEqual({
      error: "bad_request",
      message: expect.stringMatching(/^not an answer: .*reason holds U\+0000/) as string,
    });
    // The client's own fault: nothing for the server's onError, and the ask still waits.
    expect(errors).toEqual([]);
    expect(watched.settlements).toBe(0);
    const approved = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" },
      body: JSON.stringify({ type: "approve", ask }),
    });
    expect(approved.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("a deny link whose reason the queue cannot store gets a page saying so, and answers nothing", async () => {
    const { server, ask, parked, errors } = await serveQueue();
    const watched = track(parked);
    const links = signAnswerLink(ask, { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 });
    const reply = await request(links.deny, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "reason=no%00",
    });
    expect(reply.status).toBe(400);
    expect(reply.text).toContain("<title>Not a valid request</title>");
    expect(reply.text).toContain("reason holds U+0000");
    expect(errors).toEqual([]);
    expect(watched.settlements).toBe(0);
  });

  it("never says nothing was answered when the database connection drops after the answer landed", async () => {
    const proxy = await startProxy(DATABASE_URL);
    cleanups.push(() => proxy.close());
    const worker = queue();
    const consoleQueue = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
      schema: db.schema,
      onError: () => undefined,
    });
    cleanups.push(() => consoleQueue.close());
    const errors: unknown[] = [];
    const server = await createApprovalServer({
      approver: consoleQueue.approver(),
      onError: (error) => errors.push(error),
    });
    cleanups.push(() => server.close());
    const ask = makeAsk(1);
    const parked = worker.resolver.resolve(ask, { signal: new AbortController().signal });
    parked.catch(() => undefined);
    const auth = { authorization: `Bearer ${server.token}` };
    for (let i = 0; ; i++) {
      const reply = await request(`${server.url}api/asks`, { headers: auth });
      if ((reply.json as { asks: unknown[] }).asks.length === 1) break;
      if (i > 500) throw new Error("the ask never reached the server");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    // The approval reaches the database and commits; the reply that says so is held in the network.
    // Held on the answer's own statement, not on the id: the console also reads the row to watch it.
    proxy.holdRepliesOn('{"type":"approve"}');
    const answering = request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ type: "approve" }),
    });
    for (let i = 0; ; i++) {
      const { rows } = await db.pool.query<{ state: string }>(`SELECT state FROM "${db.schema}".asks WHERE id = $1`, [
        ask.id,
      ]);
      if (proxy.holding && rows[0]?.state === "answered") break;
      if (i > 500) throw new Error("the answer never landed");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    // The network drops: the console never hears how its answer went.
    await proxy.cut();
    const reply = await answering;
    await expect(parked).resolves.toEqual({ type: "approve" });
    // The call was approved: the reply must not tell the client nothing was answered.
    expect(reply.json).not.toMatchObject({ message: expect.stringContaining("nothing was answered") as string });
    expect(reply.status).toBe(503);
    expect(reply.json).toEqual({
      error: "approver_unavailable",
      message: expect.stringContaining("it may have: check the ask before answering again") as string,
    });
    // A second try, once the network is back, tells: the ask ended.
    await proxy.restore();
    const again = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ type: "deny" }),
    });
    expect(again.status).toBe(409);
    expect(again.json).toMatchObject({ error: "ask_ended" });
  });
  it("a grant store whose database swallows every packet gets 503 within grantsTimeoutMs, and the queue's asks are still answered", async () => {
    const proxy = await startProxy(DATABASE_URL);
    cleanups.push(() => proxy.close());
    // A reply bound far past the server's: the server's own bound is what answers the client.
    const grants = new PostgresGrantStore(db.newPool(2, { connectionString: proxy.url }), {
      project: "acme/shop",
      schema: db.schema,
      replyMs: 600_000,
    });
    await grants.save(new Grant("read", "allow", GrantScope.thisTool()));
    const { server, ask, parked } = await serveQueue({ grants, grantsTimeoutMs: 500, maxConnections: 4 });
    const auth = { authorization: `Bearer ${server.token}` };
    expect((await request(`${server.url}api/grants`, { headers: auth })).status).toBe(200);
    proxy.stall();
    let timer: NodeJS.Timeout | undefined;
    const listings = Promise.all(
      Array.from({ length: 3 }, () => request(`${server.url}api/grants`, { headers: auth })),
    );
    const replies = await Promise.race([
      listings,
      new Promise<"no reply">((resolve) => (timer = setTimeout(() => resolve("no reply"), 10_000))),
    ]);
    clearTimeout(timer);
    expect(replies).not.toBe("no reply");
    for (const reply of replies as Awaited<typeof listings>) {
      expect(reply.status).toBe(503);
      expect(reply.json).toEqual({
        error: "grants_unavailable",
        message: "the grant store did not answer within 500 ms",
      });
    }
    const answered = await request(`${server.url}api/asks/${ask.id}`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ type: "approve" }),
    });
    expect(answered.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("lists the asks already parked in the database from its first request, never an empty list", async () => {
    const worker = queue();
    const asks = [makeAsk(1), makeAsk(2), makeAsk(3)];
    for (const ask of asks)
      worker.resolver.resolve(ask, { signal: new AbortController().signal }).catch(() => undefined);
    // Parked: their rows are written, as a server started now finds them.
    for (let i = 0; ; i++) {
      const rows = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".asks WHERE state = 'pending'`);
      if ((rows.rows[0] as { n: number }).n === asks.length) break;
      if (i > 500) throw new Error("the asks were never written");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const server = await createApprovalServer({ approver: queue().approver(), onError: () => undefined });
    cleanups.push(() => server.close());
    const reply = await request(`${server.url}api/asks`, { headers: { authorization: `Bearer ${server.token}` } });
    expect(reply.status).toBe(200);
    const listed = (reply.json as { asks: { ask: PendingAsk }[] }).asks.map((view) => view.ask.id);
    expect(listed).toEqual(asks.map((ask) => ask.id));
  });

  it("says catching_up on /healthz until the queue's approver has read the asks already pending", async () => {
    const proxy = await startProxy(DATABASE_URL);
    cleanups.push(() => proxy.close());
    // Until LISTEN is in place the approver cannot have caught up: its reply is held in the network.
    proxy.holdRepliesOn("LISTEN");
    const consoleQueue = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
      schema: db.schema,
      onError: () => undefined,
    });
    cleanups.push(() => consoleQueue.close());
    const server = await createApprovalServer({ approver: consoleQueue.approver(), onError: () => undefined });
    cleanups.push(() => server.close());
    for (let i = 0; !proxy.holding; i++) {
      if (i > 500) throw new Error("LISTEN was never sent");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const waiting = await request(`${server.url}healthz`);
    expect(waiting.status).toBe(503);
    expect(waiting.json).toEqual({ ok: false, inbox: "catching_up" });
    proxy.pass();
    for (let i = 0; (await request(`${server.url}healthz`)).status !== 200; i++) {
      if (i > 500) throw new Error("the approver never caught up");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect((await request(`${server.url}healthz`)).json).toEqual({ ok: true, inbox: "ok" });
  });
});
