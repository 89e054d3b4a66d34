import type { Db } from "./db.js";

/**
 * Deletes the lapsed leases and, a batch at a time, the asks that ended
 * longer than `keepEndedMs` ago. Deleting a worker's row closes its pending
 * asks as `abandoned` (a trigger, through the index of pending asks by
 * worker), and no pending ask can be written under a worker without a row
 * (see the migrations), so the reaper never looks for asks without a worker:
 * with no lease lapsed and nothing old enough to purge it reads no ask,
 * however many wait. Every queue runs it on its heartbeat; one at a time does
 * the work (a transaction-scoped advisory lock, tried, never waited for), so
 * reapers never queue up behind each other.
 */
export async function reap(db: Db, keepEndedMs: number): Promise<void> {
  const workers = db.names.table("workers");
  const asks = db.names.table("asks");
  await db.transaction("PostgresAskQueue: closing abandoned asks", undefined, async (tx) => {
    const lock = await tx.query("SELECT pg_try_advisory_xact_lock(hashtext($1)) AS ok", [
      `loopctl.reap:${db.names.name}`,
    ]);
    if (lock.rows[0]?.["ok"] !== true) return;
    await tx.query(`DELETE FROM ${workers} WHERE lease_until < now()`);
    await tx.query(
      `DELETE FROM ${asks} WHERE id IN (
         SELECT id FROM ${asks} WHERE state <> 'pending' AND ended_at < now() - $1 * interval '1 millisecond' LIMIT 1000)`,
      [keepEndedMs],
    );
  });
}
