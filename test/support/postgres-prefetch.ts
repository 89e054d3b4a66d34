/**
 * `usePostgres()` for files of many tests: each test still gets a schema of its own, migrated, and
 * dropped after it, but the next test's schema is migrated while this one runs (on connections of
 * its own), so no test but the first waits for a migration.
 */
import pg from "pg";
import { afterAll, afterEach, beforeEach } from "vitest";
import { migrate } from "loopctl/postgres";
import { DATABASE_URL, freshSchema, unavailable } from "./postgres.js";
import type { PostgresFixture } from "./postgres.js";

export function usePostgresPrefetched(): PostgresFixture {
  let pool: pg.Pool | undefined;
  let schema = "";
  const extra: pg.Pool[] = [];
  // Migrations and drops go through their own connections: a test's use of `pool` never waits on them.
  let admin: pg.Pool | undefined;
  const adminPool = (): pg.Pool => (admin ??= makePool(2));
  /** The next test's schema, being migrated; a failed migration fails that test's beforeEach. */
  let next: Promise<string> | undefined;
  const prepare = (): Promise<string> => {
    const name = freshSchema();
    const made = migrate(adminPool(), { schema: name }).then(() => name);
    made.catch(() => undefined);
    return made;
  };
  const fixture: PostgresFixture = {
    get schema() {
      return schema;
    },
    get pool() {
      pool ??= makePool(8);
      return pool;
    },
    newPool(max = 4, options = {}) {
      const made = makePool(max, options);
      extra.push(made);
      return made;
    },
  };
  beforeEach(async (context) => {
    if (unavailable !== undefined) context.skip(unavailable);
    const ready = next ?? prepare();
    next = undefined;
    schema = await ready;
    next = prepare();
  });
  afterEach(async () => {
    if (unavailable !== undefined) return;
    await Promise.all(extra.splice(0).map((p) => p.end().catch(() => undefined)));
    await adminPool().query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  afterAll(async () => {
    // The schema made for a test that never came.
    const unused = await next?.catch(() => undefined);
    if (unused !== undefined) await adminPool().query(`DROP SCHEMA IF EXISTS "${unused}" CASCADE`);
    await pool?.end();
    await admin?.end();
  });
  return fixture;
}

function makePool(max: number, options: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max, ...options });
  // A connection terminated on purpose by a test must not crash the process.
  pool.on("error", () => undefined);
  return pool;
}
