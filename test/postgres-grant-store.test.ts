import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  Grant,
  GrantConfigError,
  GrantPolicy,
  MemoryGrantStore,
  GrantRecordError,
  GrantScope,
  canonicalJson,
  descriptorFingerprint,
} from "loopctl/grant";
import type { ToolDescriptor } from "loopctl/grant";
import {
  PostgresConfigError,
  PostgresGrantStore,
  PostgresQueryError,
  PostgresRowError,
  SCHEMA_VERSION,
  migrate,
} from "loopctl/postgres";
import { DATABASE_URL, terminateIdleNow, usePostgres, waitUntilGone, withEachNonPool } from "./support/postgres.js";
import { startProxy } from "./support/tcp-proxy.js";
import { expectAbortedSignalFirst, expectBadCallOptionsRefused } from "./support/grant-call-options.js";

const db = usePostgres({ prefetch: true });

const read = new Grant("read", "allow", GrantScope.thisTool());
const deployProd = new Grant("deploy", "deny", GrantScope.thisCall({ env: "production", version: "1.4.0" }));
const writeReadme = new Grant("write", "allow", GrantScope.thisCall({ path: "README.md" }));

const WRITE: ToolDescriptor = {
  name: "write",
  description: "Write a file",
  inputSchema: { type: "object", properties: { path: { type: "string" } } },
};

function store(project = "acme/shop", pool = db.pool): PostgresGrantStore {
  return new PostgresGrantStore(pool, { project, schema: db.schema });
}

/** A pool of two that records every statement its connections send, as `[text, ...values]`. */
function recordingPool(): { pool: ReturnType<typeof db.newPool>; seen: string[][] } {
  const seen: string[][] = [];
  const pool = db.newPool(2);
  pool.on("connect", (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as { query: unknown }).query = (config: unknown, ...rest: unknown[]) => {
      // A statement comes as a config object, or (in a transaction) as its text and its values.
      const statement = typeof config === "string" ? { text: config, values: rest[0] as unknown[] } : config;
      const { text, values } = statement as { text?: unknown; values?: unknown[] };
      if (typeof text === "string") seen.push([text, ...(values ?? []).map(String)]);
      return query(config, ...rest);
    };
  });
  return { pool, seen };
}

describe("PostgresGrantStore: the GrantStore contract", () => {
  it("starts empty, and saves, loads, revokes and clears with the ledger's semantics", async () => {
    const s = store();
    expect(await s.load()).toEqual([]);
    expect(await s.save(read)).toBe(read);
    await s.save(deployProd.withNote("never on a Friday").withCreatedAtMs(1_700_000_000_000));
    await s.save(writeReadme.withPinnedDescriptor(descriptorFingerprint(WRITE)));

    const loaded = await s.load();
    expect(loaded.map((g) => g.id)).toEqual([read.id, deployProd.id, writeReadme.id]);
    expect(loaded.map((g) => g.toJSON())).toEqual([
      read.toJSON(),
      deployProd.withNote("never on a Friday").withCreatedAtMs(1_700_000_000_000).toJSON(),
      writeReadme.withPinnedDescriptor(descriptorFingerprint(WRITE)).toJSON(),
    ]);

    const revoked = await s.revoke(deployProd.id);
    expect(revoked?.toJSON()).toEqual(
      deployProd.withNote("never on a Friday").withCreatedAtMs(1_700_000_000_000).toJSON(),
    );
    expect(await s.revoke(deployProd.id)).toBeUndefined();
    expect(await s.revoke("0000000000000000")).toBeUndefined();
    // No stored id holds text PostgreSQL cannot store: such an id is unknown, not a server error.
    expect(await s.revoke("\u0000")).toBeUndefined();
    expect(await s.revoke(`${read.id}\ud800`)).toBeUndefined();
    expect((await s.load()).map((g) => g.id)).toEqual([read.id, writeReadme.id]);

    expect(await s.clear()).toBe(2);
    expect(await s.clear()).toBe(0);
    expect(await s.load()).toEqual([]);
  });

  it("revoke refuses an id that is not a string (a Grant passed for its id) with GrantConfigError, changing nothing", async () => {
    const s = store();
    await s.save(read);
    for (const id of [read, undefined, 7]) {
      const error: unknown = await s.revoke(id as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ argument: "id" });
      expect((error as Error).message).toMatch(/^PostgresGrantStore\.revoke: id must be a string, got /);
    }
    expect((await s.load()).map((g) => g.id)).toEqual([read.id]);
  });

  it("replaces a re-granted rule instead of adding one, moving it last, with the new metadata", async () => {
    const s = store();
    await s.save(read);
    await s.save(deployProd);
    await s.save(read.withNote("again").withCreatedAtMs(7));
    const loaded = await s.load();
    expect(loaded.map((g) => g.id)).toEqual([deployProd.id, read.id]);
    expect(loaded[1]?.note).toBe("again");
    expect(loaded[1]?.createdAtMs).toBe(7);
  });

  it("brings a revoked rule back only when it is saved again", async () => {
    const s = store();
    await s.save(read);
    await s.revoke(read.id);
    expect(await s.load()).toEqual([]);
    await s.save(read.withNote("back"));
    expect((await s.load()).map((g) => g.note)).toEqual(["back"]);
  });

  it("keeps projects apart and shares a project between stores on other connections", async () => {
    const mine = store("acme/shop");
    const theirs = store("acme/shop", db.newPool());
    const other = store("acme/blog");
    await mine.save(read);
    await other.save(deployProd);
    expect((await theirs.load()).map((g) => g.id)).toEqual([read.id]);
    expect((await other.load()).map((g) => g.id)).toEqual([deployProd.id]);

    // A change made elsewhere counts from the very next read, a revocation included.
    await theirs.save(writeReadme);
    await theirs.revoke(read.id);
    expect((await mine.load()).map((g) => g.id)).toEqual([writeReadme.id]);
    expect(await theirs.clear()).toBe(1);
    expect(await mine.load()).toEqual([]);
  });

  it.each([
    ["its tool holds U+0000", new Grant("rea\u0000d", "allow", GrantScope.thisTool()), "tool", "U+0000"],
    ["its tool holds a lone surrogate", new Grant("read\ud800", "allow", GrantScope.thisTool()), "tool", "U+D800"],
    ["its note holds U+0000", read.withNote("ok\u0000"), "note", "U+0000"],
    ["its note holds a lone surrogate", read.withNote("\udc00ok"), "note", "U+DC00"],
    ["its pin holds U+0000", read.withPinnedDescriptor("sha256:\u0000"), "pinnedDescriptor", "U+0000"],
    ["its pin holds a lone surrogate", read.withPinnedDescriptor("sha256:\udbff"), "pinnedDescriptor", "U+DBFF"],
  ])(
    "refuses a grant when %s with GrantRecordError naming the field, writing nothing; the store stays usable",
    async (_what, grant, field, char) => {
      const s = store();
      const error = await s.save(grant).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(GrantRecordError);
      expect(error).toMatchObject({ code: "GRANT_RECORD" });
      expect((error as Error).message).toContain(`PostgresGrantStore.save: grant ${grant.id}: ${field} holds`);
      expect((error as Error).message).toContain(char);
      const written = await db.pool.query(
        `SELECT (SELECT count(*) FROM "${db.schema}".grants)::int AS grants,
                (SELECT count(*) FROM "${db.schema}".grant_projects)::int AS projects`,
      );
      expect(written.rows[0]).toEqual({ grants: 0, projects: 0 });
      await s.save(writeReadme);
      expect((await s.load()).map((g) => g.id)).toEqual([writeReadme.id]);
      expect((await store().load()).map((g) => g.id)).toEqual([writeReadme.id]);
    },
  );

  it("saves arguments holding U+0000 or a lone surrogate: they are stored as escaped JSON text and read back equal", async () => {
    const grant = new Grant("write", "allow", GrantScope.thisCall({ path: "a\u0000b", ["k\udc00"]: "\ud800" }));
    await store().save(grant);
    expect((await store().load()).map((g) => g.toJSON())).toEqual([grant.toJSON()]);
  });

  it("refuses anything but a Grant", async () => {
    await expect(store().save({ id: read.id } as unknown as Grant)).rejects.toBeInstanceOf(GrantRecordError);
  });

  it("covering refuses a tool that is not a name, and arguments that are not their canonical JSON text, naming them", async () => {
    // A deny for these arguments beside an allow for the whole tool: a query that misses the deny hands out the allow.
    const args = { path: "/etc/passwd", mode: "w" };
    const s = store();
    await s.save(new Grant("write", "deny", GrantScope.thisCall(args)));
    await s.save(new Grant("write", "allow", GrantScope.thisTool()));
    expect((await s.covering("write", canonicalJson(args))).map((g) => g.verdict)).toEqual(["deny", "allow"]);
    for (const [tool, text, argument, problem] of [
      ["write", JSON.stringify(args), "canonicalArgs", "is not canonical JSON"],
      ["write", "{", "canonicalArgs", "is not canonical JSON"],
      ["write", args, "canonicalArgs", "must be a string"],
      ["", "{}", "tool", "must be a non-empty string"],
    ] as const) {
      const error: unknown = await s.covering(tool as never, text as never).catch((e: unknown) => e);
      expect(error, JSON.stringify(text)).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ argument });
      expect((error as Error).message).toContain(`PostgresGrantStore.covering: ${argument} ${problem}`);
    }
  });
});

