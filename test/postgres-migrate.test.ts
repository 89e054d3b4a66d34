import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresConfigError, PostgresQueryError, SCHEMA_VERSION, migrate } from "loopctl/postgres";
import type { MigrateResult } from "loopctl/postgres";
import { resultOf, startChild } from "./support/child-process.js";
import { DATABASE_URL, usePostgres, withEachNonPool } from "./support/postgres.js";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";
import { startProxy } from "./support/tcp-proxy.js";
import { makeAsk } from "./support/ask-fixtures.js";
import { MIGRATIONS } from "../src/postgres/migrations.js";
import { schemaNames } from "../src/postgres/schema.js";
import type { SchemaNames } from "../src/postgres/schema.js";

const db = usePostgres({ migrated: false });

async function tables(schema: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ name: string }>(
    "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
    [schema],
  );
  return rows.map((r) => r.name);
}

/** The test's schema as migrate's version 1 left it, made by hand from that version's statements. */
async function schemaAtVersionOne(): Promise<SchemaNames> {
  const names = schemaNames("test", db.schema);
  await db.pool.query(`CREATE SCHEMA ${names.quoted}`);
  await db.pool.query(
    `CREATE TABLE ${names.table("migrations")} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
  );
  const [first] = MIGRATIONS;
  for (const statement of first!.statements(names)) await db.pool.query(statement);
  await db.pool.query(`INSERT INTO ${names.table("migrations")} (version, name) VALUES (1, $1)`, [first!.name]);
  return names;
}

describe("migrate", () => {
  // The migrator child, bundled once: each starts with plain node instead of loading tsx.
  let migrator: Bundle | undefined;
  beforeAll(async () => {
    migrator = await bundleChild("pg-migrate-child.ts");
  });
  afterAll(() => migrator?.dispose());

  it("creates loopctl's tables in their own schema, records the version, and is idempotent", async () => {
    expect(await migrate(db.pool, { schema: db.schema })).toEqual({
      schema: db.schema,
      from: 0,
      to: SCHEMA_VERSION,
      applied: [1, 2, 3],
    });
    expect(await tables(db.schema)).toEqual(["asks", "grant_projects", "grants", "migrations", "workers"]);
    expect(await migrate(db.pool, { schema: db.schema })).toEqual({
      schema: db.schema,
      from: SCHEMA_VERSION,
      to: SCHEMA_VERSION,
      applied: [],
    });
    const { rows } = await db.pool.query(`SELECT version, name FROM "${db.schema}".migrations`);
    expect(rows).toEqual([
      { version: 1, name: "grants, asks and worker leases" },
      {
        version: 2,
        name: "asks stamped with the transaction that last changed them, and closed when their worker goes",
      },
      { version: 3, name: "live grants indexed apart from revoked ones" },
    ]);
  });

  it("finds nothing to do, creating nothing, as a role that may read the schema but create nothing in the database or in it", async () => {
    await migrate(db.pool, { schema: db.schema });
    // The roles a platform gives its workers: no CREATE on the database (PostgreSQL's default for
    // a role that does not own it) nor on the schema, USAGE on it and the right to read the version.
    const role = `${db.schema}_worker`;
    await db.pool.query(`CREATE ROLE "${role}" NOLOGIN`);
    const pool = db.newPool(2, { options: `-c role=${role}` });
    try {
      await db.pool.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO "${role}"`);
      await db.pool.query(`GRANT SELECT ON "${db.schema}".migrations TO "${role}"`);
      const can = await pool.query(
        `SELECT current_user AS name, has_database_privilege(current_database(), 'CREATE') AS database,
           has_schema_privilege($1, 'CREATE') AS schema`,
        [db.schema],
      );
      expect(can.rows[0]).toEqual({ name: role, database: false, schema: false });
      expect(await migrate(pool, { schema: db.schema })).toEqual({
        schema: db.schema,
        from: SCHEMA_VERSION,
        to: SCHEMA_VERSION,
        applied: [],
      });
    } finally {
      await pool.end();
      await db.pool.query(`DROP OWNED BY "${role}"`);
      await db.pool.query(`DROP ROLE "${role}"`);
    }
  });

  it("is safe from 8 processes at once: one applies, the others find nothing to do", async () => {
    const children = Array.from({ length: 8 }, () => startChild(migrator!.path, [DATABASE_URL, db.schema]));
    await Promise.all(children.map((c) => c.ready));
    for (const child of children) child.send("go");
    const results = await Promise.all(children.map((c, i) => resultOf<MigrateResult>(c, `migrator ${i}`)));
    expect(results.filter((r) => r.applied.length > 0)).toEqual([
      { schema: db.schema, from: 0, to: 3, applied: [1, 2, 3] },
    ]);
    expect(results.filter((r) => r.applied.length === 0)).toHaveLength(7);
    const { rows } = await db.pool.query(`SELECT version FROM "${db.schema}".migrations ORDER BY version`);
    expect(rows).toEqual([{ version: 1 }, { version: 2 }, { version: 3 }]);
  });

  it("is safe at once on a database whose transactions default to serializable: the later migrator finds nothing to do", async () => {
    const app = `${db.schema}-migrator`;
    const options = { application_name: app, options: "-c default_transaction_isolation=serializable" };
    const holder = await db.pool.connect();
    let results: PromiseSettledResult<MigrateResult>[];
    try {
      // Both migrators begin while the schema's lock is held, so both wait for it from before either commits.
      await holder.query("BEGIN");
      await holder.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`loopctl.migrate:${db.schema}`]);
      const migrating = Promise.allSettled([
        migrate(db.newPool(1, options), { schema: db.schema }),
        migrate(db.newPool(1, options), { schema: db.schema }),
      ]);
      for (let waiting = 0; waiting < 2; await new Promise((resolve) => setTimeout(resolve, 10))) {
        const { rows } = await db.pool.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'advisory'",
          [app],
        );
        waiting = rows[0]?.n ?? 0;
      }
      await holder.query("COMMIT");
      results = await migrating;
    } finally {
      await holder.query("ROLLBACK").catch(() => undefined);
      holder.release();
    }
    expect(results.map((r) => (r.status === "fulfilled" ? r.value.applied : String(r.reason))).sort()).toEqual([
      [],
      [1, 2, 3],
    ]);
  });

  it("a migrator whose network goes silent mid-transaction holds the lock only until the server ends its session", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      // Its tables are created, then the row that records the version never arrives: the server sees a
      // session idle in its transaction, holding the advisory lock and the new schema's locks.
      proxy.stallOn("(version, name) VALUES");
      const silent = migrate(db.newPool(1, { connectionString: proxy.url }), { schema: db.schema });
      const silentOutcome = silent.then(
        () => "migrated",
        () => "failed",
      );
      await waitFor(() => proxy.swallowed.includes("(version, name) VALUES"));
      const second = await Promise.race([
        migrate(db.pool, { schema: db.schema }),
        new Promise<"still blocked">((done) => setTimeout(() => done("still blocked"), 15_000)),
      ]);
      expect(second).toEqual({ schema: db.schema, from: 0, to: SCHEMA_VERSION, applied: [1, 2, 3] });
      await proxy.close();
      // Cut off by the proxy's end, the silent migrator fails: its work was rolled back by the server.
      expect(await silentOutcome).toBe("failed");
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it("waits for another migrate()'s lock at most lockTimeoutMs, then rejects naming that lock and changes nothing; free, it migrates", async () => {
    const holder = await db.pool.connect();
    try {
      // A migrate() of the schema in another process, holding its lock (loopctl's transactions take it shared).
      await holder.query("BEGIN");
      await holder.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`loopctl.migrate:${db.schema}`]);
      const started = performance.now();
      const error = await migrate(db.newPool(1), { schema: db.schema, lockTimeoutMs: 300 }).catch((e: unknown) => e);
      const waited = performance.now() - started;
      expect(error).toBeInstanceOf(PostgresQueryError);
      expect(error).toMatchObject({
        code: "POSTGRES_QUERY",
        operation: `migrate(${db.schema})`,
        message: `migrate(${db.schema}): waited 300 ms (options.lockTimeoutMs) for the lock of schema "${db.schema}" that another migrate() holds (or a transaction of loopctl's in it), and gave up; nothing was changed [SQLSTATE 55P03]`,
      });
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(5_000);
      expect(await tables(db.schema)).toEqual([]);
    } finally {
      await holder.query("ROLLBACK").catch(() => undefined);
      holder.release();
    }
    expect(await migrate(db.newPool(1), { schema: db.schema, lockTimeoutMs: 300 })).toEqual({
      schema: db.schema,
      from: 0,
      to: SCHEMA_VERSION,
      applied: [1, 2, 3],
    });
  });

  it("waits for a table another session has locked at most lockTimeoutMs, then rejects naming the table and applies no version", async () => {
    const names = await schemaAtVersionOne();
    const holder = await db.pool.connect();
    try {
      // A long transaction that read the asks: version 2's ALTER TABLE waits for it.
      await holder.query("BEGIN");
      await holder.query(`LOCK TABLE ${names.table("asks")} IN ACCESS SHARE MODE`);
      const error = await migrate(db.newPool(1), { schema: db.schema, lockTimeoutMs: 300 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresQueryError);
      expect(error).toMatchObject({
        code: "POSTGRES_QUERY",
        message: `migrate(${db.schema}): waited 300 ms (options.lockTimeoutMs) for a lock on ${names.table("asks")} that another session holds (a transaction reading or writing it), and gave up; nothing was changed [SQLSTATE 55P03]`,
      });
    } finally {
      await holder.query("ROLLBACK").catch(() => undefined);
      holder.release();
    }
    const { rows } = await db.pool.query(`SELECT version FROM ${names.table("migrations")} ORDER BY version`);
    expect(rows).toEqual([{ version: 1 }]);
    expect((await migrate(db.pool, { schema: db.schema, lockTimeoutMs: 300 })).applied).toEqual([2, 3]);
  });

  it("refuses a lockTimeoutMs that is not a whole number of milliseconds from 1 to an hour, naming it, before any statement", async () => {
    for (const lockTimeoutMs of [0, -1, 1.5, 3_600_001, "1s", Number.NaN]) {
      await expect(
        migrate(db.pool, { schema: db.schema, lockTimeoutMs: lockTimeoutMs as never }),
      ).rejects.toMatchObject({
        code: "POSTGRES_CONFIG",
        message: expect.stringContaining("migrate: lockTimeoutMs must be an integer from 1 to 3600000"),
      });
    }
    expect(await tables(db.schema)).toEqual([]);
  });

  it("upgrades a schema at version 1, keeping its asks, which every later write stamps; one left without a worker is closed", async () => {
    const names = await schemaAtVersionOne();
    const ask = makeAsk(1);
    const worker = randomUUID();
    await db.pool.query(
      `INSERT INTO ${names.table("workers")} (id, lease_until, host, pid) VALUES ($1, now() + interval '1 hour', 'h', 1)`,
      [worker],
    );
    await db.pool.query(`INSERT INTO ${names.table("asks")} (id, worker_id, ask) VALUES ($1, $2, $3)`, [
      ask.id,
      worker,
      JSON.stringify(ask),
    ]);
    // Version 1 let an ask be written under a worker with no row; the reaper closed it later.
    const orphan = makeAsk(2);
    await db.pool.query(`INSERT INTO ${names.table("asks")} (id, worker_id, ask) VALUES ($1, $2, $3)`, [
      orphan.id,
      randomUUID(),
      JSON.stringify(orphan),
    ]);

    expect(await migrate(db.pool, { schema: db.schema })).toEqual({
      schema: db.schema,
      from: 1,
      to: SCHEMA_VERSION,
      applied: [2, 3],
    });
    const states = await db.pool.query(`SELECT id, state, reason FROM ${names.table("asks")} ORDER BY seq`);
    expect(states.rows).toEqual([
      { id: ask.id, state: "pending", reason: null },
      { id: orphan.id, state: "withdrawn", reason: "abandoned" },
    ]);
    const stamp = async (): Promise<bigint> => {
      const { rows } = await db.pool.query<{ x: string }>(
        `SELECT changed_xid::text AS x FROM ${names.table("asks")} WHERE id = $1`,
        [ask.id],
      );
      return BigInt(rows[0]!.x);
    };
    const before = await stamp();
    // Any write, a hand-made one included, takes its transaction's id.
    await db.pool.query(`UPDATE ${names.table("asks")} SET state = 'withdrawn', reason = 'closed', ended_at = now()`);
    expect(await stamp()).toBeGreaterThan(before);
    // From version 2 on, a worker's row going closes its pending asks.
    const next = makeAsk(3);
    await db.pool.query(`INSERT INTO ${names.table("asks")} (id, worker_id, ask) VALUES ($1, $2, $3)`, [
      next.id,
      worker,
      JSON.stringify(next),
    ]);
    await db.pool.query(`DELETE FROM ${names.table("workers")} WHERE id = $1`, [worker]);
    const closed = await db.pool.query(`SELECT state, reason FROM ${names.table("asks")} WHERE id = $1`, [next.id]);
    expect(closed.rows).toEqual([{ state: "withdrawn", reason: "abandoned" }]);
  });

  it("refuses a node-postgres Client, connected or not, or a connection checked out of a pool, with PostgresConfigError naming pool, and creates nothing", async () => {
    await withEachNonPool(db.pool, async (given) => {
      const error = await migrate(given as never, { schema: db.schema }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresConfigError);
      expect((error as Error).message).toMatch(
        /^migrate: pool must be a node-postgres Pool \(new pg\.Pool\(\.\.\.\)\), not a Client/,
      );
    });
    expect(await tables(db.schema)).toEqual([]);
  });

  it("refuses a schema a newer loopctl migrated, changing nothing", async () => {
    await migrate(db.pool, { schema: db.schema });
    await db.pool.query(`INSERT INTO "${db.schema}".migrations (version, name) VALUES (999, 'from the future')`);
    await expect(migrate(db.pool, { schema: db.schema })).rejects.toMatchObject({ code: "POSTGRES_SCHEMA_TOO_NEW" });
  });

  it("refuses a schema whose migrations table is another tool's, naming it and its columns, and changes nothing", async () => {
    for (const columns of [
      "id serial PRIMARY KEY, timestamp bigint NOT NULL, name text NOT NULL",
      "version bigint PRIMARY KEY, dirty boolean NOT NULL",
    ]) {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}" CASCADE`);
      await db.pool.query(`CREATE SCHEMA "${db.schema}"`);
      await db.pool.query(`CREATE TABLE "${db.schema}".migrations (${columns})`);
      await db.pool.query(`INSERT INTO "${db.schema}".migrations DEFAULT VALUES`).catch(() => undefined);
      const error = await migrate(db.pool, { schema: db.schema }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresConfigError);
      expect((error as Error).message).toContain(
        `migrate: schema "${db.schema}" holds a migrations table that is not loopctl's`,
      );
      expect((error as Error).message).not.toContain("run migrate");
      expect(await tables(db.schema)).toEqual(["migrations"]);
    }
  });

  it("refuses a schema holding a table of one of loopctl's names that it did not create, naming both, and creates nothing", async () => {
    for (const table of ["grants", "asks"]) {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}" CASCADE`);
      await db.pool.query(`CREATE SCHEMA "${db.schema}"`);
      await db.pool.query(`CREATE TABLE "${db.schema}".${table} (id serial PRIMARY KEY, owner text NOT NULL)`);
      await db.pool.query(`INSERT INTO "${db.schema}".${table} (owner) VALUES ('the user')`);
      const error = await migrate(db.pool, { schema: db.schema }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresConfigError);
      expect(error).toMatchObject({ code: "POSTGRES_CONFIG" });
      expect((error as Error).message).toBe(
        `migrate: schema "${db.schema}" holds a table "${table}" that loopctl did not create; ` +
          "give loopctl a schema of its own (options.schema)",
      );
      // One transaction: the tables made before the collision, and the migrations table, are gone with it.
      expect(await tables(db.schema)).toEqual([table]);
      const { rows } = await db.pool.query(`SELECT owner FROM "${db.schema}".${table}`);
      expect(rows).toEqual([{ owner: "the user" }]);
    }
  });

  it("refuses a schema holding a type of one of loopctl's table names (an enum, a domain), naming it, and creates nothing", async () => {
    for (const [made, table] of [
      ["AS ENUM ('pending', 'done')", "asks"],
      ["AS text", "grants"],
    ] as const) {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${db.schema}" CASCADE`);
      await db.pool.query(`CREATE SCHEMA "${db.schema}"`);
      const kind = made.startsWith("AS ENUM") ? "TYPE" : "DOMAIN";
      await db.pool.query(`CREATE ${kind} "${db.schema}".${table} ${made}`);
      const error = await migrate(db.pool, { schema: db.schema }).catch((e: unknown) => e);
      expect(error, table).toBeInstanceOf(PostgresConfigError);
      expect((error as Error).message).toBe(
        `migrate: schema "${db.schema}" holds a type "${table}" that loopctl did not create; ` +
          "give loopctl a schema of its own (options.schema)",
      );
      expect(await tables(db.schema)).toEqual([]);
    }
  });

  it("refuses a schema holding a function of one of loopctl's names, naming it, and creates nothing", async () => {
    await db.pool.query(`CREATE SCHEMA "${db.schema}"`);
    await db.pool.query(`CREATE FUNCTION "${db.schema}".notify_asks() RETURNS int LANGUAGE sql AS 'SELECT 1'`);
    const error = await migrate(db.pool, { schema: db.schema }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PostgresConfigError);
    expect((error as Error).message).toBe(
      `migrate: schema "${db.schema}" holds a function notify_asks() that loopctl did not create; ` +
        "give loopctl a schema of its own (options.schema)",
    );
    expect(await tables(db.schema)).toEqual([]);
  });

  it("refuses an upgrade into a schema where a later version's index name is taken, naming it, and applies no version", async () => {
    await schemaAtVersionOne();
    await db.pool.query(`CREATE TABLE "${db.schema}".grants_live (note text)`);
    const error = await migrate(db.pool, { schema: db.schema }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PostgresConfigError);
    expect((error as Error).message).toContain(
      `schema "${db.schema}" holds a table "grants_live" that loopctl did not create`,
    );
    const { rows } = await db.pool.query<{ version: number }>(
      `SELECT max(version)::int AS version FROM "${db.schema}".migrations`,
    );
    expect(rows[0]?.version).toBe(1);
    const changed = await db.pool.query(
      `SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'asks' AND column_name = 'changed_xid'`,
      [db.schema],
    );
    expect(changed.rows).toEqual([]);
  });

  it("says what is missing when a migrated schema lost a table, instead of asking for the migrate that failed", async () => {
    const names = await schemaAtVersionOne();
    await db.pool.query(`DROP TABLE ${names.table("asks")}`);
    const error = await migrate(db.pool, { schema: db.schema }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "POSTGRES_QUERY", operation: `migrate(${db.schema})` });
    expect((error as Error).message).toContain(`schema "${db.schema}" is at version 1 but lacks what it holds`);
    expect((error as Error).message).toContain(`relation "${db.schema}.asks" does not exist`);
    expect((error as Error).message).not.toContain("run migrate");
  });

  it("rejects a schema name that is not a lowercase identifier", async () => {
    for (const schema of ["", "Loopctl", "a-b", 'x"; DROP SCHEMA public; --', "a".repeat(49)]) {
      await expect(migrate(db.pool, { schema })).rejects.toBeInstanceOf(PostgresConfigError);
    }
  });

  it("rejects a schema name PostgreSQL keeps for its own (pg_…), naming it, before any statement: never sent to a migrate that cannot make it", async () => {
    const { PostgresGrantStore, PostgresAskQueue } = await import("loopctl/postgres");
    const made: (() => unknown)[] = [
      () => migrate(db.pool, { schema: "pg_loopctl" }),
      () => new PostgresGrantStore(db.pool, { project: "p", schema: "pg_loopctl" }),
      () => new PostgresAskQueue(db.pool, { schema: "pg_loopctl" }),
    ];
    for (const make of made) {
      const error: unknown = await Promise.resolve()
        .then(make)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresConfigError);
      expect((error as Error).message).toContain('schema "pg_loopctl" begins with pg_');
    }
    const { rows } = await db.pool.query("SELECT 1 FROM pg_namespace WHERE nspname = 'pg_loopctl'");
    expect(rows).toEqual([]);
  });

  it("rejects options that are not an object with a typed error", async () => {
    for (const options of [null, "loopctl", 1]) {
      await expect(migrate(db.pool, options as never)).rejects.toMatchObject({
        code: "POSTGRES_CONFIG",
        message: expect.stringContaining("options must be an object"),
      });
    }
  });

  it("refuses an option it does not take, naming it, before any statement: a misspelt schema is never left to the default", async () => {
    // Each names the test's schema too: refused or not, no other schema is created in the shared database.
    for (const [options, message] of [
      [{ schema: db.schema, Schema: "loopctl_typo" }, "migrate: unknown option 'Schema' (did you mean schema?)"],
      [
        { schema: db.schema, schemaName: "x" },
        "migrate: unknown option 'schemaName' (the options are schema and lockTimeoutMs)",
      ],
    ] as const) {
      await expect(migrate(db.pool, options as never)).rejects.toMatchObject({ code: "POSTGRES_CONFIG", message });
    }
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition never held");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
