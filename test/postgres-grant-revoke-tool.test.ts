import { describe, expect, it } from "vitest";
import { EXIT } from "../src/cli/index.js";
import { Grant, GrantConfigError, GrantScope } from "loopctl/grant";
import { PostgresGrantStore, PostgresRowError } from "loopctl/postgres";
import { cli } from "./support/cli-harness.js";
import { DATABASE_URL, usePostgres } from "./support/postgres.js";
import { expectBadCallOptionsRefused } from "./support/grant-call-options.js";
import { startProxy } from "./support/tcp-proxy.js";

const db = usePostgres({ prefetch: true });

const read = new Grant("read", "allow", GrantScope.thisTool());
const writeReadme = new Grant("write", "allow", GrantScope.thisCall({ path: "README.md" }));
const writeAll = new Grant("write", "deny", GrantScope.thisTool());
const writeLog = new Grant("write", "allow", GrantScope.thisCall({ path: "CHANGELOG.md" }));

function store(project = "acme/shop"): PostgresGrantStore {
  return new PostgresGrantStore(db.pool, { project, schema: db.schema });
}

async function projectVersion(project = "acme/shop"): Promise<number> {
  const { rows } = await db.pool.query<{ version: string }>(
    `SELECT version::text AS version FROM "${db.schema}".grant_projects WHERE project = $1`,
    [project],
  );
  return Number(rows[0]?.version ?? 0);
}