describe("PostgresGrantStore's lookup index", () => {
  it("answers covering() as the same grants loaded afresh would, after any sequence of changes from other processes", async () => {
    const tools = ["a", "b"];
    const scopes = [GrantScope.thisTool(), GrantScope.thisCall({ x: 1 }), GrantScope.thisCall({ x: 2 })];
    const rules = tools.flatMap((tool) =>
      (["allow", "deny"] as const).flatMap((verdict) => scopes.map((scope) => new Grant(tool, verdict, scope))),
    );
    const op = fc.oneof(
      fc.record({
        type: fc.constant("save" as const),
        rule: fc.nat(rules.length - 1),
        note: fc.option(fc.string(), { nil: null }),
      }),
      fc.record({ type: fc.constant("revoke" as const), rule: fc.nat(rules.length - 1) }),
      fc.record({ type: fc.constant("clear" as const) }),
    );
    const writers = [db.newPool(2), db.newPool(2)];
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(fc.record({ writer: fc.nat(1), op }), { maxLength: 12 }), async (steps) => {
        const project = `property-${run++}`;
        const watcher = store(project);
        await watcher.covering("a", "{}");
        for (const { writer, op: step } of steps) {
          const other = store(project, writers[writer]);
          if (step.type === "save") await other.save(rules[step.rule]!.withNote(step.note));
          else if (step.type === "revoke") await other.revoke(rules[step.rule]!.id);
          else await other.clear();
          const loaded = await store(project).load();
          const fresh = new MemoryGrantStore(loaded);
          for (const tool of [...tools, "c"]) {
            for (const args of [{ x: 1 }, { x: 2 }, { x: 3 }]) {
              const canonical = canonicalJson(args);
              const live = await watcher.covering(tool, canonical);
              expect(live.map((g) => g.toJSON())).toEqual(
                (await fresh.covering(tool, canonical)).map((g) => g.toJSON()),
              );
            }
          }
          expect((await watcher.load()).map((g) => g.toJSON())).toEqual(loaded.map((g) => g.toJSON()));
        }
      }),
      { numRuns: 25 },
    );
  });
});

describe("PostgresGrantStore: a decision's cost on the server", () => {
  it("reads the changes since its version through the index, custom plan or generic, whatever the project holds", async () => {
    const count = 20_000;
    const grants = Array.from({ length: count }, (_, i) => new Grant("write", "allow", GrantScope.thisCall({ i })));
    for (const project of ["acme/shop", "acme/other"]) {
      await db.pool.query(
        `INSERT INTO "${db.schema}".grants (project, id, tool, verdict, args, created_at_ms, version)
         SELECT $1, v.id, 'write', 'allow', v.args, 0, v.n FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS v(id, args, n)`,
        [project, grants.map((g) => g.id), grants.map((g) => g.canonicalArgs)],
      );
      await db.pool.query(`INSERT INTO "${db.schema}".grant_projects (project, version) VALUES ($1, $2)`, [
        project,
        count,
      ]);
    }
    await db.pool.query(`ANALYZE "${db.schema}".grants`);
    const { pool, seen: sent } = recordingPool();
    const seen = (): string[][] => sent.filter(([text]) => text!.includes("head.version"));
    const s = store("acme/shop", pool);
    expect(await s.covering("write", canonicalJson({ i: 7 }))).toHaveLength(1);
    await store().save(read);
    expect(await s.covering("read", "{}")).toHaveLength(1);
    const [text, ...values] = seen().at(-1)!;
    expect(values).toEqual(["acme/shop", String(count), grants.at(-1)!.id]);
    const client = await db.pool.connect();
    try {
      await client.query(`PREPARE refresh_probe AS ${text!}`);
      for (const mode of ["force_custom_plan", "force_generic_plan"]) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        const { rows } = await client.query<{ "QUERY PLAN": unknown }>(
          `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE refresh_probe(${values.map((v) => client.escapeLiteral(v)).join(", ")})`,
        );
        const plan = JSON.stringify(rows[0]!["QUERY PLAN"]);
        expect(plan, mode).not.toContain("Seq Scan");
        expect(plan, mode).toContain("grants_by_version");
        expect(plan, mode).toContain("grants_pkey");
        expect(plan, mode).toContain("grant_projects_pkey");
        // One changed row read: the grant saved since, not the 40,000 of the two projects.
        const read = [...plan.matchAll(/"Actual Rows": (\d+)/g)].map((m) => Number(m[1]));
        expect(Math.max(...read), mode).toBeLessThanOrEqual(1);
      }
    } finally {
      await client.query("DEALLOCATE ALL; RESET plan_cache_mode").catch(() => undefined);
      client.release();
    }
  }, 60_000);
});

