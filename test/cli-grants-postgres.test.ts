import { existsSync } from "node:fs";
import { createServer } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { EXIT } from "../src/cli/index.js";
import { useStore } from "../src/cli/grants.js";
import { Grant, GrantScope } from "loopctl/grant";
import { PostgresGrantStore } from "loopctl/postgres";
import { capturedContext, cli } from "./support/cli-harness.js";
import { DATABASE_URL, redacted, usePostgres } from "./support/postgres.js";
import { startProxy } from "./support/tcp-proxy.js";

const db = usePostgres({ prefetch: true });

const read = new Grant("read", "allow", GrantScope.thisTool()).withCreatedAtMs(Date.UTC(2026, 0, 2, 3, 4, 5));
const rm = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "rm -rf /" }));
const write = new Grant("write", "allow", GrantScope.thisCall({ path: "README.md" }));

function at(project = "acme/shop"): string[] {
  return ["--database", DATABASE_URL, "--schema", db.schema, "--project", project];
}

/** `grants reset` on the project removes `n` grants, and `grants list` then shows none. */
async function resetLeavesNoGrants(n: number): Promise<void> {
  const reset = await cli(["grants", "reset", ...at()], { cwd: "/" });
  expect(reset).toMatchObject({ code: EXIT.ok, stderr: "" });
  expect(reset.stdout).toContain(`removed ${n} grants`);
  const list = await cli(["grants", "list", ...at()], { cwd: "/" });
  expect(list).toMatchObject({ code: EXIT.ok, stderr: "" });
  expect(list.stdout).toContain("no grants");
}

async function seeded(project = "acme/shop"): Promise<PostgresGrantStore> {
  const store = new PostgresGrantStore(db.pool, { project, schema: db.schema });
  for (const grant of [read, rm, write]) await store.save(grant);
  return store;
}

