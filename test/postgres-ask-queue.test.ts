import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import type { Socket } from "node:net";
import pg from "pg";
import { afterEach, describe, expect, it, vi } from "vitest";
import { InvalidApproverOptionsError, InvalidAskResolutionError, askDigest } from "loopctl/ask";
import type { AskResolution, PendingAsk } from "loopctl/ask";
import {
  LEASE_LOST_REASON,
  PostgresAskError,
  PostgresAskQueue,
  PostgresConfigError,
  PostgresLeaseError,
  PostgresQueryError,
  PostgresRowError,
  QUEUE_CLOSED_REASON,
  SCHEMA_VERSION,
} from "loopctl/postgres";
import type { PostgresAskQueueOptions } from "loopctl/postgres";
import { z } from "zod";
import { Agent, CancelledError, LoopManagers, defineTool } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";
import { PostgresGrantStore } from "loopctl/postgres";
import {
  BAD_WAIT_OPTIONS,
  makeAsk,
  stuckController,
  unlistenableSignal,
  unlistenableRefusal,
  unreadableReasonRefusal,
  unreadableReasonSignal,
} from "./support/ask-fixtures.js";
import { askingCall } from "./support/engine-fixtures.js";
import { DATABASE_URL, terminateIdleNow, usePostgres, withEachNonPool } from "./support/postgres.js";
import { startProxy } from "./support/tcp-proxy.js";
import type { TcpProxy } from "./support/tcp-proxy.js";
import { AnswerBatch } from "../src/postgres/answers.js";
import { Db } from "../src/postgres/db.js";
import { schemaNames } from "../src/postgres/schema.js";

// Its tests mostly wait (on leases, re-reads, a network gone quiet): the next schema migrates meanwhile.
const db = usePostgres({ prefetch: true });

/**
 * A queue on a pool of its own (as another process would have), closed after the test; its
 * connections carry `application_name` when given, so a test can terminate them.
 */
function queue(options: PostgresAskQueueOptions = {}, application_name?: string): PostgresAskQueue {
  const pool = db.newPool(4, application_name === undefined ? undefined : { application_name });
  const q = new PostgresAskQueue(pool, { schema: db.schema, onError: () => undefined, ...options });
  opened.push(q);
  return q;
}
const opened: PostgresAskQueue[] = [];

afterEach(async () => {
  await Promise.all(opened.splice(0).map((q) => q.close()));
});

async function row(id: string): Promise<{ state: string; reason: string | null; resolution: unknown } | undefined> {
  const { rows } = await db.pool.query<{ state: string; reason: string | null; resolution: unknown }>(
    `SELECT state, reason, resolution FROM "${db.schema}".asks WHERE id = $1`,
    [id],
  );
  return rows[0];
}

async function rowCount(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".asks`);
  return rows[0]?.n ?? 0;
}

async function waitFor(condition: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition never held");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function park(q: PostgresAskQueue, ask: PendingAsk, signal = new AbortController().signal): Promise<AskResolution> {
  return q.resolver.resolve(ask, { signal });
}

/**
 * Parks ask `n` on `worker`, takes it from `inbox`, approves it, and checks the call got the approval.
 * A park that fails shows as its error where the ask was expected, not as a wait for an ask that never comes.
 */
async function parkAndApprove(
  worker: PostgresAskQueue,
  inbox: ReturnType<PostgresAskQueue["approver"]>,
  n: number,
): Promise<PendingAsk> {
  const ask = makeAsk(n);
  const parked = park(worker, ask);
  parked.catch(() => undefined);
  expect(await Promise.race([inbox.next(), parked.catch((e: unknown) => e)])).toEqual(ask);
  expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
  expect(await parked).toEqual({ type: "approve" });
  return ask;
}

/** A worker whose connections all go through `proxy`, with a 1 s lease; closed after the test. */
function workerThrough(proxy: TcpProxy): PostgresAskQueue {
  const worker = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
    schema: db.schema,
    leaseMs: 1_000,
    onError: () => undefined,
  });
  opened.push(worker);
  return worker;
}

/** `promise`'s value, or "still waiting" when it takes over 6 s: a hang fails the assertion instead of the test's timeout. */
function soon<T>(promise: Promise<T>): Promise<T | "still waiting"> {
  return Promise.race([
    promise,
    new Promise<"still waiting">((done) => setTimeout(() => done("still waiting"), 6_000)),
  ]);
}