describe("PostgresGrantStore: revoked rows cost storage only", () => {
  /** The most rows any node of the plan of `text` reads, custom plan or generic, and the plan. */
  async function rowsRead(text: string, values: unknown[], mode: string): Promise<{ most: number; plan: string }> {
    const client = await db.pool.connect();
    try {
      await client.query("BEGIN");
      await client.query(`SET LOCAL plan_cache_mode = ${mode}`);
      await client.query(`PREPARE growth_probe AS ${text}`);
      const { rows } = await client.query<{ "QUERY PLAN": unknown }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE growth_probe(${values.map((v) => client.escapeLiteral(String(v))).join(", ")})`,
      );
      let most = 0;
      const visit = (node: Record<string, unknown>): void => {
        const read =
          Number(node["Actual Rows"] ?? 0) * Number(node["Actual Loops"] ?? 1) +
          Number(node["Rows Removed by Filter"] ?? 0) +
          Number(node["Rows Removed by Index Recheck"] ?? 0);
        most = Math.max(most, read);
        for (const child of (node["Plans"] ?? []) as Record<string, unknown>[]) visit(child);
      };
      const [top] = rows[0]!["QUERY PLAN"] as { Plan: Record<string, unknown> }[];
      visit(top!.Plan);
      return { most, plan: JSON.stringify(top) };
    } finally {
      await client.query("ROLLBACK; DEALLOCATE ALL").catch(() => undefined);
      client.release();
    }
  }

  it("a new store's first load and clear() read the live grants alone, however many the project revoked", async () => {
    const revoked = 20_000;
    const live = 10;
    const grants = Array.from(
      { length: live + revoked },
      (_, i) => new Grant("write", "allow", GrantScope.thisCall({ i })),
    );
    // The live grants first, then the revocations: the head version is a tombstone's.
    for (const [project, liveCount] of [
      ["acme/shop", live],
      ["acme/other", live + revoked],
    ] as const) {
      await db.pool.query(
        `INSERT INTO "${db.schema}".grants (project, id, tool, verdict, args, created_at_ms, version, revoked)
         SELECT $1, v.id, 'write', 'allow', v.args, 0, v.n, v.n > $4
         FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS v(id, args, n)`,
        [project, grants.map((g) => g.id), grants.map((g) => g.canonicalArgs), liveCount],
      );
      await db.pool.query(`INSERT INTO "${db.schema}".grant_projects (project, version) VALUES ($1, $2)`, [
        project,
        grants.length,
      ]);
    }
    await db.pool.query(`ANALYZE "${db.schema}".grants`);
    const { pool, seen } = recordingPool();
    const liveGrants = grants.slice(0, live);

    expect(await store("acme/shop", pool).load()).toEqual(liveGrants);
    const [load, ...loadValues] = seen.find(([text]) => text!.includes("head.version"))!;
    // clear()'s statement, taken from another project's, so that acme/shop's rows stay as they were.
    await store("acme/probe").save(read);
    expect(await store("acme/probe", pool).clear()).toBe(1);
    const [clear, ...clearValues] = seen.find(([text]) => text!.includes("SET revoked = true"))!;

    for (const mode of ["force_custom_plan", "force_generic_plan"]) {
      for (const [what, text, values] of [
        ["first load", load!, loadValues],
        ["clear()", clear!, clearValues],
      ] as const) {
        // $1 is the project.
        const { most, plan } = await rowsRead(text, ["acme/shop", ...values.slice(1)], mode);
        expect(plan, `${what}, ${mode}`).not.toContain("Seq Scan");
        expect(plan, `${what}, ${mode}`).toContain("grants_live");
        // The ten live grants, not the 20,000 tombstones nor the other project's rows.
        expect(most, `${what}, ${mode}: ${plan}`).toBeLessThanOrEqual(live);
      }
    }
    expect(await store().clear()).toBe(live);
    expect(await store().load()).toEqual([]);
  }, 60_000);
});

describe("PostgresGrantStore under GrantPolicy", () => {
  it("decides deny over allow, re-asks a changed tool, and sees a revocation made by another process at once", async () => {
    const mine = store();
    const elsewhere = store("acme/shop", db.newPool());
    const policy = new GrantPolicy(mine);
    expect(await policy.decide(WRITE, { path: "README.md" })).toEqual({ type: "ask", reason: "no_grant" });

    const remembered = await policy.remember(WRITE, { path: "README.md" }, "allow", "this_call", { nowMs: 5 });
    expect(await policy.decide(WRITE, { path: "README.md" })).toEqual({ type: "allow", grant: remembered });
    const changed = { ...WRITE, description: "Write any file, anywhere" };
    expect(await policy.decide(changed, { path: "README.md" })).toEqual({
      type: "ask",
      reason: "tool_changed",
      grant: remembered,
    });

    const deny = await elsewhere.save(new Grant("write", "deny", GrantScope.thisTool()));
    expect(await policy.decide(WRITE, { path: "README.md" })).toEqual({ type: "deny", grant: deny });
    await elsewhere.revoke(deny.id);
    expect((await policy.decide(WRITE, { path: "README.md" })).type).toBe("allow");
  });
});

describe("PostgresGrantStore when the database goes back in time", () => {
  const WRITE_README = { path: "README.md" };

  it("forgets the grants it held once the project's versions start again (the schema dropped and migrated anew)", async () => {
    const mine = store();
    const policy = new GrantPolicy(mine);
    await policy.remember(WRITE, WRITE_README, "allow", "this_call", { nowMs: 1 });
    await mine.save(read);
    expect((await policy.decide(WRITE, WRITE_README)).type).toBe("allow");

    await db.pool.query(`DROP SCHEMA ${db.schema} CASCADE`);
    await migrate(db.pool, { schema: db.schema });
    expect(await policy.decide(WRITE, WRITE_README)).toEqual({ type: "ask", reason: "no_grant" });
    expect(await mine.load()).toEqual([]);
  });

  it("sees a revocation made after a restore that lost the last change it read, though the head is back where it was", async () => {
    const mine = store();
    const elsewhere = store("acme/shop", db.newPool());
    const policy = new GrantPolicy(mine);
    const allowed = await policy.remember(WRITE, WRITE_README, "allow", "this_call", { nowMs: 1 });
    await elsewhere.save(read);
    expect((await policy.decide(WRITE, WRITE_README)).type).toBe("allow");

    // A restore (or a failover to a replica) that lost the save of `read`, version 2.
    await db.pool.query(`DELETE FROM ${db.schema}.grants WHERE project = $1 AND id = $2`, ["acme/shop", read.id]);
    await db.pool.query(`UPDATE ${db.schema}.grant_projects SET version = 1 WHERE project = $1`, ["acme/shop"]);
    // The revocation takes version 2 again.
    expect((await store("acme/shop", db.newPool()).revoke(allowed.id))?.id).toBe(allowed.id);

    expect(await policy.decide(WRITE, WRITE_README)).toEqual({ type: "ask", reason: "no_grant" });
    expect(await mine.load()).toEqual([]);
  });

  it("notices it even when the head it first read was a revocation, whose row that read skips", async () => {
    const elsewhere = store("acme/shop", db.newPool());
    await elsewhere.save(read);
    await elsewhere.save(writeReadme);
    await elsewhere.revoke(writeReadme.id);
    const mine = store();
    expect(await mine.load()).toEqual([read]);

    // A restore that lost the revocation, version 3; another process then revokes `read` at version 3 again.
    await db.pool.query(`UPDATE ${db.schema}.grants SET revoked = false, version = 2 WHERE project = $1 AND id = $2`, [
      "acme/shop",
      writeReadme.id,
    ]);
    await db.pool.query(`UPDATE ${db.schema}.grant_projects SET version = 2 WHERE project = $1`, ["acme/shop"]);
    expect((await store("acme/shop", db.newPool()).revoke(read.id))?.id).toBe(read.id);

    expect(await mine.load()).toEqual([writeReadme]);
  });
});

describe("PostgresGrantStore fails closed", () => {
  it("a writer whose network goes silent before its COMMIT holds the project's lock only until the server ends its session", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      const cut = store("acme/shop", db.newPool(2, { connectionString: proxy.url }));
      await cut.save(read);
      // The next COMMIT never arrives: the server sees a session idle in its transaction, the project's row locked.
      proxy.stallOn("COMMIT");
      void cut.save(deployProd).catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 200));
      const started = Date.now();
      await store().save(writeReadme);
      expect(Date.now() - started).toBeLessThan(15_000);
      expect((await store().load()).map((g) => g.tool).sort()).toEqual(["read", "write"]);
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it("loses no save made while another process's write holds the project, on a database whose transactions default to serializable", async () => {
    const serializable = db.newPool(2, { options: "-c default_transaction_isolation=serializable" });
    const s = store("acme/shop", serializable);
    await s.save(read);
    // Another process's write to the project, not yet committed: the save waits for the project's row.
    const writer = await db.pool.connect();
    let saving: Promise<unknown>;
    try {
      await writer.query("BEGIN");
      await writer.query(`UPDATE "${db.schema}".grant_projects SET version = version WHERE project = 'acme/shop'`);
      saving = s.save(deployProd).catch((e: unknown) => e);
      await waitFor(async () => (await lockWaiters(db.schema)) > 0);
      await writer.query("COMMIT");
    } finally {
      await writer.query("ROLLBACK").catch(() => undefined);
      writer.release();
    }
    expect(await saving).toBe(deployProd);
    expect((await store().load()).map((g) => g.id)).toEqual([read.id, deployProd.id]);
  });

  it("a save whose transaction fails as it opens (its wait for migrate's lock cut short) hands its connection back rolled back, not in a failed transaction", async () => {
    const pool = db.newPool(1, { options: "-c lock_timeout=200" });
    const s = store("acme/shop", pool);
    await s.save(read);
    // A migrate holds the schema's lock: the save's shared lock waits, and lock_timeout ends the wait.
    const migrator = await db.pool.connect();
    try {
      await migrator.query("BEGIN");
      await migrator.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`loopctl.migrate:${db.schema}`]);
      await expect(s.save(deployProd)).rejects.toMatchObject({
        code: "POSTGRES_QUERY",
        message: expect.stringContaining("[SQLSTATE 55P03]") as unknown,
      });
    } finally {
      await migrator.query("ROLLBACK");
      migrator.release();
    }
    // The pool's one connection serves the next decision, and the pool's other users, as before.
    expect((await s.covering("read", "{}")).map((g) => g.id)).toEqual([read.id]);
    expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    expect((await s.save(deployProd)).id).toBe(deployProd.id);
  });

  it("a save whose schema went away since its first check hands its connection back rolled back, not in a failed transaction", async () => {
    const pool = db.newPool(1);
    const s = store("acme/shop", pool);
    await s.save(read);
    await db.pool.query(`ALTER TABLE "${db.schema}".migrations RENAME TO migrations_gone`);
    await expect(s.save(deployProd)).rejects.toMatchObject({ code: "POSTGRES_NOT_MIGRATED" });
    expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
  });

  it("gives up a statement that gets no reply within replyMs: the call rejects, and the next goes through on a new connection", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      await store().save(read);
      const pool = db.newPool(2, { connectionString: proxy.url });
      const silent = new PostgresGrantStore(pool, { project: "acme/shop", schema: db.schema, replyMs: 500 });
      // The first read of the project's grants is swallowed, with all that follows on its connection.
      proxy.stallConnectionOn(`"${db.schema}".grants`);
      const started = Date.now();
      const error = await silent.covering("read", "{}").catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresQueryError);
      expect((error as Error).message).toContain("no reply within 500 ms");
      expect(Date.now() - started).toBeLessThan(10_000);
      expect((await silent.load()).map((g) => g.tool)).toEqual(["read"]);
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it("gives up within replyMs a call with a signal whose connection swallows its first statement", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      await store().save(read);
      const pool = db.newPool(2, { connectionString: proxy.url });
      const silent = new PostgresGrantStore(pool, { project: "acme/shop", schema: db.schema, replyMs: 500 });
      // A call with a signal first asks its connection for the server process to cancel it on: swallowed.
      proxy.stallConnectionOn("pg_backend_pid");
      const { signal } = new AbortController();
      const started = Date.now();
      const outcome = await Promise.race([
        silent.covering("read", "{}", { signal }).catch((e: unknown) => e),
        new Promise((resolve) => setTimeout(() => resolve("still waiting after 5 s"), 5_000)),
      ]);
      expect(outcome).toBeInstanceOf(PostgresQueryError);
      expect((outcome as Error).message).toContain("no reply within 500 ms");
      expect(Date.now() - started).toBeLessThan(5_000);
      expect((await silent.load({ signal })).map((g) => g.tool)).toEqual(["read"]);
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it("gives its connection up within replyMs when its signal aborted a call whose connection swallows everything", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      await store().save(read);
      // One connection: a call that kept it would hold up every call after it.
      const pool = db.newPool(1, { connectionString: proxy.url });
      const silent = new PostgresGrantStore(pool, { project: "acme/shop", schema: db.schema, replyMs: 500 });
      proxy.stallConnectionOn(`"${db.schema}".grants`);
      const controller = new AbortController();
      const reading = silent.covering("read", "{}", { signal: controller.signal });
      // Aborted once its statement is swallowed, not after a set time: on a busy machine the statement may
      // not have been sent by then, and the stall would take the next connection that sends one (load's).
      for (let waited = 0; proxy.stalledConnections === 0; waited += 10) {
        if (waited > 10_000) throw new Error("the read's statement never reached the proxy");
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      const reason = new Error("the run was cancelled");
      controller.abort(reason);
      await expect(reading).rejects.toBe(reason);
      const outcome = await Promise.race([
        silent.load().then((grants) => grants.map((g) => g.tool)),
        new Promise((resolve) => setTimeout(() => resolve("still waiting after 5 s"), 5_000)),
      ]);
      expect(outcome).toEqual(["read"]);
    } finally {
      await proxy.close();
    }
  }, 30_000);

  const malformed: readonly [string, string, (id: string) => unknown[]][] = [
    ["its id is not the id of its rule", "'read', 'allow', NULL", () => []],
    ["its arguments are not JSON", "'write', 'allow', '{path:'", () => []],
    ["its verdict is neither allow nor deny", "'read', 'maybe', NULL", () => []],
  ];
  for (const [what, columns] of malformed) {
    it(`names the row when ${what}, and decides nothing from the project`, async () => {
      const s = store();
      await s.save(deployProd);
      await db.pool.query(
        `INSERT INTO "${db.schema}".grants (project, id, tool, verdict, args, pinned_descriptor, created_at_ms, note, version)
         VALUES ('acme/shop', 'badbadbadbadbad0', ${columns}, NULL, 0, NULL, 99)`,
      );
      await db.pool.query(`UPDATE "${db.schema}".grant_projects SET version = 99`);
      const error = await s.load().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresRowError);
      expect((error as PostgresRowError).code).toBe("POSTGRES_ROW_MALFORMED");
      expect((error as PostgresRowError).key).toBe("badbadbadbadbad0");
      expect((error as Error).message).toContain("badbadbadbadbad0");
      await expect(new GrantPolicy(s).decide(WRITE, { path: "x" })).rejects.toBeInstanceOf(PostgresRowError);
      // A fresh store, never having seen the project, refuses it the same way.
      await expect(store().load()).rejects.toBeInstanceOf(PostgresRowError);
    });
  }

  it("refuses a project whose versions a hand edit put past 2^53, where they stop being told apart: a later revocation is never read as already held", async () => {
    const running = store();
    await running.save(read);
    await running.save(deployProd);
    // A row's version past 2^53 - 1: the row is named.
    await db.pool.query(`UPDATE "${db.schema}".grants SET version = 9007199254740993 WHERE id = $1`, [deployProd.id]);
    const rowError = await store()
      .load()
      .catch((e: unknown) => e);
    expect(rowError).toBeInstanceOf(PostgresRowError);
    expect(rowError).toMatchObject({ key: deployProd.id });
    expect((rowError as Error).message).toContain("9007199254740993");
    await db.pool.query(`UPDATE "${db.schema}".grants SET version = 2 WHERE id = $1`, [deployProd.id]);
    // The project's version at 2^53: the next, 2^53 + 1, would read as 2^53 again in a JavaScript number.
    await db.pool.query(`UPDATE "${db.schema}".grant_projects SET version = 9007199254740992`);
    const headError = await running.load().catch((e: unknown) => e);
    expect(headError).toBeInstanceOf(PostgresRowError);
    expect(headError).toMatchObject({ table: `${db.schema}.grant_projects`, key: "acme/shop" });
    expect((headError as Error).message).toContain("9007199254740992");
    await expect(store().load()).rejects.toBeInstanceOf(PostgresRowError);
    // Revoked at 2^53 + 1 by another process: no store decides from the grant it held.
    await store()
      .revoke(read.id)
      .catch(() => undefined);
    await expect(running.covering("read", "{}")).rejects.toBeInstanceOf(PostgresRowError);
    await expect(
      new GrantPolicy(running).decide({ name: "read", description: "", inputSchema: {} }, {}),
    ).rejects.toBeInstanceOf(PostgresRowError);
  });

  it("refuses a project whose version in grant_projects a hand edit put below its live grants' (its row deleted): a deny it holds is never read as no grant", async () => {
    const running = store();
    const denyWrite = new Grant("write", "deny", GrantScope.thisTool());
    await running.save(denyWrite);
    await running.save(writeReadme);
    const policy = new GrantPolicy(running);
    expect(await policy.decide(WRITE, { path: "README.md" })).toEqual({ type: "deny", grant: denyWrite });
    for (const [edit, head] of [
      [`DELETE FROM "${db.schema}".grant_projects`, "0"],
      [`UPDATE "${db.schema}".grant_projects SET version = 1`, "1"],
    ] as const) {
      if (edit.startsWith("UPDATE"))
        await db.pool.query(`INSERT INTO "${db.schema}".grant_projects (project, version) VALUES ('acme/shop', 2)`);
      await db.pool.query(edit);
      for (const [who, s] of [
        ["running", running],
        ["fresh", store()],
      ] as const) {
        const error: unknown = await s.load().catch((e: unknown) => e);
        expect(error, `${who}, ${edit}`).toBeInstanceOf(PostgresRowError);
        expect(error).toMatchObject({ code: "POSTGRES_ROW_MALFORMED", key: writeReadme.id });
        expect((error as Error).message).toContain(
          `above the project's version ${head} in ${db.schema}.grant_projects`,
        );
        await expect(new GrantPolicy(s).decide(WRITE, { path: "README.md" })).rejects.toBeInstanceOf(PostgresRowError);
      }
    }
    // The way out the docs give: a reset of the project, which every store reads.
    expect(await store().clear()).toBe(2);
    expect(await running.load()).toEqual([]);
    expect(await store().load()).toEqual([]);
    await running.save(read);
    expect((await store().load()).map((g) => g.id)).toEqual([read.id]);
  });

  it("reads a revoked row as the tombstone it is, whatever else the row holds, so clear() repairs a malformed row", async () => {
    const running = store();
    await running.save(read);
    await running.save(deployProd);
    expect(await running.load()).toHaveLength(2);
    // Malformed by hand, at its own version: no store has applied it.
    await db.pool.query(
      `INSERT INTO "${db.schema}".grants (project, id, tool, verdict, args, pinned_descriptor, created_at_ms, note, version)
       VALUES ('acme/shop', 'badbadbadbadbad0', 'read', 'maybe', '{path:', NULL, 0, NULL, 99)`,
    );
    await db.pool.query(`UPDATE "${db.schema}".grant_projects SET version = 99`);
    await expect(store().load()).rejects.toMatchObject({ code: "POSTGRES_ROW_MALFORMED", key: "badbadbadbadbad0" });
    expect(await store().clear()).toBe(3);
    // The tombstones, the malformed one among them, are read by the running store and by a fresh one.
    expect(await running.load()).toEqual([]);
    expect(await store().load()).toEqual([]);
    await running.save(writeReadme);
    expect((await store().load()).map((g) => g.id)).toEqual([writeReadme.id]);
    expect((await running.load()).map((g) => g.id)).toEqual([writeReadme.id]);
  });

  it("repairs one malformed row for every store, running ones too, by revoking it at a new version of the project", async () => {
    const running = store();
    await running.save(read);
    await running.save(deployProd);
    expect(await running.covering("deploy", deployProd.canonicalArgs!)).toHaveLength(1);
    // Edited by hand where it stands: the running store never reads it again, a fresh one refuses the project.
    await db.pool.query(`UPDATE "${db.schema}".grants SET verdict = 'Deny' WHERE id = $1`, [deployProd.id]);
    await expect(store().load()).rejects.toMatchObject({ key: deployProd.id });
    // The repair docs/postgres.md gives: the row revoked at the project's next version, in one statement.
    await db.pool.query(
      `WITH bump AS (
         UPDATE "${db.schema}".grant_projects SET version = version + 1 WHERE project = $1 RETURNING version)
       UPDATE "${db.schema}".grants AS g SET revoked = true, version = bump.version FROM bump
       WHERE g.project = $1 AND g.id = $2`,
      ["acme/shop", deployProd.id],
    );
    expect(await running.covering("deploy", deployProd.canonicalArgs!)).toEqual([]);
    expect((await running.load()).map((g) => g.id)).toEqual([read.id]);
    expect((await store().load()).map((g) => g.id)).toEqual([read.id]);
  });

  it("names the project and the schema in a query error, whether the server is unreachable or refuses a statement", async () => {
    const project = 'acme "shop"';
    const unreachable = new PostgresGrantStore(
      db.newPool(1, { connectionString: "postgres://nobody@127.0.0.1:1/none", connectionTimeoutMillis: 2_000 }),
      { project, schema: db.schema },
    );
    const refused = store(project);
    await refused.save(read);
    // A statement the server refuses: the project's next save breaks a constraint added by hand.
    await db.pool.query(
      `ALTER TABLE "${db.schema}".grants ADD CONSTRAINT no_boom CHECK (note IS DISTINCT FROM 'boom')`,
    );
    const calls: [string, () => Promise<unknown>][] = [
      ["PostgresGrantStore.load", () => unreachable.load()],
      ["PostgresGrantStore.covering", () => unreachable.covering("read", "{}")],
      ["PostgresGrantStore.save", () => unreachable.save(read)],
      ["PostgresGrantStore.revoke", () => unreachable.revoke(read.id)],
      ["PostgresGrantStore.clear", () => unreachable.clear()],
      ["PostgresGrantStore.save", () => refused.save(deployProd.withNote("boom"))],
    ];
    for (const [operation, call] of calls) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PostgresQueryError);
      expect(error).toMatchObject({ code: "POSTGRES_QUERY", operation });
      expect((error as Error).message).toContain(`${operation}: project "acme \\"shop\\"" in schema "${db.schema}": `);
    }
  });

  it("says the schema needs migrating when it does not exist", async () => {
    const s = new PostgresGrantStore(db.pool, { project: "p", schema: "loopctl_never_migrated" });
    const error = await s.load().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PostgresQueryError);
    expect((error as PostgresQueryError).code).toBe("POSTGRES_NOT_MIGRATED");
    expect((error as Error).message).toContain("migrate(pool");
    await expect(s.save(read)).rejects.toMatchObject({ code: "POSTGRES_NOT_MIGRATED" });
  });

  it("refuses a schema a newer loopctl migrated", async () => {
    await db.pool.query(`INSERT INTO "${db.schema}".migrations (version, name) VALUES (999, 'from the future')`);
    await expect(store().load()).rejects.toMatchObject({ code: "POSTGRES_SCHEMA_TOO_NEW" });
  });

  it("stops deciding and writing once a newer loopctl migrates the schema under it, writing nothing more", async () => {
    const decider = store();
    const writers = { save: store(), revoke: store(), clear: store() };
    await decider.save(read);
    await writers.save.save(deployProd);
    await writers.revoke.save(writeReadme);
    expect(await decider.covering("read", "{}")).toHaveLength(1);
    expect(await writers.clear.load()).toHaveLength(3);
    // A newer loopctl's migrate, as this one reads versions: the next row of the migrations table.
    await db.pool.query(`INSERT INTO "${db.schema}".migrations (version, name) VALUES ($1, 'from the future')`, [
      SCHEMA_VERSION + 1,
    ]);
    const tooNew = (operation: string): object => ({
      code: "POSTGRES_SCHEMA_TOO_NEW",
      operation,
      message: expect.stringContaining(`is at version ${SCHEMA_VERSION + 1}`) as unknown,
    });
    // The next decision's own statement finds it, and so does every call after it.
    await expect(decider.covering("read", "{}")).rejects.toMatchObject(tooNew("PostgresGrantStore.covering"));
    await expect(decider.load()).rejects.toMatchObject(tooNew("PostgresGrantStore.load"));
    await expect(decider.save(writeReadme.withNote("late"))).rejects.toMatchObject(tooNew("PostgresGrantStore.save"));
    // Stores that last wrote before the migration find it in their next write's transaction.
    await expect(writers.save.save(read.withNote("late"))).rejects.toMatchObject(tooNew("PostgresGrantStore.save"));
    await expect(writers.revoke.revoke(writeReadme.id)).rejects.toMatchObject(tooNew("PostgresGrantStore.revoke"));
    await expect(writers.clear.clear()).rejects.toMatchObject(tooNew("PostgresGrantStore.clear"));
    const { rows } = await db.pool.query(
      `SELECT id, note, revoked, version::int AS version FROM "${db.schema}".grants ORDER BY version`,
    );
    expect(rows).toEqual([
      { id: read.id, note: null, revoked: false, version: 1 },
      { id: deployProd.id, note: null, revoked: false, version: 2 },
      { id: writeReadme.id, note: null, revoked: false, version: 3 },
    ]);
  });

  it("refuses a project PostgreSQL cannot store as given (U+0000, a lone surrogate) with PostgresConfigError", async () => {
    // U+0000 is refused by the server; a lone surrogate would be stored as U+FFFD, so two such projects would share grants.
    for (const project of ["acme\u0000shop", "acme\ud800", "acme\udbff"]) {
      expect(() => new PostgresGrantStore(db.pool, { project })).toThrow(PostgresConfigError);
      expect(() => new PostgresGrantStore(db.pool, { project })).toThrow(/options\.project holds/);
    }
    await store("acme\ufffd").save(read);
    expect(await store("acme\ufffd").load()).toHaveLength(1);
  });

  it("takes a project of up to 2048 bytes of UTF-8, the most the grants' index holds whatever the text; a longer one is a PostgresConfigError", async () => {
    // Random hex does not compress: past about 2.7 KB PostgreSQL refuses it as an index key, so such a store
    // could read but never save.
    const hex = (bytes: number) => randomBytes(bytes / 2).toString("hex");
    const longest = `${hex(2044)}\u00e9\u00e9`;
    expect(Buffer.byteLength(longest)).toBe(2048);
    await store(longest).save(read);
    expect((await store(longest).load()).map((g) => g.id)).toEqual([read.id]);
    for (const project of [`${hex(2044)}\u00e9\u00e9x`, hex(3000), "\u{1f600}".repeat(513)]) {
      expect(() => new PostgresGrantStore(db.pool, { project, schema: db.schema })).toThrow(PostgresConfigError);
      expect(() => new PostgresGrantStore(db.pool, { project, schema: db.schema })).toThrow(
        `PostgresGrantStore: options.project is ${Buffer.byteLength(project)} bytes of UTF-8; at most 2048`,
      );
    }
  });

  it("rejects bad options with a typed error", () => {
    expect(() => new PostgresGrantStore(db.pool, { project: "" })).toThrow(PostgresConfigError);
    expect(() => new PostgresGrantStore(db.pool, { project: "p", schema: "Robert'); DROP TABLE" })).toThrow(
      PostgresConfigError,
    );
    expect(() => new PostgresGrantStore({} as never, { project: "p" })).toThrow(PostgresConfigError);
    for (const replyMs of [0, 299, 600_001, 1.5, Number.NaN, "1000"]) {
      expect(() => new PostgresGrantStore(db.pool, { project: "p", replyMs: replyMs as never })).toThrow(
        /PostgresGrantStore: replyMs must be an integer from 300 to 600000/,
      );
    }
    for (const options of [null, undefined, "p"]) {
      expect(() => new PostgresGrantStore(db.pool, options as never)).toThrow(PostgresConfigError);
    }
  });

  it("refuses an option it does not take, naming it: a misspelt schema never puts the project's grants in the default one", () => {
    for (const [options, message] of [
      [{ project: "p", Schema: db.schema }, "PostgresGrantStore: unknown option 'Schema' (did you mean schema?)"],
      [
        { project: "p", schema: db.schema, reply_ms: 500 },
        "PostgresGrantStore: unknown option 'reply_ms' (did you mean replyMs?)",
      ],
      [
        { project: "p", schema: db.schema, tenant: "a" },
        "PostgresGrantStore: unknown option 'tenant' (the options are project, schema and replyMs)",
      ],
    ] as const) {
      expect(() => new PostgresGrantStore(db.pool, options as never)).toThrow(
        expect.objectContaining({ code: "POSTGRES_CONFIG", message }),
      );
    }
    // A connection string given where options go: refused without its text (it may hold a password).
    expect(() => new PostgresGrantStore(db.pool, "postgres://app:hunter2@db/prod" as never)).toThrow(
      /^PostgresGrantStore: options must be an object, got a string$/,
    );
    // A signal has no keys of its own, an array none that are options: neither is taken for options.
    expect(() => new PostgresGrantStore(db.pool, new AbortController().signal as never)).toThrow(
      "PostgresGrantStore: options must be an object, got an AbortSignal",
    );
    expect(() => new PostgresGrantStore(db.pool, [{ project: "p" }] as never)).toThrow(
      "PostgresGrantStore: options must be an object, got an array",
    );
  });

  it("refuses a node-postgres Client, connected or not, or a connection checked out of a pool, with PostgresConfigError naming pool", async () => {
    await withEachNonPool(db.pool, (given) => {
      const make = (): unknown => new PostgresGrantStore(given as never, { project: "p", schema: db.schema });
      expect(make).toThrow(PostgresConfigError);
      expect(make).toThrow(
        /^PostgresGrantStore: pool must be a node-postgres Pool \(new pg\.Pool\(\.\.\.\)\), not a Client/,
      );
    });
  });
});

