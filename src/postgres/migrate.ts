import {
  BEGIN,
  checkOut,
  connectionFailure,
  migrateLockKey,
  positiveInteger,
  queryFailure,
  requireOptions,
  requirePool,
  versionQuery,
} from "./db.js";
import { PostgresConfigError, PostgresQueryError } from "./errors.js";
import { MIGRATIONS, SCHEMA_VERSION } from "./migrations.js";
import type { PgPool, PgPoolClient } from "./pg.js";
import { schemaNames } from "./schema.js";
import type { SchemaNames } from "./schema.js";

/** Options for {@link migrate}. */
export interface MigrateOptions {
  /**
   * The schema that holds loopctl's tables; created if missing.
   * @default "loopctl"
   */
  readonly schema?: string;
  /**
   * How long each of its statements may wait for a lock another session
   * holds (PostgreSQL's `lock_timeout`, set for its transaction alone): the
   * schema's, which another `migrate()` holds while it runs (and loopctl's
   * transactions share), or a table's that a version changes, held by any
   * transaction that read or wrote it. Past it, `migrate` rejects naming
   * what it waited for, and nothing is changed. From 1 ms to an hour.
   * @default 60000
   */
  readonly lockTimeoutMs?: number;
}

/** What {@link migrate} found and did. */
export interface MigrateResult {
  /** The schema migrated. */
  readonly schema: string;
  /** Its version before the call (0: it had no loopctl tables). */
  readonly from: number;
  /** Its version now. */
  readonly to: number;
  /** The versions this call applied, oldest first (empty when it was up to date). */
  readonly applied: readonly number[];
}

/**
 * Creates or upgrades loopctl's tables in their own schema. Idempotent, and
 * safe to run from any number of processes at once: all of it happens in one
 * transaction holding a transaction-scoped advisory lock on the schema's
 * name, so concurrent callers run one after another and the later ones find
 * nothing left to do. Each applied version is recorded in `<schema>.migrations`.
 * On a schema already up to date it creates and writes nothing, so a role
 * with only `USAGE` on the schema and `SELECT` on its `migrations` table may
 * call it (a worker at start-up).
 * A migrator whose network goes silent mid-transaction holds the lock only
 * until the server ends its session, 5 s idle in the transaction
 * (`idle_in_transaction_session_timeout`), as every loopctl transaction does.
 * No wait for a lock another session holds (the schema's, or a table's a
 * version changes) lasts longer than `options.lockTimeoutMs`.
 *
 * @throws {PostgresConfigError} for a bad schema name, pool or options, a
 *   schema whose `migrations` table is another tool's, or a schema that
 *   already holds a table (index, function, type) of a name loopctl would create,
 *   which loopctl did not create: the user's own `grants`, say. The error
 *   names the schema and the table; nothing is changed.
 * @throws {PostgresQueryError} `"POSTGRES_SCHEMA_TOO_NEW"` when a newer
 *   loopctl migrated the schema (nothing is changed), `"POSTGRES_QUERY"`
 *   when a statement fails, a wait for a lock runs out (`SQLSTATE 55P03`,
 *   naming the lock or the table waited for), or the schema lacks an object
 *   its version made (nothing is changed: the transaction rolls back).
 *
 * @example
 * ```ts
 * import pg from "pg";
 * import { migrate } from "loopctl/postgres";
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await migrate(pool); // { schema: "loopctl", from: 0, to: 3, applied: [1, 2, 3] } the first time
 * ```
 */
