import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { queryFailure } from "./db.js";
import type { Db } from "./db.js";
import type { PgPoolClient } from "./pg.js";

/** Why a worker stopped holding its lease. */
export type LeaseLoss = "lapsed" | "unreachable";

/**
 * A worker's lease: a row in `<schema>.workers` whose `lease_until` the
 * worker pushes forward on every heartbeat. Times are the database's
 * (`now()`), so clocks on other machines never matter; the worker's own view
 * of how long it still holds the lease counts from when it sent its last
 * successful renewal, which is never later than the database's.
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
  readonly #onLost: (workerId: string, why: LeaseLoss) => void;
  readonly #direct: () => PgPoolClient | undefined;
  #id: string | undefined;
  /** `performance.now()` until which the lease surely holds. */
  #validUntil = 0;
  #taking: Promise<string> | undefined;
  /** Given up for good: a lease taken after this is never used. */
  #released = false;

  constructor(
    db: Db,
    leaseMs: number,
    onLost: (workerId: string, why: LeaseLoss) => void,
    direct: () => PgPoolClient | undefined,
  ) {
    this.#db = db;
    this.#leaseMs = leaseMs;
    this.#onLost = onLost;
    this.#direct = direct;
  }

  /** The id of the lease held now, if any. */
  get id(): string | undefined {
    return this.#id;
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
    const id = randomUUID();
    const { sent } = await this.#run(
      "PostgresAskQueue: taking a worker lease",
      `INSERT INTO ${this.#db.names.table("workers")} (id, lease_until, host, pid)
       VALUES ($1, now() + $2 * interval '1 millisecond', $3, $4)`,
      [id, this.#leaseMs, hostname(), process.pid],
    );
    // Taken after release(): no ask is written under it, and unrenewed it lapses for a reaper to delete.
    if (this.#released) throw new Error("the worker lease was released while it was being taken");
    this.#id = id;
    this.#validUntil = sent + this.#leaseMs;
    return id;
  }

  /**
   * Runs a lease statement over the listening connection when it is up,
   * else over a pooled one, and says when it was sent: the database's
   * `now()` for it is no earlier, so a lease counted from then ends no later
   * than the database's. Time spent waiting for a pooled connection is not
   * counted against the lease.
   */
  async #run(
    operation: string,
    sql: string,
    values: unknown[],
  ): Promise<{ rows: readonly Record<string, unknown>[]; sent: number }> {
    const send = async (client: PgPoolClient): Promise<{ rows: readonly Record<string, unknown>[]; sent: number }> => {
      const sent = performance.now();
      try {
        return { rows: (await client.query(sql, values)).rows as Record<string, unknown>[], sent };
      } catch (error) {
        throw queryFailure(operation, this.#db.names, error);
      }
    };
    const direct = this.#direct();
    return direct === undefined ? this.#db.session(operation, send) : send(direct);
  }

  /**
   * Pushes the lease forward, only while it holds on the database's clock. A
   * lease found gone (it lapsed and a reaper closed its asks) or found lapsed
   * is lost, never revived: the same statement deletes a lapsed lease and
   * closes its pending asks as abandoned, so no answer lands on them later.
   * A failed renewal is retried at the next heartbeat while the lease still
   * holds here.
   */
  async renew(): Promise<void> {
    const id = this.#id;
    if (id === undefined) return;
    const workers = this.#db.names.table("workers");
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
      );
      if (this.#id !== id) return;
      if (rows[0]?.["renewed"] !== 1) this.#lose("lapsed");
      else this.#validUntil = sent + this.#leaseMs;
    } catch (error) {
      if (this.#id === id && !this.holds) this.#lose("unreachable");
      throw error;
    }
  }

  /** Loses the lease if its time ran out without a renewal. */
  check(): void {
    if (this.#id !== undefined && !this.holds) this.#lose("unreachable");
  }

  /**
   * Gives the lease up for good: its row goes, so any ask of it still pending
   * is closed as abandoned. A lease still being taken is not waited for (on a
   * pool with no free connection, or a network that swallows packets, its
   * statement may never run): if it lands, it is never used and lapses.
   */
  async release(): Promise<void> {
    this.#released = true;
    const id = this.#id;
    this.#id = undefined;
    if (id === undefined) return;
    await this.#db.query(
      "PostgresAskQueue.close: releasing the worker lease",
      `DELETE FROM ${this.#db.names.table("workers")} WHERE id = $1`,
      [id],
    );
  }

  #lose(why: LeaseLoss): void {
    const id = this.#id;
    if (id === undefined) return;
    this.#id = undefined;
    this.#onLost(id, why);
  }
}
