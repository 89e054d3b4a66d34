/**
 * The PostgreSQL server the tests talk to: `DATABASE_URL`, by default
 * postgres://postgres@127.0.0.1:5432/test. The suite starts nothing: when no
 * server answers, every test that needs one is reported as skipped, with the
 * reason and the variable to set.
 */
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, afterEach, beforeEach } from "vitest";
import { migrate } from "loopctl/postgres";

export const DATABASE_URL = process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/test";

/** The URL without its password, for messages. */
export function redacted(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
}

async function probe(): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 3_000 });
  client.on("error", () => undefined);
  try {
    await client.connect();
    await client.query("SELECT 1");
    return undefined;
  } catch (error) {
    return (
      `no PostgreSQL server at ${redacted(DATABASE_URL)} (${error instanceof Error ? error.message : String(error)}); ` +
      "start one or set DATABASE_URL to a server the tests may create schemas in"
    );
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Why the Postgres tests cannot run, or undefined when a server answered. */
export const unavailable: string | undefined = await probe();
if (unavailable !== undefined) console.warn(`PostgreSQL tests skipped: ${unavailable}`);

/** A fresh schema name for one test. */
export function freshSchema(): string {
  return `loopctl_t_${randomBytes(6).toString("hex")}`;
}

export interface PostgresFixture {
  /** The current test's schema (migrated unless `migrated: false`). */
  readonly schema: string;
  /** A pool shared by the file's tests. */
  readonly pool: pg.Pool;
  /** Another pool, closed after the test: a second process's view, in this process. */
  newPool(max?: number, options?: pg.PoolConfig): pg.Pool;
}

/**
 * Hooks for a test file: skips each test (with the reason) when no server
 * answers; otherwise gives each test a schema of its own, migrated unless
 * `migrated` is false, dropped after the test with everything in it. With
 * `prefetch`, for files of many tests, the next test's schema is migrated
 * while this one runs, and migrations and drops go through connections of
 * their own (a test's use of `pool` never waits on them), so no test but the
 * first waits for a migration.
 */
export function usePostgres(
  options: { readonly migrated?: boolean; readonly prefetch?: boolean } = {},
): PostgresFixture {
  let pool: pg.Pool | undefined;
  let schema = "";
  const extra: pg.Pool[] = [];
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
  let admin: pg.Pool | undefined;
  const adminPool = (): pg.Pool => (options.prefetch === true ? (admin ??= makePool(2)) : fixture.pool);
  /** The next test's schema, being migrated (prefetch only); a failed migration fails that test's beforeEach. */
  let next: Promise<string> | undefined;
  const prepare = async (): Promise<string> => {
    const name = freshSchema();
    if (options.migrated !== false) await migrate(adminPool(), { schema: name });
    return name;
  };
  beforeEach(async (context) => {
    if (unavailable !== undefined) context.skip(unavailable);
    const ready = next ?? prepare();
    next = undefined;
    schema = await ready;
    if (options.prefetch === true) {
      next = prepare();
      next.catch(() => undefined);
    }
  });
  afterEach(async () => {
    if (unavailable !== undefined) return;
    // A test that failed half-way may have left a connection checked out, or in a transaction
    // holding locks in its schema: the schema is dropped all the same.
    try {
      await Promise.all(extra.splice(0).map((p) => endSoon(p)));
    } finally {
      await dropSchema(adminPool(), schema);
    }
  });
  afterAll(async () => {
    // The schema made for a test that never came.
    const unused = await next?.catch(() => undefined);
    if (unused !== undefined) await dropSchema(adminPool(), unused);
    if (pool !== undefined) await endSoon(pool);
    if (admin !== undefined) await endSoon(admin);
  });
  return fixture;
}

/** Ends `pool`, waiting at most 5 s for connections a failed test never gave back. */
async function endSoon(pool: pg.Pool): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    pool.end().catch(() => undefined),
    new Promise<void>((done) => {
      timer = setTimeout(done, 5_000);
    }),
  ]);
  clearTimeout(timer);
}

/**
 * Drops `schema` with everything in it. When a connection a failed test left behind holds a lock in
 * it past 5 s, the connections holding locks in the schema are terminated and the drop made again.
 */
export async function dropSchema(admin: pg.Pool, schema: string): Promise<void> {
  const client = await admin.connect();
  try {
    try {
      await client.query("BEGIN");
      await client.query("SET LOCAL lock_timeout = '5s'");
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.query("COMMIT");
      return;
    } catch (error) {
      await client.query("ROLLBACK");
      if ((error as { code?: unknown }).code !== "55P03") throw error;
    }
    await client.query(
      `SELECT pg_terminate_backend(pid) FROM (
         SELECT DISTINCT l.pid FROM pg_locks l
         JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND l.pid <> pg_backend_pid()
       ) holders`,
      [schema],
    );
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    client.release();
  }
}

function makePool(max: number, options: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max, ...options });
  // A connection terminated on purpose by a test must not crash the process.
  pool.on("error", () => undefined);
  return pool;
}

/**
 * Runs `check` with each node-postgres object that is not a pool: a Client not connected, a
 * connected one, and a connection checked out of `pool`; each is closed or given back after.
 */
export async function withEachNonPool(pool: pg.Pool, check: (given: unknown) => Promise<void> | void): Promise<void> {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  const connected = new pg.Client({ connectionString: DATABASE_URL });
  await connected.connect();
  const checkedOut = await pool.connect();
  try {
    for (const given of [client, connected, checkedOut]) await check(given);
  } finally {
    checkedOut.release();
    await connected.end();
  }
}

/**
 * Terminates the idle connections of one application and waits until their server processes are
 * gone, blocking this process meanwhile: it hears nothing of the ends, so a statement sent right
 * after goes to a pooled connection the server already ended, as one can in production.
 * Returns how many were terminated.
 */
export function terminateIdleNow(application: string): number {
  const script = `
    const pg = require("pg");
    (async () => {
      const client = new pg.Client({ connectionString: process.argv[1] });
      await client.connect();
      const { rows } = await client.query(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle'", [process.argv[2]]);
      const pids = rows.map((r) => r.pid);
      await client.query("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", [pids]);
      while ((await client.query("SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])", [pids])).rows.length > 0)
        await new Promise((resolve) => setTimeout(resolve, 10));
      await client.end();
      process.stdout.write(String(pids.length));
    })();`;
  const done = spawnSync(process.execPath, ["-e", script, DATABASE_URL, application], { encoding: "utf8" });
  if (done.status !== 0) throw new Error(`terminating ${application}'s connections failed: ${done.stderr}`);
  return Number(done.stdout);
}

/**
 * Waits until the server has no connection of one application left (ended by the server's own
 * timeouts, say), blocking this process meanwhile: it hears nothing of the ends.
 */
export function waitUntilGone(application: string): void {
  const script = `
    const pg = require("pg");
    (async () => {
      const client = new pg.Client({ connectionString: process.argv[1] });
      await client.connect();
      const deadline = Date.now() + 10000;
      while ((await client.query("SELECT 1 FROM pg_stat_activity WHERE application_name = $1", [process.argv[2]])).rows.length > 0) {
        if (Date.now() > deadline) throw new Error("the connections of " + process.argv[2] + " never went");
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await client.end();
    })().catch((error) => { process.stderr.write(String(error)); process.exit(1); });`;
  const done = spawnSync(process.execPath, ["-e", script, DATABASE_URL, application], { encoding: "utf8" });
  if (done.status !== 0) throw new Error(`waiting for ${application}'s connections to end failed: ${done.stderr}`);
}