describe("PostgresAskQueue: a worker and consoles in different places", () => {
  it("hands an ask to a console and its whole answer, remember included, back to the parked call, once", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect(await inbox.next()).toEqual(ask);
    expect(await inbox.resolve(ask.id, { type: "approve", remember: "this_tool" })).toBe(true);
    expect(await parked).toEqual({ type: "approve", remember: "this_tool" });
    expect(await inbox.resolve(ask.id, { type: "deny" })).toBe(false);
    expect(await inbox.ended(ask.id)).toEqual({ type: "answered", verdict: "approve" });
    expect(await row(ask.id)).toEqual({
      state: "answered",
      reason: null,
      resolution: { type: "approve", remember: "this_tool" },
    });
    expect(worker.parked).toBe(0);
  });

  it("lands an answer made for one ask (askDigest) only on a row holding that ask: not on another call that took its id after its row was purged", async () => {
    // No re-read comes during the test: every ending reaches the worker by its notification, that of
    // the call that took the id again included, though the worker saw the id's first ask end.
    const worker = queue({ rereadMs: 600_000 });
    const inbox = queue().approver();
    const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    const first = park(worker, shown);
    expect(await inbox.next()).toEqual(shown);
    expect(await inbox.resolve(shown.id, { type: "deny" }, { askDigest: askDigest(shown) })).toBe(true);
    expect(await first).toEqual({ type: "deny" });
    // The reaper purges ended rows after keepEndedMs; a seeded id generator then parks the id again.
    await db.pool.query(`DELETE FROM "${db.schema}".asks WHERE id = $1`, [shown.id]);
    const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = park(worker, now);
    await waitFor(async () => (await row(now.id))?.state === "pending");

    expect(await inbox.resolve(shown.id, { type: "approve" }, { askDigest: askDigest(shown) })).toBe(false);
    expect(await row(now.id)).toMatchObject({ state: "pending" });
    // Answers given at once go in one statement, each held to its own ask.
    const other = makeAsk(2);
    const third = park(worker, other);
    await waitFor(async () => (await row(other.id))?.state === "pending");
    const [wrong, right] = await Promise.all([
      inbox.resolve(now.id, { type: "approve" }, { askDigest: askDigest({ ...now, argsSha256: "a".repeat(64) }) }),
      inbox.resolve(other.id, { type: "approve" }, { askDigest: askDigest(other) }),
    ]);
    expect([wrong, right]).toEqual([false, true]);
    expect(await third).toEqual({ type: "approve" });
    expect(await row(now.id)).toMatchObject({ state: "pending" });
    expect(await inbox.resolve(now.id, { type: "deny" }, { askDigest: askDigest(now) })).toBe(true);
    expect(await soon(second)).toEqual({ type: "deny" });
  });

  it("delivers an ask whose id an ask that ended moments before had, once that one's row was purged, to a console that saw the first end", async () => {
    // No re-read comes during the test: the console hears of the second ask by its notification alone.
    const worker = queue({ rereadMs: 600_000 });
    const inbox = queue({ rereadMs: 600_000 }).approver();
    const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    const first = park(worker, shown);
    expect(await inbox.next()).toEqual(shown);
    expect(await inbox.resolve(shown.id, { type: "deny" })).toBe(true);
    expect(await first).toEqual({ type: "deny" });
    // The reaper purges ended rows after keepEndedMs; a seeded id generator then parks the id again.
    await db.pool.query(`DELETE FROM "${db.schema}".asks WHERE id = $1`, [shown.id]);
    const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = park(worker, now);
    expect(await soon(inbox.next())).toEqual(now);
    expect(await inbox.resolve(now.id, { type: "deny" }, { askDigest: askDigest(now) })).toBe(true);
    expect(await soon(second)).toEqual({ type: "deny" });
  });

  /**
   * A worker whose connections go through `proxy` under `app`, past its
   * first ask: its first re-read (which reads every parked ask's row) is
   * done, so the next statement of it that names a parked ask is the one the
   * test means.
   */
  async function warmWorker(proxy: TcpProxy, app: string, rereadMs: number) {
    const worker = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url, application_name: app }), {
      schema: db.schema,
      rereadMs,
      leaseMs: 10_000,
      onError: () => undefined,
    });
    opened.push(worker);
    const inbox = queue().approver();
    await parkAndApprove(worker, inbox, 3);
    return { worker, inbox };
  }

  /**
   * Gives up `first`, the call parked on `shown`, by `cancel`; purges its row; parks on `worker` the
   * call that takes its id again, and waits for that call's row.
   */
  async function takeIdAgain(
    worker: PostgresAskQueue,
    shown: PendingAsk,
    cancel: AbortController,
    first: Promise<AskResolution>,
  ): Promise<{ now: PendingAsk; second: Promise<AskResolution> }> {
    cancel.abort(new Error("the run ended"));
    await expect(first).rejects.toThrow("the run ended");
    await db.pool.query(`DELETE FROM "${db.schema}".asks WHERE id = $1`, [shown.id]);
    const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = park(worker, now);
    await waitFor(async () => (await row(now.id))?.state === "pending");
    return { now, second };
  }

  /** Whether the connection of `app` ran a statement that holds `text`, started after `ask`'s row ended. */
  async function ranAfterEnding(app: string, text: string, ask: PendingAsk): Promise<boolean> {
    const { rows } = await db.pool.query(
      `SELECT 1 FROM pg_stat_activity AS s, "${db.schema}".asks AS r
       WHERE s.application_name = $1 AND s.state = 'idle' AND strpos(s.query, $2) > 0
         AND r.id = $3 AND s.query_start > r.ended_at`,
      [app, text, ask.id],
    );
    return rows.length > 0;
  }

  /** Whether a session of `app` waits on a lock in a statement that holds `text`. */
  async function waitsOnLock(app: string, text: string): Promise<boolean> {
    const { rows } = await db.pool.query(
      `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND strpos(query, $2) > 0`,
      [app, text],
    );
    return rows.length > 0;
  }

  it("keeps a call parked that took a purged ask's id when a re-read that asked after the first ask's row finds it gone", async () => {
    const proxy = await startProxy(DATABASE_URL);
    const app = `${db.schema}-gone`;
    const locker = await db.pool.connect();
    try {
      const { worker, inbox } = await warmWorker(proxy, app, 50);
      const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
      const cancel = new AbortController();
      const first = park(worker, shown, cancel.signal);
      await waitFor(async () => (await row(shown.id))?.state === "pending");
      const lease = (
        await db.pool.query(`SELECT worker_id::text AS w FROM "${db.schema}".asks WHERE id = $1`, [shown.id])
      ).rows[0].w as string;
      // A re-read asks whether the first ask's row is still there: the question is held in the network.
      proxy.holdConnectionOn(shown.id);
      await waitFor(() => proxy.holding);
      cancel.abort(new Error("the run ended"));
      await expect(first).rejects.toThrow("the run ended");
      await waitFor(async () => (await row(shown.id))?.state === "withdrawn");
      await db.pool.query(`DELETE FROM "${db.schema}".asks WHERE id = $1`, [shown.id]);
      // The call that takes the id again cannot write its row yet: the table is locked against inserts.
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${db.schema}".asks IN SHARE MODE`);
      const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
      const second = park(worker, now);
      second.catch(() => undefined);
      await waitFor(() => waitsOnLock(app, "INSERT INTO"));
      // The question arrives: no row has that id. The worker's next statement naming its lease
      // is sent on that connection only after the answer was taken in.
      proxy.pass();
      proxy.holdConnectionOn(lease);
      await waitFor(() => proxy.holding);
      proxy.pass();
      await locker.query("COMMIT");
      await waitFor(async () => (await row(now.id))?.state === "pending");
      expect(await inbox.resolve(now.id, { type: "approve" }, { askDigest: askDigest(now) })).toBe(true);
      expect(await soon(second)).toEqual({ type: "approve" });
    } finally {
      await locker.query("ROLLBACK").catch(() => undefined);
      locker.release();
      await proxy.close();
    }
  });

  it("never gives a call that took a purged ask's id that ask's answer, read before the call parked and arriving after", async () => {
    const proxy = await startProxy(DATABASE_URL);
    const app = `${db.schema}-late`;
    try {
      const { worker, inbox } = await warmWorker(proxy, app, 600_000);
      const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
      const cancel = new AbortController();
      const first = park(worker, shown, cancel.signal);
      expect(await inbox.next()).toEqual(shown);
      // The worker reads the row the approval ended; the reply is held in the network.
      proxy.holdRepliesOn(shown.id);
      expect(await inbox.resolve(shown.id, { type: "approve" })).toBe(true);
      await waitFor(async () => proxy.holding && (await ranAfterEnding(app, "a.id = ANY", shown)));
      const { now, second } = await takeIdAgain(worker, shown, cancel, first);
      // The old row's approval arrives now; then the new ask is denied, and its ending read after.
      proxy.pass();
      expect(await inbox.resolve(now.id, { type: "deny" }, { askDigest: askDigest(now) })).toBe(true);
      expect(await soon(second)).toEqual({ type: "deny" });
    } finally {
      await proxy.close();
    }
  });

  it("an answer that lands on the row while the worker has not read it yet, then the call's cancel: the row keeps the answer the console was told landed, the call is cancelled and does not run", async () => {
    const proxy = await startProxy(DATABASE_URL);
    const app = `${db.schema}-told`;
    try {
      const { worker, inbox } = await warmWorker(proxy, app, 600_000);
      const { calling, caller, records, executed } = askingCall(worker.resolver);
      const shown = (await inbox.next())!;
      // The worker reads the row the approval ended; the reply is held in the network.
      proxy.holdRepliesOn(shown.id);
      expect(await inbox.resolve(shown.id, { type: "approve" })).toBe(true);
      await waitFor(async () => proxy.holding && (await ranAfterEnding(app, "a.id = ANY", shown)));
      // The engine owns the cancel: the call ends at once, without waiting on the database.
      caller.abort();
      const error = await calling.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CancelledError);
      expect(executed()).toBe(0);
      expect(records.map((r) => r.verdict)).toEqual(["cancelled"]);
      proxy.pass();
      // The withdrawal that follows changes nothing: the row keeps the answer, and every console reads it.
      await waitFor(() => ranAfterEnding(app, "SET state = 'withdrawn'", shown));
      expect(await row(shown.id)).toMatchObject({ state: "answered", resolution: { type: "approve" } });
      expect(await inbox.ended(shown.id)).toEqual({ type: "answered", verdict: "approve" });
      expect(await inbox.resolve(shown.id, { type: "deny" })).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it("never gives a call that took a purged ask's id the answer its own process landed on that ask, its reply arriving after", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const queueOnProxy = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
        schema: db.schema,
        rereadMs: 600_000,
        leaseMs: 10_000,
        onError: () => undefined,
      });
      opened.push(queueOnProxy);
      const inbox = queueOnProxy.approver();
      // Past its first re-read (which reads every parked ask's row): no read of it sees the approval below.
      await parkAndApprove(queueOnProxy, inbox, 3);
      const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
      const cancel = new AbortController();
      const first = park(queueOnProxy, shown, cancel.signal);
      expect(await inbox.next()).toEqual(shown);
      // The approval lands; the reply that says so is held in the network. It is held by what the
      // approval alone sends, its resolution: a read that names the ask (the one the notification
      // of its row sends, say) may still be on its way, and must pass.
      proxy.holdRepliesOn(JSON.stringify({ type: "approve" }));
      const landed = inbox.resolve(shown.id, { type: "approve" });
      await waitFor(async () => proxy.holding && (await row(shown.id))?.state === "answered");
      const { now, second } = await takeIdAgain(queueOnProxy, shown, cancel, first);
      proxy.pass();
      expect(await landed).toBe(true);
      expect(await inbox.resolve(now.id, { type: "deny" }, { askDigest: askDigest(now) })).toBe(true);
      expect(await soon(second)).toEqual({ type: "deny" });
    } finally {
      await proxy.close();
    }
  });

  it("closes with a call's withdrawal only the row that call wrote: not that of a call that took its id after its row was purged, its withdrawal arriving after", async () => {
    const proxy = await startProxy(DATABASE_URL);
    const app = `${db.schema}-withdrawn`;
    const locker = await db.pool.connect();
    try {
      const { worker, inbox } = await warmWorker(proxy, app, 600_000);
      const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
      const cancel = new AbortController();
      const first = park(worker, shown, cancel.signal);
      await waitFor(async () => (await row(shown.id))?.state === "pending");
      // The call is given up; the statement that withdraws its row is held in the network.
      proxy.holdConnectionOn("cancelled");
      cancel.abort(new Error("the run ended"));
      await expect(first).rejects.toThrow("the run ended");
      await waitFor(() => proxy.holding);
      // The row goes (as the reaper purges an ended one); a seeded id generator parks the id again.
      await db.pool.query(`DELETE FROM "${db.schema}".asks WHERE id = $1`, [shown.id]);
      const now = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };
      const second = park(worker, now);
      await waitFor(async () => (await row(now.id))?.state === "pending");
      // The withdrawal arrives now, and waits on the table until the test has let it run.
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${db.schema}".asks IN SHARE MODE`);
      proxy.pass();
      await waitFor(() => waitsOnLock(app, "reason = v.reason"));
      await locker.query("COMMIT");
      // Read under the same lock: after the withdrawal, which was waiting for it first.
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${db.schema}".asks IN SHARE MODE`);
      const { rows } = await locker.query(`SELECT state, reason FROM "${db.schema}".asks WHERE id = $1`, [now.id]);
      await locker.query("COMMIT");
      expect(rows).toEqual([{ state: "pending", reason: null }]);
      expect(await inbox.resolve(now.id, { type: "deny" }, { askDigest: askDigest(now) })).toBe(true);
      expect(await soon(second)).toEqual({ type: "deny" });
    } finally {
      await locker.query("ROLLBACK").catch(() => undefined);
      locker.release();
      await proxy.close();
    }
  });

  it("hands a call the answer a console gave before the reply to the call's insert reached its worker", async () => {
    const proxy = await startProxy(DATABASE_URL);
    const app = `${db.schema}-early`;
    try {
      const { worker, inbox } = await warmWorker(proxy, app, 600_000);
      const ask = makeAsk(1);
      // The row is written; the reply that says so is held in the network.
      proxy.holdRepliesOn(ask.id);
      const parked = park(worker, ask);
      expect(await inbox.next()).toEqual(ask);
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
      // The worker hears the ending and reads the row before it knows the row is its call's.
      await waitFor(async () => ranAfterEnding(app, "a.id = ANY", ask));
      proxy.pass();
      expect(await soon(parked)).toEqual({ type: "approve" });
    } finally {
      await proxy.close();
    }
  });

  it("hands a console a pending ask once, and no ending for it, when a read of rows begun before its row was written finds none after the console was handed it", async () => {
    const proxy = await startProxy(DATABASE_URL);
    const app = `${db.schema}-unwritten`;
    const locker = await db.pool.connect();
    try {
      // A worker and a console on one queue, as in one process.
      const shared = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url, application_name: app }), {
        schema: db.schema,
        rereadMs: 600_000,
        leaseMs: 30_000,
        onError: () => undefined,
      });
      opened.push(shared);
      const inbox = shared.approver();
      await parkAndApprove(shared, inbox, 1);
      // The call's row cannot be written yet: the table is locked against inserts.
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${db.schema}".asks IN SHARE MODE`);
      const ask = makeAsk(2);
      const parked = park(shared, ask);
      await waitFor(() => waitsOnLock(app, "INSERT INTO"));
      // LISTEN is made anew, and the re-read that follows asks after the parked call's row: none yet.
      // Its reply is held in the network.
      proxy.holdRepliesOn(ask.id);
      const { rows } = await db.pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type IS DISTINCT FROM 'Lock'`,
        [app],
      );
      await db.pool.query("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", [rows.map((r) => r.pid)]);
      await waitFor(() => proxy.holding);
      await locker.query("COMMIT");
      await waitFor(async () => (await row(ask.id))?.state === "pending");
      // Another inbox opens: the pending asks are read, and offered to every inbox of the queue.
      shared.approver();
      expect(await soon(inbox.next())).toEqual(ask);
      const ending = inbox.ended(ask.id);
      // The reply saying no row has that id arrives, then the notification of the row's insert.
      proxy.pass();
      const later = makeAsk(3);
      const parkedLater = park(shared, later);
      expect(await soon(inbox.next())).toEqual(later);
      expect(await queue().approver().resolve(ask.id, { type: "approve" })).toBe(true);
      expect(await soon(parked)).toEqual({ type: "approve" });
      expect(await soon(ending)).toEqual({ type: "answered", verdict: "approve" });
      expect(await inbox.resolve(later.id, { type: "deny" })).toBe(true);
      expect(await soon(parkedLater)).toEqual({ type: "deny" });
    } finally {
      await locker.query("ROLLBACK").catch(() => undefined);
      locker.release();
      await proxy.close();
    }
  });

  /**
   * Runs `answer` while another session holds the row of `ask` locked: the answer reads the row, its UPDATE waits
   * for the lock (seen in pg_stat_activity under `app`), and meanwhile the row comes to hold `changed`, still pending.
   */
  async function changedUnderAnswer<T>(app: string, ask: PendingAsk, changed: PendingAsk, answer: () => Promise<T>) {
    const other = await db.pool.connect();
    try {
      await other.query("BEGIN");
      await other.query(`SELECT 1 FROM "${db.schema}".asks WHERE id = $1 FOR UPDATE`, [ask.id]);
      const answered = answer();
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%UPDATE%'`,
          [app],
        );
        return rows.length === 1;
      });
      await other.query(`UPDATE "${db.schema}".asks SET ask = $2::jsonb WHERE id = $1`, [
        ask.id,
        JSON.stringify(changed),
      ]);
      await other.query("COMMIT");
      return await answered;
    } finally {
      other.release();
    }
  }

  it("lands an answer made for one ask (askDigest) on no row whose ask changed between the answer's read and its write", async () => {
    const app = `${db.schema}-answers`;
    const worker = queue();
    const inbox = queue({}, app).approver();
    const shown = makeAsk(1, { tool: "read_file", prompt: "Read notes.txt?" });
    // Caught from the start: it rejects as soon as the worker reads its answered row.
    const parked = park(worker, shown).catch((e: unknown) => e);
    await waitFor(async () => (await row(shown.id))?.state === "pending");
    const changed = { ...shown, tool: "delete_file", prompt: "Delete the whole home folder?" };

    const landed = changedUnderAnswer(app, shown, changed, () =>
      inbox.resolve(shown.id, { type: "approve" }, { askDigest: askDigest(shown) }),
    );
    expect(await landed).toBe(false);
    expect(await row(shown.id)).toMatchObject({ state: "pending" });
    expect(await inbox.resolve(shown.id, { type: "deny" }, { askDigest: askDigest(changed) })).toBe(true);
    // Made for the changed ask, the answer is not the call's, a denial included (its `remember` would be
    // a grant for what the row shows): the call rejects, and the engine denies.
    expect(await parked).toMatchObject({
      code: "POSTGRES_ROW_MALFORMED",
      key: shown.id,
      message: expect.stringContaining("not the ask its call parked") as unknown,
    });
  });

  it("lands answers given at once, each held to the ask it was made for: one whose row's ask changed under the batch does not land", async () => {
    const app = `${db.schema}-batch`;
    const worker = queue();
    const asks = [makeAsk(1), makeAsk(2)];
    const parked = asks.map((ask) => park(worker, ask));
    await waitFor(async () => (await Promise.all(asks.map((ask) => row(ask.id)))).every((r) => r?.state === "pending"));
    const { rows } = await db.pool.query<{ id: string; stored: string }>(
      `SELECT id::text AS id, ask::text AS stored FROM "${db.schema}".asks WHERE id = ANY($1::uuid[])`,
      [asks.map((ask) => ask.id)],
    );
    const stored = new Map(rows.map((r) => [r.id, r.stored]));
    // Two answers in one tick go in one statement: its form for a batch, the one a busy console sends.
    const answers = new AnswerBatch(
      new Db(db.newPool(2, { application_name: app }), schemaNames("test", db.schema), 10_000),
      () => () => undefined,
      () => [],
    );
    const second = asks[1]!;
    const changed = { ...second, prompt: "Delete the whole home folder?" };
    const landed = await changedUnderAnswer(app, second, changed, () =>
      Promise.all(asks.map((ask) => answers.land(ask.id, { type: "approve" }, stored.get(ask.id)))),
    );
    expect(landed).toEqual([true, false]);
    expect(await parked[0]).toEqual({ type: "approve" });
    expect(await row(second.id)).toMatchObject({ state: "pending" });
  });

  it("lands no answer made for one ask (askDigest) whose inbox closed while the answer read the row: false, and the ask stays pending", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const worker = queue();
      const consoleQueue = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
        schema: db.schema,
        onError: () => undefined,
      });
      opened.push(consoleQueue);
      const inbox = consoleQueue.approver();
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      expect(await inbox.next()).toEqual(ask);
      // The answer reads the row first; the reply is held in the network.
      proxy.holdRepliesOn(ask.id);
      const answered = inbox.resolve(ask.id, { type: "approve" }, { askDigest: askDigest(ask) });
      await waitFor(() => proxy.holding);
      await consoleQueue.close();
      proxy.pass();
      expect(await soon(answered)).toBe(false);
      expect(await row(ask.id)).toMatchObject({ state: "pending" });
      expect(await queue().approver().resolve(ask.id, { type: "deny" })).toBe(true);
      expect(await soon(parked)).toEqual({ type: "deny" });
    } finally {
      await proxy.close();
    }
  });

  it("refuses resolve() options that are not an object, or a digest that is not 64 lowercase hex digits (undefined included), writing nothing", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect(await inbox.next()).toEqual(ask);
    for (const [options, argument] of [
      [null, "options"],
      [{ askDigest: ask.argsDigest }, "options.askDigest"],
      // Misspelt, it would answer without the check it was meant to make.
      [{ askdigest: askDigest(ask) }, "options"],
      // Given as undefined (a request that carried none), it too would answer without the check.
      [{ askDigest: undefined }, "options.askDigest"],
    ] as const) {
      const error: unknown = await inbox
        .resolve(ask.id, { type: "approve" }, options as never)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidApproverOptionsError);
      expect(error).toMatchObject({ code: "ASK_OPTIONS_INVALID", method: "resolve", argument });
    }
    expect(await row(ask.id)).toMatchObject({ state: "pending" });
    expect(await inbox.resolve(ask.id, { type: "approve" }, { askDigest: askDigest(ask) })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
  });

  it("shows every pending ask to every console, including asks parked before it opened, and takes one answer", async () => {
    const worker = queue();
    const first = makeAsk(1);
    const second = makeAsk(2, { tool: "deploy" });
    const parkedFirst = park(worker, first);
    await waitFor(async () => (await row(first.id)) !== undefined);
    const consoleA = queue().approver();
    const consoleB = queue().approver();
    expect(await consoleA.next()).toEqual(first);
    expect(await consoleB.next()).toEqual(first);
    const parkedSecond = park(worker, second);
    expect(await consoleA.next()).toEqual(second);
    expect(await consoleB.next()).toEqual(second);

    const answers = await Promise.all([
      consoleA.resolve(first.id, { type: "deny", reason: "not today" }),
      consoleB.resolve(first.id, { type: "approve" }),
    ]);
    expect(answers.filter(Boolean)).toHaveLength(1);
    const won = answers[0] ? { type: "deny", reason: "not today" } : { type: "approve" };
    expect(await parkedFirst).toEqual(won);
    expect(await consoleB.resolve(second.id, { type: "deny" })).toBe(true);
    expect(await parkedSecond).toEqual({ type: "deny" });
    expect(await consoleA.ended(second.id)).toEqual({ type: "answered", verdict: "deny" });
  });

  it("closes the row when the engine stops waiting: the call rejects with the reason, a late answer is refused", async () => {
    const worker = queue();
    const consoleQueue = queue();
    const inbox = consoleQueue.approver();
    const expiring = makeAsk(1);
    const cancelled = makeAsk(2);
    const deadline = new AbortController();
    const cancel = new AbortController();
    const parkedExpiring = park(worker, expiring, deadline.signal);
    const parkedCancelled = park(worker, cancelled, cancel.signal);
    expect((await inbox.next())?.id).toBe(expiring.id);
    const endedExpiring = inbox.ended(expiring.id);

    const expired = new Error(`ask ${expiring.id} expired`);
    deadline.abort(expired);
    await expect(parkedExpiring).rejects.toBe(expired);
    expect(await endedExpiring).toEqual({ type: "withdrawn", reason: "expired" });
    expect(await inbox.resolve(expiring.id, { type: "approve" })).toBe(false);

    cancel.abort();
    await expect(parkedCancelled).rejects.toMatchObject({ name: "AbortError" });
    await waitFor(async () => (await row(cancelled.id))?.state === "withdrawn");
    expect(await row(cancelled.id)).toMatchObject({ reason: "cancelled" });
    expect(await inbox.resolve(cancelled.id, { type: "approve" })).toBe(false);
    expect(await inbox.ended(cancelled.id)).toEqual({ type: "withdrawn", reason: "cancelled" });

    // A cancel whose own text says "expired" (a session's) is a cancel, not the engine's deadline.
    const sessionEnded = makeAsk(3);
    const session = new AbortController();
    const parkedSession = park(worker, sessionEnded, session.signal);
    // Taken first: an ask this console heard of while pending could otherwise still be handed out below.
    expect((await inbox.next())?.id).toBe(sessionEnded.id);
    session.abort(new Error("the user's session expired"));
    await expect(parkedSession).rejects.toThrow("session expired");
    await waitFor(async () => (await row(sessionEnded.id))?.state === "withdrawn");
    expect(await row(sessionEnded.id)).toMatchObject({ reason: "cancelled" });

    // Ended before this console took it: never delivered.
    const next = inbox.next({ signal: AbortSignal.timeout(300) });
    await expect(next).rejects.toMatchObject({ name: "TimeoutError" });
    expect(
      await queue()
        .approver()
        .next({ signal: AbortSignal.timeout(300) })
        .catch((e: unknown) => e),
    ).toMatchObject({
      name: "TimeoutError",
    });
  });

  it("closes the row at once when its withdrawal goes to a pooled connection the server ended: sent again on another, not left answerable until the next heartbeat", async () => {
    const app = `${db.schema}-withdrawer`;
    // A heartbeat every 10 s: the withdrawal's retry there comes after the wait below.
    const worker = queue({ leaseMs: 30_000 }, app);
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const cancel = new AbortController();
    const parked = park(worker, ask, cancel.signal);
    expect((await inbox.next())?.id).toBe(ask.id);
    // Terminated, and the call cancelled at once: its withdrawal goes to a pooled connection, unheard of its end.
    expect(terminateIdleNow(app)).toBeGreaterThan(0);
    cancel.abort();
    await expect(parked).rejects.toMatchObject({ name: "AbortError" });
    await waitFor(async () => (await row(ask.id))?.state === "withdrawn", 5_000);
    expect(await row(ask.id)).toMatchObject({ reason: "cancelled" });
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
  });

  it("never writes an ask whose signal aborted before the park", async () => {
    const worker = queue();
    const ask = makeAsk(1);
    const reason = new Error("cancelled first");
    await expect(park(worker, ask, AbortSignal.abort(reason))).rejects.toBe(reason);
    expect(await row(ask.id)).toBeUndefined();
  });

  it("settles everything on close: parked calls deny, rows close, next() gives undefined, ended() says closed", async () => {
    const worker = queue();
    const consoleQueue = queue();
    const inbox = consoleQueue.approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const waitingNext = inbox.next();
    const waitingEnd = inbox.ended(ask.id);

    await worker.close();
    expect(await parked).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
    expect(await row(ask.id)).toMatchObject({ state: "withdrawn", reason: "closed" });
    expect(await waitingEnd).toEqual({ type: "withdrawn", reason: "closed" });
    expect(await park(worker, makeAsk(2))).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });

    await consoleQueue.close();
    expect(await waitingNext).toBeUndefined();
    expect(await inbox.next()).toBeUndefined();
    expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "closed" });
    expect(await inbox.resolve(randomUUID(), { type: "approve" })).toBe(false);
    expect(consoleQueue.approver().closed).toBe(true);
    // Closing releases every connection: the pool has none left out.
    await worker.close();
  });

  it("close() waits for a park in flight: it resolves with the row closed and nothing of the queue left to run", async () => {
    const errors: unknown[] = [];
    const pool = db.newPool(4);
    // Its parks in flight, their inserts waiting behind the lock, are denied after leaseMs: a short lease, a short wait.
    const worker = new PostgresAskQueue(pool, { schema: db.schema, leaseMs: 3_000, onError: (e) => errors.push(e) });
    const inbox = queue().approver();
    // The lease is taken and LISTEN is in place.
    const first = makeAsk(0);
    const parkedFirst = park(worker, first);
    expect((await inbox.next())?.id).toBe(first.id);
    expect(await inbox.resolve(first.id, { type: "approve" })).toBe(true);
    expect(await parkedFirst).toEqual({ type: "approve" });
    // Inserts into asks wait behind this lock, so the next parks are surely in flight at close().
    const blocker = await db.pool.connect();
    let closedWhen: "before" | "after" | undefined;
    try {
      await blocker.query("BEGIN");
      await blocker.query(`LOCK TABLE "${db.schema}".asks IN SHARE MODE`);
      const asks = Array.from({ length: 20 }, (_, n) => makeAsk(n + 1));
      const parked = asks.map((ask) => park(worker, ask));
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO %' AND query LIKE $1",
          [`%${db.schema}%`],
        );
        return rows.length > 0;
      });
      const closing = worker.close().then(() => {
        closedWhen ??= "before";
      });
      for (const result of await Promise.all(parked))
        expect(result).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
      // A close that does not wait for the insert resolves at once; one that does cannot until the lock goes.
      await Promise.race([closing, new Promise((resolve) => setTimeout(resolve, 1_000))]);
      closedWhen ??= "after";
      await blocker.query("COMMIT");
      await closing;
      const { rows } = await db.pool.query(`SELECT id FROM "${db.schema}".asks WHERE state = 'pending'`);
      expect({ closedWhen, pending: rows }).toEqual({ closedWhen: "after", pending: [] });
      const closed = await db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${db.schema}".asks WHERE state = 'withdrawn' AND reason = 'closed'`,
      );
      expect(closed.rows[0]?.n).toBe(asks.length);
      await pool.end();
      expect(errors).toEqual([]);
    } finally {
      await blocker.query("ROLLBACK").catch(() => undefined);
      blocker.release();
    }
  });

  it("close() racing an answer: an answer that landed first is the call's, never a true for a denied call", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    // The row is locked, so the answer waits for it, and close()'s statements queue behind the answer.
    const blocker = await db.pool.connect();
    try {
      await blocker.query("BEGIN");
      await blocker.query(`SELECT 1 FROM "${db.schema}".asks WHERE id = $1 FOR UPDATE`, [ask.id]);
      const answer = inbox.resolve(ask.id, { type: "approve", remember: "this_call" });
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE %' AND query LIKE $1",
          [`%${db.schema}%`],
        );
        return rows.length > 0;
      });
      const closing = worker.close();
      await new Promise((resolve) => setTimeout(resolve, 200));
      await blocker.query("ROLLBACK");
      expect(await answer).toBe(true);
      expect(await parked).toEqual({ type: "approve", remember: "this_call" });
      await closing;
      expect(await row(ask.id)).toMatchObject({ state: "answered" });
    } finally {
      await blocker.query("ROLLBACK").catch(() => undefined);
      blocker.release();
    }
  });

  it("close() whose statement goes to a pooled connection the server ended sends it again on another: its calls are denied at once, and no answer lands after", async () => {
    const app = `${db.schema}-closer`;
    const worker = queue({ leaseMs: 10_000 }, app);
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    // Terminated, and close() called at once: its statement goes to a pooled connection, unheard of its end.
    expect(terminateIdleNow(app)).toBeGreaterThan(0);
    const closing = worker.close();
    // Its row closed now, not left answerable until the lease runs out with the call denied all the same.
    expect(await soon(parked)).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    await closing;
    expect(await row(ask.id)).toMatchObject({ state: "withdrawn", reason: "closed" });
  });

  it("close() that cannot reach the database still settles its parked calls, by the time its lease runs out", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const worker = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
        schema: db.schema,
        leaseMs: 900,
        onError: () => undefined,
      });
      const inbox = queue().approver();
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      expect((await inbox.next())?.id).toBe(ask.id);
      proxy.stall();
      void worker.close();
      const outcome = await Promise.race([
        parked,
        new Promise<"still parked">((done) => setTimeout(() => done("still parked"), 5_000)),
      ]);
      expect(outcome).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
    } finally {
      await proxy.close();
    }
  });

  it("close() while a call's row is being written leaves the call to its row: an answer that lands on it first is the call's", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const worker = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
        schema: db.schema,
        onError: () => undefined,
      });
      opened.push(worker);
      const inbox = queue().approver();
      const ask = makeAsk(1, { prompt: `Run the migration ${randomUUID()}?` });
      // The row goes in; the reply that says so is held in the network (only the insert sends the prompt).
      proxy.holdRepliesOn(ask.prompt);
      const parked = park(worker, ask);
      let settled = false;
      void parked.then(() => (settled = true));
      expect((await inbox.next())?.id).toBe(ask.id);
      await waitFor(() => proxy.holding);
      const closing = worker.close();
      // A console answers the row it sees: the answer lands, so the call must not be denied.
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
      expect(settled).toBe(false);
      proxy.pass();
      expect(await parked).toEqual({ type: "approve" });
      await closing;
      expect((await row(ask.id))?.state).toBe("answered");
    } finally {
      await proxy.close();
    }
  });

  it("close() that finds the database gone denies its parked calls only once no answer can land on them", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      // A long lease: the database keeps it well after close() fails to reach it.
      const pool = db.newPool(4, { connectionString: proxy.url, connectionTimeoutMillis: 500 });
      const worker = new PostgresAskQueue(pool, { schema: db.schema, leaseMs: 3_000, onError: () => undefined });
      const inbox = queue().approver();
      const ask = makeAsk(1, { prompt: `Run the migration ${randomUUID()}?` });
      // The call must be parked (its insert confirmed to the worker) before the database goes: a
      // console can see the row before the insert's reply reaches the worker.
      proxy.holdRepliesOn(ask.prompt);
      const parked = park(worker, ask);
      expect((await inbox.next())?.id).toBe(ask.id);
      await waitFor(() => proxy.holding);
      const port = proxy.heldRepliesPort;
      const inserted = new Promise<void>((done) =>
        pool.on("release", (_error: unknown, client: pg.PoolClient) => {
          if ((client as unknown as { connection: { stream: Socket } }).connection.stream.localPort === port) done();
        }),
      );
      proxy.pass();
      await inserted;
      await proxy.cut();
      const closing = worker.close();
      expect(await parked).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
      // The call was denied: an answer now must not land, or the console is told true for it.
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
      await closing;
    } finally {
      await proxy.close();
    }
  });

  it("closing one inbox leaves the asks pending for the others", async () => {
    const worker = queue();
    const consoleQueue = queue();
    const leaving = consoleQueue.approver();
    const staying = consoleQueue.approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await leaving.next())?.id).toBe(ask.id);
    const waiting = leaving.next();
    leaving.close();
    expect(await waiting).toBeUndefined();
    expect(await leaving.resolve(ask.id, { type: "approve" })).toBe(false);
    expect((await staying.next())?.id).toBe(ask.id);
    expect(await staying.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
  });

  it("an inbox's iterator stopped while it waits for an ask ends at once and takes no ask: the inbox's next() gets it", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const iterator = inbox[Symbol.asyncIterator]();
    const waiting = iterator.next();
    let stopped = false;
    void iterator.return(undefined).then(() => (stopped = true));
    await waitFor(() => stopped, 2_000);
    expect(await waiting).toEqual({ done: true, value: undefined });
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect(await inbox.next()).toEqual(ask);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
  });
});

