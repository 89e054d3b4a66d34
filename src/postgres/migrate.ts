import {
  BEGIN,
  checkOut,
  connectionFailure,
  migrateLockKey,
  queryFailure,
  requireOptions,
  requirePool,
  versionQuery,
} from "./db.js";
import { PostgresConfigError, PostgresQueryError } from "./errors.js";
import { MIGRATIONS, SCHEMA_VERSION } from "./migrations.js";
import type { PgPool, PgPoolClient } from "./pg.js";
import { schemaNames } from "./schema.js";

/** Options for {@link migrate}. */
export interface MigrateOptions {
  /**
   * The schema that holds loopctl's tables; created if missing.
   * @default "loopctl"
   */
  readonly schema?: string;
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
 * A migrator whose network goes silent mid-transaction holds the lock only
 * until the server ends its session, 5 s idle in the transaction
 * (`idle_in_transaction_session_timeout`), as every loopctl transaction does.
 *
 * @throws {PostgresConfigError} for a bad schema name, pool or options, or
 *   a schema whose `migrations` table is another tool's (nothing is changed).
 * @throws {PostgresQueryError} `"POSTGRES_SCHEMA_TOO_NEW"` when a newer
 *   loopctl migrated the schema (nothing is changed), `"POSTGRES_QUERY"`
 *   when a statement fails, or the schema lacks an object its version made
 *   (nothing is changed: the transaction rolls back).
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
  const names = schemaNames("migrate", requireOptions("migrate", options).schema);
  const operation = `migrate(${names.name})`;
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
  try {
    client = await checkOut(pool, onError);
  } catch (error) {
    throw queryFailure(operation, names, error);
  }
  try {
    await client.query(BEGIN);
    try {
      // Serializes every migrate() of this schema, from any process, until COMMIT.
      await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [migrateLockKey(names)]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${names.quoted}`);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${names.table("migrations")} (
          version integer PRIMARY KEY,
          name text NOT NULL,
          applied_at timestamptz NOT NULL DEFAULT now()
        )`,
      );
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
      const found = await client.query(versionQuery(names));
      const from = Number((found.rows[0] as { version?: unknown } | undefined)?.version ?? 0);
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
        for (const statement of migration.statements(names)) await client.query(statement);
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
