/**
 * loopctl on a pool whose connections carry session defaults of the user's, the database's or the
 * role's: another isolation level, read-only transactions, a search_path without public.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { AskResolution, PendingAsk } from "loopctl/ask";
import { Grant, GrantScope } from "loopctl/grant";
import { PostgresAskQueue, PostgresGrantStore, PostgresQueryError, migrate } from "loopctl/postgres";
import type { PostgresAskQueueOptions } from "loopctl/postgres";
import { makeAsk } from "./support/ask-fixtures.js";
import { freshSchema, usePostgres } from "./support/postgres.js";

const db = usePostgres();

const opened: PostgresAskQueue[] = [];

afterEach(async () => {
  await Promise.all(opened.splice(0).map((q) => q.close()));
});

/** A queue on a pool of its own whose connections carry `session` (`-c name=value …`) and `application_name`. */
function queue(application_name: string, session?: string, options: PostgresAskQueueOptions = {}): PostgresAskQueue {
  const pool = db.newPool(4, session === undefined ? { application_name } : { application_name, options: session });
  const q = new PostgresAskQueue(pool, { schema: db.schema, onError: () => undefined, ...options });
  opened.push(q);
  return q;
}

function park(q: PostgresAskQueue, ask: PendingAsk, signal = new AbortController().signal): Promise<AskResolution> {
  return q.resolver.resolve(ask, { signal });
}

async function waitFor(condition: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition never held");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** How many sessions named `application_name` wait for a lock. */
async function waitingForLock(application_name: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
    [application_name],
  );
  return rows[0]?.n ?? 0;
}

/**
 * Holds ask `id`'s row locked (`FOR UPDATE`) while `racing` sends its statements, until `waiters`
 * sessions named so wait for it: then lets them all go at once, the first to get the row changing
 * it under the others.
 */
async function race<T>(id: string, waiters: Record<string, number>, racing: () => T): Promise<T> {
  const holder = await db.pool.connect();
  try {
    await holder.query("BEGIN");
    await holder.query(`SELECT 1 FROM "${db.schema}".asks WHERE id = $1 FOR UPDATE`, [id]);
    const raced = racing();
    for (const [name, n] of Object.entries(waiters)) await waitFor(async () => (await waitingForLock(name)) === n);
    await holder.query("COMMIT");
    return raced;
  } finally {
    holder.release();
  }
}

async function answeredRow(id: string): Promise<unknown> {
  const { rows } = await db.pool.query(`SELECT state, resolution FROM "${db.schema}".asks WHERE id = $1`, [id]);
  return rows[0];
}

describe.each(["serializable", "repeatable read"])("a pool whose transactions default to %s", (level) => {
  const session = `-c default_transaction_isolation=${level.replace(" ", "\\ ")}`;

  it("tells the answer that lost a race for one ask false, not a serialization error, and the call gets the winner's", async () => {
    const worker = queue("loopctl_worker");
    const first = queue("loopctl_consoles", session).approver();
    const second = queue("loopctl_consoles", session).approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await first.next())?.id).toBe(ask.id);
    expect((await second.next())?.id).toBe(ask.id);
    const answers = await race(ask.id, { loopctl_consoles: 2 }, () =>
      Promise.allSettled([
        first.resolve(ask.id, { type: "approve" }),
        second.resolve(ask.id, { type: "deny", reason: "no" }),
      ]),
    );
    expect(answers.map((a) => a.status)).toEqual(["fulfilled", "fulfilled"]);
    const landed = answers.map((a) => (a.status === "fulfilled" ? a.value : undefined));
    expect(landed.filter((l) => l === true)).toHaveLength(1);
    expect(landed.filter((l) => l === false)).toHaveLength(1);
    const winner: AskResolution = landed[0] === true ? { type: "approve" } : { type: "deny", reason: "no" };
    expect(await parked).toEqual(winner);
    expect(await answeredRow(ask.id)).toEqual({ state: "answered", resolution: winner });
  });

  it("settles a call whose queue closes while an answer lands with that answer, the one its console was told landed", async () => {
    const errors: unknown[] = [];
    const worker = queue("loopctl_worker", session, { onError: (error) => errors.push(error) });
    const inbox = queue("loopctl_console").approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    // The answer waits for the row first, the close's UPDATE behind it.
    let closed: Promise<void> | undefined;
    const answered = await race(ask.id, { loopctl_console: 1, loopctl_worker: 1 }, () => {
      const answer = inbox.resolve(ask.id, { type: "approve" });
      void waitFor(async () => (await waitingForLock("loopctl_console")) === 1).then(() => {
        closed = worker.close();
      });
      return answer;
    });
    expect(answered).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
    await closed;
    expect(errors).toEqual([]);
  });

  it("withdraws a cancelled call's row behind an answer that got there first without reporting an error", async () => {
    const errors: unknown[] = [];
    const worker = queue("loopctl_worker", session, { onError: (error) => errors.push(error) });
    const inbox = queue("loopctl_console").approver();
    const ask = makeAsk(1);
    const stop = new AbortController();
    const parked = park(worker, ask, stop.signal).catch((error: unknown) => error);
    expect((await inbox.next())?.id).toBe(ask.id);
    const answered = await race(ask.id, { loopctl_console: 1, loopctl_worker: 1 }, () => {
      const answer = inbox.resolve(ask.id, { type: "approve" });
      void waitFor(async () => (await waitingForLock("loopctl_console")) === 1).then(() =>
        stop.abort(new Error("cancelled")),
      );
      return answer;
    });
    expect(answered).toBe(true);
    expect(await parked).toEqual(new Error("cancelled"));
    // The withdrawal found the ask ended and is done: closing sends it no more.
    await worker.close();
    expect(errors).toEqual([]);
    expect(await answeredRow(ask.id)).toEqual({ state: "answered", resolution: { type: "approve" } });
  });
  it("renews a worker's lease whose row another transaction changed while the renewal waited: the lease holds, no error", async () => {
    const errors: unknown[] = [];
    const worker = queue("loopctl_worker", session, { leaseMs: 3_000, onError: (error) => errors.push(error) });
    const inbox = queue("loopctl_console").approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    const { rows } = await db.pool.query<{ id: string; until: Date }>(
      `SELECT w.id::text AS id, w.lease_until AS until FROM "${db.schema}".workers AS w
       JOIN "${db.schema}".asks AS a ON a.worker_id = w.id WHERE a.id = $1`,
      [ask.id],
    );
    const lease = rows[0]!;
    const holder = await db.pool.connect();
    try {
      await holder.query("BEGIN");
      await holder.query(`UPDATE "${db.schema}".workers SET lease_until = lease_until WHERE id = $1`, [lease.id]);
      // The next heartbeat's renewal waits for the row, then finds it changed under its snapshot.
      await waitFor(async () => (await waitingForLock("loopctl_worker")) === 1);
      await holder.query("COMMIT");
    } finally {
      holder.release();
    }
    await waitFor(async () => {
      const now = await db.pool.query<{ until: Date }>(
        `SELECT lease_until AS until FROM "${db.schema}".workers WHERE id = $1`,
        [lease.id],
      );
      return (now.rows[0]?.until.getTime() ?? 0) > lease.until.getTime();
    });
    expect(errors).toEqual([]);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
  });
});