describe("loopctl grants … --database URL --project NAME", () => {
  it("lists the project's grants from the database, as a table and as JSON", async () => {
    await seeded();
    await new PostgresGrantStore(db.pool, { project: "acme/blog", schema: db.schema }).save(
      new Grant("other", "allow", GrantScope.thisTool()),
    );
    const location = `${redacted(DATABASE_URL)} (schema ${db.schema}, project "acme/shop")`;
    const run = await cli(["grants", "list", ...at()], { cwd: "/" });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain(`ledger: ${location}`);
    expect(run.stdout).toMatch(/read\s+allow\s+this_tool\s+-\s+2026-01-02T03:04:05Z\s+-/);
    expect(run.stdout).toContain('this_call {"cmd":"rm -rf /"}');
    expect(run.stdout).not.toContain("other");
    expect(run.stdout).toContain("3 grants");
    const asJson = await cli(["grants", "list", ...at(), "--json"], { cwd: "/" });
    expect(JSON.parse(asJson.stdout)).toEqual({
      ledger: location,
      grants: [read.toJSON(), rm.toJSON(), write.toJSON()],
    });
  });

  it("revokes one grant for every process that shares the database, and says when there is none", async () => {
    const store = await seeded();
    const run = await cli(["grants", "revoke", rm.id, ...at()], { cwd: "/" });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain(`revoked ${rm.id} (deny shell`);
    expect((await store.load()).map((g) => g.id)).toEqual([read.id, write.id]);
    const again = await cli(["grants", "revoke", rm.id, ...at()], { cwd: "/" });
    expect(again.code).toBe(EXIT.failed);
    expect(again.stderr).toContain(`no grant ${rm.id}`);
  });

  it("resets one tool's grants, then all of them", async () => {
    const store = await seeded();
    const one = await cli(["grants", "reset", "--tool", "write", ...at()], { cwd: "/" });
    expect(one).toMatchObject({ code: EXIT.ok });
    expect(one.stdout).toContain('removed 1 grant of tool "write"');
    const all = await cli(["grants", "reset", ...at()], { cwd: "/" });
    expect(all.stdout).toContain("removed 2 grants");
    expect(await store.load()).toEqual([]);
  });

  it("explains which grant decides a call", async () => {
    await seeded();
    const run = await cli(["grants", "explain", "--tool", "shell", "--args", '{"cmd":"rm -rf /"}', ...at(), "--json"], {
      cwd: "/",
    });
    expect(run.code).toBe(EXIT.ok);
    expect(JSON.parse(run.stdout)).toMatchObject({ decision: { type: "deny", grant: rm.id } });
  });

  it("warns when the project never held a grant but names differing only in case or surrounding spaces did", async () => {
    const near = await seeded("Acme/Shop");
    await new PostgresGrantStore(db.pool, { project: " acme/shop\t", schema: db.schema }).save(read);
    const warning =
      `loopctl: warning: project "acme/shop" never held a grant in schema ${db.schema}; the name matches exactly, ` +
      `and " acme/shop\\t", "Acme/Shop" (differing in case or surrounding spaces) are other projects, left as they are\n`;
    for (const argv of [
      ["grants", "list", ...at()],
      ["grants", "list", ...at(), "--json"],
      ["grants", "reset", ...at()],
      ["grants", "reset", "--tool", "shell", ...at()],
      ["grants", "revoke", rm.id, ...at()],
      ["grants", "explain", "--tool", "shell", "--args", '{"cmd":"rm -rf /"}', ...at()],
    ]) {
      const run = await cli(argv, { cwd: "/" });
      expect(run.stderr.split(warning).length - 1, argv.join(" ")).toBe(1);
    }
    expect(await near.load()).toHaveLength(3);
    // Said only of a project the database has never seen that has such neighbours.
    for (const project of ["Acme/Shop", "acme/blog"]) {
      expect(await cli(["grants", "list", ...at(project)], { cwd: "/" })).toMatchObject({ code: EXIT.ok, stderr: "" });
    }
  });

  it("names a single near project as one project", async () => {
    await seeded("Acme/Shop");
    const run = await cli(["grants", "list", ...at()], { cwd: "/" });
    expect(run.stderr).toBe(
      `loopctl: warning: project "acme/shop" never held a grant in schema ${db.schema}; the name matches exactly, ` +
        `and "Acme/Shop" (differing in case or surrounding spaces) is another project, left as it is\n`,
    );
  });

  it("refuses options that do not go together, with a usage error", async () => {
    const cases: [string[], string][] = [
      [["grants", "list", "--database", DATABASE_URL], "--database needs --project NAME"],
      [["grants", "list", ...at(), "--root", "/tmp"], "--root is for a ledger file"],
      [["grants", "list", "--schema", "x"], "--schema needs --database"],
      [
        ["grants", "list", "--database", DATABASE_URL, "--project", "p", "--schema", "Bad Name"],
        "schema must be a lowercase identifier",
      ],
    ];
    for (const [argv, message] of cases) {
      const run = await cli(argv, { cwd: "/" });
      expect(run.code).toBe(EXIT.usage);
      expect(run.stderr).toContain(message);
    }
  });

  it("names --schema, not the class it is passed on to, when it is not a schema name", async () => {
    const cases: [string[], string][] = [
      [["grants", "list"], "loopctl grants list"],
      [["grants", "reset", "--tool", "t"], "loopctl grants reset"],
      [["console"], "loopctl console"],
    ];
    for (const [command, prefix] of cases) {
      const argv = [...command, "--database", DATABASE_URL, "--project", "p", "--schema", "Bad Name"];
      const run = await cli(argv, { cwd: "/" });
      expect(run, argv.join(" ")).toMatchObject({ code: EXIT.usage, stdout: "" });
      expect(run.stderr).toBe(
        `${prefix}: --schema: schema must be a lowercase identifier of at most 48 characters ` +
          `([a-z_][a-z0-9_]*), got "Bad Name"\nRun '${prefix} --help' for usage.\n`,
      );
    }
  });

  it("names --project, not the class it is passed on to, when no project can be named so; before any connection", async () => {
    const long = "p".repeat(2049);
    // No server answers there: a refusal after connecting would be a database error (exit 4).
    for (const database of [DATABASE_URL, "postgres://postgres@127.0.0.1:1/test"]) {
      const cases: [string[], string, string][] = [
        [["grants", "list"], "loopctl grants list", long],
        [["grants", "reset", "--tool", "t"], "loopctl grants reset", long],
        [["grants", "explain", "--tool", "t", "--args", "{}"], "loopctl grants explain", long],
        [["console", "--port", "0"], "loopctl console", long],
        [["console", "--port", "0"], "loopctl console", ""],
      ];
      for (const [command, prefix, project] of cases) {
        const argv = [...command, "--database", database, "--schema", db.schema, `--project=${project}`];
        const run = await cli(argv, { cwd: "/" });
        const said =
          project === ""
            ? "--project needs the NAME of a project; leave it out to serve no grants"
            : "--project is 2049 bytes of UTF-8; at most 2048 (it is a key of the grants' indexes)";
        expect(run, `${prefix} ${JSON.stringify(project.slice(0, 3))} at ${database}`).toMatchObject({
          code: EXIT.usage,
          stdout: "",
          stderr: `${prefix}: ${said}\nRun '${prefix} --help' for usage.\n`,
        });
      }
    }
  });

  it("says the way out of an unmigrated schema: the --schema the workers use, or migrate; the CLI creates nothing", async () => {
    const argv = ["grants", "list", "--database", DATABASE_URL, "--schema", "loopctl_never_there", "--project", "p"];
    const hint =
      "the CLI creates no tables: pass the --schema your workers migrated (without --schema: loopctl), " +
      "or create this one with migrate(pool, { schema }) from loopctl/postgres";
    const run = await cli(argv, { cwd: "/" });
    expect(run.code).toBe(EXIT.io);
    expect(run.stderr).toContain(`[POSTGRES_NOT_MIGRATED]\nloopctl: ${hint}\n`);
    const asJson = await cli([...argv, "--json"], { cwd: "/" });
    expect(JSON.parse(asJson.stdout)).toMatchObject({ error: "POSTGRES_NOT_MIGRATED", hint });
  });

  it("reports an unmigrated schema and an unreachable server as database errors, naming them", async () => {
    const unmigrated = await cli(
      ["grants", "list", "--database", DATABASE_URL, "--schema", "loopctl_never_there", "--project", "p"],
      {
        cwd: "/",
      },
    );
    expect(unmigrated.code).toBe(EXIT.io);
    expect(unmigrated.stderr).toContain("[POSTGRES_NOT_MIGRATED]");
    const unreachable = await cli(
      ["grants", "list", "--database", "postgres://nobody:secret@127.0.0.1:1/none", "--project", "p"],
      {
        cwd: "/",
      },
    );
    expect(unreachable.code).toBe(EXIT.io);
    expect(unreachable.stderr).toContain("[POSTGRES_QUERY]");
    expect(unreachable.stderr).not.toContain("secret");
    const asJson = await cli(
      ["grants", "list", "--database", "postgres://nobody:secret@127.0.0.1:1/none", "--project", "p", "--json"],
      {
        cwd: "/",
      },
    );
    expect(asJson.code).toBe(EXIT.io);
    expect(JSON.parse(asJson.stdout)).toMatchObject({
      error: "POSTGRES_QUERY",
      ledger: expect.stringContaining("postgres://nobody:***@127.0.0.1:1/none"),
    });
    expect(asJson.stdout).not.toContain("secret");
    expect(JSON.parse(asJson.stdout)).not.toHaveProperty("hint");
  });

  /** `grants list` against a server that takes the connection and never answers, with `PGCONNECT_TIMEOUT` set to `timeout`. */
  async function listOnSilentServer(timeout: string): Promise<Awaited<ReturnType<typeof cli>>> {
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => {
      sockets.add(socket);
      socket.on("error", () => undefined);
    });
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      return await cli(["grants", "list", "--database", `postgres://nobody@127.0.0.1:${port}/none`, "--project", "p"], {
        cwd: "/",
        env: { PGCONNECT_TIMEOUT: timeout },
      });
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  }

  it("gives up on a server that takes the connection and never answers, after PGCONNECT_TIMEOUT", async () => {
    const run = await listOnSilentServer("1");
    expect(run.code).toBe(EXIT.io);
    expect(run.stderr).toContain("[POSTGRES_QUERY]");
    expect(run.stderr).toMatch(/timeout/i);
  });

  it("never turns the connect timeout off: a PGCONNECT_TIMEOUT under a millisecond still gives up", async () => {
    // 0.0001 s rounded to whole milliseconds is 0, which node-postgres reads as no timeout at all.
    const run = await listOnSilentServer("0.0001");
    expect(run.code).toBe(EXIT.io);
    expect(run.stderr).toMatch(/timeout/i);
  }, 10_000);

  it("refuses a PGCONNECT_TIMEOUT that is not a number of seconds, naming it, before any connection", async () => {
    for (const given of ["10s", "ten", "1e"]) {
      const run = await cli(["grants", "list", ...at()], { cwd: "/", env: { PGCONNECT_TIMEOUT: given } });
      expect(run.code, given).toBe(EXIT.usage);
      expect(run.stderr, given).toContain(`PGCONNECT_TIMEOUT must be a number of seconds, got "${given}"`);
    }
    // Empty is unset, as libpq reads it; zero or less, the default rather than no timeout.
    for (const given of ["", "0", "-1"]) {
      const run = await cli(["grants", "list", ...at()], { cwd: "/", env: { PGCONNECT_TIMEOUT: given } });
      expect(run, given).toMatchObject({ code: EXIT.ok, stderr: "" });
    }
  });

  it("gives up the hint of near projects when its connection stops answering, after the stores' 15 s, and ends", async () => {
    await seeded();
    const proxy = await startProxy(DATABASE_URL);
    try {
      // The grants are read; the look for projects differing in case never arrives, nor does its reply.
      proxy.stallConnectionOn("btrim(");
      const started = Date.now();
      const argv = ["grants", "list", "--database", proxy.url, "--schema", db.schema, "--project", "acme/shop"];
      const run = await cli(argv, { cwd: "/" });
      expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
      expect(run.stdout).toContain("3 grants");
      expect(proxy.stalledConnections).toBe(1);
      expect(Date.now() - started).toBeLessThan(25_000);
    } finally {
      await proxy.close();
    }
  }, 40_000);

  it("a pool that fails to close leaves the command's own error, or its result, and is one warning line", async () => {
    await seeded();
    // Each pool is ended by the work itself, so the store's close (a second end()) rejects for real.
    const opened = () => {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      const store = new PostgresGrantStore(pool, { project: "acme/shop", schema: db.schema });
      return { pool, store, location: "the test database", close: () => pool.end() };
    };
    const warning = "loopctl: warning: could not close the test database: Called end on pool more than once\n";

    const failing = opened();
    const failed = capturedContext();
    const error = await useStore(
      failing,
      failed,
      async (store) => {
        await failing.pool.end();
        return store.load();
      },
      true,
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/Cannot use a pool after calling end on the pool/);
    expect(JSON.parse(failed.out)).toMatchObject({ ledger: "the test database", error: "POSTGRES_QUERY" });
    expect(failed.err).toBe(warning);

    const working = opened();
    const worked = capturedContext();
    const { value } = await useStore(working, worked, async (store) => {
      const grants = await store.load();
      await working.pool.end();
      return grants;
    });
    expect(value.map((g) => g.id)).toEqual([read.id, rm.id, write.id]);
    expect(worked.err).toBe(warning);
  });

  it("reports a malformed row as corrupt, naming it, and changes nothing", async () => {
    await seeded();
    await db.pool.query(
      `INSERT INTO "${db.schema}".grants (project, id, tool, verdict, args, created_at_ms, version) VALUES ('acme/shop', 'badbadbadbadbad0', 'x', 'allow', NULL, 0, 99)`,
    );
    await db.pool.query(`UPDATE "${db.schema}".grant_projects SET version = 99`);
    const run = await cli(["grants", "revoke", read.id, ...at()], { cwd: "/" });
    expect(run.code).toBe(EXIT.corrupt);
    expect(run.stderr).toContain("badbadbadbadbad0");
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".grants WHERE NOT revoked`);
    expect(rows).toEqual([{ n: 4 }]);
  });

  it("gives a malformed row a way out that fits a database: never grants repair, which is for a ledger file", async () => {
    await seeded();
    await db.pool.query(
      `INSERT INTO "${db.schema}".grants (project, id, tool, verdict, args, created_at_ms, version) VALUES ('acme/shop', 'badbadbadbadbad0', 'x', 'allow', NULL, 0, 99)`,
    );
    await db.pool.query(`UPDATE "${db.schema}".grant_projects SET version = 99`);
    const hint =
      "loopctl: nothing was changed and the row is left as it is: forget every grant of the project with " +
      "'loopctl grants reset' and the same --database, --schema and --project (its rows are kept, marked " +
      "revoked), or revoke that row alone at the project's next version (docs/postgres.md shows the statement); " +
      "an edit or a DELETE by hand that keeps the row's version goes unseen by the stores already running\n";
    for (const argv of [
      ["grants", "list"],
      ["grants", "reset", "--tool", "read"],
      ["grants", "explain", "--tool", "x", "--args", "{}"],
    ]) {
      const run = await cli([...argv, ...at()], { cwd: "/" });
      expect(run.code, argv.join(" ")).toBe(EXIT.corrupt);
      expect(run.stderr).toContain("[POSTGRES_ROW_MALFORMED]");
      expect(run.stderr).not.toContain("grants repair");
      expect(run.stderr.endsWith(hint)).toBe(true);
    }
    const repair = await cli(["grants", "repair", ...at()], { cwd: "/" });
    expect(repair.code).toBe(EXIT.usage);
    expect(repair.stderr).toContain(
      "repair moves a ledger file aside; a malformed grants row in PostgreSQL is forgotten with the project's other grants",
    );
    expect(repair.stderr).not.toContain("deleted");
    expect(repair.stderr).toContain("'loopctl grants reset'");
    const asJson = await cli(["grants", "list", ...at(), "--json"], { cwd: "/" });
    expect(asJson.code).toBe(EXIT.corrupt);
    expect(JSON.parse(asJson.stdout)).toEqual({
      ledger: `${redacted(DATABASE_URL)} (schema ${db.schema}, project "acme/shop")`,
      error: "POSTGRES_ROW_MALFORMED",
      message: expect.stringContaining("badbadbadbadbad0"),
      hint: hint.slice("loopctl: ".length, -1),
    });
    // The way out the hint names works: the project's grants are forgotten, every row kept as revoked.
    await resetLeavesNoGrants(4);
    const { rows } = await db.pool.query(`SELECT id, revoked FROM "${db.schema}".grants WHERE id = 'badbadbadbadbad0'`);
    expect(rows).toEqual([{ id: "badbadbadbadbad0", revoked: true }]);
  });

  it("repairs a row whose verdict is unknown with 'grants reset', for the stores already running too", async () => {
    const running = await seeded();
    expect(await running.load()).toHaveLength(3);
    await db.pool.query(`UPDATE "${db.schema}".grants SET verdict = 'maybe' WHERE id = $1`, [write.id]);
    await db.pool.query(
      `INSERT INTO "${db.schema}".grants (project, id, tool, verdict, args, created_at_ms, version) VALUES ('acme/shop', 'badbadbadbadbad0', 'x', 'maybe', NULL, 0, 99)`,
    );
    await db.pool.query(`UPDATE "${db.schema}".grant_projects SET version = 99`);
    const broken = await cli(["grants", "list", ...at()], { cwd: "/" });
    expect(broken.code).toBe(EXIT.corrupt);
    await resetLeavesNoGrants(4);
    expect(await running.load()).toEqual([]);
    await running.save(read);
    const again = await cli(["grants", "list", ...at(), "--json"], { cwd: "/" });
    expect(again.code).toBe(EXIT.ok);
    expect(JSON.parse(again.stdout)).toMatchObject({ grants: [read.toJSON()] });
  });

  it("never prints a password given in the URL, in its userinfo or as ?password=", async () => {
    const url = new URL(DATABASE_URL);
    url.searchParams.set("password", "s3cret-query");
    url.searchParams.set("sslmode", "disable");
    const withUser = new URL(url);
    withUser.password = "s3cret-user";
    for (const given of [url.href, withUser.href]) {
      const argv = ["grants", "list", "--database", given, "--schema", "loopctl_never_there", "--project", "p"];
      for (const run of [await cli(argv, { cwd: "/" }), await cli([...argv, "--json"], { cwd: "/" })]) {
        expect(run.code).toBe(EXIT.io);
        expect(run.stdout + run.stderr).not.toContain("s3cret");
      }
      const listed = await cli([...argv.slice(0, -4), "--schema", db.schema, "--project", "p"], { cwd: "/" });
      expect(listed).toMatchObject({ code: EXIT.ok, stderr: "" });
      expect(listed.stdout).toContain("password=***");
      expect(listed.stdout).toContain("sslmode=disable");
      expect(listed.stdout).not.toContain("s3cret");
    }
  });

  const local = new URL(DATABASE_URL);
  const socketDir = "/var/run/postgresql";
  const overSocket =
    ["127.0.0.1", "localhost"].includes(local.hostname) && existsSync(`${socketDir}/.s.PGSQL.${local.port || "5432"}`);
  it.skipIf(!overSocket)("reaches the server over its Unix socket with a socket: URL", async () => {
    await seeded();
    const url = `socket:${socketDir}?db=${local.pathname.slice(1)}&user=${local.username}`;
    const run = await cli(["grants", "list", "--database", url, "--schema", db.schema, "--project", "acme/shop"], {
      cwd: "/",
    });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain("3 grants");
  });

  it.skipIf(!overSocket)(
    "takes a user before an empty host, as node-postgres does: ?host= naming the socket folder, or a socket:// URL",
    async () => {
      await seeded();
      const user = `${local.username}:s3cret-user`;
      const database = local.pathname.slice(1);
      for (const [url, shown] of [
        [
          `postgres://${user}@/${database}?host=${socketDir}`,
          `postgres://${local.username}:***@/${database}?host=${socketDir}`,
        ],
        [`socket://${user}@${socketDir}?db=${database}`, `socket://${local.username}:***@${socketDir}?db=${database}`],
      ] as const) {
        const argv = ["grants", "list", "--database", url, "--schema", db.schema, "--project", "acme/shop"];
        const run = await cli(argv, { cwd: "/" });
        expect(run, url).toMatchObject({ code: EXIT.ok, stderr: "" });
        expect(run.stdout).toContain(`ledger: ${shown} (schema ${db.schema}, project "acme/shop")`);
        expect(run.stdout).toContain("3 grants");
        expect(run.stdout).not.toContain("s3cret");
      }
    },
  );

  it("refuses a --database that is empty or not a PostgreSQL URL, naming the option", async () => {
    for (const [given, message] of [
      ["", "--database needs a URL"],
      ["not a url", "--database: not a PostgreSQL URL"],
      ["localhost:5432", '--database: "localhost:" is not a PostgreSQL URL scheme'],
      ["https://db.internal/loopctl", '--database: "https:" is not a PostgreSQL URL scheme'],
    ] as const) {
      for (const argv of [
        ["grants", "list", "--database", given, "--project", "p"],
        ["console", "--database", given, "--port", "0"],
      ]) {
        const run = await cli(argv, { cwd: "/" });
        expect(run.code, `${argv[0]} ${JSON.stringify(given)}`).toBe(EXIT.usage);
        expect(run.stderr).toContain(message);
        expect(run.stderr).not.toContain("ENOTFOUND");
      }
    }
  });
});
