import type { Db } from "./db.js";

/**
 * Closes as `abandoned` every pending ask whose worker's lease lapsed or is
 * gone, deletes the lapsed leases and, a batch at a time, the asks that ended
 * longer than `keepEndedMs` ago. Every queue runs it on its heartbeat; one at
 * a time does the work (a transaction-scoped advisory lock, tried, never
 * waited for), so reapers never queue up behind each other.
 */
export async function reap(db: Db, keepEndedMs: number): Promise<void> {
  const workers = db.names.table("workers");
  const asks = db.names.table("asks");
  await db.transaction("PostgresAskQueue: closing abandoned asks", undefined, async (tx) => {
    const lock = await tx.query("SELECT pg_try_advisory_xact_lock(hashtext($1)) AS ok", [
      `loopctl.reap:${db.names.name}`,
    ]);
    if (lock.rows[0]?.["ok"] !== true) return;
    // The lapsed leases are deleted by this same statement, which therefore
    // still sees them in workers: they are named through `lapsed` instead.
    await tx.query(
      `WITH lapsed AS (DELETE FROM ${workers} WHERE lease_until < now() RETURNING id)
       UPDATE ${asks} AS a SET state = 'withdrawn', reason = 'abandoned', ended_at = now()
       WHERE a.state = 'pending'
         AND (a.worker_id IN (SELECT id FROM lapsed)
              OR NOT EXISTS (SELECT 1 FROM ${workers} AS w WHERE w.id = a.worker_id))`,
    );
    await tx.query(
      `DELETE FROM ${asks} WHERE id IN (
         SELECT id FROM ${asks} WHERE state <> 'pending' AND ended_at < now() - $1 * interval '1 millisecond' LIMIT 1000)`,
      [keepEndedMs],
    );
  });
}
