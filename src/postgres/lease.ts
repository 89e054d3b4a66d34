import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { conflictFailure, connectionLost, inTurn } from "./db.js";
import type { Db } from "./db.js";
import type { PgPoolClient } from "./pg.js";

/** Why a worker stopped holding its lease. */
export type LeaseLoss = "lapsed" | "unreachable";

/** What a {@link WorkerLease} needs from its queue. */
export interface LeaseHost {
  /** Hears that the lease was lost (its parked calls are to be denied). */
  lost(workerId: string, why: LeaseLoss): void;
  /** The queue's listening connection, when it is up. */
  direct(): PgPoolClient | undefined;
  /** The listening connection swallowed a lease statement: it is given up (and listening starts again). */
  broken(client: PgPoolClient, error: Error): void;
}

interface Sent {
  readonly rows: readonly Record<string, unknown>[];
  readonly sent: number;
}

/**
 * A worker's lease: a row in `<schema>.workers` whose `lease_until` the
 * worker pushes forward on every heartbeat. Times are the database's
 * (`now()`), so clocks on other machines never matter; the worker's own view
 * of how long it still holds the lease counts from when it sent its last
 * successful renewal, which is never later than the database's.
 *
 * That view runs on its own clock: a timer loses the lease the moment it can
 * no longer surely hold, whatever a renewal in flight is doing. Its calls are
 * denied later, once the lease surely lapsed on the database as well (see
 * `#lose`): until then an answer may still land on their rows. A renewal
 * that has no reply by then (a network that swallows packets sends no FIN or
 * RST to say so) is given up and its connection closed, and there is never
 * more than one renewal in flight, so renewals cannot pile up behind a hung one.
 *
 * Lease statements go over the queue's listening connection when it is up: a pool
 * busy with a burst of asks must not hold a heartbeat in its line until the
 * lease lapses.
 *
 * The id is made when the lease is first taken. Once lost, the id is never
 * renewed again: its asks are closed as abandoned by whoever sees the lease
 * lapse, and the next ask takes a lease under a new id.
 */
export class WorkerLease {
  readonly #db: Db;
  readonly #leaseMs: number;
  readonly #host: LeaseHost;
  #id: string | undefined;
  /** `performance.now()` until which the lease surely holds. */
  #validUntil = 0;
  /** Loses the lease at {@link #validUntil} unless a renewal moved it. */
  #expiry: NodeJS.Timeout | undefined;
  #taking: Promise<string> | undefined;
  #renewing: Promise<void> | undefined;
  /** Given up for good: a lease taken after this is never used. */
  #released = false;
  /** `performance.now()` when the last lease statement that succeeded replied: the database ran it before. */
  #repliedAt = 0;
  /** Renewals sent since that reply: each may have landed, its reply lost, and pushed the lease further. */
  #unanswered = 0;
  /** Leases lost while unreachable whose host is not told yet, with when they surely lapse on the database. */
  readonly #losing = new Map<string, number>();

  constructor(db: Db, leaseMs: number, host: LeaseHost) {
    this.#db = db;
    this.#leaseMs = leaseMs;
    this.#host = host;
  }

  /** The id of the lease held now, if any. */
  get id(): string | undefined {
    return this.#id;
  }

  /**
   * The ids of the leases answers may still land under: the one held now, and those lost while
   * unreachable that may still hold on the database (see {@link lapsesBy}). A handful at most,
   * however many asks are parked.
   */
  get ids(): readonly string[] {
    return this.#id === undefined ? [...this.#losing.keys()] : [this.#id, ...this.#losing.keys()];
  }