export async function migrate(pool: PgPool, options?: MigrateOptions): Promise<MigrateResult> {
  requirePool("migrate", pool);
  const given: MigrateOptions = requireOptions("migrate", options, ["schema", "lockTimeoutMs"]);
  const names = schemaNames("migrate", given.schema);
  const lockTimeoutMs = positiveInteger("migrate", "lockTimeoutMs", given.lockTimeoutMs, 60_000, 1, 3_600_000);
  const operation = `migrate(${names.name})`;
  /** What the statement in flight may wait for: named when its wait runs out. */
  let waitingFor = `the lock of schema ${names.quoted} that another migrate() holds (or a transaction of loopctl's in it)`;
  let broken = false;
  let lost: Error | undefined;
  // Heard here, a dropped connection fails the statement in flight instead of leaving the process.
  const onError = (error: Error): void => {
    broken = true;
    lost ??= error;
  };
  let client: PgPoolClient;
  /** The version the schema was found at, once read. */
  let atVersion: number | undefined;
  /** What a migration statement failed to create because the schema already holds something of its name. */
  let taken: Taken | undefined;
  try {
    client = await checkOut(pool, onError);
  } catch (error) {
    throw queryFailure(operation, names, error);
  }
  try {
    // Every wait for a lock is bounded: another session's transaction never holds this call up for good.
    await client.query(`${BEGIN}; SET LOCAL lock_timeout = ${lockTimeoutMs}`);
    try {
      // Serializes every migrate() of this schema, from any process, until COMMIT.
      await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [migrateLockKey(names)]);
      waitingFor = `a lock in schema ${names.quoted} that another session holds`;
      // Created only when missing: `CREATE … IF NOT EXISTS` checks the privilege to create before it
      // looks, so a role that may not create in the database or the schema (a worker's, migrating at
      // start-up) would fail on a schema that is up to date.
      const present = await client.query(
        `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1) AS schema,
           EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                   WHERE n.nspname = $1 AND c.relname = 'migrations') AS migrations`,
        [names.name],
      );
      const found = present.rows[0] as { schema?: unknown; migrations?: unknown } | undefined;
      if (found?.schema !== true) await client.query(`CREATE SCHEMA IF NOT EXISTS ${names.quoted}`);
      if (found?.migrations !== true) {
        await client.query(
          `CREATE TABLE IF NOT EXISTS ${names.table("migrations")} (
            version integer PRIMARY KEY,
            name text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
          )`,
        );
      }
      // A schema shared with another tool may hold its migrations table: never read or write that as ours.
      const shape = await client.query(
        `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) AS columns,
           count(*) FILTER (WHERE (attname, atttypid) IN (('version', 'integer'::regtype), ('name', 'text'::regtype))) AS ours
         FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`,
        [names.table("migrations")],
      );
      const columns = shape.rows[0] as { columns?: unknown; ours?: unknown } | undefined;
      if (Number(columns?.ours) !== 2) {
        throw new PostgresConfigError(
          "migrate",
          `schema ${names.quoted} holds a migrations table that is not loopctl's (${String(columns?.columns)}); ` +
            "give loopctl a schema of its own (options.schema)",
        );
      }
      const recorded = await client.query(versionQuery(names));
      const from = Number((recorded.rows[0] as { version?: unknown } | undefined)?.version ?? 0);
      atVersion = from;
      if (from > SCHEMA_VERSION) {
        throw new PostgresQueryError(
          "POSTGRES_SCHEMA_TOO_NEW",
          operation,
          `schema ${names.quoted} is at version ${from}, newer than the ${SCHEMA_VERSION} this loopctl knows; upgrade loopctl`,
        );
      }
      const applied: number[] = [];
      for (const migration of MIGRATIONS) {
        if (migration.version <= from) continue;
        for (const statement of migration.statements(names)) {
          const table = lockedTable(statement);
          waitingFor =
            table === undefined
              ? `a lock in schema ${names.quoted} that another session holds`
              : `a lock on ${table} that another session holds (a transaction reading or writing it)`;
          try {
            await client.query(statement);
          } catch (error) {
            taken = takenName(statement, error);
            throw error;
          }
        }
        await client.query(`INSERT INTO ${names.table("migrations")} (version, name) VALUES ($1, $2)`, [
          migration.version,
          migration.name,
        ]);
        applied.push(migration.version);
      }
      await client.query("COMMIT");
      return { schema: names.name, from, to: Math.max(from, SCHEMA_VERSION), applied };
    } catch (error) {
      await client.query("ROLLBACK").catch(() => {
        broken = true;
      });
      throw error;
    }
  } catch (error) {
    if (taken !== undefined) {
      throw new PostgresConfigError(
        "migrate",
        `schema ${names.quoted} holds ${broken ? taken.kind : await kindOf(client, names, taken)} ${taken.what} ` +
          "that loopctl did not create; give loopctl a schema of its own (options.schema)",
      );
    }
    // 55P03 lock_not_available: lock_timeout ended a wait for another session's lock.
    if ((error as { code?: unknown } | null)?.code === "55P03") {
      throw new PostgresQueryError(
        "POSTGRES_QUERY",
        operation,
        `waited ${lockTimeoutMs} ms (options.lockTimeoutMs) for ${waitingFor}, and gave up; nothing was changed [SQLSTATE 55P03]`,
        { cause: error },
      );
    }
    const failure = queryFailure(operation, names, connectionFailure(error, lost));
    // Not "run migrate": this is migrate. A schema at a version lacks an object that version made.
    if (failure instanceof PostgresQueryError && failure.code === "POSTGRES_NOT_MIGRATED") {
      throw new PostgresQueryError(
        "POSTGRES_QUERY",
        operation,
        `schema ${names.quoted} is at version ${atVersion ?? 0} but lacks what it holds (${(error as Error).message}); ` +
          "it was changed by hand: restore it, or drop it and migrate again",
        { cause: error },
      );
    }
    throw failure;
  } finally {
    client.removeListener("error", onError);
    client.release(broken ? true : undefined);
  }
}