describe("PostgresAskQueue with the engine", () => {
  it("parks an Agent's call, runs it once approved, and remembers the answer for the next run", async () => {
    const deployed: string[] = [];
    const deploy = defineTool({
      name: "deploy",
      description: "Deploy a version",
      input: z.object({ version: z.string() }),
      execute: ({ version }) => {
        deployed.push(version);
        return `deployed ${version}`;
      },
    });
    const worker = queue();
    const managers = new LoopManagers()
      .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name}?` }) })
      .withAskResolver(worker.resolver)
      .withAskTimeout(30_000)
      .withGrantStore(new PostgresGrantStore(db.newPool(2), { project: "shop", schema: db.schema }));
    const run = (version: string): Promise<unknown> =>
      new Agent({
        model: new ScriptedModel([
          { toolCalls: [{ id: `c-${version}`, name: "deploy", input: { version } }] },
          { text: "ok" },
        ]),
        tools: [deploy],
        managers,
      }).run("ship");

    const inbox = queue().approver();
    const first = run("1.0.0");
    const ask = await inbox.next();
    expect(ask).toMatchObject({ tool: "deploy", callId: "c-1.0.0", prompt: "Run deploy?" });
    expect(deployed).toEqual([]);
    expect(await inbox.resolve(ask!.id, { type: "approve", remember: "this_tool" })).toBe(true);
    expect(await first).toMatchObject({ records: [{ verdict: "ask_allowed" }] });
    expect(deployed).toEqual(["1.0.0"]);

    // Remembered in the database: the next run is allowed by the grant without asking anyone.
    expect(await run("1.0.1")).toMatchObject({ records: [{ verdict: "allow", ruleId: "grant" }] });
    expect(deployed).toEqual(["1.0.0", "1.0.1"]);
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".asks`);
    expect(rows).toEqual([{ n: 1 }]);
  });

  it("never runs a call whose row's ask was changed while it was parked: the approval of the changed ask is a denial, naming the row", async () => {
    const deleted: string[] = [];
    const remove = defineTool({
      name: "delete_file",
      description: "Delete a file",
      input: z.object({ path: z.string() }),
      execute: ({ path }) => {
        deleted.push(path);
        return `deleted ${path}`;
      },
    });
    const worker = queue();
    const managers = new LoopManagers()
      .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name}?` }) })
      .withAskResolver(worker.resolver)
      .withAskTimeout(30_000);
    const run = new Agent({
      model: new ScriptedModel([
        { toolCalls: [{ id: "c-1", name: "delete_file", input: { path: "/home" } }] },
        { text: "ok" },
      ]),
      tools: [remove],
      managers,
    }).run("tidy up");
    const inbox = queue().approver();
    const ask = await inbox.next();
    expect(ask).toMatchObject({ tool: "delete_file", prompt: "Run delete_file?" });
    await db.pool.query(
      `UPDATE "${db.schema}".asks SET ask = ask || '{"tool":"read_file","prompt":"Run read_file?"}' WHERE id = $1`,
      [ask!.id],
    );
    const shown = await queue().approver().next();
    expect(shown).toMatchObject({ id: ask!.id, tool: "read_file", prompt: "Run read_file?" });
    expect(await inbox.resolve(ask!.id, { type: "approve" })).toBe(true);
    expect(await run).toMatchObject({
      records: [
        {
          verdict: "ask_denied",
          reason: expect.stringContaining("not the ask its call parked") as unknown,
        },
      ],
    });
    expect(deleted).toEqual([]);
  });

  it("closes the row of an ask the engine's deadline ended as expired, and of a run cancelled as cancelled", async () => {
    const ran: unknown[] = [];
    const tool = defineTool({ name: "rm", description: "Remove", input: z.object({}), execute: () => ran.push(1) });
    const worker = queue();
    const inbox = queue().approver();
    const agent = (managers: LoopManagers): Agent =>
      new Agent({
        model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: "rm", input: {} }] }, { text: "ok" }]),
        tools: [tool],
        managers,
      });
    const asking = new LoopManagers()
      .withHook({ preToolUse: () => ({ type: "ask", prompt: "Remove?" }) })
      .withAskResolver(worker.resolver);

    const expiring = agent(asking.withAskTimeout(300)).run("go");
    const expired = await inbox.next();
    expect(await expiring).toMatchObject({ records: [{ verdict: "ask_expired" }] });
    await waitFor(async () => (await row(expired!.id))?.state === "withdrawn");
    expect(await row(expired!.id)).toMatchObject({ reason: "expired" });

    // A cancel whose reason says "expired" too (a session's) is still a cancel.
    const session = new AbortController();
    const cancelled = agent(asking).run("go", { signal: session.signal });
    const asked = await inbox.next();
    session.abort(new Error("the user's session expired"));
    await expect(cancelled).rejects.toBeInstanceOf(CancelledError);
    await waitFor(async () => (await row(asked!.id))?.state === "withdrawn");
    expect(await row(asked!.id)).toMatchObject({ reason: "cancelled" });
    expect(ran).toEqual([]);
  });

  it("denies the call when the queue closes while it is parked, and never runs it", async () => {
    const ran: unknown[] = [];
    const tool = defineTool({ name: "rm", description: "Remove", input: z.object({}), execute: () => ran.push(1) });
    const worker = queue();
    const managers = new LoopManagers()
      .withHook({ preToolUse: () => ({ type: "ask", prompt: "Remove?" }) })
      .withAskResolver(worker.resolver);
    const running = new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name: "rm", input: {} }] }, { text: "ok" }]),
      tools: [tool],
      managers,
    }).run("go");
    await queue().approver().next();
    await worker.close();
    expect(await running).toMatchObject({
      records: [{ verdict: "ask_denied", reason: `denied by approver: ${QUEUE_CLOSED_REASON}` }],
    });
    expect(ran).toEqual([]);
  });
});

describe("PostgresAskQueue: LISTEN/NOTIFY, and what happens when it drops", () => {
  it("wakes the parked call and the console through notifications, not the re-read", async () => {
    // A re-read once in ten minutes: only notifications can get these through in time.
    const worker = queue({ rereadMs: 600_000 });
    const inbox = queue({ rereadMs: 600_000 }).approver();
    for (let n = 0; n < 20; n++) await parkAndApprove(worker, inbox, n);
  });

  it("settles a call parked on the queue that answered it from the answer's own UPDATE, with no notification or re-read", async () => {
    // The class's own example: one queue is the worker and the console.
    const both = queue({ rereadMs: 600_000 });
    const inbox = both.approver();
    const answered = async (n: number): Promise<AskResolution | "still parked"> => {
      const ask = makeAsk(n);
      const parked = park(both, ask);
      expect((await inbox.next())?.id).toBe(ask.id);
      expect(await inbox.resolve(ask.id, { type: "approve", remember: "this_call" })).toBe(true);
      return Promise.race([
        parked,
        new Promise<"still parked">((done) => setTimeout(() => done("still parked"), 5_000)),
      ]);
    };
    for (let n = 0; n < 5; n++) expect(await answered(n)).toEqual({ type: "approve", remember: "this_call" });
    // No notification at all: only what the UPDATE returned can end the call.
    await db.pool.query(`ALTER TABLE "${db.schema}".asks DISABLE TRIGGER asks_end`);
    expect(await answered(5)).toEqual({ type: "approve", remember: "this_call" });
    expect(both.parked).toBe(0);
  });

  it("never reads back a row its own answer ended: the answer's reply is the news, not the notification", async () => {
    const worker = queue({ rereadMs: 600_000 });
    const pool = db.newPool(4);
    const endingReads: string[] = [];
    let marksRead = 0;
    pool.on("connect", (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as { query: unknown }).query = (config: unknown, ...rest: unknown[]) => {
        const text = typeof config === "string" ? config : (config as { text?: string } | null)?.text;
        if (text?.includes("a.worker_id::text AS worker_id") && text.startsWith("SELECT")) endingReads.push(text);
        const result = query(config, ...rest);
        if (text?.includes("pg_snapshot_xmin") && result instanceof Promise) void result.then(() => (marksRead += 1));
        return result;
      };
    });
    const consoleQueue = new PostgresAskQueue(pool, { schema: db.schema, rereadMs: 600_000, onError: () => undefined });
    opened.push(consoleQueue);
    const inbox = consoleQueue.approver();
    // The re-read once LISTEN takes hold reads the endings of every ask then delivered, as it must (a
    // notification may have been missed before it): let it pass first, so what follows is answers only.
    await waitFor(() => marksRead > 0);
    for (let n = 0; n < 20; n++) {
      const ask = await parkAndApprove(worker, inbox, n);
      expect(await inbox.ended(ask.id)).toEqual({ type: "answered", verdict: "approve" });
    }
    expect(endingReads).toEqual([]);
  });

  it("an answer's reply carries the ask only for a call parked on the queue that answered, which checks it: a console is sent none", async () => {
    const worker = queue({ rereadMs: 600_000 });
    const sent: Record<string, unknown>[] = [];
    const pool = db.newPool(4);
    pool.on("connect", (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      (client as { query: unknown }).query = (config: unknown, ...rest: unknown[]) => {
        const text = typeof config === "string" ? config : ((config as { text?: string } | null)?.text ?? "");
        const result = query(config, ...rest);
        if (/^\s*(WITH locked[\s\S]*)?UPDATE\b[\s\S]*state = 'answered'/.test(text) && result instanceof Promise) {
          void result.then(
            (done: { rows: Record<string, unknown>[] }) => sent.push(...done.rows),
            () => undefined,
          );
        }
        return result;
      };
    });
    // A console that is a worker too: its own parked call's answer carries the ask, the other worker's do not.
    const both = new PostgresAskQueue(pool, { schema: db.schema, rereadMs: 600_000, onError: () => undefined });
    opened.push(both);
    const inbox = both.approver();
    const asks = [0, 1, 2].map((n) => makeAsk(n, { prompt: `secret prompt #${n}` }));
    const parks = asks.map((ask) => park(worker, ask));
    const own = makeAsk(3, { prompt: "own prompt" });
    const ownPark = park(both, own);
    for (let i = 0; i < 4; i++) await soon(inbox.next());
    // One answer alone, then two given at once (one statement for both).
    expect(await inbox.resolve(asks[0]!.id, { type: "approve" })).toBe(true);
    expect(
      await Promise.all([
        inbox.resolve(asks[1]!.id, { type: "approve" }),
        inbox.resolve(asks[2]!.id, { type: "deny", reason: "no" }),
      ]),
    ).toEqual([true, true]);
    expect(await inbox.resolve(own.id, { type: "approve" })).toBe(true);
    expect((await Promise.all(parks)).map((r) => r.type)).toEqual(["approve", "approve", "deny"]);
    expect(await soon(ownPark)).toEqual({ type: "approve" });
    await waitFor(() => sent.length === 4);
    for (const [n, ask] of asks.entries()) {
      const reply = sent.find((r) => r["id"] === ask.id);
      expect(reply, `answer ${n}`).toBeDefined();
      expect(JSON.stringify(reply), `answer ${n}`).not.toContain(ask.prompt);
    }
    expect(sent.find((r) => r["id"] === own.id)?.["answered_ask"]).toEqual(own);
  });

  it("reads the row when its own answer did not land and an ending was heard while it was in flight", async () => {
    // The worker reads the row before the other answer commits: only its re-read finds that answer.
    const worker = queue({ rereadMs: 100 });
    const inbox = queue({ rereadMs: 600_000 }).approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    // A console waiting for the ending: it learns it only from a read of the row after the ending.
    const ending = inbox.ended(ask.id);
    expect(await Promise.race([ending, new Promise((resolve) => setTimeout(() => resolve("waiting"), 200))])).toBe(
      "waiting",
    );
    // Another answer, in a transaction that holds the table and sends no notification of its own.
    const other = await db.pool.connect();
    try {
      await other.query("BEGIN");
      await other.query(`ALTER TABLE "${db.schema}".asks DISABLE TRIGGER asks_end`);
      await other.query(
        `UPDATE "${db.schema}".asks SET state = 'answered', resolution = '{"type":"deny","reason":"other"}', ended_at = now() WHERE id = $1`,
        [ask.id],
      );
      const mine = inbox.resolve(ask.id, { type: "approve" });
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE%' AND pid <> $1",
          [(other as unknown as { processID: number }).processID],
        );
        return rows.length > 0;
      });
      // The ending is heard while this console's answer waits: it says only "read the row".
      await db.pool.query("SELECT pg_notify($1, $2)", [`${db.schema}.asks`, `end ${ask.id}`]);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await other.query(`ALTER TABLE "${db.schema}".asks ENABLE TRIGGER asks_end`);
      await other.query("COMMIT");
      expect(await mine).toBe(false);
    } finally {
      other.release();
    }
    expect(await ending).toEqual({ type: "answered", verdict: "deny" });
    expect(await parked).toEqual({ type: "deny", reason: "other" });
  });

  it("sends one statement at a time on its listening connection: ending reads, re-reads and lease renewals wait their turn", async () => {
    // node-postgres queues statements sent together on one connection, but warns that pg 9 will not
    // (DeprecationWarning, in the user's process): the listening connection carries three kinds of them.
    let inFlight = 0;
    let most = 0;
    let renewals = 0;
    const pool = db.newPool(4);
    pool.on("connect", (client) => {
      const query = client.query.bind(client) as (...args: unknown[]) => unknown;
      const outstanding = new Set<unknown>();
      (client as { query: unknown }).query = (...args: unknown[]) => {
        const [sql] = args;
        const text = typeof sql === "string" ? sql : (sql as { text?: unknown } | undefined)?.text;
        if (typeof text === "string" && text.includes("WITH renewed AS")) renewals += 1;
        const result = query(...args);
        if (result instanceof Promise) {
          outstanding.add(result);
          most = Math.max(most, outstanding.size);
          inFlight += 1;
          const done = (): void => {
            outstanding.delete(result);
            inFlight -= 1;
          };
          void result.then(done, done);
        }
        return result;
      };
    });
    const worker = new PostgresAskQueue(pool, {
      schema: db.schema,
      rereadMs: 50,
      // Renewed every 400 ms: often enough to meet the other statements, not so often that a busy
      // machine lets it lapse (a lapsed lease denies the calls, and this test is not about that).
      leaseMs: 1_200,
      onError: () => undefined,
    });
    opened.push(worker);
    const inbox = queue({ rereadMs: 50 }).approver();
    // Rounds go on until the lease has been renewed a few times among them: bounded by time, not by a
    // count of rounds, which a fast machine runs through before the third renewal (every 400 ms).
    const until = Date.now() + 30_000;
    for (let round = 0; round < 10 || (renewals < 3 && Date.now() < until); round++) {
      const asks = Array.from({ length: 20 }, (_, n) => makeAsk(round * 20 + n));
      const parked = asks.map((ask) => park(worker, ask));
      for (let n = 0; n < asks.length; n++) await inbox.next();
      await Promise.all(asks.map((ask) => inbox.resolve(ask.id, { type: "approve" })));
      expect(await Promise.all(parked)).toEqual(asks.map(() => ({ type: "approve" })));
    }
    await waitFor(() => inFlight === 0);
    expect(renewals).toBeGreaterThanOrEqual(3);
    expect(most).toBe(1);
  });

  it("reconnects a terminated listener and re-reads: no parked call and no new ask is stranded", async () => {
    const errors = { worker: [] as unknown[], console: [] as unknown[] };
    const app = (name: string): string => `${db.schema}-${name}`;
    const workerStatements: { text: string; values: unknown[]; rows: number }[] = [];
    const worker = new PostgresAskQueue(watchedPool(workerStatements, { application_name: app("worker") }), {
      schema: db.schema,
      rereadMs: 600_000,
      onError: (e) => errors.worker.push(e),
    });
    const consoleQueue = new PostgresAskQueue(db.newPool(4, { application_name: app("console") }), {
      schema: db.schema,
      rereadMs: 600_000,
      onError: (e) => errors.console.push(e),
    });
    opened.push(worker, consoleQueue);
    const inbox = consoleQueue.approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    // The console's LISTEN is in place (with this rereadMs, only it brings the console asks), but
    // nothing above waits for the worker's, which under load may still be connecting: a connection not
    // yet there is not cut, and then nothing here would be lost. Cut once it has taken hold.
    await waitFor(() => workerStatements.some((s) => s.text.startsWith("LISTEN")));

    // Answered while the worker is cut off: the notification is lost with its connection.
    await terminate(app("worker"));
    expect(await inbox.resolve(ask.id, { type: "approve", remember: "this_call" })).toBe(true);
    expect(await parked).toEqual({ type: "approve", remember: "this_call" });

    // Parked while the console is cut off: found by the re-read after its reconnect.
    await terminate(app("console"));
    const later = makeAsk(2);
    const parkedLater = park(worker, later);
    expect((await inbox.next())?.id).toBe(later.id);
    expect(await inbox.resolve(later.id, { type: "deny" })).toBe(true);
    expect(await parkedLater).toEqual({ type: "deny" });
    const listening = (e: unknown): boolean => String(e).includes("listening on");
    expect(errors.worker.some(listening)).toBe(true);
    expect(errors.console.some(listening)).toBe(true);
  });
});