  /**
   * The `performance.now()` time by which the lease `id` surely lapsed on the database, after
   * which no answer lands on its asks: 0 for a lease not held nor being lost (given up, or found
   * lapsed by the database).
   */
  lapsesBy(id: string | undefined): number {
    if (id === undefined) return 0;
    if (id === this.#id) return this.#repliedAt + (this.#unanswered + 1) * this.#leaseMs;
    return this.#losing.get(id) ?? 0;
  }

  /** True while the lease surely holds. */
  get holds(): boolean {
    return this.#id !== undefined && performance.now() < this.#validUntil;
  }

  /** The id of a lease that holds, taking a new one when none does. */
  acquire(): Promise<string> {
    if (this.#id !== undefined && this.holds) return Promise.resolve(this.#id);
    if (this.#id !== undefined) this.#lose("unreachable");
    this.#taking ??= this.#take().finally(() => {
      this.#taking = undefined;
    });
    return this.#taking;
  }

  async #take(): Promise<string> {
    const workers = this.#db.names.table("workers");
    const insert = `INSERT INTO ${workers} (id, lease_until, host, pid) VALUES ($1, now() + $2 * interval '1 millisecond', $3, $4)`;
    /** Takes the lease under `id`, deleting the rows the attempts before it (`lost`) may have written. */
    const take = (id: string, lost: readonly string[]): Promise<Sent> =>
      this.#run(
        "PostgresAskQueue: taking a worker lease",
        lost.length === 0 ? insert : `WITH lost AS (DELETE FROM ${workers} WHERE id = ANY($5::uuid[])) ${insert}`,
        lost.length === 0
          ? [id, this.#leaseMs, hostname(), process.pid]
          : [id, this.#leaseMs, hostname(), process.pid, lost],
        Number.POSITIVE_INFINITY,
        lost.length > 0,
      );
    let id = randomUUID();
    const lost: string[] = [];
    let sent: number;
    // The connection the statement went to was lost, or the server ended its session (the listening
    // connection, idle between notifications, or a pooled one; a restart ends both): it may have
    // committed, or not. It is taken again on a pooled connection, under a new id, and once more on
    // another should that one be lost too. The attempt that succeeds deletes, in its statement, the
    // rows the lost ones may have written: no worker row is left unused to lapse. (One that reaches
    // the server later still, a statement delayed in the network, is never renewed nor written
    // under, and lapses for a reaper to delete.) A new id rather than the same one written again: a
    // lost attempt's late statement then cannot push this lease's end past what the worker counts.
    for (let attempt = 0; ; attempt++) {
      try {
        ({ sent } = await take(id, lost));
        break;
      } catch (error) {
        if (attempt === 2 || !connectionLost(error)) throw error;
        lost.push(id);
        id = randomUUID();
      }
    }
    // Taken after release(): no ask is written under it, and unrenewed it lapses for a reaper to delete.
    if (this.#released) throw new Error("the worker lease was released while it was being taken");
    this.#id = id;
    this.#holdFrom(sent);
    return id;
  }

  /**
   * Pushes the lease forward, only while it holds on the database's clock. A
   * lease found gone (it lapsed and a reaper closed its asks) or found lapsed
   * is lost, never revived: the same statement deletes a lapsed lease and
   * closes its pending asks as abandoned, so no answer lands on them later.
   * A failed renewal is retried at the next heartbeat while the lease still
   * holds here. While one renewal is in flight, another call joins it; it
   * settles by the time the lease would run out at the latest.
   */
  renew(): Promise<void> {
    this.#renewing ??= this.#renew().finally(() => {
      this.#renewing = undefined;
    });
    return this.#renewing;
  }