describe("a pool whose transactions default to read-only (a standby's pool, say)", () => {
  it("fails parks, answers and saves with a typed error saying the connections are read-only, approving nothing", async () => {
    const readOnly = "-c default_transaction_read_only=on";
    const worker = queue("loopctl_worker", readOnly);
    const ask = makeAsk(1);
    const refused = await park(worker, ask).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(PostgresQueryError);
    expect((refused as PostgresQueryError).code).toBe("POSTGRES_QUERY");
    expect(String(refused)).toMatch(/read-only.*default_transaction_read_only.*writable/);
    expect(worker.parked).toBe(0);

    const writable = queue("loopctl_worker2");
    const other = makeAsk(2);
    const parked = park(writable, other);
    const inbox = queue("loopctl_console", readOnly).approver();
    expect((await inbox.next())?.id).toBe(other.id);
    const answer = await inbox.resolve(other.id, { type: "approve" }).catch((error: unknown) => error);
    expect(answer).toBeInstanceOf(PostgresQueryError);
    expect(String(answer)).toMatch(/PostgresApprover\.resolve: .*read-only.*default_transaction_read_only/);
    expect(await answeredRow(other.id)).toEqual({ state: "pending", resolution: null });

    const store = new PostgresGrantStore(db.newPool(2, { options: readOnly }), { project: "acme", schema: db.schema });
    expect(await store.load()).toEqual([]);
    const saved = await store.save(new Grant("read", "allow", GrantScope.thisTool())).catch((error: unknown) => error);
    expect(saved).toBeInstanceOf(PostgresQueryError);
    expect(String(saved)).toMatch(
      /PostgresGrantStore\.save: project "acme" .*read-only.*default_transaction_read_only/,
    );

    // A schema up to date needs nothing written; one to make fails, saying why.
    expect(await migrate(db.newPool(2, { options: readOnly }), { schema: db.schema })).toMatchObject({ applied: [] });
    await expect(migrate(db.newPool(2, { options: readOnly }), { schema: freshSchema() })).rejects.toThrow(
      /read-only.*default_transaction_read_only/,
    );

    await writable.close();
    expect(await parked).toMatchObject({ type: "deny" });
  });
});

describe("a pool whose search_path is empty", () => {
  it("parks, answers, saves and loads: every name loopctl uses is qualified", async () => {
    const session = "-c search_path=";
    const worker = queue("loopctl_worker", session);
    const inbox = queue("loopctl_console", session).approver();
    const ask = makeAsk(1);
    const parked = park(worker, ask);
    expect((await inbox.next())?.id).toBe(ask.id);
    expect(await inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
    const store = new PostgresGrantStore(db.newPool(2, { options: session }), { project: "acme", schema: db.schema });
    const grant = new Grant("read", "allow", GrantScope.thisTool());
    await store.save(grant);
    expect((await store.load()).map((g) => g.id)).toEqual([grant.id]);
  });
});