describe("PostgresApprover: a statement whose server process is terminated (57P01)", () => {
  /**
   * A worker, a console whose connections carry `app`, one ask parked and taken, and a connection
   * of the test's own in an open transaction, to hold what the console's next statement waits for.
   */
  const consoleAndLocker = async () => {
    const app = `${db.schema}-console`;
    const worker = queue({ rereadMs: 600_000 });
    const inbox = queue({ rereadMs: 600_000 }, app).approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const locker = await db.pool.connect();
    await locker.query("BEGIN");
    return { app, inbox, ask, parked, locker };
  };
  const answerRow = (resolution: AskResolution): string =>
    `UPDATE "${db.schema}".asks SET state = 'answered', resolution = '${JSON.stringify(resolution)}'::jsonb, ended_at = now() WHERE id = $1`;

  it("resolve sends the answer again on another connection: it lands once, and the call gets it", async () => {
    const { app, inbox, ask, parked, locker } = await consoleAndLocker();
    try {
      await locker.query(`SELECT 1 FROM "${db.schema}".asks WHERE id = $1 FOR UPDATE`, [ask.id]);
      const answer = inbox.resolve(ask.id, { type: "approve", remember: "this_call" });
      answer.catch(() => undefined);
      await terminateWaiting(app, "UPDATE");
      await locker.query("ROLLBACK");
      expect(await answer).toBe(true);
    } finally {
      locker.release();
    }
    expect(await parked).toEqual({ type: "approve", remember: "this_call" });
    expect(await row(ask.id)).toMatchObject({
      state: "answered",
      resolution: { type: "approve", remember: "this_call" },
    });
  });

  it("resolve sends answers given together again together: each lands once", async () => {
    const { app, inbox, ask, parked, locker } = await consoleAndLocker();
    const worker = queue({ rereadMs: 600_000 });
    const other = makeAsk(2);
    const parkedOther = park(worker, other);
    await waitFor(async () => (await row(other.id)) !== undefined);
    try {
      await locker.query(`SELECT 1 FROM "${db.schema}".asks WHERE id = $1 FOR UPDATE`, [ask.id]);
      // Given in one turn: one statement for both.
      const answers = [inbox.resolve(ask.id, { type: "approve" }), inbox.resolve(other.id, { type: "deny" })];
      for (const answer of answers) answer.catch(() => undefined);
      await terminateWaiting(app, "UPDATE");
      await locker.query("ROLLBACK");
      expect(await Promise.all(answers)).toEqual([true, true]);
    } finally {
      locker.release();
    }
    expect(await Promise.all([parked, parkedOther])).toEqual([{ type: "approve" }, { type: "deny" }]);
  });

  it("resolve gives false when, meanwhile, another answer ended the ask differently", async () => {
    const { app, inbox, ask, parked, locker } = await consoleAndLocker();
    try {
      await locker.query(answerRow({ type: "deny", reason: "other" }), [ask.id]);
      const answer = inbox.resolve(ask.id, { type: "approve" });
      answer.catch(() => undefined);
      await terminateWaiting(app, "UPDATE");
      await locker.query("COMMIT");
      expect(await answer).toBe(false);
    } finally {
      locker.release();
    }
    expect(await parked).toEqual({ type: "deny", reason: "other" });
  });

  it("resolve rejects, never true, when the ask was answered exactly as this answer: whose landed is unknown", async () => {
    const { app, inbox, ask, parked, locker } = await consoleAndLocker();
    let answer: Promise<boolean>;
    try {
      await locker.query(answerRow({ type: "approve" }), [ask.id]);
      answer = inbox.resolve(ask.id, { type: "approve" });
      answer.catch(() => undefined);
      await terminateWaiting(app, "UPDATE");
      await locker.query("COMMIT");
    } finally {
      locker.release();
    }
    await expect(answer).rejects.toThrow(/57P01/);
    expect(await parked).toEqual({ type: "approve" });
    expect(await inbox.ended(ask.id)).toEqual({ type: "answered", verdict: "approve" });
  });

  it("resolve with askDigest reads the row again on another connection, and lands: an idle pooled connection the server ended does not fail the answer", async () => {
    const app = `${db.schema}-console`;
    const worker = queue({ rereadMs: 600_000 });
    const inbox = queue({ rereadMs: 600_000 }, app).approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    // Terminated, and the answer sent at once: its read of the row goes to a pooled connection, unheard of its end.
    expect(terminateIdleNow(app)).toBeGreaterThan(0);
    expect(await inbox.resolve(ask.id, { type: "approve" }, { askDigest: askDigest(ask) })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
  });

  it("ended() reads again on another connection", async () => {
    const { app, inbox, ask, parked, locker } = await consoleAndLocker();
    expect(await inbox.resolve(ask.id, { type: "deny" })).toBe(true);
    expect(await parked).toEqual({ type: "deny" });
    let ending: Promise<unknown>;
    try {
      await locker.query(`LOCK TABLE "${db.schema}".asks IN ACCESS EXCLUSIVE MODE`);
      ending = inbox.ended(ask.id);
      ending.catch(() => undefined);
      await terminateWaiting(app, "resolution, reason FROM");
      await locker.query("ROLLBACK");
    } finally {
      locker.release();
    }
    expect(await ending).toEqual({ type: "answered", verdict: "deny" });
  });
});

describe("PostgresAskQueue: a park whose pooled connection the server ended (57P01)", () => {
  it("sends the insert once more on another connection: the call parks, and its answer reaches it", async () => {
    const app = `${db.schema}-parker`;
    // One connection for LISTEN, one for statements: the insert takes the one the server ended.
    const worker = new PostgresAskQueue(db.newPool(2, { application_name: app }), {
      schema: db.schema,
      onError: () => undefined,
    });
    opened.push(worker);
    const inbox = queue().approver();
    await parkAndApprove(worker, inbox, 1);
    // Terminated, and the park sent at once: its insert goes to the pooled connection, unheard of its end.
    expect(terminateIdleNow(app)).toBeGreaterThan(0);
    await parkAndApprove(worker, inbox, 2);
  });
});

describe("PostgresAskQueue: a lease taken over a listening connection the server ended (57P01)", () => {
  it("takes the lease on another connection: the call parks, and its answer reaches it", async () => {
    const app = `${db.schema}-listener`;
    const errors: unknown[] = [];
    const worker = new PostgresAskQueue(db.newPool(2, { application_name: app }), {
      schema: db.schema,
      rereadMs: 600_000,
      onError: (e) => errors.push(e),
    });
    opened.push(worker);
    // An inbox of the worker's own queue: it listens, and holds no lease yet.
    const own = worker.approver();
    const inbox = queue().approver();
    const first = makeAsk(1);
    const other = queue({ rereadMs: 600_000 });
    const parkedFirst = park(other, first);
    expect((await own.next())?.id).toBe(first.id);
    expect(await inbox.resolve(first.id, { type: "deny" })).toBe(true);
    expect(await parkedFirst).toEqual({ type: "deny" });
    expect(await own.ended(first.id)).toEqual({ type: "answered", verdict: "deny" });
    expect(worker.workerId).toBeUndefined();
    // Terminated, and the first park sent at once: its lease goes to the listening connection,
    // unheard of its end.
    expect(terminateIdleNow(app)).toBeGreaterThan(0);
    await parkAndApprove(worker, inbox, 2);
    // The listening connection's end alone is reported: the lease that failed on it was taken again.
    expect(errors).toEqual([
      expect.objectContaining({
        code: "POSTGRES_QUERY",
        message: expect.stringContaining(`PostgresAskQueue: listening on ${db.schema}.asks`) as unknown,
      }),
    ]);
  });
});

describe("PostgresAskQueue: a lease taken on a connection lost after the lease's row was written", () => {
  it("takes it again, deleting the row the lost attempt wrote: no worker row is left unused to lapse", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const app = `${db.schema}-taker`;
      const worker = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url, application_name: app }), {
        schema: db.schema,
        rereadMs: 600_000,
        onError: () => undefined,
      });
      opened.push(worker);
      const inbox = queue().approver();
      const workers = async (): Promise<string[]> =>
        (await db.pool.query<{ id: string }>(`SELECT id::text AS id FROM "${db.schema}".workers`)).rows.map(
          (r) => r.id,
        );
      // The lease's row is written and committed; the reply saying so is held in the network.
      proxy.holdRepliesOn("lease_until, host, pid)");
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      parked.catch(() => undefined);
      await waitFor(async () => (await workers()).length === 1);
      const [lost] = await workers();
      // Then the connection is lost, its reply never heard: the server process ends, and the proxy drops it.
      const { rows } = await db.pool.query<{ ended: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity
         WHERE application_name = $1 AND query LIKE '%lease_until, host, pid)%'`,
        [app],
      );
      expect(rows).toEqual([{ ended: true }]);
      expect(await soon(Promise.race([inbox.next(), parked.catch((e: unknown) => e)]))).toEqual(ask);
      expect(worker.workerId).not.toBe(lost);
      expect(await workers()).toEqual([worker.workerId]);
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
      expect(await parked).toEqual({ type: "approve" });
    } finally {
      await proxy.close();
    }
  });
});

describe("PostgresAskQueue: a console's read whose pooled connection the server ended (57P01)", () => {
  it("sends its read of pending asks once more on another connection: a new inbox gets them, and nothing fails", async () => {
    const app = `${db.schema}-console`;
    const errors: unknown[] = [];
    // One connection for LISTEN, one for statements: the read of pending asks takes the one the server ended.
    const consoleQueue = new PostgresAskQueue(db.newPool(2, { application_name: app }), {
      schema: db.schema,
      rereadMs: 600_000,
      onError: (e) => errors.push(e),
    });
    opened.push(consoleQueue);
    const worker = queue({ rereadMs: 600_000 });
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await consoleQueue.approver().next())?.id).toBe(ask.id);
    // Terminated, and a new inbox opened at once: its read of pending asks goes to the pooled connection,
    // unheard of its end.
    expect(terminateIdleNow(app)).toBeGreaterThan(0);
    const inbox = consoleQueue.approver();
    expect((await inbox.next())?.id).toBe(ask.id);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
    expect(errors.filter((e) => String(e).includes("reading pending asks"))).toEqual([]);
  });
});

describe("PostgresAskQueue: a dropped LISTEN connection", () => {
  it("re-reads after the reconnect: an answer whose notification never reached the worker still ends its call", async () => {
    const errors: unknown[] = [];
    const app = `${db.schema}-worker`;
    const worker = queue({ rereadMs: 600_000, onError: (e) => errors.push(e) }, app);
    const inbox = queue({ rereadMs: 600_000 }).approver();
    // A first answer heard: the worker's LISTEN is in place.
    const first = makeAsk(0);
    const parkedFirst = park(worker, first);
    expect((await inbox.next())?.id).toBe(first.id);
    expect(await inbox.resolve(first.id, { type: "deny" })).toBe(true);
    expect(await parkedFirst).toEqual({ type: "deny" });

    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    // No notification for this answer at all: only a read of the row can end the call.
    await db.pool.query(`ALTER TABLE "${db.schema}".asks DISABLE TRIGGER asks_end`);
    expect(await inbox.resolve(ask.id, { type: "approve", remember: "this_tool" })).toBe(true);
    await terminate(app);
    expect(await parked).toEqual({ type: "approve", remember: "this_tool" });
    expect(errors.some((e) => String(e).includes("listening on"))).toBe(true);
    expect(worker.parked).toBe(0);
  });

  /** A worker and a console whose connections can be terminated by name, one ask parked and taken. */
  const consoleWithOneAsk = async () => {
    const app = `${db.schema}-console`;
    const worker = queue({ rereadMs: 600_000 });
    const inbox = queue({ rereadMs: 600_000 }, app).approver();
    const first = makeAsk(1);
    const parkedFirst = park(worker, first);
    expect((await inbox.next())?.id).toBe(first.id);
    return { app, worker, inbox, first, parkedFirst };
  };

  it("re-reads pending asks for a console after the reconnect: an ask parked unannounced is still delivered", async () => {
    const { app, worker, inbox, first, parkedFirst } = await consoleWithOneAsk();
    await db.pool.query(`ALTER TABLE "${db.schema}".asks DISABLE TRIGGER asks_new`);
    const later = makeAsk(2);
    const parkedLater = park(worker, later);
    await waitFor(async () => (await row(later.id)) !== undefined);
    await terminate(app);
    expect((await inbox.next())?.id).toBe(later.id);
    expect(await inbox.resolve(later.id, { type: "deny" })).toBe(true);
    expect(await inbox.resolve(first.id, { type: "approve" })).toBe(true);
    expect(await parkedLater).toEqual({ type: "deny" });
    expect(await parkedFirst).toEqual({ type: "approve" });
  });

  it("re-reads the endings of asks still buffered for a console: one that ended unannounced is never delivered", async () => {
    const { app, worker, inbox, first, parkedFirst } = await consoleWithOneAsk();
    // Read by the console, not yet taken by next().
    const buffered = makeAsk(2);
    const parkedBuffered = park(worker, buffered);
    await waitFor(() => inbox.buffered === 1);
    // Answered with no notification at all: only a read of the row can tell the console.
    await db.pool.query(`ALTER TABLE "${db.schema}".asks DISABLE TRIGGER asks_end`);
    expect(await worker.approver().resolve(buffered.id, { type: "deny" })).toBe(true);
    expect(await parkedBuffered).toEqual({ type: "deny" });
    await db.pool.query(`ALTER TABLE "${db.schema}".asks ENABLE TRIGGER asks_end`);
    await terminate(app);
    await waitFor(() => inbox.buffered === 0);
    const later = makeAsk(3);
    const parkedLater = park(worker, later);
    expect((await inbox.next())?.id).toBe(later.id);
    expect(await inbox.ended(buffered.id)).toEqual({ type: "answered", verdict: "deny" });
    expect(await inbox.resolve(later.id, { type: "approve" })).toBe(true);
    expect(await inbox.resolve(first.id, { type: "approve" })).toBe(true);
    expect(await Promise.all([parkedLater, parkedFirst])).toEqual([{ type: "approve" }, { type: "approve" }]);
  });

  it("gives up a listening connection that stops answering (a black hole) for a console too: ended() still hears the ending", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const pool = db.newPool(3, { connectionString: proxy.url });
      const errors: unknown[] = [];
      const consoleQueue = new PostgresAskQueue(pool, {
        schema: db.schema,
        leaseMs: 1_000,
        rereadMs: 600_000,
        onError: (error) => errors.push(error),
      });
      opened.push(consoleQueue);
      const inbox = consoleQueue.approver();
      const worker = queue();
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      expect((await inbox.next())?.id).toBe(ask.id);
      // The network swallows the listening connection from the read of endings on (only that read over the
      // listener names these columns so), whatever else went out over it first.
      proxy.stallConnectionOn(`a.reason FROM "${db.schema}".asks AS a`);
      const ending = inbox.ended(ask.id);
      // ended() reads the row over the pool first (the pool's connections pass): answered only once that read
      // found it pending and the watch that follows went out over the stalled listener, the ending can reach
      // this console in no other way than by giving that connection up.
      await waitFor(() => proxy.swallowed.includes(ask.id));
      expect(await queue().approver().resolve(ask.id, { type: "deny", reason: "elsewhere" })).toBe(true);
      expect(await parked).toEqual({ type: "deny", reason: "elsewhere" });
      expect(await ending).toEqual({ type: "answered", verdict: "deny" });
      expect(errors.map((error) => (error as Error).message).join("\n")).toContain("no reply within 1000 ms");
    } finally {
      await proxy.close();
    }
  });

  it("gives up a pooled connection that swallowed an insert: that park fails, and the asks parked after it reach the consoles", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      // The first insert is swallowed, with all that follows on its connection; every other connection passes.
      proxy.stallConnectionOn(`INSERT INTO "${db.schema}".asks`);
      const worker = workerThrough(proxy);
      const inbox = queue().approver();
      const first = makeAsk(1);
      const parkedFirst = park(worker, first).catch((error: unknown) => error);
      await waitFor(() => proxy.swallowed.includes(first.id));
      const second = makeAsk(2);
      const parkedSecond = park(worker, second);
      expect(await soon(inbox.next()).then((ask) => (typeof ask === "string" ? ask : ask?.id))).toBe(second.id);
      expect(await inbox.resolve(second.id, { type: "approve" })).toBe(true);
      expect(await soon(parkedSecond)).toEqual({ type: "approve" });
      // The swallowed park fails (the engine denies it) once the statement had no reply for leaseMs.
      expect(await soon(parkedFirst)).toMatchObject({
        code: "POSTGRES_QUERY",
        message: expect.stringContaining("no reply"),
      });
      // Its row is written withdrawn, so the insert, should it still arrive, fails on the id.
      await waitFor(async () => (await row(first.id))?.state === "withdrawn");
      expect(await row(first.id)).toEqual({ state: "withdrawn", reason: "closed", resolution: null });
    } finally {
      await proxy.close();
    }
  });

  it("takes a reply that arrived while the process was too busy to read it, not for silence", async () => {
    const statements = new Db(db.pool, schemaNames("test", db.schema), 300);
    await statements.query("warming up", "SELECT 1");
    const reply = statements.query("a reply read late", "SELECT pg_sleep(0.05) AS slept").then(
      (rows) => rows.rowCount,
      (error: unknown) => error,
    );
    // Sent by now and answered soon after, while the process cannot read: it is past its deadline when it can.
    await new Promise((resolve) => setTimeout(resolve, 30));
    // Busy in the loop's check phase: the next turn runs its expired timers before it reads any I/O.
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        const until = performance.now() + 600;
        while (performance.now() < until) {
          // busy
        }
        resolve();
      }),
    );
    expect(await reply).toBe(1);
  });

  it("gives up a schema check that gets no reply: the parks waiting on it fail, and the next ones check again", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      // The first check of the schema's version is swallowed; every other connection passes.
      proxy.stallConnectionOn(`FROM "${db.schema}".migrations`);
      const worker = workerThrough(proxy);
      const inbox = queue().approver();
      const first = makeAsk(1);
      expect(await soon(park(worker, first).catch((error: unknown) => error))).toMatchObject({
        code: "POSTGRES_QUERY",
        message: expect.stringContaining("no reply"),
      });
      const second = makeAsk(2);
      const parkedSecond = park(worker, second);
      expect(await soon(inbox.next()).then((ask) => (typeof ask === "string" ? ask : ask?.id))).toBe(second.id);
      expect(await inbox.resolve(second.id, { type: "approve" })).toBe(true);
      expect(await soon(parkedSecond)).toEqual({ type: "approve" });
    } finally {
      await proxy.close();
    }
  });

  it("gives up a LISTEN that gets no reply and listens again once the network recovers: parked calls hear their answers", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const errors: unknown[] = [];
      // The first LISTEN is swallowed, with all that follows on its connection; every other connection passes.
      proxy.stallConnectionOn("LISTEN");
      const worker = new PostgresAskQueue(db.newPool(4, { connectionString: proxy.url }), {
        schema: db.schema,
        // Long enough that a loaded machine does not lose the worker's lease on the way.
        leaseMs: 2_000,
        rereadMs: 600_000,
        onError: (error) => errors.push(error),
      });
      opened.push(worker);
      const inbox = queue({ rereadMs: 600_000 }).approver();
      const answeredSoon = (parked: Promise<AskResolution>): Promise<AskResolution | "still parked"> =>
        Promise.race([parked, new Promise<"still parked">((done) => setTimeout(() => done("still parked"), 6_000))]);
      const first = makeAsk(1);
      const parkedFirst = park(worker, first);
      expect((await inbox.next())?.id).toBe(first.id);
      await waitFor(() => proxy.swallowed.includes("LISTEN"));
      // Heard, once the LISTEN is given up after leaseMs, through the re-read that follows the next one.
      expect(await inbox.resolve(first.id, { type: "deny" })).toBe(true);
      expect(await answeredSoon(parkedFirst)).toEqual({ type: "deny" });
      // Parked and answered with LISTEN in place again: only its notification can end this call in time.
      const second = makeAsk(2);
      const parkedSecond = park(worker, second);
      expect((await inbox.next())?.id).toBe(second.id);
      expect(await inbox.resolve(second.id, { type: "approve" })).toBe(true);
      expect(await answeredSoon(parkedSecond)).toEqual({ type: "approve" });
      expect(errors.map((error) => (error as Error).message).join("\n")).toContain("no reply to LISTEN within 2000 ms");
    } finally {
      await proxy.close();
    }
  });

  it("keeps every parked call through repeated drops, each answered once", async () => {
    const app = `${db.schema}-worker`;
    const worker = queue({ rereadMs: 600_000 }, app);
    const inbox = queue({ rereadMs: 600_000 }).approver();
    const asks = Array.from({ length: 30 }, (_, n) => makeAsk(n));
    const parked = asks.map((ask) => park(worker, ask));
    const seen = new Set<string>();
    for (let n = 0; n < asks.length; n++) {
      const next = await inbox.next();
      expect(next).toBeDefined();
      seen.add(next!.id);
      // Every row written first: a drop must cut only the listening side, not a park in flight.
      if (n === 0) await waitFor(async () => (await rowCount()) === asks.length);
      if (n % 5 === 0) {
        // The listener is back (or on its way) after the last drop: cut it again.
        await waitFor(async () => (await connections(app)) > 0);
        await terminate(app);
      }
      expect(await inbox.resolve(next!.id, { type: n % 2 === 0 ? "approve" : "deny" })).toBe(true);
    }
    expect(seen.size).toBe(asks.length);
    const results = await Promise.all(parked);
    expect(results.map((r) => r.type).sort()).toEqual(asks.map((_, n) => (n % 2 === 0 ? "approve" : "deny")).sort());
    expect(worker.parked).toBe(0);
  });
});

/** A pool whose connections report each statement's text, values and how many rows it returned. */
function watchedPool(seen: { text: string; values: unknown[]; rows: number }[], options: pg.PoolConfig = {}): pg.Pool {
  const pool = db.newPool(4, options);
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (config: unknown, ...rest: unknown[]) => {
      const statement = config as { text?: string; values?: unknown[] } | string;
      const text = typeof statement === "string" ? statement : (statement.text ?? "");
      const values = typeof statement === "string" ? (Array.isArray(rest[0]) ? rest[0] : []) : (statement.values ?? []);
      const result = query(config, ...rest);
      if (result instanceof Promise) {
        void result.then(
          (done: { rows?: unknown[] }) => seen.push({ text, values, rows: done.rows?.length ?? 0 }),
          () => undefined,
        );
      }
      return result;
    };
  });
  return pool;
}

/** Writes `count` pending asks of a worker whose lease holds for an hour, in one statement. */
async function pendingAsks(count: number): Promise<PendingAsk[]> {
  const workerId = randomUUID();
  await db.pool.query(
    `INSERT INTO "${db.schema}".workers (id, lease_until, host, pid) VALUES ($1, now() + interval '1 hour', 'elsewhere', 1)`,
    [workerId],
  );
  const asks = Array.from({ length: count }, (_, n) => makeAsk(n));
  await db.pool.query(
    `INSERT INTO "${db.schema}".asks (id, worker_id, ask) SELECT v.id, $2, v.ask FROM unnest($1::uuid[], $3::jsonb[]) AS v(id, ask)`,
    [asks.map((a) => a.id), workerId, asks.map((a) => JSON.stringify(a))],
  );
  return asks;
}

describe("PostgresApprover: catching up on the asks pending when it started", () => {
  it("hands out each of 3,000 buffered asks at a cost that does not grow with how many are left", async () => {
    const ASKS = 3_000;
    const waiting = await pendingAsks(ASKS);
    const inbox = queue({ rereadMs: 600_000 }).approver();
    await waitFor(() => inbox.buffered === ASKS);
    const caughtUp = inbox.caughtUp();
    // Every ask still to hand out is looked up in the buffer at most once per next(): counting the lookups counts that work.
    const spy = vi.spyOn(Map.prototype, "has");
    const taken: (string | undefined)[] = [];
    let lookups: number;
    try {
      for (let i = 0; i < ASKS; i++) taken.push((await inbox.next())?.id);
    } finally {
      lookups = spy.mock.calls.length;
      spy.mockRestore();
    }
    expect(taken).toEqual(waiting.map((ask) => ask.id));
    // A few per ask; a look through every ask left at each next() makes millions.
    expect(lookups).toBeLessThan(10 * ASKS);
    // Taken by a last next(): the consumer holds them all.
    void inbox.next().catch(() => undefined);
    await caughtUp;
  });
});

describe("PostgresAskQueue: the re-read under LISTEN/NOTIFY", () => {
  it("reads no row when nothing changed, however many asks wait: 2,000 pending cost what 1 does", async () => {
    const waiting = await pendingAsks(2_000);
    const seen: { text: string; values: unknown[]; rows: number }[] = [];
    const consoleQueue = new PostgresAskQueue(watchedPool(seen), {
      schema: db.schema,
      rereadMs: 50,
      onError: () => undefined,
    });
    opened.push(consoleQueue);
    const inbox = consoleQueue.approver();
    const delivered = await inbox.next();
    expect(delivered?.id).toBe(waiting[0]!.id);
    await waitFor(() => inbox.buffered === waiting.length - 1);
    // The statement that reads what changed, sent once nothing could have changed.
    const changeReads = (): typeof seen => seen.filter((s) => s.text.includes("a.changed_xid >= $1"));
    // A transaction open meanwhile anywhere on the server (another test's) holds the mark back, and the
    // re-reads read the asks again until it ends (docs/postgres.md): wait for one whose mark passed them.
    const { rows: written } = await db.pool.query<{ last: string }>(
      `SELECT max(changed_xid)::text AS last FROM "${db.schema}".asks`,
    );
    const last = BigInt(written[0]!.last);
    await waitFor(() => changeReads().some((s) => BigInt(String(s.values[0])) > last));
    const from = seen.length;
    await waitFor(() => changeReads().filter((s) => seen.indexOf(s) >= from).length >= 5);
    const quiet = seen.slice(from);
    // Each re-read: a mark (one row), then the changes since it (none). No statement read a row of the 2,000
    // (the reaper's lock is the other one-row reply).
    const rowsRead = quiet
      .filter((s) => !s.text.includes("pg_snapshot_xmin") && !s.text.includes("pg_try_advisory_xact_lock"))
      .reduce((sum, s) => sum + s.rows, 0);
    expect(rowsRead).toBe(0);
    // On the server too, the read is an index range that finds nothing: it never scans the asks.
    await db.pool.query(`ANALYZE "${db.schema}".asks`);
    const latest = changeReads().at(-1)!;
    const { rows } = await db.pool.query<{ "QUERY PLAN": unknown }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${latest.text}`,
      latest.values,
    );
    const plan = JSON.stringify(rows[0]!["QUERY PLAN"]);
    expect(plan).not.toContain("Seq Scan");
    expect(plan).toContain("asks_by_change");
    expect(plan).not.toMatch(/"Actual Rows": [1-9]/);
    expect(plan).not.toContain("Rows Removed by Filter");
  });

  it("recovers what missed notifications hid within rereadMs: a new ask, an ending, a parked call's answer", async () => {
    const worker = queue({ rereadMs: 100 });
    const inbox = queue({ rereadMs: 100 }).approver();
    const first = makeAsk(1);
    const parkedFirst = park(worker, first);
    expect((await inbox.next())?.id).toBe(first.id);
    // From here on no notification is sent at all: only the re-reads can carry anything.
    await db.pool.query(`ALTER TABLE "${db.schema}".asks DISABLE TRIGGER asks_new`);
    await db.pool.query(`ALTER TABLE "${db.schema}".asks DISABLE TRIGGER asks_end`);
    const second = makeAsk(2);
    const parkedSecond = park(worker, second);
    expect(await soon(inbox.next()).then((ask) => (typeof ask === "string" ? ask : ask?.id))).toBe(second.id);
    // Buffered for the console, then answered elsewhere: dropped, never delivered.
    const third = makeAsk(3);
    const parkedThird = park(worker, third);
    await waitFor(() => inbox.buffered === 1);
    expect(await queue().approver().resolve(third.id, { type: "deny" })).toBe(true);
    await waitFor(() => inbox.buffered === 0);
    expect(await soon(parkedThird)).toEqual({ type: "deny" });
    // Answers from the console reach the parked calls through the worker's re-read.
    expect(await inbox.resolve(second.id, { type: "approve" })).toBe(true);
    expect(await inbox.resolve(first.id, { type: "approve" })).toBe(true);
    expect(await soon(Promise.all([parkedFirst, parkedSecond]))).toEqual([{ type: "approve" }, { type: "approve" }]);
    expect(worker.parked).toBe(0);
  });
});