  async #renew(): Promise<void> {
    const id = this.#id;
    if (id === undefined) return;
    const workers = this.#db.names.table("workers");
    this.#unanswered++;
    try {
      const { rows, sent } = await this.#run(
        "PostgresAskQueue: renewing the worker lease",
        `WITH renewed AS (
           UPDATE ${workers} SET lease_until = now() + $2 * interval '1 millisecond' WHERE id = $1 AND lease_until > now() RETURNING id),
         lapsed AS (DELETE FROM ${workers} WHERE id = $1 AND lease_until <= now() RETURNING id),
         closed AS (
           UPDATE ${this.#db.names.table("asks")} SET state = 'withdrawn', reason = 'abandoned', ended_at = now()
           WHERE worker_id = $1 AND state = 'pending' AND NOT EXISTS (SELECT 1 FROM renewed) RETURNING id)
         SELECT (SELECT count(*) FROM renewed)::int AS renewed, (SELECT count(*) FROM lapsed)::int AS lapsed,
                (SELECT count(*) FROM closed)::int AS closed`,
        [id, this.#leaseMs],
        this.#validUntil,
      );
      if (this.#id !== id) return;
      if (rows[0]?.["renewed"] !== 1) this.#lose("lapsed");
      else this.#holdFrom(sent);
    } catch (error) {
      if (this.#id === id && !this.holds) this.#lose("unreachable");
      throw error;
    }
  }

  /** Loses the lease if its time ran out without a renewal. */
  check(): void {
    if (this.#id === undefined) return;
    if (this.holds) this.#watch();
    else this.#lose("unreachable");
  }

  /**
   * Gives the lease up for good: its row goes, so any ask of it still pending
   * is closed as abandoned. A lease still being taken is not waited for (on a
   * pool with no free connection, or a network that swallows packets, its
   * statement may never run): if it lands, it is never used and lapses.
   */
  async release(): Promise<void> {
    this.#released = true;
    clearTimeout(this.#expiry);
    const id = this.#id;
    this.#id = undefined;
    if (id === undefined) return;
    await this.#db.query(
      "PostgresAskQueue.close: releasing the worker lease",
      `DELETE FROM ${this.#db.names.table("workers")} WHERE id = $1`,
      [id],
    );
  }

  /** The lease surely holds for `leaseMs` from `sent`. */
  #holdFrom(sent: number): void {
    this.#validUntil = sent + this.#leaseMs;
    this.#repliedAt = performance.now();
    this.#unanswered = 0;
    this.#watch();
  }

  #watch(): void {
    clearTimeout(this.#expiry);
    // A timer may fire a fraction of a millisecond early: check() then watches again.
    this.#expiry = setTimeout(() => this.check(), Math.max(1, Math.ceil(this.#validUntil - performance.now())));
    this.#expiry.unref();
  }

  /**
   * Stops using the lease. Lapsed (the database said so), its asks are closed already and the host
   * hears at once. Unreachable, the lease may still hold on the database: the last renewal that
   * replied set it to end by `leaseMs` after that reply, and each renewal sent since may have
   * landed with its reply lost, pushing it up to `leaseMs` further, but only while it held. Answers
   * land only while it holds; the host, which denies the lease's calls, hears once it cannot.
   */
  #lose(why: LeaseLoss): void {
    const id = this.#id;
    if (id === undefined) return;
    clearTimeout(this.#expiry);
    const lapsesBy = this.lapsesBy(id);
    this.#id = undefined;
    const tell = (): void => {
      const wait = Math.ceil(lapsesBy - performance.now());
      if (why === "lapsed" || wait <= 0) {
        this.#losing.delete(id);
        this.#host.lost(id, why);
        return;
      }
      this.#losing.set(id, lapsesBy);
      // A timer may fire a fraction of a millisecond early: it then waits again.
      setTimeout(tell, wait).unref();
    };
    tell();
  }

  /**
   * Runs a lease statement over the listening connection when it is up,
   * else over a pooled one, and says when it was sent: the database's
   * `now()` for it is no earlier, so a lease counted from then ends no later
   * than the database's. Time spent waiting for a pooled connection is not
   * counted against the lease.
   *
   * `pooled` sends it over a pooled connection whatever the listening one is doing.
   *
   * With a `deadline` (a `performance.now()` time), a statement with no reply
   * by then is given up: the call rejects, and the connection it went out on
   * is closed (a connection that swallowed one statement swallows the next);
   * one still waiting for a pooled connection then is never sent.
   */
  #run(
    operation: string,
    sql: string,
    values: unknown[],
    deadline = Number.POSITIVE_INFINITY,
    pooled = false,
  ): Promise<Sent> {
    const direct = pooled ? undefined : this.#host.direct();
    let late: Error | undefined;
    let cut: ((error: Error) => void) | undefined;
    // Throws the driver's own errors: a pooled connection that failed is then closed, not handed on.
    const send = async (client: PgPoolClient): Promise<Sent> => {
      if (late !== undefined) throw this.#db.failure(operation, late);
      const given = new Promise<never>((_, reject) => {
        cut = reject;
      });
      let sent = performance.now();
      let result;
      try {
        result = await Promise.race([client.query(sql, values), given]);
      } catch (error) {
        // A serialization failure or a deadlock rolled the statement back whole (it runs alone): it is sent
        // once more, as every single statement is (see Db.query), and the lease counts from then. Left
        // failed, a renewal would wait for the next heartbeat, and near the lease's end it would lose it.
        if (late !== undefined || !conflictFailure(error)) throw error;
        sent = performance.now();
        result = await Promise.race([client.query(sql, values), given]);
      }
      return { rows: result.rows as Record<string, unknown>[], sent };
    };
    // The listening connection skips the pool, not the schema's version check (the pool does it).
    const running =
      direct === undefined
        ? this.#db.session(operation, send)
        : this.#db.ready(operation).then(() =>
            inTurn(direct, () => send(direct)).catch((error: unknown) => {
              throw this.#db.failure(operation, error);
            }),
          );
    if (deadline === Number.POSITIVE_INFINITY) return running;
    return new Promise<Sent>((resolve, reject) => {
      const wait = Math.max(0, Math.ceil(deadline - performance.now()));
      const timer = setTimeout(() => {
        late = new Error(
          `no reply to a lease statement within ${wait} ms, by when the lease could no longer be said to hold`,
        );
        if (cut !== undefined) {
          cut(late);
          if (direct !== undefined) this.#host.broken(direct, late);
        }
        reject(this.#db.failure(operation, late));
      }, wait);
      timer.unref();
      running.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }
}