async function lockWaiters(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
    [`%"${db.schema}".grant_projects%`],
  );
  return rows[0]?.n ?? 0;
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition never held");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("PostgresGrantStore.revokeTool", () => {
  it("revokes every grant of one tool at one new version of the project, oldest change first, and changes nothing when it has none", async () => {
    const s = store();
    for (const grant of [writeReadme, read, writeAll, writeLog]) await s.save(grant);
    await s.save(writeReadme.withNote("again"));
    await store("acme/blog").save(writeAll);
    const before = await projectVersion();

    const revoked = await s.revokeTool("write");
    expect(revoked.map((g) => g.toJSON())).toEqual(
      [writeAll, writeLog, writeReadme.withNote("again")].map((g) => g.toJSON()),
    );
    expect(await projectVersion()).toBe(before + 1);
    expect(await s.load()).toEqual([read]);
    // A store that held the grants learns of the revocation as it does of any other.
    expect((await store().load()).map((g) => g.id)).toEqual([read.id]);
    expect((await store("acme/blog").load()).map((g) => g.id)).toEqual([writeAll.id]);

    // Nothing of the tool left, a name that differs in case, a name PostgreSQL cannot store: no change at all.
    for (const tool of ["write", "Write", "wri\u0000te", "\ud800"]) expect(await s.revokeTool(tool)).toEqual([]);
    expect(await projectVersion()).toBe(before + 1);
    expect(await store("acme/none").revokeTool("write")).toEqual([]);
    expect(await projectVersion("acme/none")).toBe(0);
  });

  it("refuses a tool that is not a non-empty string with GrantConfigError naming it, and bad options as the other calls do", async () => {
    const s = store();
    await s.save(writeAll);
    for (const tool of ["", 7, null, undefined, writeAll]) {
      await expect(s.revokeTool(tool as never)).rejects.toMatchObject({
        name: GrantConfigError.name,
        message: expect.stringContaining("PostgresGrantStore.revokeTool: tool must be a non-empty string") as unknown,
      });
    }
    await expectBadCallOptionsRefused((options) => [
      ["PostgresGrantStore.revokeTool", () => s.revokeTool("write", options)],
    ]);
    const reason = new Error("stop");
    await expect(s.revokeTool(7 as never, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(await s.load()).toEqual([writeAll]);
  });

  /**
   * Runs `change` on a store of the project while another store's save of `writeLog` holds the
   * project's lock, its row written and its COMMIT held in the network, and lets that COMMIT go once
   * `change` waits for the lock; resolves to what `change` resolved to, the save landed.
   */
  async function whileAnotherSaves<T>(change: (s: PostgresGrantStore) => Promise<T>): Promise<T> {
    const s = store();
    await s.save(writeReadme);
    const proxy = await startProxy(DATABASE_URL);
    try {
      const other = new PostgresGrantStore(db.newPool(2, { connectionString: proxy.url }), {
        project: "acme/shop",
        schema: db.schema,
      });
      // The statement COMMIT alone, NUL-terminated: BEGIN names READ COMMITTED.
      proxy.holdConnectionOn("COMMIT\u0000");
      const saving = other.save(writeLog);
      await waitFor(() => Promise.resolve(proxy.holding));
      const changing = change(s);
      await waitFor(async () => (await lockWaiters()) === 1);
      proxy.pass();
      expect(await saving).toBe(writeLog);
      return await changing;
    } finally {
      await proxy.close();
    }
  }

  it("revokes a grant another store saved while it waited for the project's lock: it is ordered after that save", async () => {
    const revoked = await whileAnotherSaves((s) => s.revokeTool("write"));
    expect(revoked.map((g) => g.id)).toEqual([writeReadme.id, writeLog.id]);
    expect(await store().load()).toEqual([]);
  });

  it("clear() too removes a grant another store saved while it waited for the project's lock", async () => {
    // Its version is the later one: what it clears is every grant saved before it.
    expect(await whileAnotherSaves((s) => s.clear())).toBe(2);
    expect(await store().load()).toEqual([]);
  });

  it("revoke(id) too removes the grant another store saved under that id while it waited for the project's lock", async () => {
    expect((await whileAnotherSaves((s) => s.revoke(writeLog.id)))?.id).toBe(writeLog.id);
    expect(await store().load()).toEqual([writeReadme]);
  });

  it("cancels a revokeTool that waits for the project's lock: it rejects with the reason and revokes nothing", async () => {
    const s = store();
    await s.save(writeAll);
    const holder = await db.pool.connect();
    try {
      await holder.query("BEGIN");
      await holder.query(`UPDATE "${db.schema}".grant_projects SET version = version WHERE project = 'acme/shop'`);
      const controller = new AbortController();
      const revoking = s.revokeTool("write", { signal: controller.signal });
      await waitFor(async () => (await lockWaiters()) > 0);
      const reason = new Error("the reset was cancelled");
      controller.abort(reason);
      await expect(revoking).rejects.toBe(reason);
      await waitFor(async () => (await lockWaiters()) === 0);
    } finally {
      await holder.query("ROLLBACK");
      holder.release();
    }
    expect(await s.load()).toEqual([writeAll]);
  });

  it("revokes nothing while a row of the project is malformed, of the tool or not, naming that row", async () => {
    for (const [bad, tool] of [
      [writeAll, "write"],
      [read, "write"],
    ] as const) {
      const project = `acme/${bad.tool}`;
      const s = store(project);
      for (const grant of [writeReadme, read, writeAll]) await s.save(grant);
      const before = await projectVersion(project);
      await db.pool.query(`UPDATE "${db.schema}".grants SET verdict = 'maybe' WHERE project = $1 AND id = $2`, [
        project,
        bad.id,
      ]);
      for (const revoker of [s, store(project)]) {
        const refused = revoker.revokeTool(tool);
        await expect(refused).rejects.toBeInstanceOf(PostgresRowError);
        await expect(refused).rejects.toThrow(bad.id);
      }
      expect(await projectVersion(project)).toBe(before);
      const { rows } = await db.pool.query<{ id: string }>(
        `SELECT id FROM "${db.schema}".grants WHERE project = $1 AND NOT revoked ORDER BY version`,
        [project],
      );
      expect(rows.map((r) => r.id)).toEqual([writeReadme.id, read.id, writeAll.id]);
    }
  });
});

describe("loopctl grants reset --tool NAME --database URL", () => {
  it("revokes the tool's grants in one change of the project", async () => {
    const s = store();
    for (const grant of [writeReadme, read, writeAll, writeLog]) await s.save(grant);
    const before = await projectVersion();
    const run = await cli(
      [
        "grants",
        "reset",
        "--tool",
        "write",
        "--database",
        DATABASE_URL,
        "--schema",
        db.schema,
        "--project",
        "acme/shop",
      ],
      { cwd: "/" },
    );
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain('removed 3 grants of tool "write"');
    expect(await projectVersion()).toBe(before + 1);
    expect(await s.load()).toEqual([read]);
  });
});