describe("PostgresAskQueue: a parked call whose row is deleted", () => {
  it("rejects with PostgresRowError within rereadMs, though a deleted row shows in no change", async () => {
    const worker = queue({ rereadMs: 100 });
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    const inbox = queue().approver();
    expect((await inbox.next())?.id).toBe(ask.id);
    // Several quiet re-reads first, so the deletion is met by the re-read of changes, not the first full one.
    await new Promise((resolve) => setTimeout(resolve, 350));
    await db.pool.query(`DELETE FROM "${db.schema}".asks WHERE id = $1`, [ask.id]);
    const error = await soon(parked.catch((e: unknown) => e));
    expect(error).toBeInstanceOf(PostgresRowError);
    expect((error as Error).message).toContain("the row of this parked ask is gone");
    expect(worker.parked).toBe(0);
  });

  /** A call parked on `first` whose row is then moved by hand under the live lease of `second`. */
  const movedUnder = async (first: PostgresAskQueue, second: PostgresAskQueue) => {
    const ask = makeAsk(1);
    const parked = park(first, ask);
    const own = park(second, makeAsk(2));
    own.catch(() => undefined);
    await waitFor(async () => (await row(ask.id))?.state === "pending" && second.workerId !== undefined);
    await new Promise((resolve) => setTimeout(resolve, 350));
    await db.pool.query(`UPDATE "${db.schema}".asks SET worker_id = $2 WHERE id = $1`, [ask.id, second.workerId]);
    return { ask, parked };
  };

  it("rejects with PostgresRowError when its row comes to name another live worker and ends there: never left parked", async () => {
    const worker = queue({ rereadMs: 600_000 });
    // The other worker's re-read finds a pending row of its lease that no call of its waits on, and withdraws it.
    const { ask, parked } = await movedUnder(worker, queue({ rereadMs: 100 }));
    const error = await soon(parked.catch((e: unknown) => e));
    expect(error).toBeInstanceOf(PostgresRowError);
    expect((error as Error).message).toContain(`row ${ask.id} of ${db.schema}.asks is malformed`);
    expect((error as Error).message).toContain("names another worker");
    expect(worker.parked).toBe(0);
  });

  it("rejects with PostgresRowError within rereadMs when its row comes to name another live worker and stays pending", async () => {
    const worker = queue({ rereadMs: 100 });
    const { parked } = await movedUnder(worker, queue({ rereadMs: 600_000 }));
    const error = await soon(parked.catch((e: unknown) => e));
    expect(error).toBeInstanceOf(PostgresRowError);
    expect((error as Error).message).toContain("names another worker");
    expect(worker.parked).toBe(0);
  });
});

describe("PostgresAskQueue: an insert that commits after it was given up", () => {
  /** A worker whose first insert is held in the network past its lease, and given up; its statements are `seen`. */
  const givenUp = async (proxy: TcpProxy, options: PostgresAskQueueOptions = {}) => {
    const seen: { text: string; values: unknown[]; rows: number }[] = [];
    proxy.holdConnectionOn(`INSERT INTO "${db.schema}".asks`);
    const worker = new PostgresAskQueue(watchedPool(seen, { connectionString: proxy.url }), {
      schema: db.schema,
      leaseMs: 1_000,
      onError: () => undefined,
      ...options,
    });
    opened.push(worker);
    const ask = makeAsk(1);
    const outcome = await soon(park(worker, ask).catch((error: unknown) => error));
    expect(outcome).toMatchObject({ code: "POSTGRES_QUERY", message: expect.stringContaining("no reply") });
    // The withdrawal of the given-up ask has been to the server and back.
    await waitFor(() => seen.some((s) => s.text.includes("'withdrawn'") && JSON.stringify(s.values).includes(ask.id)));
    return { worker, ask };
  };

  it("ends as withdrawn: it never shows a console a pending ask nobody waits on", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const { ask } = await givenUp(proxy);
      await proxy.deliver();
      expect(await row(ask.id)).toEqual({ state: "withdrawn", reason: "closed", resolution: null });
      expect(await queue().approver().resolve(ask.id, { type: "approve" })).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it("is withdrawn by its worker's re-read when it lands after the withdrawn row was purged", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const { ask } = await givenUp(proxy, { rereadMs: 100 });
      await waitFor(async () => (await row(ask.id))?.state === "withdrawn");
      // The reaper purges ended rows after keepEndedMs (an hour at least): done here by hand.
      await db.pool.query(`DELETE FROM "${db.schema}".asks WHERE id = $1`, [ask.id]);
      await proxy.deliver();
      let landed: Awaited<ReturnType<typeof row>>;
      // Read until it has ended.
      await waitFor(async () => {
        landed = await row(ask.id);
        return landed !== undefined && landed.state !== "pending";
      });
      expect(landed).toEqual({ state: "withdrawn", reason: "closed", resolution: null });
    } finally {
      await proxy.close();
    }
  });
});

/** Every node of an `EXPLAIN (FORMAT JSON)` plan, its sub-plans and CTEs included. */
function planNodes(node: Record<string, unknown>): Record<string, unknown>[] {
  const children = (node["Plans"] as Record<string, unknown>[] | undefined) ?? [];
  return [node, ...children.flatMap(planNodes)];
}

/** What one connection read of the asks table so far (the counters it has not sent to the server's totals yet). */
async function asksCounters(
  client: pg.PoolClient,
): Promise<{ seq_scan: number; seq_tup_read: number; idx_tup_fetch: number }> {
  const { rows } = await client.query<{ seq_scan: number; seq_tup_read: number; idx_tup_fetch: number }>(
    `SELECT coalesce(seq_scan, 0)::int AS seq_scan, coalesce(seq_tup_read, 0)::int AS seq_tup_read,
            coalesce(idx_tup_fetch, 0)::int AS idx_tup_fetch
     FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`,
    [`"${db.schema}".asks`],
  );
  return rows[0]!;
}

/**
 * Runs `run` on a connection of its own, in a transaction, and says what it read of the asks
 * table: scans begun, rows read by them and rows fetched through an index, triggers' reads
 * included. The transaction is committed when `commit` is true, else rolled back.
 */
async function readOfAsks<T>(
  run: (client: pg.PoolClient) => Promise<T>,
  commit = false,
): Promise<{ result: T; read: { seq_scan: number; seq_tup_read: number; idx_tup_fetch: number } }> {
  const client = await db.pool.connect();
  try {
    await client.query("BEGIN");
    const before = await asksCounters(client);
    const result = await run(client);
    const after = await asksCounters(client);
    await client.query(commit ? "COMMIT" : "ROLLBACK");
    return {
      result,
      read: {
        seq_scan: after.seq_scan - before.seq_scan,
        seq_tup_read: after.seq_tup_read - before.seq_tup_read,
        idx_tup_fetch: after.idx_tup_fetch - before.idx_tup_fetch,
      },
    };
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

describe("PostgresAskQueue: the heartbeat's cost", () => {
  it("reads none of the pending asks when no lease lapsed: 3,000 pending cost what none do", async () => {
    await pendingAsks(3_000);
    const seen: { text: string; values: unknown[]; rows: number }[] = [];
    // A worker (it renews a lease) that runs the reaper every 100 ms.
    const worker = new PostgresAskQueue(watchedPool(seen), {
      schema: db.schema,
      leaseMs: 300,
      onError: () => undefined,
    });
    opened.push(worker);
    void park(worker, makeAsk(3_000)).catch(() => undefined);
    const heartbeat = (text: string): boolean =>
      /WITH renewed AS|lease_until < now\(\)|ended_at < now\(\) -/.test(text) && !text.startsWith("INSERT");
    await waitFor(() => seen.filter((s) => heartbeat(s.text)).length >= 9);
    await db.pool.query(`ANALYZE "${db.schema}".asks`);
    const statements = new Map(seen.filter((s) => heartbeat(s.text)).map((s) => [s.text, s]));
    // The renewal, the reaper's closing of lapsed leases' asks, and its purge of old ended asks.
    expect(statements.size).toBe(3);
    for (const statement of statements.values()) {
      const { result: plan, read } = await readOfAsks(async (client) => {
        const { rows } = await client.query<{ "QUERY PLAN": { Plan: Record<string, unknown> }[] }>(
          `EXPLAIN (ANALYZE, FORMAT JSON) ${statement.text}`,
          statement.values,
        );
        return rows[0]!["QUERY PLAN"][0]!.Plan;
      });
      for (const node of planNodes(plan).filter((n) => n["Relation Name"] === "asks")) {
        expect(node["Node Type"], statement.text).not.toBe("Seq Scan");
        expect(node["Actual Rows"] ?? 0, statement.text).toBe(0);
        expect(node["Rows Removed by Filter"] ?? 0, statement.text).toBe(0);
      }
      // Triggers included, nothing scanned the table; the index fetches are the planner's look at an
      // index's ends for its estimates, a fixed few whatever waits.
      expect(read, statement.text).toMatchObject({ seq_scan: 0, seq_tup_read: 0 });
      expect(read.idx_tup_fetch, statement.text).toBeLessThan(10);
    }
  });
});

describe("PostgresAskQueue: worker leases", () => {
  it("takes no lease in a schema a newer loopctl migrated, even over its listening connection", async () => {
    await db.pool.query(`INSERT INTO "${db.schema}".migrations (version, name) VALUES (999, 'from the future')`);
    const q = queue();
    // A console on the same queue starts LISTEN: a lease is then taken over that connection.
    q.approver();
    await waitFor(async () => {
      const { rows } = await db.pool.query(
        "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND query LIKE $1",
        [`%${db.schema}%`],
      );
      return rows.length > 0;
    });
    await expect(park(q, makeAsk(1))).rejects.toMatchObject({ code: "POSTGRES_SCHEMA_TOO_NEW" });
    expect(q.parked).toBe(0);
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".workers`);
    expect(rows[0]).toEqual({ n: 0 });
    expect(await rowCount()).toBe(0);
  });

  it("closes itself, writing nothing more, once a newer loopctl migrates the schema under it", async () => {
    const errors: unknown[] = [];
    const worker = queue({ leaseMs: 600, onError: (error) => errors.push(error) });
    const consoleErrors: unknown[] = [];
    const consoleQueue = queue({ leaseMs: 600, onError: (error) => consoleErrors.push(error) });
    const inbox = consoleQueue.approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect(await soon(inbox.next()).then((next) => (typeof next === "string" ? next : next?.id))).toBe(ask.id);
    const workerId = worker.workerId;
    // A newer loopctl's migrate, as this one reads versions: the next row of the migrations table.
    await db.pool.query(`INSERT INTO "${db.schema}".migrations (version, name) VALUES ($1, 'from the future')`, [
      SCHEMA_VERSION + 1,
    ]);
    const tooNew = { code: "POSTGRES_SCHEMA_TOO_NEW", message: expect.stringContaining(`"${db.schema}"`) as unknown };
    // Within a heartbeat (a third of leaseMs): the call is denied, the queue is closed, and says why.
    expect(await soon(parked)).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
    expect(worker.closed).toBe(true);
    expect(errors).toEqual([expect.objectContaining(tooNew)]);
    await waitFor(() => consoleQueue.closed);
    expect(await soon(inbox.next())).toBeUndefined();
    expect(consoleErrors).toEqual([expect.objectContaining(tooNew)]);
    // Nothing was written into the newer schema: the row is left pending under a lease left to lapse.
    expect(await row(ask.id)).toEqual({ state: "pending", reason: null, resolution: null });
    const { rows } = await db.pool.query(`SELECT id::text FROM "${db.schema}".workers`);
    expect(rows).toEqual([{ id: workerId }]);
    expect(await park(worker, makeAsk(2))).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    expect(await row(ask.id)).toEqual({ state: "pending", reason: null, resolution: null });
  });

  it("names its schema in a query error", async () => {
    const q = new PostgresAskQueue(
      db.newPool(2, { connectionString: "postgres://nobody@127.0.0.1:1/none", connectionTimeoutMillis: 2_000 }),
      { schema: db.schema, onError: () => undefined },
    );
    opened.push(q);
    const parkFailure = await park(q, makeAsk(1)).catch((error: unknown) => error);
    const answerFailure = await q
      .approver()
      .resolve(makeAsk(1).id, { type: "approve" })
      .catch((error: unknown) => error);
    for (const error of [parkFailure, answerFailure]) {
      expect(error).toMatchObject({ code: "POSTGRES_QUERY" });
      expect((error as Error).message).toMatch(/^Postgres(AskQueue|Approver)/);
      expect((error as Error).message).toContain(`: schema "${db.schema}": `);
    }
  });

  it("closes the asks of a worker whose lease lapsed as abandoned; answers to them are refused", async () => {
    const live = await pendingAsks(20);
    const consoleQueue = queue({ leaseMs: 600 });
    const inbox = consoleQueue.approver();
    // A worker that died: its lease ran out and nobody renews it.
    const dead = randomUUID();
    const ask = makeAsk(1);
    await db.pool.query(
      `INSERT INTO "${db.schema}".workers (id, lease_until, host, pid) VALUES ($1, now() - interval '1 second', 'gone', 1)`,
      [dead],
    );
    await db.pool.query(`INSERT INTO "${db.schema}".asks (id, worker_id, ask) VALUES ($1, $2, $3)`, [
      ask.id,
      dead,
      ask,
    ]);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "abandoned" });
    expect(await row(ask.id)).toMatchObject({ state: "withdrawn", reason: "abandoned" });
    const { rows } = await db.pool.query(`SELECT 1 FROM "${db.schema}".workers WHERE id = $1`, [dead]);
    expect(rows).toEqual([]);
    // The asks of a worker whose lease holds stay pending.
    for (const ask of live) expect(await row(ask.id)).toMatchObject({ state: "pending" });
  });

  it("finds a lapsed worker's asks through the index: the reaper reads them, not the others waiting", async () => {
    await pendingAsks(3_000);
    const dead = randomUUID();
    const asks = [makeAsk(1), makeAsk(2)];
    await db.pool.query(
      `INSERT INTO "${db.schema}".workers (id, lease_until, host, pid) VALUES ($1, now() + interval '1 hour', 'gone', 1)`,
      [dead],
    );
    for (const ask of asks)
      await db.pool.query(`INSERT INTO "${db.schema}".asks (id, worker_id, ask) VALUES ($1, $2, $3)`, [
        ask.id,
        dead,
        ask,
      ]);
    await db.pool.query(`UPDATE "${db.schema}".workers SET lease_until = now() - interval '1 second' WHERE id = $1`, [
      dead,
    ]);
    // The reaper's statement, the closing of the asks included (a trigger of the deletion).
    const { result, read } = await readOfAsks(
      (client) => client.query(`DELETE FROM "${db.schema}".workers WHERE lease_until < now()`),
      true,
    );
    expect(result.rowCount).toBe(1);
    expect(read).toMatchObject({ seq_scan: 0, seq_tup_read: 0 });
    expect(read.idx_tup_fetch).toBeLessThan(10);
    for (const ask of asks) expect(await row(ask.id)).toMatchObject({ state: "withdrawn", reason: "abandoned" });
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${db.schema}".asks WHERE state = 'pending'`,
    );
    expect(rows[0]!.n).toBe(3_000);
  });

  it("denies the parked calls of a worker that finds its lease gone, and takes a new one for the next ask", async () => {
    const errors: unknown[] = [];
    const worker = queue({ leaseMs: 600, onError: (e) => errors.push(e) });
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const lost = worker.workerId;
    await db.pool.query(`DELETE FROM "${db.schema}".workers WHERE id = $1`, [lost]);
    // The deletion closed the row at once: the call is denied by its ending or by the next renewal, whichever
    // comes first, and that renewal reports the lease lost either way.
    const denied = await parked;
    expect([
      { type: "deny", reason: LEASE_LOST_REASON },
      { type: "deny", reason: "the ask was withdrawn: abandoned after its worker's lease lapsed" },
    ]).toContainEqual(denied);
    await waitFor(() => errors.some((e) => e instanceof PostgresLeaseError));
    expect(errors.find((e) => e instanceof PostgresLeaseError)).toMatchObject({
      code: "POSTGRES_LEASE_LOST",
      workerId: lost,
    });
    expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "abandoned" });

    const next = makeAsk(2);
    const parkedNext = park(worker, next);
    expect((await inbox.next())?.id).toBe(next.id);
    expect(worker.workerId).not.toBe(lost);
    expect(await inbox.resolve(next.id, { type: "approve" })).toBe(true);
    expect(await parkedNext).toEqual({ type: "approve" });
  });
  it("never revives a lease that lapsed on the database's clock: its asks end as abandoned, a late answer is refused", async () => {
    // Every reaper is held off, so only the worker's own renewal can see the lapse.
    const reaperLock = await db.pool.connect();
    try {
      await reaperLock.query("SELECT pg_advisory_lock(hashtext($1))", [`loopctl.reap:${db.schema}`]);
      const errors: unknown[] = [];
      // Renewed every second: a stall of two seconds, not one under a busy machine's load, loses it here first.
      const worker = queue({ leaseMs: 3_000, onError: (e) => errors.push(e) });
      const inbox = queue({ leaseMs: 600_000 }).approver();
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      expect((await inbox.next())?.id).toBe(ask.id);
      const lapsed = worker.workerId;
      // The process stalled past its lease: on the database's clock the lease is over.
      await db.pool.query(`UPDATE "${db.schema}".workers SET lease_until = now() - interval '1 second' WHERE id = $1`, [
        lapsed,
      ]);
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);

      // The next renewal finds it lapsed: it denies, and closes the ask itself rather than bring the lease back.
      expect(await parked).toEqual({ type: "deny", reason: LEASE_LOST_REASON });
      expect(errors.find((e) => e instanceof PostgresLeaseError)).toMatchObject({ workerId: lapsed });
      expect(await row(ask.id)).toMatchObject({ state: "withdrawn", reason: "abandoned" });
      const { rows } = await db.pool.query(`SELECT 1 FROM "${db.schema}".workers WHERE id = $1`, [lapsed]);
      expect(rows).toEqual([]);
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
      expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "abandoned" });

      // The worker goes on under a new lease; the old ask stays ended.
      const next = makeAsk(2);
      const parkedNext = park(worker, next);
      expect((await inbox.next())?.id).toBe(next.id);
      expect(worker.workerId).not.toBe(lapsed);
      expect(await inbox.resolve(next.id, { type: "approve" })).toBe(true);
      expect(await parkedNext).toEqual({ type: "approve" });
      expect(await row(ask.id)).toMatchObject({ state: "withdrawn", reason: "abandoned" });
    } finally {
      await reaperLock.query("SELECT pg_advisory_unlock_all()").catch(() => undefined);
      reaperLock.release();
    }
  });

  it("answers given at once go in one statement and keep every rule: one answer per ask, none to an ended ask or a lapsed worker's", async () => {
    // Every reaper is held off, so the lapsed worker's asks stay pending: only the answer's own check refuses them.
    const reaperLock = await db.pool.connect();
    try {
      await reaperLock.query("SELECT pg_advisory_lock(hashtext($1))", [`loopctl.reap:${db.schema}`]);
      const worker = queue();
      const inbox = queue({ leaseMs: 600_000 }).approver();
      const [twice, ended, plain] = [makeAsk(1), makeAsk(2), makeAsk(3)];
      const parks = [twice, ended, plain].map((ask) => park(worker, ask));
      for (let i = 0; i < 3; i++) await inbox.next();
      expect(await inbox.resolve(ended.id, { type: "deny", reason: "first" })).toBe(true);
      const dead = randomUUID();
      const orphans = [makeAsk(4), makeAsk(5)];
      await db.pool.query(
        `INSERT INTO "${db.schema}".workers (id, lease_until, host, pid) VALUES ($1, now() - interval '1 second', 'gone', 1)`,
        [dead],
      );
      for (const ask of orphans)
        await db.pool.query(`INSERT INTO "${db.schema}".asks (id, worker_id, ask) VALUES ($1, $2, $3)`, [
          ask.id,
          dead,
          ask,
        ]);

      // All given in one tick: they land together.
      const landed = await Promise.all([
        inbox.resolve(twice.id, { type: "approve" }),
        inbox.resolve(twice.id, { type: "deny", reason: "second" }),
        inbox.resolve(ended.id, { type: "approve" }),
        inbox.resolve(orphans[0]!.id, { type: "approve" }),
        inbox.resolve(orphans[1]!.id, { type: "approve" }),
        inbox.resolve(plain.id, { type: "deny", reason: "no" }),
      ]);
      expect(landed).toEqual([true, false, false, false, false, true]);
      expect(await Promise.all(parks)).toEqual([
        { type: "approve" },
        { type: "deny", reason: "first" },
        { type: "deny", reason: "no" },
      ]);
      expect(await row(twice.id)).toMatchObject({ state: "answered", resolution: { type: "approve" } });
      expect(await row(ended.id)).toMatchObject({ state: "answered", resolution: { type: "deny", reason: "first" } });
      for (const ask of orphans) expect(await row(ask.id)).toMatchObject({ state: "pending", resolution: null });
    } finally {
      await reaperLock.query("SELECT pg_advisory_unlock_all()").catch(() => undefined);
      reaperLock.release();
    }
  });
  it("two consoles answering the same asks at once, in opposite orders, never deadlock: each ask takes one answer, no answer fails", async () => {
    const worker = queue({ leaseMs: 600_000, rereadMs: 600_000 });
    const asks = Array.from({ length: 40 }, (_, n) => makeAsk(n));
    const parks = asks.map((ask) => park(worker, ask));
    await waitFor(async () => (await rowCount()) === asks.length);
    const ids = asks.map((ask) => ask.id).sort();
    const apps = [`${db.schema}-up`, `${db.schema}-down`];
    const [up, down] = apps.map((app) => queue({ rereadMs: 600_000 }, app).approver());
    // A row in the middle held: each console's batch gets as far as it, and both wait there at once.
    const locker = await db.pool.connect();
    let answers: Promise<PromiseSettledResult<boolean>[]>;
    try {
      await locker.query("BEGIN");
      await locker.query(`SELECT 1 FROM "${db.schema}".asks WHERE id = $1 FOR UPDATE`, [ids[ids.length / 2]]);
      // Each console's answers given in one turn: one statement each.
      answers = Promise.allSettled([
        ...ids.map((id) => up!.resolve(id, { type: "approve" })),
        ...[...ids].reverse().map((id) => down!.resolve(id, { type: "deny", reason: "no" })),
      ]);
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE application_name = ANY($1) AND wait_event_type = 'Lock'",
          [apps],
        );
        return rows.length === 2;
      });
    } finally {
      await locker.query("ROLLBACK").catch(() => undefined);
      locker.release();
    }
    const settled = await answers;
    expect(settled.filter((s) => s.status === "rejected")).toEqual([]);
    const landed = settled.map((s) => (s.status === "fulfilled" ? s.value : undefined));
    // Each ask's two answers: exactly one landed.
    for (let i = 0; i < ids.length; i++) expect(landed[i] !== landed[2 * ids.length - 1 - i]).toBe(true);
    const calls = await Promise.all(parks);
    for (const [i, ask] of asks.entries()) {
      const up = landed[ids.indexOf(ask.id)] === true;
      expect(calls[i]).toEqual(up ? { type: "approve" } : { type: "deny", reason: "no" });
    }
  });
  it.each(["console", "worker"])(
    "a worker closing its calls while a console answers them in another order (the %s waiting first): neither fails on a deadlock, each call gets what its row says",
    async (first) => {
      const errors: unknown[] = [];
      const apps = [`${db.schema}-worker`, `${db.schema}-console`];
      const worker = queue({ leaseMs: 600_000, rereadMs: 600_000, onError: (error) => errors.push(error) }, apps[0]);
      // Parked in descending order of id: close() closes them in that order, the console's batch in ascending.
      const asks = Array.from({ length: 40 }, (_, n) => makeAsk(n)).sort((a, b) => (a.id < b.id ? 1 : -1));
      const parks = asks.map((ask) => park(worker, ask));
      await waitFor(async () => (await rowCount()) === asks.length);
      const ids = asks.map((ask) => ask.id).sort();
      const inbox = queue({ rereadMs: 600_000 }, apps[1]).approver();
      const waiting = async (app: string): Promise<boolean> => {
        const { rows } = await db.pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
          [app],
        );
        return rows.length > 0;
      };
      const locker = await db.pool.connect();
      let answers: Promise<PromiseSettledResult<boolean>[]> = Promise.resolve([]);
      let closed: Promise<void> = Promise.resolve();
      try {
        await locker.query("BEGIN");
        await locker.query(`SELECT 1 FROM "${db.schema}".asks WHERE id = $1 FOR UPDATE`, [ids[ids.length / 2]]);
        const answer = (): void => {
          answers = Promise.allSettled(ids.map((id) => inbox.resolve(id, { type: "approve" })));
        };
        const close = (): void => {
          closed = worker.close();
        };
        // Whichever waits for the held row first gets it first, and the other is the one to find the deadlock.
        for (const [start, app] of first === "console"
          ? ([
              [answer, apps[1]!],
              [close, apps[0]!],
            ] as const)
          : ([
              [close, apps[0]!],
              [answer, apps[1]!],
            ] as const)) {
          start();
          await waitFor(() => waiting(app));
        }
      } finally {
        await locker.query("ROLLBACK").catch(() => undefined);
        locker.release();
      }
      const settled = await answers;
      await closed;
      expect(settled.filter((s) => s.status === "rejected")).toEqual([]);
      expect(errors).toEqual([]);
      const landed = new Map(ids.map((id, i) => [id, (settled[i] as PromiseFulfilledResult<boolean>).value]));
      const calls = await Promise.all(parks);
      for (const [i, ask] of asks.entries()) {
        expect(calls[i]).toEqual(
          landed.get(ask.id) === true ? { type: "approve" } : { type: "deny", reason: QUEUE_CLOSED_REASON },
        );
        expect((await row(ask.id))?.state).toBe(landed.get(ask.id) === true ? "answered" : "withdrawn");
      }
    },
  );
  it("sends a single statement the server ended to break a deadlock once more: it lands, no 40P01 reaches the caller", async () => {
    await db.pool.query(`CREATE TABLE "${db.schema}".pair (id int PRIMARY KEY, n int NOT NULL)`);
    await db.pool.query(`INSERT INTO "${db.schema}".pair VALUES (1, 0), (2, 0), (3, 0)`);
    const app = `${db.schema}-deadlock`;
    const statements = new Db(db.newPool(2, { application_name: app }), schemaNames("test", db.schema));
    // The server ends the transaction whose own wait finds the deadlock, once, deadlock_timeout after
    // that wait began. So the other transaction never looks (its deadlock_timeout is an hour), and the
    // statement's last wait, the one that closes the circle, begins only once the other already waits
    // on it: the statement alone finds the deadlock, however slow the machine.
    const gate = await db.pool.connect();
    const other = await db.pool.connect();
    const lockWaits = async (pid: number): Promise<boolean> => {
      const { rows } = await db.pool.query(
        "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
        [pid],
      );
      return rows.length > 0;
    };
    let sent: Promise<unknown> = Promise.resolve();
    let updated: Promise<unknown> = Promise.resolve();
    let failed: unknown;
    try {
      await gate.query("BEGIN");
      await gate.query(`SELECT 1 FROM "${db.schema}".pair WHERE id = 2 FOR UPDATE`);
      await other.query("BEGIN");
      await other.query("SET LOCAL deadlock_timeout = '1h'");
      await other.query(`UPDATE "${db.schema}".pair SET n = n + 1 WHERE id = 1`);
      // Locks row 3, then waits for row 2 (the gate's), then for row 1 (the other's).
      sent = statements.query(
        "test",
        `WITH l AS MATERIALIZED (SELECT id FROM "${db.schema}".pair ORDER BY id DESC FOR UPDATE)
         UPDATE "${db.schema}".pair SET n = n + 10 WHERE id IN (SELECT id FROM l)`,
      );
      sent.catch(() => undefined);
      await waitFor(async () => {
        const { rows } = await db.pool.query(
          "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
          [app],
        );
        return rows.length > 0;
      });
      // Waits for row 3, the statement's.
      const { rows } = await other.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      updated = other.query(`UPDATE "${db.schema}".pair SET n = n + 1 WHERE id = 3`);
      updated.catch(() => undefined);
      await waitFor(() => lockWaits(rows[0]!.pid));
      // The statement takes row 2 and waits for row 1: the deadlock, which only the statement looks for.
      await gate.query("ROLLBACK");
      await updated;
      await other.query("COMMIT");
    } catch (error) {
      failed = error;
      throw error;
    } finally {
      // A connection left in a transaction goes, not back to the file's pool.
      gate.release(failed instanceof Error ? failed : undefined);
      other.release(failed instanceof Error ? failed : undefined);
    }
    expect(await sent).toMatchObject({ rowCount: 3 });
    const { rows } = await db.pool.query(`SELECT n FROM "${db.schema}".pair ORDER BY id`);
    expect(rows).toEqual([{ n: 11 }, { n: 10 }, { n: 11 }]);
  });
});

