import { afterEach, describe, expect, it } from "vitest";
import type { AskResolution, PendingAsk } from "loopctl/ask";
import { PostgresAskQueue } from "loopctl/postgres";
import { createApprovalServer, signAnswerLink } from "loopctl/server";
import type { ApprovalServer } from "loopctl/server";
import { makeAsk, track } from "./support/ask-fixtures.js";
import { request } from "./support/http-client.js";
import { usePostgres } from "./support/postgres.js";

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
async function serveQueue(): Promise<{
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
});