describe("PostgresGrantStore: a read whose connection the server ended (57P01)", () => {
  it("reads again on another connection when the pooled one it took was terminated while idle", async () => {
    const app = `${db.schema}-reader`;
    const pool = db.newPool(1, { application_name: app });
    const reader = store("acme/shop", pool);
    await store().save(read);
    expect((await reader.load()).map((g) => g.id)).toEqual([read.id]);
    await store().save(deployProd);
    // Terminated, and the read sent at once: on the pooled connection, before this process hears the end.
    expect(terminateIdleNow(app)).toBe(1);
    expect((await reader.load()).map((g) => g.id)).toEqual([read.id, deployProd.id]);
    await store().save(writeReadme);
    expect(terminateIdleNow(app)).toBe(1);
    expect(await reader.covering("write", writeReadme.canonicalArgs!)).toHaveLength(1);
    // A new store's first read checks the schema's version first, on the same kind of connection.
    const fresh = store("acme/shop", pool);
    expect(terminateIdleNow(app)).toBe(1);
    expect((await fresh.load()).map((g) => g.id)).toEqual([read.id, deployProd.id, writeReadme.id]);
  });

  it("saves, revokes and clears on another connection when the pooled one it took was ended while idle: nothing of the write ran", async () => {
    const app = `${db.schema}-writer`;
    const pool = db.newPool(1, { application_name: app });
    const writer = store("acme/shop", pool);
    await writer.save(read);
    // Terminated, and each write sent at once: its BEGIN goes to the pooled connection, unheard of its end.
    expect(terminateIdleNow(app)).toBe(1);
    await writer.save(deployProd);
    expect(terminateIdleNow(app)).toBe(1);
    expect((await writer.revoke(read.id))?.id).toBe(read.id);
    expect(terminateIdleNow(app)).toBe(1);
    expect(await writer.clear()).toBe(1);
    expect(await store().load()).toEqual([]);
    const { rows } = await db.pool.query(
      `SELECT version::int AS version FROM "${db.schema}".grant_projects WHERE project = 'acme/shop'`,
    );
    // One version per change: save, save, revoke, clear.
    expect(rows).toEqual([{ version: 4 }]);
  });

  it("reads again on another connection when the server ended the pooled one for idling (idle_session_timeout, 57P05)", async () => {
    const app = `${db.schema}-idler`;
    // The pool keeps its connections (no idleTimeoutMillis): the server's idle_session_timeout ends them first.
    const pool = db.newPool(1, {
      application_name: app,
      options: "-c idle_session_timeout=200",
      idleTimeoutMillis: 0,
    });
    const reader = store("acme/shop", pool);
    await store().save(read);
    expect((await reader.load()).map((g) => g.id)).toEqual([read.id]);
    await store().save(deployProd);
    // Ended while this process is busy: it hears nothing of it, and the read goes to that connection.
    waitUntilGone(app);
    expect((await reader.load()).map((g) => g.id)).toEqual([read.id, deployProd.id]);
  });

  it("rejects with the error naming the project and the schema when the second read is ended too, and reads no third time", async () => {
    const app = `${db.schema}-reader`;
    const pool = db.newPool(1, { application_name: app });
    const reader = store("acme/shop", pool);
    await store().save(read);
    expect(await reader.load()).toHaveLength(1);
    // The read sent again waits behind this lock, where it is terminated as well.
    const locker = await db.pool.connect();
    let error: unknown;
    try {
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${db.schema}".grants IN ACCESS EXCLUSIVE MODE`);
      expect(terminateIdleNow(app)).toBe(1);
      const loading = reader.load().catch((e: unknown) => e);
      await terminateWaiting(app);
      error = await loading;
      expect(await lockWaiters(db.schema, "grants")).toBe(0);
    } finally {
      await locker.query("ROLLBACK");
      locker.release();
    }
    expect(error).toBeInstanceOf(PostgresQueryError);
    expect(error).toMatchObject({ code: "POSTGRES_QUERY", operation: "PostgresGrantStore.load" });
    expect((error as Error).message).toContain(
      `PostgresGrantStore.load: project "acme/shop" in schema "${db.schema}": terminating connection`,
    );
    expect((error as Error).message).toContain("[SQLSTATE 57P01]");
    expect((await reader.load()).map((g) => g.id)).toEqual([read.id]);
  });

  it("reads once only when the server refuses the read: nothing but an ended session is read again", async () => {
    const pool = db.newPool(1, { options: "-c lock_timeout=200" });
    let checkouts = 0;
    pool.on("acquire", () => checkouts++);
    const reader = store("acme/shop", pool);
    expect(await reader.load()).toEqual([]);
    const locker = await db.pool.connect();
    try {
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${db.schema}".grants IN ACCESS EXCLUSIVE MODE`);
      checkouts = 0;
      await expect(reader.load()).rejects.toMatchObject({
        code: "POSTGRES_QUERY",
        message: expect.stringContaining("[SQLSTATE 55P03]") as unknown,
      });
      expect(checkouts).toBe(1);
    } finally {
      await locker.query("ROLLBACK");
      locker.release();
    }
  });
});