/** The table (`"schema".asks`) a migration statement changes or builds on, which it locks. */
function lockedTable(statement: string): string | undefined {
  return /^(?:ALTER TABLE|CREATE (?:UNIQUE )?INDEX \S+ ON|CREATE TRIGGER [\s\S]*? ON|UPDATE) ("[^"]+"\.[a-z_]+)/.exec(
    statement,
  )?.[1];
}

/** A name a migration statement wanted, found taken: what it is, and how to say it. */
interface Taken {
  /** `"grants"`, or `notify_asks()` for a function. */
  readonly what: string;
  /** The relation's name alone, to look up what holds it; undefined for a function or a type. */
  readonly relation: string | undefined;
  /** What to call it when what holds the name cannot be looked up. */
  readonly kind: string;
}

/**
 * The name `statement` (one of loopctl's `CREATE TABLE`, `CREATE INDEX` or
 * `CREATE FUNCTION`) failed to create because the schema already holds
 * something of that name (SQLSTATE `42P07` duplicate_table, which indexes and
 * views share with tables, `42710` duplicate_object for a type of a table's
 * name, or `42723` duplicate_function): never loopctl's,
 * as a version records everything it created and none of them is applied.
 */
function takenName(statement: string, error: unknown): Taken | undefined {
  const state = (error as { code?: unknown } | null)?.code;
  const created = /^CREATE (?:UNIQUE )?(TABLE|INDEX|FUNCTION) (?:"[^"]+"\.)?([a-z_][a-z0-9_]*)/.exec(statement);
  if (created === null) return undefined;
  const [, kind, name = ""] = created;
  if (kind === "FUNCTION")
    return state === "42723" ? { what: `${name}()`, relation: undefined, kind: "a function" } : undefined;
  // A table makes a type of its name: a type (an enum, a domain) of that name is 42710 duplicate_object.
  if (kind === "TABLE" && state === "42710") return { what: JSON.stringify(name), relation: undefined, kind: "a type" };
  return state === "42P07" ? { what: JSON.stringify(name), relation: name, kind: "a relation" } : undefined;
}

const RELATION_KINDS: Readonly<Record<string, string>> = {
  r: "a table",
  p: "a table",
  f: "a foreign table",
  v: "a view",
  m: "a materialized view",
  i: "an index",
  I: "an index",
  S: "a sequence",
  c: "a composite type",
};

/** What holds `taken`'s name in the schema (`"a table"`, `"an index"`), read after the migration's rollback. */
async function kindOf(client: PgPoolClient, names: SchemaNames, taken: Taken): Promise<string> {
  if (taken.relation === undefined) return taken.kind;
  try {
    const found = await client.query(
      "SELECT relkind FROM pg_class WHERE relnamespace = $1::regnamespace AND relname = $2",
      [names.quoted, taken.relation],
    );
    const relkind = (found.rows[0] as { relkind?: unknown } | undefined)?.relkind;
    return (typeof relkind === "string" ? RELATION_KINDS[relkind] : undefined) ?? taken.kind;
  } catch {
    return taken.kind;
  }
}
