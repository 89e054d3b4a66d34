import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel } from "loopctl/ask";
import type { Approver, PendingAsk } from "loopctl/ask";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import { FileGrantStore, Grant, GrantPolicy, GrantRecordSchema, GrantScope, MemoryGrantStore } from "loopctl/grant";
import type { GrantStore } from "loopctl/grant";
import { ScriptedModel } from "loopctl/testing";
import { releaseTools } from "../demo/tools.js";
import { openWorkspace } from "../demo/workspace.js";
import { EXIT } from "../src/cli/index.js";
import { cli } from "./support/cli-harness.js";
import { codeBlocks, runSnippet } from "./support/doc-snippets.js";

const blocks = (lang: string): string[] => codeBlocks("docs/grants.md", lang);

const deployTool = defineTool({
  name: "deploy",
  description: "Deploy a version to an environment",
  input: z.object({ env: z.string(), version: z.string() }),
  execute: ({ env, version }) => `deployed ${version} to ${env}`,
});

const readTool = defineTool({
  name: "read",
  description: "Read a file",
  input: z.object({ path: z.string() }),
  execute: ({ path }) => `contents of ${path}`,
});

describe("docs/grants.md: its snippets run and say what they do", () => {
  let base: string;
  beforeAll(async () => {
    base = await mkdtemp(join(tmpdir(), "loopctl-docs-grants-"));
  });
  afterAll(async () => {
    await rm(base, { recursive: true, force: true });
  });

  it("has the snippets this test runs", () => {
    expect(blocks("ts")).toHaveLength(5);
    expect(blocks("json")).toHaveLength(1);
    expect(blocks("console")).toHaveLength(1);
  });

  it("using grants with the engine: a FileGrantStore and a channel make the managers", async () => {
    const [channel] = ApprovalChannel.pair(1);
    const { store, managers } = await runSnippet(blocks("ts")[0] as string, { channel, process: { cwd: () => base } });
    expect(store).toBeInstanceOf(FileGrantStore);
    expect((store as FileGrantStore).ledgerPath.startsWith(FileGrantStore.defaultRoot())).toBe(true);
    expect(managers).toBeInstanceOf(LoopManagers);
  });

  it("an answer with remember saves the grant it says: always this tool, never these arguments", async () => {
    const [always, never] = (blocks("ts")[1] as string).trim().split("\n");
    expect(always).toContain("// always allow this tool");
    expect(never).toContain("// never these arguments");
    const store = new MemoryGrantStore();
    const [channel, approver] = ApprovalChannel.pair(4);
    const managers = new LoopManagers()
      .withHook({ preToolUse: () => ({ type: "ask", prompt: "deploy?" }) })
      .withAskResolver(channel)
      .withGrantStore(store);
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "read", input: { path: "NOTES.md" } }] },
      { toolCalls: [{ id: "c2", name: "deploy", input: { env: "production", version: "1.4.0" } }] },
      { toolCalls: [{ id: "c3", name: "read", input: { path: "CHANGELOG.md" } }] },
      { text: "done" },
    ]);
    const run = new Agent({ model, tools: [readTool, deployTool], managers }).run("ship");
    const lines = [always as string, never as string];
    const answering = (async (answerer: Approver) => {
      for await (const ask of answerer) {
        await runSnippet(lines.shift() ?? "", { approver: answerer, ask: ask satisfies PendingAsk });
      }
    })(approver);
    const result = await run.finally(() => approver.close());
    await answering;
    expect(lines).toEqual([]);
    // The third call, another read, is decided by the grant the first answer saved.
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_denied", "allow"]);
    const saved = (await store.load()).map((g) => g.toJSON());
    expect(saved).toMatchObject([
      { tool: "read", verdict: "Allow", scope: "this_tool" },
      { tool: "deploy", verdict: "Deny", scope: { this_call: { args: { env: "production", version: "1.4.0" } } } },
    ]);
  });

  it("the policy decides as its comment says", async () => {
    const store: GrantStore = new MemoryGrantStore();
    const code = blocks("ts")[2] as string;
    const asked = await runSnippet(code, { store, deploy: deployTool });
    expect(asked["decision"]).toEqual({ type: "ask", reason: "no_grant" });
    await store.save(new Grant("deploy", "deny", GrantScope.thisCall({ env: "production", version: "1.4.0" })));
    const denied = await runSnippet(code, { store, deploy: deployTool });
    expect(denied["decision"]).toMatchObject({ type: "deny", grant: { tool: "deploy", verdict: "deny" } });
  });

  it("a grant's id and covers are what its comments say", async () => {
    const code = blocks("ts")[3] as string;
    const { g } = await runSnippet(code, {});
    expect(g).toBeInstanceOf(Grant);
    expect((g as Grant).id).toMatch(/^[0-9a-f]{16}$/);
    expect((g as Grant).id).toBe(new Grant("read", "allow", GrantScope.thisTool()).id);
    expect(code).toContain('g.covers("read", { path: "README.md" }); // true');
    expect((g as Grant).covers("read", { path: "README.md" })).toBe(true);
  });

  it("the store API it shows is the one a custom store implements", async () => {
    const shown = blocks("ts")[4] as string;
    const methods = [...shown.matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1]);
    expect(methods).toEqual(["load", "save", "revoke", "clear"]);
    // A store with exactly those four methods backs the engine.
    const inner = new MemoryGrantStore();
    const store: GrantStore = {
      load: (o) => inner.load(o),
      save: (g, o) => inner.save(g, o),
      revoke: (id, o) => inner.revoke(id, o),
      clear: (o) => inner.clear(o),
    };
    expect(Object.keys(store)).toEqual(methods);
    await store.save(new Grant("read", "allow", GrantScope.thisTool()));
    expect(await new GrantPolicy(store).decide(deployTool.descriptor, {})).toEqual({ type: "ask", reason: "no_grant" });
  });

  it("the ledger it shows is the demo's: records that parse, ids of their rules, pins of the demo's tools", async () => {
    const records = JSON.parse(blocks("json")[0] as string) as unknown[];
    const workspace = await openWorkspace(undefined);
    try {
      const pins = new Map(releaseTools(workspace).map((t) => [t.name, t.descriptorFingerprint]));
      for (const record of records) {
        const parsed = GrantRecordSchema.parse(record);
        const grant = Grant.fromJSON(parsed);
        expect(grant.id).toBe(new Grant(grant.tool, grant.verdict, grant.scope).id);
        expect(grant.pinnedDescriptor).toBe(pins.get(grant.tool));
      }
    } finally {
      await workspace.dispose();
    }
  });

  it("the CLI prints what the page shows for that ledger, but for the ledger's path", async () => {
    const root = join(base, "state");
    const project = join(base, ".loopctl-demo");
    await mkdir(project);
    const ledger = new FileGrantStore(root, project).ledgerPath;
    await mkdir(dirname(ledger), { recursive: true, mode: 0o700 });
    await writeFile(ledger, blocks("json")[0] as string, { mode: 0o600 });
    const shown = (blocks("console")[0] as string).split(/^\$ loopctl /m).slice(1);
    expect(shown).toHaveLength(2);
    for (const session of shown) {
      const [command = "", ...output] = session.trimEnd().split("\n");
      const argv = (command.match(/'[^']*'|\S+/g) ?? []).map((word) => word.replace(/^'|'$/g, ""));
      const run = await cli([...argv, "--root", root], { cwd: base, env: {} });
      expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
      const printed = run.stdout.trimEnd().split("\n");
      expect(printed[0]).toBe(`ledger: ${ledger}`);
      expect(output[0]).toMatch(
        /^ledger: \/home\/me\/\.local\/state\/loopctl\/grants\/projects\/[0-9a-f]{16}\/grants\.json$/,
      );
      expect(printed.slice(1)).toEqual(output.slice(1));
    }
  });
});