describe("PostgresAskQueue: an ask whose worker is gone", () => {
  /** A worker row whose lease holds for an hour. */
  const worker = async (): Promise<string> => {
    const id = randomUUID();
    await db.pool.query(
      `INSERT INTO "${db.schema}".workers (id, lease_until, host, pid) VALUES ($1, now() + interval '1 hour', 'h', 1)`,
      [id],
    );
    return id;
  };
  /** Writes `ask` pending under `workerId` as a worker does, and returns the row as written. */
  const insert = async (client: pg.Pool | pg.ClientBase, ask: PendingAsk, workerId: string) => {
    const { rows } = await client.query<{ state: string; reason: string | null }>(
      `INSERT INTO "${db.schema}".asks (id, worker_id, ask) SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[])
       RETURNING state, reason`,
      [[ask.id], [workerId], [JSON.stringify(ask)]],
    );
    return rows[0];
  };
  const ABANDONED = { state: "withdrawn", reason: "abandoned", resolution: null };
  /** True once the connection `pid` waits for a lock. */
  const waitsForLock = async (pid: number): Promise<boolean> => {
    const { rows } = await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", [
      pid,
    ]);
    return rows.length > 0;
  };
  const pidOf = async (client: pg.ClientBase): Promise<number> =>
    (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;

  it("is closed as abandoned when its worker's row is deleted by hand, at once, reaper or not", async () => {
    const reaperLock = await db.pool.connect();
    try {
      await reaperLock.query("SELECT pg_advisory_lock(hashtext($1))", [`loopctl.reap:${db.schema}`]);
      const gone = await worker();
      const ask = makeAsk(1);
      expect(await insert(db.pool, ask, gone)).toEqual({ state: "pending", reason: null });
      const inbox = queue().approver();
      expect((await inbox.next())?.id).toBe(ask.id);
      await db.pool.query(`DELETE FROM "${db.schema}".workers WHERE id = $1`, [gone]);
      expect(await row(ask.id)).toEqual(ABANDONED);
      expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "abandoned" });
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    } finally {
      await reaperLock.query("SELECT pg_advisory_unlock_all()").catch(() => undefined);
      reaperLock.release();
    }
  });

  it("is written abandoned when inserted under a worker id that has no row; a console never gets it", async () => {
    const ask = makeAsk(1);
    expect(await insert(db.pool, ask, randomUUID())).toEqual({ state: "withdrawn", reason: "abandoned" });
    const inbox = queue().approver();
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "abandoned" });
    const later = makeAsk(2);
    expect(await insert(db.pool, later, await worker())).toEqual({ state: "pending", reason: null });
    expect((await inbox.next())?.id).toBe(later.id);
  });

  it("is written abandoned when its insert lands after its worker's lease was reaped", async () => {
    const lapsed = await worker();
    await db.pool.query(`UPDATE "${db.schema}".workers SET lease_until = now() - interval '1 second' WHERE id = $1`, [
      lapsed,
    ]);
    // A live queue's reaper deletes the lapsed lease, then the worker's insert arrives.
    queue({ leaseMs: 300 }).approver();
    await waitFor(async () => {
      const { rows } = await db.pool.query(`SELECT 1 FROM "${db.schema}".workers WHERE id = $1`, [lapsed]);
      return rows.length === 0;
    });
    const ask = makeAsk(1);
    expect(await insert(db.pool, ask, lapsed)).toEqual({ state: "withdrawn", reason: "abandoned" });
    expect(await row(ask.id)).toEqual(ABANDONED);
  });

  it("is abandoned when its insert and its worker's deletion run at once, whichever commits first", async () => {
    const [writer, reaper] = [await db.pool.connect(), await db.pool.connect()];
    try {
      const [writerPid, reaperPid] = [await pidOf(writer), await pidOf(reaper)];
      // The deletion first: the insert waits for it, then finds no worker.
      const first = await worker();
      await reaper.query("BEGIN");
      await reaper.query(`DELETE FROM "${db.schema}".workers WHERE id = $1`, [first]);
      const ask = makeAsk(1);
      let landed = false;
      const inserted = insert(writer, ask, first).finally(() => {
        landed = true;
      });
      await waitFor(async () => landed || (await waitsForLock(writerPid)));
      await reaper.query("COMMIT");
      expect(await inserted).toEqual({ state: "withdrawn", reason: "abandoned" });

      // The insert first: the deletion waits for it, then closes the ask it wrote.
      const second = await worker();
      const next = makeAsk(2);
      await writer.query("BEGIN");
      expect(await insert(writer, next, second)).toEqual({ state: "pending", reason: null });
      let deleted = false;
      const deletion = reaper.query(`DELETE FROM "${db.schema}".workers WHERE id = $1`, [second]).finally(() => {
        deleted = true;
      });
      await waitFor(async () => deleted || (await waitsForLock(reaperPid)));
      await writer.query("COMMIT");
      await deletion;
      expect(await row(next.id)).toEqual(ABANDONED);
    } finally {
      writer.release(true);
      reaper.release(true);
    }
  });

  it("is closed as abandoned however its worker goes: its id changed, the table truncated, the ask moved or revived by hand", async () => {
    const [renamed, moved, revived, truncated] = [makeAsk(1), makeAsk(2), makeAsk(3), makeAsk(4)];
    const first = await worker();
    await insert(db.pool, renamed, first);
    await db.pool.query(`UPDATE "${db.schema}".workers SET id = $2 WHERE id = $1`, [first, randomUUID()]);
    expect(await row(renamed.id)).toEqual(ABANDONED);

    const second = await worker();
    await insert(db.pool, moved, second);
    await db.pool.query(`UPDATE "${db.schema}".asks SET worker_id = $2 WHERE id = $1`, [moved.id, randomUUID()]);
    expect(await row(moved.id)).toEqual(ABANDONED);

    await insert(db.pool, revived, second);
    await db.pool.query(`DELETE FROM "${db.schema}".workers WHERE id = $1`, [second]);
    await db.pool.query(
      `UPDATE "${db.schema}".asks SET state = 'pending', reason = NULL, ended_at = NULL WHERE id = $1`,
      [revived.id],
    );
    expect(await row(revived.id)).toEqual(ABANDONED);

    const live = makeAsk(5);
    await insert(db.pool, truncated, await worker());
    await insert(db.pool, live, await worker());
    await db.pool.query(`TRUNCATE "${db.schema}".workers`);
    expect(await row(truncated.id)).toEqual(ABANDONED);
    expect(await row(live.id)).toEqual(ABANDONED);
  });
});

