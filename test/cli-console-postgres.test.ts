import pg from "pg";
import { describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { PendingAsk } from "loopctl/ask";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import { Grant, GrantScope } from "loopctl/grant";
import { PostgresAskQueue, PostgresGrantStore } from "loopctl/postgres";
import { ScriptedModel } from "loopctl/testing";
import { EXIT } from "../src/cli/index.js";
import { CliUsageError } from "../src/cli/context.js";
import { serveConsole } from "../src/cli/console.js";
import type { ConsoleSources } from "../src/cli/console.js";
import { makeAsk } from "./support/ask-fixtures.js";
import { capturedContext, cli } from "./support/cli-harness.js";
import { startConsole } from "./support/console-run.js";
import { openStream, request } from "./support/http-client.js";
import { DATABASE_URL, usePostgres } from "./support/postgres.js";
import { startProxy } from "./support/tcp-proxy.js";

const db = usePostgres();

describe("loopctl console --database URL", () => {
  it("serves the asks every worker parks in the database and the project's shared grants: an answer there resumes the worker", async () => {
    const worker = new PostgresAskQueue(db.pool, { schema: db.schema });
    const grants = new PostgresGrantStore(db.pool, { project: "acme/shop", schema: db.schema });
    const ran: unknown[] = [];
    const deploy = defineTool({
      name: "deploy",
      description: "Deploy a version",
      input: { type: "object", properties: { env: { type: "string" } }, required: ["env"] },
      execute: (input) => {
        ran.push(input);
        return "deployed";
      },
    });
    const managers = new LoopManagers()
      .withHook({
        preToolUse: (call) => ({ type: "ask", prompt: `Deploy to ${String((call.input as { env: string }).env)}?` }),
      })
      .withAskResolver(worker.resolver)
      .withAskTimeout(60_000)
      .withGrantStore(grants);
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "deploy", input: { env: "staging" } }] },
      { text: "done" },
    ]);

    const console = startConsole("/", [
      "--database",
      DATABASE_URL,
      "--schema",
      db.schema,
      "--project",
      "acme/shop",
      "--port",
      "0",
    ]);
    try {
      const url = await console.printed;
      expect(console.output()).toContain(`the asks of every worker parked on`);
      expect(console.output()).toContain(`(schema ${db.schema})`);
      expect(console.output()).toContain('grants  project "acme/shop"');
      const base = url.slice(0, url.indexOf("?"));
      const auth = { authorization: `Bearer ${new URL(url).searchParams.get("token") ?? ""}` };
      const stream = await openStream(`${base}api/asks/stream`, auth);

      const run = new Agent({ model, tools: [deploy], managers }).run("ship it");
      const { ask } = JSON.parse((await stream.next((e) => e.event === "ask")).data) as { ask: PendingAsk };
      expect(ask).toMatchObject({ tool: "deploy", prompt: "Deploy to staging?" });
      expect(ran).toEqual([]);
      const answered = await request(`${base}api/asks/${ask.id}`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ type: "approve", remember: "this_tool" }),
      });
      expect(answered.status).toBe(200);
      expect((await run).records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
      expect(ran).toEqual([{ env: "staging" }]);
      // A second answer finds the row answered: the database said no.
      const again = await request(`${base}api/asks/${ask.id}`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ type: "deny" }),
      });
      expect(again.status).toBe(409);
      stream.close();

      // The grant the answer asked to remember is shared, and the console lists and revokes it.
      const [grant] = await grants.load();
      expect(grant).toMatchObject({ tool: "deploy", verdict: "allow" });
      const listed = await request(`${base}api/grants`, { headers: auth });
      expect(listed.json).toMatchObject({ available: true, grants: [{ id: grant!.id, tool: "deploy" }] });
      expect((await request(`${base}api/grants/${grant!.id}`, { method: "DELETE", headers: auth })).status).toBe(200);
      expect(await grants.load()).toEqual([]);
    } finally {
      console.stop.abort();
      expect(await console.done).toBe(EXIT.ok);
      await worker.close();
    }
    expect(console.output()).toContain("loopctl console: stopped");
  });

  it("warns at start when --project never held a grant but names differing only in case or surrounding spaces did", async () => {
    const read = new Grant("read", "allow", GrantScope.thisTool());
    for (const project of ["Acme/Shop", " acme/shop\t"]) {
      await new PostgresGrantStore(db.pool, { project, schema: db.schema }).save(read);
    }
    const warning =
      `loopctl: warning: project "acme/shop" never held a grant in schema ${db.schema}; the name matches exactly, ` +
      `and " acme/shop\\t", "Acme/Shop" (differing in case or surrounding spaces) are other projects, left as they are\n`;
    for (const [project, warned] of [
      ["acme/shop", 1],
      ["Acme/Shop", 0],
      ["acme/blog", 0],
    ] as const) {
      const args = ["--database", DATABASE_URL, "--schema", db.schema, "--project", project, "--port", "0"];
      const console = startConsole("/", args);
      try {
        expect(await console.printed).toMatch(/^http/);
      } finally {
        console.stop.abort();
        expect(await console.done).toBe(EXIT.ok);
      }
      const output = console.output();
      expect(output.split(warning).length - 1, project).toBe(warned);
      expect(output.replace(warning, ""), project).not.toContain("warning");
    }
  });

  it("fails on a schema that is not migrated, as the grants commands do, instead of serving", async () => {
    const run = await cli(
      ["console", "--database", DATABASE_URL, "--schema", "loopctl_never_there", "--project", "p", "--port", "0"],
      { cwd: "/", signal: AbortSignal.timeout(10_000) },
    );
    expect(run.code).toBe(EXIT.io);
    expect(run.stderr).toContain("[POSTGRES_NOT_MIGRATED]");
    expect(run.stderr).toContain('schema "loopctl_never_there" is not migrated');
    // Named once, as the grants commands name theirs: not "loopctl: loopctl console: …".
    expect(run.stderr.startsWith('loopctl: PostgresAskQueue: schema "loopctl_never_there" is not migrated')).toBe(true);
    expect(run.stdout).not.toContain("open http");
    const unreachable = await cli(
      ["console", "--database", "postgres://nobody:secret@127.0.0.1:1/none", "--port", "0"],
      {
        cwd: "/",
        signal: AbortSignal.timeout(10_000),
      },
    );
    expect(unreachable.code).toBe(EXIT.io);
    expect(unreachable.stderr).toContain("[POSTGRES_QUERY]");
    expect(unreachable.stderr).not.toContain("secret");
  });

  it("fails (exit 4) when the server stops answering its check of the schema, after the stores' 15 s, instead of hanging", async () => {
    const proxy = await startProxy(DATABASE_URL);
    try {
      // The connection is made; the statement reading the schema's version never arrives.
      proxy.stallConnectionOn("coalesce(max(version), 0)");
      const started = Date.now();
      const run = await cli(["console", "--database", proxy.url, "--schema", db.schema, "--port", "0"], {
        cwd: "/",
        signal: AbortSignal.timeout(35_000),
      });
      expect(run).toMatchObject({ code: EXIT.io });
      expect(run.stderr).toContain("no reply within 15000 ms");
      expect(run.stderr).toContain("[POSTGRES_QUERY]");
      expect(run.stdout).not.toContain("open http");
      expect(Date.now() - started).toBeLessThan(25_000);
    } finally {
      await proxy.close();
    }
  }, 40_000);

  it("refuses --root and --schema where they cannot apply", async () => {
    const root = await cli(["console", "--database", DATABASE_URL, "--root", "/tmp/x"], { cwd: "/" });
    expect(root.code).toBe(EXIT.usage);
    expect(root.stderr).toContain("--root is for a ledger file; it cannot go with --database");
    const schema = await cli(["console", "--schema", "loopctl"], { cwd: "/" });
    expect(schema.code).toBe(EXIT.usage);
    expect(schema.stderr).toContain("--schema needs --database");
  });
  it("a pool that fails to close leaves the console's own error, or its stop, and is one warning line", async () => {
    // Sources over a pool, as the command opens with --database; the test ends each pool first, so
    // the console's close (a second end()) rejects for real.
    const opened = (): ConsoleSources & { pool: pg.Pool } => {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      return {
        pool,
        inbox: undefined,
        grants: new PostgresGrantStore(pool, { project: "acme/shop", schema: db.schema }),
        describe: "the test database\n",
        location: "the test database",
        close: () => pool.end(),
      };
    };
    const warning = "loopctl: warning: could not close the test database: Called end on pool more than once\n";
    const settings = { audit: undefined, host: undefined, allowedHosts: undefined, port: 0, token: undefined };

    const failing = opened();
    await failing.pool.end();
    const failed = capturedContext();
    const error = await serveConsole(failing, { ...settings, host: "0.0.0.0" }, failed).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CliUsageError);
    expect((error as Error).message).toContain("--host 0.0.0.0 needs --allowed-host H");
    expect(failed.err).toBe(warning);

    const stop = new AbortController();
    const working = opened();
    await working.pool.end();
    const worked = capturedContext(stop.signal);
    const served = serveConsole(working, settings, worked);
    await expect.poll(() => worked.out).toContain("open http");
    stop.abort();
    expect(await served).toBe(EXIT.ok);
    expect(worked.out).toContain("loopctl console: stopped");
    expect(worked.err).toBe(warning);
  });

  it("a grant store that never answers holds the start no longer than grantsTimeoutMs: one warning line, its load aborted, and the asks are served", async () => {
    const proxy = await startProxy(DATABASE_URL);
    const pool = new pg.Pool({ connectionString: proxy.url, max: 2 });
    const [channel, approver] = ApprovalChannel.pair(4);
    const store = new PostgresGrantStore(pool, { project: "acme/shop", schema: db.schema });
    // The signal each load of the store was given.
    const given: (AbortSignal | undefined)[] = [];
    const load = store.load.bind(store);
    store.load = (options) => {
      given.push(options?.signal);
      return load(options);
    };
    const sources: ConsoleSources = {
      inbox: approver,
      grants: store,
      describe: "the test database\n",
      location: "the test database",
      close: async () => {
        approver.close();
        await proxy.close();
        await pool.end();
      },
    };
    // The connection is made; the statement reading the grants never arrives, and no reply comes
    // (the store's own bound on a reply is 15 s).
    proxy.stallOn("AS witness");
    const stop = new AbortController();
    const context = capturedContext(stop.signal);
    const started = Date.now();
    const settings = { audit: undefined, host: undefined, allowedHosts: undefined, port: 0, token: undefined };
    const served = serveConsole(sources, { ...settings, grantsTimeoutMs: 300 }, context);
    try {
      await expect.poll(() => context.out, { timeout: 10_000 }).toContain("open http");
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(context.err).toBe(
        "loopctl: warning: the grants in the test database could not be read within 0.3 s; " +
          "the console serves asks meanwhile, and a request for the grants waits 0.3 s at most\n",
      );
      expect(given).toHaveLength(1);
      expect(given[0]?.aborted).toBe(true);

      const url = /^open (\S+)$/m.exec(context.out)?.[1] ?? "";
      const base = url.slice(0, url.indexOf("?"));
      const auth = { authorization: `Bearer ${new URL(url).searchParams.get("token") ?? ""}` };
      const ask = makeAsk(1, { tool: "deploy" });
      const parked = channel.resolve(ask, { signal: new AbortController().signal });
      const answered = await request(`${base}api/asks/${ask.id}`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify({ type: "approve" }),
      });
      expect(answered.status).toBe(200);
      await expect(parked).resolves.toEqual({ type: "approve" });
      // The server's own requests for the grants are bound alike.
      const grants = await request(`${base}api/grants`, { headers: auth });
      expect(grants.status).toBe(503);
      expect(grants.json).toMatchObject({ error: "grants_unavailable" });
    } finally {
      stop.abort();
      expect(await served).toBe(EXIT.ok);
    }
  });
});
