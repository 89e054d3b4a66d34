import type { SchemaNames } from "./schema.js";

/** One step of the schema's history. Applied steps are never edited; a change is a new step. */
export interface Migration {
  readonly version: number;
  readonly name: string;
  statements(names: SchemaNames): readonly string[];
}

/**
 * The schema's history, oldest first.
 *
 * Grants: one row per (project, grant id). A revocation keeps the row as a
 * tombstone (`revoked`) so that other processes' caches learn of it; every
 * change takes the next `version` of its project, assigned under the
 * project's row lock, so versions commit in order and a reader that has
 * seen version v needs only the rows above v.
 *
 * Asks: one row per parked call. The row is the truth; the trigger's
 * notifications only say which row to read again (a notification can be
 * sent by anyone who can connect, so its payload is never trusted).
 *
 * Version 2 stamps each ask with the transaction that last wrote it
 * (`changed_xid`), indexed: a re-read asks only for the rows changed by a
 * transaction its previous read could not see, which are all at or above
 * that read's snapshot `xmin`. Nothing changed costs one empty index range,
 * however many asks wait.
 *
 * Version 2 also closes an ask as `abandoned` the moment its worker's row
 * goes, so the reaper only deletes lapsed leases and never looks for asks
 * without a worker, which would mean visiting every pending one. A worker's
 * row going (deleted, its id changed, the table truncated) closes its pending
 * asks, found through an index of pending asks by worker. An ask written
 * pending (inserted, or its worker or state changed) under a worker that has
 * no row is written `abandoned` instead; the worker's row is locked
 * `FOR KEY SHARE` for the check, as a foreign key would, so a deletion and an
 * insert racing each other are ordered: the deletion waits for the insert and
 * then closes its ask, or the insert waits for the deletion and then finds no
 * worker. No foreign key: an ended ask outlives its worker. Answers and
 * withdrawals set neither the worker nor `pending`, so they never run the
 * check.
 *
 * Version 3 indexes the live grants apart (`grants_live`): tombstones are
 * kept for good, so a new store's first read and `clear()`, which want only
 * the live grants, would otherwise read every row the project ever revoked.
 * An index alone, but a version all the same: the version is the one record
 * of what a schema holds, this loopctl's reads count on the index to stay
 * flat, and an older loopctl cannot tell an index from a change to what rows
 * mean, so it refuses the schema as too new.
 */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "grants, asks and worker leases",
    statements: (s) => [
      `CREATE TABLE ${s.table("grant_projects")} (
        project text PRIMARY KEY CHECK (project <> ''),
        version bigint NOT NULL CHECK (version > 0)
      )`,
      `CREATE TABLE ${s.table("grants")} (
        project text NOT NULL,
        id text NOT NULL,
        tool text NOT NULL,
        verdict text NOT NULL,
        args text,
        pinned_descriptor text,
        created_at_ms bigint NOT NULL,
        note text,
        version bigint NOT NULL,
        revoked boolean NOT NULL DEFAULT false,
        PRIMARY KEY (project, id)
      )`,
      `CREATE INDEX grants_by_version ON ${s.table("grants")} (project, version)`,
      `CREATE TABLE ${s.table("workers")} (
        id uuid PRIMARY KEY,
        lease_until timestamptz NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now(),
        host text NOT NULL,
        pid integer NOT NULL
      )`,
      `CREATE TABLE ${s.table("asks")} (
        id uuid PRIMARY KEY,
        seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
        worker_id uuid NOT NULL,
        ask jsonb NOT NULL,
        state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'answered', 'withdrawn')),
        resolution jsonb,
        reason text CHECK (reason IN ('expired', 'cancelled', 'closed', 'abandoned')),
        created_at timestamptz NOT NULL DEFAULT now(),
        ended_at timestamptz,
        CHECK ((state = 'pending') = (ended_at IS NULL)),
        CHECK ((state = 'answered') = (resolution IS NOT NULL)),
        CHECK ((state = 'withdrawn') = (reason IS NOT NULL))
      )`,
      `CREATE INDEX asks_pending ON ${s.table("asks")} (seq) WHERE state = 'pending'`,
      `CREATE INDEX asks_ended ON ${s.table("asks")} (ended_at) WHERE state <> 'pending'`,
      `CREATE FUNCTION ${s.quoted}.notify_asks() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '.asks', CASE WHEN TG_OP = 'INSERT' THEN 'new ' ELSE 'end ' END || NEW.id::text);
        RETURN NULL;
      END $$`,
      `CREATE TRIGGER asks_new AFTER INSERT ON ${s.table("asks")}
        FOR EACH ROW EXECUTE FUNCTION ${s.quoted}.notify_asks()`,
      `CREATE TRIGGER asks_end AFTER UPDATE OF state ON ${s.table("asks")}
        FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION ${s.quoted}.notify_asks()`,
    ],
  },
  {
    version: 2,
    name: "asks stamped with the transaction that last changed them, and closed when their worker goes",
    statements: (s) => [
      `ALTER TABLE ${s.table("asks")} ADD COLUMN changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id()`,
      `CREATE INDEX asks_by_change ON ${s.table("asks")} (changed_xid)`,
      // Every write stamps the row, whatever the statement sets: a hand-made UPDATE counts too.
      `CREATE FUNCTION ${s.quoted}.stamp_asks() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        NEW.changed_xid := pg_current_xact_id();
        RETURN NEW;
      END $$`,
      `CREATE TRIGGER asks_stamp BEFORE INSERT OR UPDATE ON ${s.table("asks")}
        FOR EACH ROW EXECUTE FUNCTION ${s.quoted}.stamp_asks()`,
      `CREATE INDEX asks_pending_by_worker ON ${s.table("asks")} (worker_id) WHERE state = 'pending'`,
      // The asks a worker's row leaves behind when it goes.
      `CREATE FUNCTION ${s.quoted}.abandon_asks() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'TRUNCATE' THEN
          UPDATE ${s.table("asks")} SET state = 'withdrawn', reason = 'abandoned', ended_at = now()
          WHERE state = 'pending';
        ELSIF TG_OP = 'DELETE' OR OLD.id IS DISTINCT FROM NEW.id THEN
          UPDATE ${s.table("asks")} SET state = 'withdrawn', reason = 'abandoned', ended_at = now()
          WHERE worker_id = OLD.id AND state = 'pending';
        END IF;
        RETURN NULL;
      END $$`,
      `CREATE TRIGGER workers_gone AFTER DELETE OR UPDATE OF id ON ${s.table("workers")}
        FOR EACH ROW EXECUTE FUNCTION ${s.quoted}.abandon_asks()`,
      `CREATE TRIGGER workers_truncated AFTER TRUNCATE ON ${s.table("workers")}
        FOR EACH STATEMENT EXECUTE FUNCTION ${s.quoted}.abandon_asks()`,
      // A pending ask is only ever written under a worker that has a row, which then cannot go until it commits.
      `CREATE FUNCTION ${s.quoted}.check_ask_worker() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM 1 FROM ${s.table("workers")} WHERE id = NEW.worker_id FOR KEY SHARE;
        IF NOT FOUND THEN
          NEW.state := 'withdrawn';
          NEW.reason := 'abandoned';
          NEW.ended_at := now();
        END IF;
        RETURN NEW;
      END $$`,
      `CREATE TRIGGER asks_worker_on_insert BEFORE INSERT ON ${s.table("asks")}
        FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION ${s.quoted}.check_ask_worker()`,
      `CREATE TRIGGER asks_worker_on_update BEFORE UPDATE OF state, worker_id ON ${s.table("asks")}
        FOR EACH ROW WHEN (NEW.state = 'pending' AND (OLD.state <> 'pending' OR OLD.worker_id <> NEW.worker_id))
        EXECUTE FUNCTION ${s.quoted}.check_ask_worker()`,
      // Asks left without a worker before this version.
      `UPDATE ${s.table("asks")} AS a SET state = 'withdrawn', reason = 'abandoned', ended_at = now()
        WHERE a.state = 'pending' AND NOT EXISTS (SELECT 1 FROM ${s.table("workers")} AS w WHERE w.id = a.worker_id)`,
    ],
  },
  {
    version: 3,
    name: "live grants indexed apart from revoked ones",
    statements: (s) => [`CREATE INDEX grants_live ON ${s.table("grants")} (project, version) WHERE NOT revoked`],
  },
];

/** The schema version this build of loopctl reads and writes. */
export const SCHEMA_VERSION = MIGRATIONS.at(-1)?.version ?? 0;