describe("PostgresAskQueue when the worker loses the database", () => {
  /**
   * Waits for a heartbeat of `worker`'s lease after now. Called once its ask
   * is seen: by then the worker has heard back from its insert, whose reply
   * can still be on its way when another connection already sees the row.
   */
  async function renewedOnce(worker: PostgresAskQueue): Promise<void> {
    const leaseUntil = async (): Promise<number> => {
      const { rows } = await db.pool.query<{ t: Date }>(
        `SELECT lease_until AS t FROM "${db.schema}".workers WHERE id = $1`,
        [worker.workerId],
      );
      return rows[0]?.t.getTime() ?? 0;
    };
    const before = await leaseUntil();
    await waitFor(async () => (await leaseUntil()) > before);
  }

  it("keeps a call parked through an outage shorter than the lease, and takes the answer after", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const pool = db.newPool(4, { connectionString: proxy.url });
      const worker = new PostgresAskQueue(pool, {
        schema: db.schema,
        leaseMs: 1_500,
        rereadMs: 600_000,
        onError: () => undefined,
      });
      opened.push(worker);
      const inbox = queue().approver();
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      expect((await inbox.next())?.id).toBe(ask.id);
      await renewedOnce(worker);
      await proxy.cut();
      // Answered while the worker cannot hear it; the lease, renewed until the cut, still holds.
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
      await proxy.restore();
      expect(await parked).toEqual({ type: "approve" });
    } finally {
      await proxy.close();
    }
  });

  /**
   * A worker with a 900 ms lease whose pool goes through `url` (a proxy), one
   * call parked on it and taken by a console on the direct pool.
   */
  async function parkedThrough(url: string, poolOptions: pg.PoolConfig) {
    const errors: unknown[] = [];
    const worker = new PostgresAskQueue(db.newPool(4, { connectionString: url, ...poolOptions }), {
      schema: db.schema,
      leaseMs: 900,
      onError: (e) => errors.push(e),
    });
    opened.push(worker);
    const inbox = queue({ leaseMs: 900 }).approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    await renewedOnce(worker);
    return { errors, inbox, ask, parked, lease: worker.workerId };
  }

  it("denies a parked call once the lease can no longer be said to hold, and its ask ends as abandoned", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const { errors, inbox, ask, parked, lease } = await parkedThrough(proxy.url, { connectionTimeoutMillis: 500 });
      await proxy.cut();
      expect(await parked).toEqual({ type: "deny", reason: LEASE_LOST_REASON });
      expect(errors.find((e) => e instanceof PostgresLeaseError)).toMatchObject({ workerId: lease });
      // Meanwhile, on the database's clock, the lease lapsed and a live queue closed the ask.
      expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "abandoned" });
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it("reports an answer that landed while the worker was cut off, before its lease lapsed there: its call was denied", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const { errors, inbox, ask, parked, lease } = await parkedThrough(proxy.url, { connectionTimeoutMillis: 500 });
      await proxy.cut();
      // The lease still holds on the database: the answer lands, and the console is told so.
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
      expect(await parked).toEqual({ type: "deny", reason: LEASE_LOST_REASON });
      await proxy.restore();
      await waitFor(() => errors.some((e) => e instanceof PostgresLeaseError && e.message.includes(ask.id)));
      const said = errors.find((e) => e instanceof PostgresLeaseError && e.message.includes(ask.id));
      expect(said).toMatchObject({ workerId: lease, code: "POSTGRES_LEASE_LOST" });
      expect((said as Error).message).toContain(`ask ${ask.id} was answered (approve)`);
    } finally {
      await proxy.close();
    }
  });

  /**
   * Blocks this process (a worker that stalls: its event loop blocked, the process stopped, hears
   * nothing meanwhile) until the asks `answered` are answered on the database, lease `lease`
   * lapsed there, and `pastMs` went by since the stall began; another process watches for that.
   */
  function stallUntil(lease: string, answered: readonly string[], pastMs: number): void {
    const until = Date.now() + pastMs;
    const script = `
      const pg = require("pg");
      (async () => {
        const [url, schema, lease, answered, until] = process.argv.slice(1);
        const client = new pg.Client({ connectionString: url });
        await client.connect();
        for (const giveUp = Date.now() + 20000; ; ) {
          const { rows } = await client.query(
            "SELECT (SELECT count(*)::int FROM " + schema + ".asks WHERE id = ANY($2::uuid[]) AND state = 'answered') AS answered, " +
              "EXISTS (SELECT 1 FROM " + schema + ".workers WHERE id = $1 AND lease_until > now()) AS holds",
            [lease, JSON.parse(answered)]);
          if (rows[0].answered === JSON.parse(answered).length && !rows[0].holds && Date.now() >= Number(until)) break;
          if (Date.now() > giveUp) throw new Error("never answered and lapsed: " + JSON.stringify(rows[0]));
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        await client.end();
      })().catch((error) => { process.stderr.write(String(error)); process.exit(1); });`;
    const done = spawnSync(
      process.execPath,
      ["-e", script, DATABASE_URL, `"${db.schema}"`, lease, JSON.stringify(answered), String(until)],
      { encoding: "utf8" },
    );
    if (done.status !== 0) throw new Error(`the stall failed: ${done.stderr}`);
  }

  it("gives a worker that stalled past its lease the answers that landed while the lease held, and denies the rest", async () => {
    const errors: unknown[] = [];
    const worker = queue({ leaseMs: 900, onError: (e) => errors.push(e) });
    const inbox = queue({ leaseMs: 600_000 }).approver();
    const [approved, denied, unanswered] = [makeAsk(1), makeAsk(2), makeAsk(3)];
    const calls = [approved, denied, unanswered].map((ask) => park(worker, ask));
    for (let i = 0; i < 3; i++) await inbox.next();
    await renewedOnce(worker);
    const lease = worker.workerId;
    if (lease === undefined) throw new Error("the worker holds no lease");
    const workers = `"${db.schema}".workers`;
    // A console's answers, as it lands them (only while the lease holds), committed once the worker
    // stalled. Under the lease row's lock, taken while the lease holds (the worker just renewed it),
    // the lease is held for them and then set back as the worker left it: they land while it holds
    // however long the machine takes, and it lapses when it would have.
    const console_ = await db.pool.connect();
    let counts: number[];
    try {
      await console_.query("BEGIN");
      const held = await console_.query<{ t: string }>(
        `SELECT lease_until::text AS t FROM ${workers} WHERE id = $1 AND lease_until > now() FOR UPDATE`,
        [lease],
      );
      expect(held.rows).toHaveLength(1);
      await console_.query(`UPDATE ${workers} SET lease_until = now() + interval '1 hour' WHERE id = $1`, [lease]);
      const answer = async (id: string, resolution: AskResolution): Promise<number> =>
        (
          await console_.query(
            `UPDATE "${db.schema}".asks AS a SET state = 'answered', resolution = $2::jsonb, ended_at = now()
             WHERE a.id = $1::uuid AND a.ended_at IS NULL AND EXISTS (
               SELECT 1 FROM ${workers} AS w WHERE w.id = a.worker_id AND w.lease_until > now())`,
            [id, JSON.stringify(resolution)],
          )
        ).rowCount ?? 0;
      counts = [
        await answer(approved.id, { type: "approve" }),
        await answer(denied.id, { type: "deny", reason: "not now" }),
      ];
      await console_.query(`UPDATE ${workers} SET lease_until = $2::timestamptz WHERE id = $1`, [
        lease,
        held.rows[0]?.t,
      ]);
      // Sent now; the server commits it while this process stalls, past the lease: past its lapse
      // on the database, and past the worker's own bound for it (two leases after the last renewal
      // it heard back from, one more renewal at most in flight).
      const committed = console_.query("COMMIT");
      stallUntil(lease, [approved.id, denied.id], 2 * 900 + 100);
      await committed;
    } finally {
      await console_.query("ROLLBACK").catch(() => undefined);
      console_.release();
    }
    expect(counts).toEqual([1, 1]);
    expect(await calls[0]).toEqual({ type: "approve" });
    expect(await calls[1]).toEqual({ type: "deny", reason: "not now" });
    expect(await calls[2]).toEqual({ type: "deny", reason: LEASE_LOST_REASON });
    expect(errors.find((e) => e instanceof PostgresLeaseError)).toMatchObject({ workerId: lease });
    // The lease lapsed on the database: the unanswered ask takes no answer now.
    expect(await inbox.resolve(unanswered.id, { type: "approve" })).toBe(false);
    expect(await inbox.ended(unanswered.id)).toEqual({ type: "withdrawn", reason: "abandoned" });
  });

  it("denies a parked call for a lost lease only once no answer can land: a renewal that landed without its reply is counted", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const { inbox, ask, parked, lease } = await parkedThrough(proxy.url, { connectionTimeoutMillis: 500 });
      const leaseUntil = async (): Promise<number> => {
        const { rows } = await db.pool.query<{ t: Date }>(
          `SELECT lease_until AS t FROM "${db.schema}".workers WHERE id = $1`,
          [lease],
        );
        return rows[0]?.t.getTime() ?? 0;
      };
      // The next renewal reaches the server and commits; its reply never reaches the worker.
      proxy.holdRepliesOn("WITH renewed AS");
      const before = await leaseUntil();
      await waitFor(async () => (await leaseUntil()) > before);
      await proxy.cut();
      let denied = false;
      void parked.then(() => (denied = true));
      // Answered once the worker denied its call: the answer must not land, or the console is told
      // true for a call that was denied.
      await waitFor(() => denied);
      expect(await parked).toEqual({ type: "deny", reason: LEASE_LOST_REASON });
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
      expect((await row(ask.id))?.state).not.toBe("answered");
    } finally {
      await proxy.close();
    }
  });

  it("denies a parked call when the lease runs out though its renewal hangs (a black hole), sending one renewal, not a pile", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      // No connect timeout either: nothing but the lease's own clock can end the wait.
      const { errors, inbox, ask, parked, lease } = await parkedThrough(proxy.url, {});
      proxy.stall();
      const outcome = await Promise.race([
        parked,
        new Promise<"still parked">((done) => setTimeout(() => done("still parked"), 10_000)),
      ]);
      expect(outcome).toEqual({ type: "deny", reason: LEASE_LOST_REASON });
      expect(errors.find((e) => e instanceof PostgresLeaseError)).toMatchObject({ workerId: lease });
      expect(await inbox.ended(ask.id)).toEqual({ type: "withdrawn", reason: "abandoned" });
      // Several heartbeats went by while the network swallowed everything: one renewal was sent, then given up.
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      expect(proxy.swallowed.split("WITH renewed AS").length - 1).toBeLessThanOrEqual(1);
    } finally {
      await proxy.close();
    }
  });
});

describe("PostgresAskQueue whose pool is ended while it is open", () => {
  it("closes itself and says so: parked calls are denied, inboxes end, and pool.end() finishes", async () => {
    const pool = db.newPool(4);
    const errors: unknown[] = [];
    // Heartbeats a second apart, lease 3 s: the pool's end is seen long before the lease could run out.
    const options = { schema: db.schema, leaseMs: 3_000, onError: (error: unknown) => errors.push(error) };
    const worker = new PostgresAskQueue(pool, options);
    const consoleQueue = new PostgresAskQueue(pool, options);
    opened.push(worker, consoleQueue);
    const inbox = consoleQueue.approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const ending = pool.end().then(() => "ended");
    const outcome = await Promise.race([
      ending,
      new Promise<string>((done) => setTimeout(() => done("still ending: the queues hold their connections"), 8_000)),
    ]);
    expect(outcome).toBe("ended");
    expect(await parked).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
    expect(await inbox.next()).toBeUndefined();
    expect([worker.closed, consoleQueue.closed]).toEqual([true, true]);
    const said = errors.filter((error) => error instanceof PostgresConfigError).map((error) => error.message);
    expect(said).toEqual([
      "PostgresAskQueue: its pool was ended while the queue was open; the queue closed itself (close queues before ending their pool)",
      "PostgresAskQueue: its pool was ended while the queue was open; the queue closed itself (close queues before ending their pool)",
    ]);
  });
});

describe("PostgresAskQueue on a pool with too few connections", () => {
  it("refuses a pool of one connection, which its LISTEN connection would take whole", () => {
    const error = (() => {
      try {
        return new PostgresAskQueue(db.newPool(1), { schema: db.schema });
      } catch (thrown) {
        return thrown;
      }
    })();
    expect(error).toBeInstanceOf(PostgresConfigError);
    expect((error as Error).message).toContain("at least 2");
  });

  it("reports queues that take every connection of their pool for LISTEN, and still closes", async () => {
    const pool = db.newPool(2);
    const errors: unknown[] = [];
    const queues = [0, 1].map(() => new PostgresAskQueue(pool, { schema: db.schema, onError: (e) => errors.push(e) }));
    for (const q of queues) q.approver();
    await waitFor(() => errors.some((e) => e instanceof PostgresConfigError));
    expect(errors.find((e) => e instanceof PostgresConfigError)).toMatchObject({
      code: "POSTGRES_CONFIG",
      message: expect.stringContaining("connections"),
    });
    const deadline = new AbortController();
    const parked = park(queues[0]!, makeAsk(1), deadline.signal);
    setTimeout(() => deadline.abort(new Error("expired")), 500);
    await expect(parked).rejects.toThrow("expired");
    const closing = Promise.all(queues.map((q) => q.close())).then(() => "closed");
    const hung = new Promise((done) => setTimeout(() => done("still closing"), 10_000));
    expect(await Promise.race([closing, hung])).toBe("closed");
    const { rows } = await db.pool.query(`SELECT id FROM "${db.schema}".asks WHERE state = 'pending'`);
    expect(rows).toEqual([]);
  });
});