describe("PostgresGrantStore with an AbortSignal", () => {
  it("rejects at once with the reason, and writes nothing, when the signal is already aborted", async () => {
    const s = store();
    const reason = new Error("stop");
    const signal = AbortSignal.abort(reason);
    await expect(s.save(read, { signal })).rejects.toBe(reason);
    await expect(s.load({ signal })).rejects.toBe(reason);
    await expect(s.revoke(read.id, { signal })).rejects.toBe(reason);
    await expect(s.clear({ signal })).rejects.toBe(reason);
    expect(await s.load()).toEqual([]);
  });

  it("rejects options that are not an object, or a signal that is not an AbortSignal or cannot be listened to, with GrantConfigError naming them, as the other stores do", async () => {
    const s = store();
    await s.save(read);
    await expectBadCallOptionsRefused((options) => [
      ["PostgresGrantStore.load", () => s.load(options)],
      ["PostgresGrantStore.save", () => s.save(deployProd, options)],
      ["PostgresGrantStore.revoke", () => s.revoke(read.id, options)],
      ["PostgresGrantStore.clear", () => s.clear(options)],
      ["PostgresGrantStore.covering", () => s.covering("read", "{}", options)],
    ]);
    expect(await s.load()).toEqual([read]);
  });

  it("rejects with an aborted signal's reason before anything else: a revoke of an id it cannot store, a save of no grant", async () => {
    const s = store();
    const reason = new Error("stop");
    const signal = AbortSignal.abort(reason);
    for (const id of ["\u0000", `${read.id}\ud800`, 7 as never, null as never]) {
      await expect(s.revoke(id, { signal })).rejects.toBe(reason);
      // Without the abort, text it cannot store names no stored grant, and what is not text is refused, as in the other stores.
      if (typeof id === "string") expect(await s.revoke(id)).toBeUndefined();
      else await expect(s.revoke(id)).rejects.toBeInstanceOf(GrantConfigError);
    }
    await expect(s.save(read.toJSON() as never, { signal })).rejects.toBe(reason);
    await expectAbortedSignalFirst(s);
  });

  it("cancels a save that waits for the project's lock: it rejects with the reason and never lands", async () => {
    const s = store();
    await s.save(deployProd);
    const holder = await db.pool.connect();
    try {
      await holder.query("BEGIN");
      await holder.query(`UPDATE "${db.schema}".grant_projects SET version = version WHERE project = 'acme/shop'`);
      const controller = new AbortController();
      const saving = s.save(read, { signal: controller.signal });
      await waitFor(async () => (await lockWaiters(db.schema)) > 0);
      const reason = new Error("the run was cancelled");
      controller.abort(reason);
      await expect(saving).rejects.toBe(reason);
      // The waiting statement was cancelled on the server, not left queued behind the lock.
      await waitFor(async () => (await lockWaiters(db.schema)) === 0);
    } finally {
      await holder.query("ROLLBACK");
      holder.release();
    }
    expect((await s.load()).map((g) => g.id)).toEqual([deployProd.id]);
  });
});

async function lockWaiters(schema: string, table = "grant_projects"): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
    [`%"${schema}".${table}%`],
  );
  return rows[0]?.n ?? 0;
}

/** Terminates the connection of one application whose statement waits for a lock, once there is one, and waits until it is gone. */
async function terminateWaiting(application: string): Promise<void> {
  let pid: number | undefined;
  await waitFor(async () => {
    const { rows } = await db.pool.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
      [application],
    );
    pid = rows[0]?.pid;
    return pid !== undefined;
  });
  await db.pool.query("SELECT pg_terminate_backend($1)", [pid]);
  await waitFor(
    async () => (await db.pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid])).rows.length === 0,
  );
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition never held");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