describe("PostgresAskQueue fails closed", () => {
  it("rejects a parked call whose answer is not a resolution, and never approves it", async () => {
    const worker = queue();
    const ask = makeAsk(1);
    // Caught from the start: the rejection may come before the UPDATE's own reply does.
    const parked = park(worker, ask).catch((e: unknown) => e);
    await waitFor(async () => (await row(ask.id)) !== undefined);
    await db.pool.query(
      `UPDATE "${db.schema}".asks SET state = 'answered', resolution = '{"type":"approve","remember":"forever"}', ended_at = now() WHERE id = $1`,
      [ask.id],
    );
    const error = await parked;
    expect(error).toBeInstanceOf(PostgresRowError);
    expect((error as PostgresRowError).key).toBe(ask.id);
  });

  it("rejects a parked call whose row's ask was changed after it was parked, whatever answer lands: the console approves what it shows, never the call the worker holds", async () => {
    const errors: unknown[] = [];
    const worker = queue({ onError: (e) => errors.push(e) });
    // Each a change to what the console shows: the tool, the arguments' digest, the prompt; and an ask no longer an ask.
    const edits = [
      `jsonb_set(ask, '{tool}', '"read_file"')`,
      `jsonb_set(ask, '{argsSha256}', to_jsonb(repeat('a', 64)))`,
      `jsonb_set(ask, '{prompt}', '"Read the changelog?"')`,
      `ask - 'tool'`,
    ];
    for (const [n, edit] of edits.entries()) {
      const ask = makeAsk(n, { tool: "delete_file", prompt: "Delete the home folder?" });
      const parked = park(worker, ask).catch((e: unknown) => e);
      // Every other answer given on the worker's own queue: its call hears it from the answer's own UPDATE.
      const consoles = n % 2 === 0 ? queue() : worker;
      const inbox = consoles.approver();
      expect(await soon(inbox.next())).toEqual(ask);
      await db.pool.query(`UPDATE "${db.schema}".asks SET ask = ${edit} WHERE id = $1`, [ask.id]);
      // A console that reads the row now shows the changed ask, and its approval lands on it.
      const shown = edit.startsWith("ask -") ? undefined : await soon(consoles.approver().next());
      if (shown !== undefined) expect(shown).not.toEqual(ask);
      expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
      const error = await soon(parked);
      expect(error, edit).toBeInstanceOf(PostgresRowError);
      expect(error).toMatchObject({
        code: "POSTGRES_ROW_MALFORMED",
        key: ask.id,
        message: expect.stringContaining("not the ask its call parked") as unknown,
      });
      // Reported as well: the console was told its answer landed, and the call did not run.
      expect(errors.at(-1)).toBe(error);
    }
    expect(errors).toHaveLength(edits.length);
    expect(worker.parked).toBe(0);
  });

  it("takes an answer whose row holds the ask it parked, however the database wrote its jsonb back", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1, { prompt: 'Ship \u00e9t\u00e9 \ud83d\ude80 "now"?\n\t\\ <b>&amp;</b>' });
    const parked = park(worker, ask);
    expect(await soon(inbox.next())).toEqual(ask);
    // Written again, keys reordered by jsonb: still the same ask.
    await db.pool.query(`UPDATE "${db.schema}".asks SET ask = (ask::text)::jsonb WHERE id = $1`, [ask.id]);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await soon(parked)).toEqual({ type: "approve" });
  });

  it("rejects a parked call whose answer row carries fields no resolution has, and never approves it", async () => {
    const worker = queue();
    const answers = [
      '{"type":"approve","scope":"everything"}',
      '{"type":"approve","remember":"this_call","reason":"ok"}',
      '{"type":"deny","reason":"no","extra":true}',
      '{"type":"approve","remember":null}',
      '"approve"',
      '[{"type":"approve"}]',
    ];
    const asks = answers.map((_, n) => makeAsk(n));
    for (const [n, answer] of answers.entries()) {
      const ask = asks[n]!;
      const parked = park(worker, ask).catch((e: unknown) => e);
      await waitFor(async () => (await row(ask.id)) !== undefined);
      await db.pool.query(
        `UPDATE "${db.schema}".asks SET state = 'answered', resolution = $2::jsonb, ended_at = now() WHERE id = $1`,
        [ask.id, answer],
      );
      const error = await parked;
      expect(error, answer).toBeInstanceOf(PostgresRowError);
      expect(error).toMatchObject({ code: "POSTGRES_ROW_MALFORMED", key: ask.id });
    }
    // A console asking how such an ask ended gets the same typed error, not an ending.
    const inbox = queue().approver();
    await expect(inbox.ended(asks[0]!.id)).rejects.toBeInstanceOf(PostgresRowError);
  });

  it("rejects a console's ended() that was waiting when its ask's row ended unreadable, and never delivers the ask", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const buffered = makeAsk(2);
    const parked = park(worker, ask).catch((e: unknown) => e);
    const parkedBuffered = park(worker, buffered).catch((e: unknown) => e);
    expect((await inbox.next())?.id).toBe(ask.id);
    await waitFor(() => inbox.buffered === 1);
    // A signal that says when ended()'s own read of the row is done (the row then pending).
    let read = false;
    const signal = new AbortController().signal;
    const removeEventListener = signal.removeEventListener.bind(signal);
    signal.removeEventListener = (...args: Parameters<AbortSignal["removeEventListener"]>) => {
      read = true;
      removeEventListener(...args);
    };
    // Caught from the start: it may reject before the second UPDATE is written.
    const waiting = inbox.ended(ask.id, { signal }).catch((e: unknown) => e);
    await waitFor(() => read);
    for (const id of [ask.id, buffered.id]) {
      await db.pool.query(
        `UPDATE "${db.schema}".asks SET state = 'answered', resolution = '{"type":"approve","extra":1}', ended_at = now() WHERE id = $1`,
        [id],
      );
    }
    expect(await waiting).toBeInstanceOf(PostgresRowError);
    expect(await waiting).toMatchObject({ code: "POSTGRES_ROW_MALFORMED", key: ask.id });
    expect(await parked).toBeInstanceOf(PostgresRowError);
    expect(await parkedBuffered).toBeInstanceOf(PostgresRowError);
    // The buffered ask ended too (unreadably): it is dropped, not delivered.
    await waitFor(() => inbox.buffered === 0);
    const later = makeAsk(3);
    const parkedLater = park(worker, later);
    expect((await inbox.next())?.id).toBe(later.id);
    expect(await inbox.resolve(later.id, { type: "deny" })).toBe(true);
    expect(await parkedLater).toEqual({ type: "deny" });
  });

  it("rejects an ended() whose row ends unreadable while its own read still waits, leaving no unhandled rejection", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on("unhandledRejection", onUnhandled);
    try {
      const worker = queue();
      const parked = park(worker, makeAsk(1)).catch((e: unknown) => e);
      const pool = db.newPool(2);
      const consoleQueue = new PostgresAskQueue(pool, { schema: db.schema, onError: () => undefined });
      opened.push(consoleQueue);
      const inbox = consoleQueue.approver();
      const ask = await inbox.next();
      // The pool's other connection taken: ended()'s own read waits for it; the listening one reads endings.
      await waitFor(() => pool.idleCount === 1);
      const held = await pool.connect();
      const ending = inbox.ended(ask!.id);
      await db.pool.query(
        `UPDATE "${db.schema}".asks SET state = 'answered', resolution = '{"type":"approve","extra":1}', ended_at = now() WHERE id = $1`,
        [ask!.id],
      );
      expect(await parked).toBeInstanceOf(PostgresRowError);
      // The ending was read and failed on the listening connection; give the process a turn to report it.
      await new Promise((resolve) => setTimeout(resolve, 100));
      held.release();
      await expect(ending).rejects.toMatchObject({ code: "POSTGRES_ROW_MALFORMED", key: ask!.id });
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("rejects a next() for a pending row whose ask carries fields an ask does not have", async () => {
    const worker = queue();
    const odd = makeAsk(7);
    const other = randomUUID();
    await db.pool.query(
      `INSERT INTO "${db.schema}".workers (id, lease_until, host, pid) VALUES ($1, now() + interval '1 hour', 'h', 1)`,
      [other],
    );
    await db.pool.query(`INSERT INTO "${db.schema}".asks (id, worker_id, ask) VALUES ($1, $2, $3)`, [
      odd.id,
      other,
      { ...odd, args: { path: "/etc/passwd" } },
    ]);
    const inbox = queue().approver();
    const error = await inbox.next().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PostgresRowError);
    expect(error).toMatchObject({ key: odd.id });
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
  });

  it("ignores notifications that are not its own: a forged payload never answers a parked call", async () => {
    const worker = queue({ rereadMs: 600_000 });
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    await waitFor(async () => (await row(ask.id)) !== undefined);
    const channel = `${db.schema}.asks`;
    for (const payload of [
      `end ${ask.id} approve`,
      `approve ${ask.id}`,
      `end ${ask.id}`,
      `{"id":"${ask.id}","type":"approve"}`,
      "",
    ]) {
      await db.pool.query("SELECT pg_notify($1, $2)", [channel, payload]);
    }
    // A bare `end <id>` only made the worker read the row, which is still pending.
    const inbox = queue().approver();
    expect((await inbox.next())?.id).toBe(ask.id);
    expect(await row(ask.id)).toMatchObject({ state: "pending" });
    expect(worker.parked).toBe(1);
    expect(await inbox.resolve(ask.id, { type: "deny", reason: "no" })).toBe(true);
    expect(await parked).toEqual({ type: "deny", reason: "no" });
  });

  it("rejects one next() per pending row that is not an ask, naming it, and goes on", async () => {
    const worker = queue();
    const bad = randomUUID();
    await db.pool.query(
      `INSERT INTO "${db.schema}".workers (id, lease_until, host, pid) VALUES ($1, now() + interval '1 hour', 'h', 1)`,
      [bad],
    );
    await db.pool.query(`INSERT INTO "${db.schema}".asks (id, worker_id, ask) VALUES ($1, $1, '{"tool":"x"}')`, [bad]);
    const inbox = queue({ rereadMs: 50 }).approver();
    const error = await inbox.next().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PostgresRowError);
    expect((error as PostgresRowError).key).toBe(bad);
    // Once: the re-reads that find the row still pending do not reject again.
    const quiet = await inbox.next({ signal: AbortSignal.timeout(1_000) }).catch((e: unknown) => e);
    expect(quiet).toMatchObject({ name: "TimeoutError" });
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    expect(await inbox.resolve(ask.id, { type: "deny" })).toBe(true);
    expect(await parked).toEqual({ type: "deny" });
  });

  it("refuses what is not a pending ask, a missing signal and a duplicate id, with typed errors", async () => {
    const worker = queue();
    const signal = new AbortController().signal;
    await expect(worker.resolver.resolve({ id: "x" } as PendingAsk, { signal })).rejects.toMatchObject({
      code: "POSTGRES_ASK_INVALID",
    });
    // One line, naming the fields at fault.
    await expect(worker.resolver.resolve({ ...makeAsk(1), turn: -1 }, { signal })).rejects.toThrow(
      /: not a pending ask: turn: Too small: expected number to be >=0$/,
    );
    await expect(worker.resolver.resolve(makeAsk(1), undefined as never)).rejects.toBeInstanceOf(PostgresAskError);
    const ask = makeAsk(2);
    const parked = park(worker, ask);
    await expect(park(worker, ask)).rejects.toMatchObject({ code: "POSTGRES_ASK_DUPLICATE" });
    await waitFor(async () => (await row(ask.id)) !== undefined);
    await expect(park(queue(), ask)).rejects.toMatchObject({ code: "POSTGRES_ASK_DUPLICATE" });
    await worker.close();
    expect(await parked).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
  });

  it("refuses a signal that only inherits from AbortSignal, or one it cannot listen to, with PostgresAskError, leaving nothing parked", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1);
    let refused: Promise<AskResolution> | undefined;
    expect(() => {
      refused = worker.resolver.resolve(ask, { signal: Object.create(AbortSignal.prototype) as AbortSignal });
    }).not.toThrow();
    await expect(refused).rejects.toMatchObject({ code: "POSTGRES_ASK_INVALID", askId: ask.id });
    const unlistenable = new AbortController().signal;
    const trap = new Error("cannot listen");
    unlistenable.addEventListener = () => {
      throw trap;
    };
    const unheard = await park(worker, ask, unlistenable).catch((e: unknown) => e);
    expect(unheard).toBeInstanceOf(PostgresAskError);
    expect(unheard).toMatchObject({
      code: "POSTGRES_ASK_INVALID",
      askId: ask.id,
      message: `ask ${ask.id}: options.signal cannot be listened to`,
      cause: trap,
    });
    expect(worker.parked).toBe(0);
    // Nothing of either call is left: the same ask parks, is delivered and answered once.
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
    expect(await rowCount()).toBe(1);
  });

  it("ends a park whose signal aborts with a reason that cannot be read with PostgresAskError; its row is withdrawn", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const trap = new Error("reason unreadable");
    const refusal = (ask: PendingAsk): Record<string, unknown> => ({
      code: "POSTGRES_ASK_INVALID",
      askId: ask.id,
      message: `ask ${ask.id}: options.signal aborted, and its reason could not be read`,
      cause: trap,
    });
    const first = makeAsk(1);
    const before = unreadableReasonSignal(trap);
    before.controller.abort();
    await expect(park(worker, first, before.signal)).rejects.toMatchObject(refusal(first));
    expect(worker.parked).toBe(0);
    const ask = makeAsk(2);
    const during = unreadableReasonSignal(trap);
    const parked = park(worker, ask, during.signal);
    expect((await inbox.next())?.id).toBe(ask.id);
    during.controller.abort();
    const error = await parked.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PostgresAskError);
    expect(error).toMatchObject(refusal(ask));
    expect(worker.parked).toBe(0);
    await waitFor(async () => (await row(ask.id))?.state === "withdrawn");
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(false);
  });

  it("refuses an ask or an answer holding text jsonb cannot store (U+0000, a lone surrogate) alone, never its batch", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const bad = [
      makeAsk(1, { prompt: "ok?\u0000" }),
      makeAsk(2, { tool: "write\ud800" }),
      makeAsk(3, { callId: "call\udc00_3" }),
    ];
    const good = makeAsk(4);
    // Parked in one turn: one insert batch.
    const parked = [...bad, good].map((ask) => park(worker, ask).catch((e: unknown) => e));
    for (const [n, ask] of bad.entries()) {
      const error = await parked[n];
      expect(error).toBeInstanceOf(PostgresAskError);
      expect(error).toMatchObject({ code: "POSTGRES_ASK_INVALID", askId: ask.id });
      expect((error as Error).message).toMatch(/prompt|tool|callId/);
      expect(await row(ask.id)).toBeUndefined();
    }
    expect((await inbox.next())?.id).toBe(good.id);
    const other = makeAsk(5);
    const parkedOther = park(worker, other);
    expect((await inbox.next())?.id).toBe(other.id);
    // Answered in one turn: one answer batch.
    const answers = [
      inbox.resolve(good.id, { type: "deny", reason: "no\u0000" }).catch((e: unknown) => e),
      inbox.resolve(good.id, { type: "deny", reason: "no\udbff" }).catch((e: unknown) => e),
      inbox.resolve(other.id, { type: "deny", reason: "not now" }),
    ];
    for (const refused of [await answers[0], await answers[1]]) {
      expect(refused).toBeInstanceOf(InvalidAskResolutionError);
      expect(refused).toMatchObject({ askId: good.id });
      expect((refused as Error).message).toContain("reason");
    }
    expect(await answers[2]).toBe(true);
    expect(await parkedOther).toEqual({ type: "deny", reason: "not now" });
    expect(await row(good.id)).toMatchObject({ state: "pending" });
    expect(await inbox.resolve(good.id, { type: "approve" })).toBe(true);
    expect(await parked[3]).toEqual({ type: "approve" });
  });

  it("refuses a malformed answer, and treats bad or unknown ids as nothing to answer", async () => {
    const inbox = queue().approver();
    const id = randomUUID();
    await expect(inbox.resolve(id, { type: "maybe" } as never)).rejects.toThrow(
      new InvalidAskResolutionError(id, "type: Invalid discriminator value. Expected 'approve' | 'deny'"),
    );
    expect(await inbox.resolve("not-a-uuid", { type: "approve" })).toBe(false);
    expect(await inbox.resolve(randomUUID(), { type: "approve" })).toBe(false);
    expect(await inbox.ended("not-a-uuid")).toEqual({ type: "withdrawn", reason: "unknown" });
    expect(await inbox.ended(randomUUID())).toEqual({ type: "withdrawn", reason: "unknown" });
    const reason = new Error("stop");
    await expect(inbox.next({ signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
  });

  it("refuses a malformed answer to an id that is not a string with InvalidAskResolutionError naming it", async () => {
    const inbox = queue().approver();
    for (const [id, named] of [
      [5, "5"],
      [Symbol("id"), "Symbol(id)"],
      [Object.create(null) as object, "(an unprintable object)"],
    ] as const) {
      expect(await inbox.resolve(id as never, { type: "approve" })).toBe(false);
      const error = await inbox.resolve(id as never, { type: "maybe" } as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidAskResolutionError);
      expect(error).toMatchObject({ code: "ASK_RESOLUTION_INVALID", askId: named });
    }
  });

  it("refuses a keepEndedMs under an hour, naming it: a row answered and purged before its worker read it would lose its answer", async () => {
    for (const keepEndedMs of [0, 1, 60_000, 3_599_999]) {
      expect(() => new PostgresAskQueue(db.pool, { schema: db.schema, keepEndedMs })).toThrow(
        expect.objectContaining({
          code: "POSTGRES_CONFIG",
          message: expect.stringMatching(
            new RegExp(`^PostgresAskQueue: keepEndedMs must be at least 3600000 \\(an hour\\).*, got ${keepEndedMs}$`),
          ) as unknown,
        }),
      );
    }
    for (const keepEndedMs of [1.5, -1, 365 * 86_400_000 + 1]) {
      expect(() => new PostgresAskQueue(db.pool, { schema: db.schema, keepEndedMs })).toThrow(
        expect.objectContaining({
          code: "POSTGRES_CONFIG",
          message: expect.stringContaining("keepEndedMs") as unknown,
        }),
      );
    }
    // An hour is enough: the queue works with it.
    const worker = queue({ keepEndedMs: 3_600_000 });
    await parkAndApprove(worker, queue({ keepEndedMs: 3_600_000 }).approver(), 1);
  });

  it("rejects options out of range", () => {
    expect(() => new PostgresAskQueue(db.pool, { leaseMs: 0 })).toThrow(PostgresConfigError);
    expect(() => new PostgresAskQueue(db.pool, { rereadMs: 1.5 })).toThrow(PostgresConfigError);
    expect(() => new PostgresAskQueue(db.pool, { schema: "x y" })).toThrow(PostgresConfigError);
    for (const options of [null, "loopctl", 1]) {
      expect(() => new PostgresAskQueue(db.pool, options as never)).toThrow(PostgresConfigError);
    }
  });

  it("refuses an option it does not take, naming it: a misspelt lease or schema is never left at its default", () => {
    for (const [options, message] of [
      [{ schema: db.schema, leaseMS: 1_000 }, "PostgresAskQueue: unknown option 'leaseMS' (did you mean leaseMs?)"],
      [{ Schema: db.schema }, "PostgresAskQueue: unknown option 'Schema' (did you mean schema?)"],
      [
        { schema: db.schema, onerror: () => undefined },
        "PostgresAskQueue: unknown option 'onerror' (did you mean onError?)",
      ],
      [
        { schema: db.schema, pollMs: 10 },
        "PostgresAskQueue: unknown option 'pollMs' (the options are schema, leaseMs, rereadMs, keepEndedMs and onError)",
      ],
    ] as const) {
      expect(() => new PostgresAskQueue(db.pool, options as never)).toThrow(
        expect.objectContaining({ code: "POSTGRES_CONFIG", message }),
      );
    }
  });

  it("refuses a node-postgres Client, connected or not, or a connection checked out of a pool, with PostgresConfigError naming pool", async () => {
    await withEachNonPool(db.pool, (given) => {
      const make = (): unknown => new PostgresAskQueue(given as never, { schema: db.schema });
      expect(make).toThrow(PostgresConfigError);
      expect(make).toThrow(
        /^PostgresAskQueue: pool must be a node-postgres Pool \(new pg\.Pool\(\.\.\.\)\), not a Client/,
      );
    });
  });
});

describe("PostgresApprover: next() and ended() check their options before anything waits", () => {
  const approve: AskResolution = { type: "approve" };

  it.each(BAD_WAIT_OPTIONS)(
    "next(%s): rejects with InvalidApproverOptionsError naming it, never throws, and leaves no taker behind",
    async (_label, options, argument) => {
      const errors: unknown[] = [];
      const worker = queue();
      const inbox = queue({ onError: (e) => errors.push(e) }).approver();
      let taking: Promise<PendingAsk | undefined> | undefined;
      expect(() => {
        taking = inbox.next(options as never);
      }).not.toThrow();
      await expect(taking).rejects.toBeInstanceOf(InvalidApproverOptionsError);
      await expect(taking).rejects.toMatchObject({ code: "ASK_OPTIONS_INVALID", method: "next", argument });
      // The next ask goes to the call waiting after it, and close() still settles the one after that.
      const waiting = inbox.next();
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      expect((await waiting)?.id).toBe(ask.id);
      expect(await inbox.resolve(ask.id, approve)).toBe(true);
      expect(await parked).toEqual(approve);
      const last = inbox.next();
      expect(() => inbox.close()).not.toThrow();
      await expect(last).resolves.toBeUndefined();
      expect(errors).toEqual([]);
    },
  );

  it.each(BAD_WAIT_OPTIONS)(
    "ended(id, %s): rejects with InvalidApproverOptionsError naming it, never throws, and other waits hear the ending",
    async (_label, options, argument) => {
      const errors: unknown[] = [];
      const worker = queue();
      const inbox = queue({ onError: (e) => errors.push(e) }).approver();
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      expect((await inbox.next())?.id).toBe(ask.id);
      const before = inbox.ended(ask.id);
      let ending: Promise<unknown> | undefined;
      expect(() => {
        ending = inbox.ended(ask.id, options as never);
      }).not.toThrow();
      await expect(ending).rejects.toBeInstanceOf(InvalidApproverOptionsError);
      await expect(ending).rejects.toMatchObject({ code: "ASK_OPTIONS_INVALID", method: "ended", argument });
      const after = inbox.ended(ask.id);
      expect(await inbox.resolve(ask.id, approve)).toBe(true);
      expect(await parked).toEqual(approve);
      expect(await Promise.all([before, after])).toEqual([
        { type: "answered", verdict: "approve" },
        { type: "answered", verdict: "approve" },
      ]);
      // A wait on another ask, and close(), go on as if the bad call was never made.
      const other = makeAsk(2);
      const parkedOther = park(worker, other);
      expect((await inbox.next())?.id).toBe(other.id);
      const waiting = inbox.ended(other.id);
      expect(() => inbox.close()).not.toThrow();
      await expect(waiting).resolves.toEqual({ type: "withdrawn", reason: "closed" });
      await worker.close();
      expect(await parkedOther).toEqual({ type: "deny", reason: QUEUE_CLOSED_REASON });
      expect(errors).toEqual([]);
    },
  );

  it("ended() whose signal aborts while it reads rejects alone: the other waits on that ask hear its ending", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const before = inbox.ended(ask.id);
    const stop = new AbortController();
    const reason = new Error("this console stopped waiting");
    const stopped = inbox.ended(ask.id, { signal: stop.signal });
    stop.abort(reason);
    await expect(stopped).rejects.toBe(reason);
    const after = inbox.ended(ask.id);
    expect(await inbox.resolve(ask.id, approve)).toBe(true);
    expect(await parked).toEqual(approve);
    expect(await Promise.all([before, after])).toEqual([
      { type: "answered", verdict: "approve" },
      { type: "answered", verdict: "approve" },
    ]);
  });

  it("ended() whose own read fails rejects alone: a wait on that ask begun before goes on, and hears its ending", async () => {
    const app = `${db.schema}-ended-read`;
    const worker = queue();
    const inbox = queue({ leaseMs: 30_000 }, app).approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const before = inbox.ended(ask.id);
    before.catch(() => undefined);
    // Its read is done: the ask is pending, and the call waits for its ending.
    await waitFor(async () => {
      const { rows } = await db.pool.query(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle' AND strpos(query, $2) > 0`,
        [app, "id, state, resolution, reason FROM"],
      );
      return rows.length > 0;
    });
    const locker = await db.pool.connect();
    try {
      // The next ended() cannot read the row: its statement waits on a lock, and its connection, then
      // the one it is sent again on, is terminated.
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${db.schema}".asks IN ACCESS EXCLUSIVE MODE`);
      const failed = inbox.ended(ask.id);
      failed.catch(() => undefined);
      await terminateWaiting(app, "id, state, resolution, reason FROM");
      await terminateWaiting(app, "id, state, resolution, reason FROM");
      await expect(failed).rejects.toBeInstanceOf(PostgresQueryError);
    } finally {
      await locker.query("ROLLBACK").catch(() => undefined);
      locker.release();
    }
    expect(await queue().approver().resolve(ask.id, approve)).toBe(true);
    expect(await parked).toEqual(approve);
    expect(await soon(before)).toEqual({ type: "answered", verdict: "approve" });
  });

  it.each(["next", "ended"] as const)(
    "%s() given a signal whose reason cannot be read rejects with InvalidApproverOptionsError when it aborts, before or during the wait",
    async (method) => {
      const worker = queue();
      const inbox = queue().approver();
      const trap = new Error("reason unreadable");
      const ask = makeAsk(1);
      const parked = park(worker, ask);
      // next() waits only when nothing is ready: the ask is taken first (and its row is written).
      expect((await inbox.next())?.id).toBe(ask.id);
      const refusal = unreadableReasonRefusal(method, trap);
      const call = (signal: AbortSignal): Promise<unknown> =>
        method === "next" ? inbox.next({ signal }) : inbox.ended(ask.id, { signal });
      const before = unreadableReasonSignal(trap);
      before.controller.abort();
      await expect(call(before.signal)).rejects.toMatchObject(refusal);
      const during = unreadableReasonSignal(trap);
      const waiting = call(during.signal).catch((e: unknown) => e);
      await new Promise((resolve) => setTimeout(resolve, 50));
      during.controller.abort();
      const error = await waiting;
      expect(error).toBeInstanceOf(InvalidApproverOptionsError);
      expect(error).toMatchObject(refusal);
      expect(await inbox.resolve(ask.id, approve)).toBe(true);
      expect(await parked).toEqual(approve);
    },
  );

  it("next() with a signal it cannot listen to rejects with InvalidApproverOptionsError, that failure its cause, and takes no ask", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const trap = new Error("cannot listen");
    await expect(inbox.next({ signal: unlistenableSignal(trap) })).rejects.toMatchObject(
      unlistenableRefusal("next", trap),
    );
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    // Delivered to the next call, not to the one that already rejected.
    expect((await inbox.next())?.id).toBe(ask.id);
    expect(await inbox.resolve(ask.id, approve)).toBe(true);
    expect(await parked).toEqual(approve);
  });

  it("ended() with a signal it cannot listen to rejects with InvalidApproverOptionsError, that failure its cause; the other waits hear the ending", async () => {
    const worker = queue();
    const inbox = queue().approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const before = inbox.ended(ask.id);
    const trap = new Error("cannot listen");
    await expect(inbox.ended(ask.id, { signal: unlistenableSignal(trap) })).rejects.toMatchObject(
      unlistenableRefusal("ended", trap),
    );
    const after = inbox.ended(ask.id);
    expect(await inbox.resolve(ask.id, approve)).toBe(true);
    expect(await parked).toEqual(approve);
    expect(await Promise.all([before, after])).toEqual([
      { type: "answered", verdict: "approve" },
      { type: "answered", verdict: "approve" },
    ]);
  });

  it("a signal that refuses to give up its listener keeps no call, answer or close from settling", async () => {
    const errors: unknown[] = [];
    const [watcherA, engineB, takerC, watcherD, takerE, engineF] = [
      stuckController(),
      stuckController(),
      stuckController(),
      stuckController(),
      stuckController(),
      stuckController(),
    ];
    // The worker and the console share a queue, so answers settle the parked call from their own UPDATE.
    const shared = queue({ onError: (e) => errors.push(e) });
    const inbox = shared.approver();
    // An answer reaches an ask one of whose watchers is stuck (and read its row with that signal), and resolve() says so.
    const a = makeAsk(1);
    const parkedA = park(shared, a);
    expect((await inbox.next())?.id).toBe(a.id);
    const watchersA = [inbox.ended(a.id, { signal: watcherA.signal }), inbox.ended(a.id)];
    await waitFor(() => inbox.buffered === 0);
    expect(await inbox.resolve(a.id, approve)).toBe(true);
    await expect(parkedA).resolves.toEqual(approve);
    expect(await Promise.all(watchersA)).toEqual([0, 1].map(() => ({ type: "answered", verdict: "approve" })));
    // The engine's own signal is stuck.
    const b = makeAsk(2);
    const parkedB = park(shared, b, engineB.signal);
    expect((await inbox.next())?.id).toBe(b.id);
    expect(await inbox.resolve(b.id, approve)).toBe(true);
    await expect(parkedB).resolves.toEqual(approve);
    // A stuck next() is handed an ask, and the one behind it the next.
    const takingC = inbox.next({ signal: takerC.signal });
    const behindC = inbox.next();
    const c = makeAsk(3);
    const c2 = makeAsk(4);
    const parkedC = park(shared, c);
    expect((await takingC)?.id).toBe(c.id);
    const parkedC2 = park(shared, c2);
    expect((await behindC)?.id).toBe(c2.id);
    // close() settles everything, stuck or not.
    const d = makeAsk(5);
    const parkedD = park(shared, d);
    const f = makeAsk(6);
    const parkedF = park(shared, f, engineF.signal);
    expect((await inbox.next())?.id).toBe(d.id);
    expect((await inbox.next())?.id).toBe(f.id);
    const watchersD = [inbox.ended(d.id, { signal: watcherD.signal }), inbox.ended(d.id)];
    const takers = [inbox.next({ signal: takerE.signal }), inbox.next()];
    await expect(shared.close()).resolves.toBeUndefined();
    const denial: AskResolution = { type: "deny", reason: QUEUE_CLOSED_REASON };
    expect(await Promise.all([parkedC, parkedC2, parkedD, parkedF])).toEqual([denial, denial, denial, denial]);
    expect(await Promise.all(watchersD)).toEqual([0, 1].map(() => ({ type: "withdrawn", reason: "closed" })));
    expect(await Promise.all(takers)).toEqual([undefined, undefined]);
    expect(shared.parked).toBe(0);
    // The listeners left behind are inert.
    for (const controller of [watcherA, engineB, takerC, watcherD, takerE, engineF])
      controller.abort(new Error("late"));
    expect(errors).toEqual([]);
  });
});

/**
 * Terminates every connection of one application, its listening one included, and waits until
 * their server processes are gone: `pg_terminate_backend` only signals them, and a statement sent
 * meanwhile on one of them would fail with the termination instead of finding it dead.
 */
async function terminate(application: string): Promise<void> {
  const { rows } = await db.pool.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
    [application],
  );
  const pids = rows.map((r) => r.pid);
  const killed = await db.pool.query<{ n: number }>(
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n FROM unnest($1::int[]) AS pid",
    [pids],
  );
  expect(killed.rows[0]?.n).toBeGreaterThan(0);
  await waitFor(async () => {
    const alive = await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])", [pids]);
    return alive.rows.length === 0;
  });
}

/**
 * Terminates the server process of one application's connection whose statement (its text holding
 * `text`) waits for a lock, once there is one, and waits until the process is gone.
 */
async function terminateWaiting(application: string, text: string): Promise<void> {
  let pid: number | undefined;
  await waitFor(async () => {
    const { rows } = await db.pool.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND strpos(query, $2) > 0",
      [application, text],
    );
    pid = rows[0]?.pid;
    return pid !== undefined;
  });
  const { rows } = await db.pool.query<{ done: boolean }>("SELECT pg_terminate_backend($1) AS done", [pid]);
  expect(rows[0]?.done).toBe(true);
  await waitFor(
    async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid])).rows.length === 0,
  );
}

async function connections(application: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1",
    [application],
  );
  return rows[0]?.n ?? 0;
}
