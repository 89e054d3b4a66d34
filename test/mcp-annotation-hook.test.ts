import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ApprovalChannel, SyncAskResolver } from "loopctl/ask";
import type { PendingAsk } from "loopctl/ask";
import { Agent, Gate, LoopManagers } from "loopctl/engine";
import type { Hook, HookDecision, ToolDescriptor } from "loopctl/engine";
import { McpConfigError, mcpAnnotationHook, mcpTools } from "loopctl/mcp";
import { ScriptedModel } from "loopctl/testing";
import { changes, startFilesystem, startFixture } from "./support/mcp-fixtures.js";
import { bundleBuilds } from "./support/reliability-bundle.js";
import type { Builds } from "./support/reliability-bundle.js";
import { thrownBy } from "./support/thrown.js";

type McpModule = typeof import("../src/mcp/index.js");

const schema = { type: "object", properties: { path: { type: "string" } } };
const descriptor = (annotations?: Record<string, unknown>, title?: string): ToolDescriptor => ({
  name: "t",
  description: "a tool",
  inputSchema: schema,
  ...(annotations === undefined ? {} : { annotations }),
  ...(title === undefined ? {} : { title }),
});

/** What the hook decides for one call (through a gate, as a hook runs). */
async function decide(
  hook: ReturnType<typeof mcpAnnotationHook>,
  tool: ToolDescriptor,
  input: unknown = { path: "a" },
): Promise<HookDecision> {
  let decision: HookDecision | undefined;
  const gate = new Gate(
    new LoopManagers().withHook({
      async preToolUse(call, context) {
        decision = await hook.preToolUse(call, context);
        return decision;
      },
    }),
  );
  await gate.call({ tool, callId: "c1", input }, () => "ran");
  return decision!;
}

describe("mcpAnnotationHook: annotations are untrusted hints", () => {
  it("by default every call asks, whatever the tool claims", async () => {
    const hook = mcpAnnotationHook();
    for (const annotations of [
      undefined,
      { readOnlyHint: true },
      { readOnlyHint: true, destructiveHint: false },
      { destructiveHint: true },
    ]) {
      expect((await decide(hook, descriptor(annotations))).type).toBe("ask");
    }
  });

  it("trusted: read-only and not destructive is allowed; anything else asks", async () => {
    const hook = mcpAnnotationHook({ trusted: true });
    expect(await decide(hook, descriptor({ readOnlyHint: true }))).toEqual({ type: "allow" });
    expect(await decide(hook, descriptor({ readOnlyHint: true, destructiveHint: false, openWorldHint: true }))).toEqual(
      { type: "allow" },
    );
    for (const annotations of [
      undefined,
      {},
      { readOnlyHint: false },
      { readOnlyHint: true, destructiveHint: true },
      { readOnlyHint: "yes" },
      { destructiveHint: false },
    ]) {
      expect((await decide(hook, descriptor(annotations))).type, JSON.stringify(annotations)).toBe("ask");
    }
  });

  it("the prompt names the tool and its title, says what the server claims, and shows the arguments readably", async () => {
    const decision = await decide(
      mcpAnnotationHook(),
      {
        ...descriptor({ readOnlyHint: false, destructiveHint: true, idempotentHint: true }, "Write File"),
        name: "write_file",
      },
      { path: "notes/a.txt", content: "hello" },
    );
    expect(decision).toEqual({
      type: "ask",
      prompt: [
        'Allow the tool "write_file" ("Write File") to run?',
        "The server says (unverified): modifies its environment, destructive, idempotent.",
        "Arguments:",
        // The hook sees the gate's snapshot: keys in canonical order.
        "{",
        '  "content": "hello",',
        '  "path": "notes/a.txt"',
        "}",
      ].join("\n"),
    });
    expect(((await decide(mcpAnnotationHook(), descriptor())) as { prompt: string }).prompt).toContain(
      "The server gives no hints about this tool.",
    );
  });

  it("redacts secrets and caps the arguments, as asked", async () => {
    const input = { path: "a", token: "s3cret" };
    const prompt = ((await decide(mcpAnnotationHook(), descriptor(), input)) as { prompt: string }).prompt;
    expect(prompt).not.toContain("s3cret");
    expect(prompt).toContain('"token": "[redacted]"');
    const long = (
      (await decide(mcpAnnotationHook({ maxArgsChars: 80 }), descriptor(), { path: "x".repeat(500) })) as {
        prompt: string;
      }
    ).prompt;
    expect(long).toMatch(/\n… 436 more characters not shown$/);
    const custom = (
      (await decide(
        mcpAnnotationHook({ redact: (path, value) => (path.at(-1) === "path" ? "<path>" : value) }),
        descriptor(),
        input,
      )) as { prompt: string }
    ).prompt;
    expect(custom).toContain('"path": "<path>"');
    expect(custom).toContain('"token": "s3cret"');
  });

  it("a hostile title cannot hide in the prompt: quoted, bounded, invisible characters escaped", async () => {
    const prompt = (
      (await decide(mcpAnnotationHook(), descriptor({}, "Read\u202e etalpmet\n" + "y".repeat(300)))) as {
        prompt: string;
      }
    ).prompt;
    const first = prompt.split("\n")[0]!;
    expect(first).toContain("\\u202e");
    expect(first).toContain("\\n");
    expect(first.length).toBeLessThan(260);
  });

  it("typed errors for options of the wrong kind", () => {
    expect(() => mcpAnnotationHook({ trusted: "yes" as never })).toThrow(McpConfigError);
    expect(() => mcpAnnotationHook({ redact: "all" as never })).toThrow(McpConfigError);
    expect(() => mcpAnnotationHook({ maxArgsChars: 0 })).toThrow(McpConfigError);
  });

  it("options that are not an object (null, a string named never shown, an array, an AbortSignal) are an McpConfigError naming options", () => {
    for (const [options, got] of [
      [null, "null"],
      ["sk-live-123", "a string"],
      [[{ trusted: true }], "an array"],
      [new AbortController().signal, "an AbortSignal"],
    ] as const) {
      const error = thrownBy(() => mcpAnnotationHook(options as never));
      expect(error, got).toBeInstanceOf(McpConfigError);
      expect(error, got).toMatchObject({
        code: "MCP_CONFIG",
        option: "options",
        message: `options: must be an object, got ${got}`,
      });
    }
  });

  it("an unknown option is an McpConfigError naming it, never ignored", () => {
    for (const [options, option, message] of [
      [{ trust: true }, "trust", "unknown option 'trust' (did you mean trusted?)"],
      [{ maxArgChars: 10 }, "maxArgChars", "unknown option 'maxArgChars' (did you mean maxArgsChars?)"],
      [{ redactor: false }, "redactor", "unknown option 'redactor' (did you mean redact?)"],
      [{ prompt: "x" }, "prompt", "unknown option 'prompt' (the options are trusted, redact and maxArgsChars)"],
    ] as const) {
      const error = thrownBy(() => mcpAnnotationHook(options as never));
      expect(error, option).toBeInstanceOf(McpConfigError);
      expect(error).toMatchObject({ code: "MCP_CONFIG", option, message: `${option}: ${message}` });
    }
  });
});

describe("mcpAnnotationHook on real servers", () => {
  const scratch: string[] = [];
  afterEach(() => {
    for (const dir of scratch.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it("server-filesystem from npm, trusted: reads are allowed by its annotations, writes are asked", async () => {
    const dir = realpathSync(mkdtempSync(join(tmpdir(), "loopctl-fs-")));
    scratch.push(dir);
    writeFileSync(join(dir, "notes.txt"), "remember the milk\n");
    const server = await startFilesystem(dir);
    const toolset = await mcpTools(server.client, { prefix: "fs_" });
    expect(toolset.tools.map((t) => t.name)).toEqual(
      expect.arrayContaining(["fs_read_text_file", "fs_write_file", "fs_list_directory"]),
    );
    const [channel, approver] = ApprovalChannel.pair(4);
    const managers = new LoopManagers().withHook(mcpAnnotationHook({ trusted: true })).withAskResolver(channel);
    const model = new ScriptedModel([
      { toolCalls: [{ id: "r1", name: "fs_read_text_file", input: { path: join(dir, "notes.txt") } }] },
      { toolCalls: [{ id: "w1", name: "fs_write_file", input: { path: join(dir, "out.txt"), content: "written" } }] },
      { toolCalls: [{ id: "w2", name: "fs_write_file", input: { path: join(dir, "nope.txt"), content: "refused" } }] },
      { text: "done" },
    ]);
    const running = new Agent({ model, tools: toolset, managers }).run("tidy the notes");
    const asks: PendingAsk[] = [];
    for (const answer of [true, false]) {
      const a = (await approver.next())!;
      asks.push(a);
      approver.resolve(a.id, answer ? { type: "approve" } : { type: "deny" });
    }
    const result = await running;
    expect(result.records.map((r) => [r.tool, r.verdict])).toEqual([
      ["fs_read_text_file", "allow"],
      ["fs_write_file", "ask_allowed"],
      ["fs_write_file", "ask_denied"],
    ]);
    expect(
      result.messages
        .filter((m) => m.type === "tool_result")
        .map((m) => m.type === "tool_result" && [m.status, m.content]),
    ).toEqual([
      ["ran", "remember the milk\n"],
      ["ran", expect.stringContaining("Successfully wrote")],
      ["refused", "Permission denied by approver for tool 'fs_write_file'"],
    ]);
    expect(readFileSync(join(dir, "out.txt"), "utf8")).toBe("written");
    expect(existsSync(join(dir, "nope.txt"))).toBe(false);
    expect(asks[0]!.prompt).toContain('Allow the tool "fs_write_file" ("Write File") to run?');
    expect(asks[0]!.prompt).toContain("destructive");
    expect(asks[0]!.prompt).toContain(JSON.stringify(join(dir, "out.txt")));
    toolset.close();
  });

  it("a trusted server's tool that flips to read-only after it was listed still asks, and says it changed", async () => {
    const server = await startFixture("mutable");
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange });
    server.signal("SIGUSR2");
    const changed = await next();
    const remove = changed.find((t) => t.name === "delete_note")!;
    expect(remove.descriptor.annotations).toEqual({ readOnlyHint: true, destructiveHint: false });
    const asks: PendingAsk[] = [];
    const managers = new LoopManagers()
      .withHook(mcpAnnotationHook({ trusted: true }))
      .withAskResolver(new SyncAskResolver((a) => (asks.push(a), false)));
    const model = new ScriptedModel([
      {
        toolCalls: [
          { id: "c1", name: "delete_note", input: { name: "todo" } },
          { id: "c2", name: "read_note", input: { name: "todo" } },
        ],
      },
      { text: "ok" },
    ]);
    const result = await new Agent({ model, tools: toolset, managers }).run("go");
    expect(result.records.map((r) => [r.tool, r.verdict])).toEqual([
      ["delete_note", "ask_denied"],
      ["read_note", "allow"],
    ]);
    expect(asks[0]!.prompt).toContain("This tool changed on the server since it was first listed.");
    expect(server.lines.some((l) => l.startsWith("called delete_note"))).toBe(false);
  });

  it("a trusted server's tool spelt anew (the same name in Unicode's eyes) and flipped to read-only still asks, and says it changed", async () => {
    const server = await startFixture("respelt");
    const { onChange, next } = changes();
    const toolset = await mcpTools(server.client, { onChange });
    server.signal("SIGUSR2");
    const [respelt] = await next();
    expect(respelt!.name).toBe("cafe\u0301");
    expect(respelt!.descriptor.annotations).toEqual({ readOnlyHint: true });
    const asks: PendingAsk[] = [];
    const managers = new LoopManagers()
      .withHook(mcpAnnotationHook({ trusted: true }))
      .withAskResolver(new SyncAskResolver((a) => (asks.push(a), false)));
    const model = new ScriptedModel([{ toolCalls: [{ id: "c1", name: "cafe\u0301", input: {} }] }, { text: "ok" }]);
    const result = await new Agent({ model, tools: toolset, managers }).run("go");
    expect(result.records.map((r) => [r.tool, r.verdict])).toEqual([["cafe\u0301", "ask_denied"]]);
    expect(asks[0]!.prompt).toContain("This tool changed on the server since it was first listed.");
    expect(server.lines.some((l) => l.startsWith("called"))).toBe(false);
    toolset.close();
  });

  it("trust is the hook's, not a server's: a trusted hook believes every server's claims, and one that routes by the vetted toolset's descriptors trusts that server alone", async () => {
    const vetted = await startFixture("mutable");
    const other = await startFixture("twins");
    const mine = await mcpTools(vetted.client, { prefix: "mine_" });
    const theirs = await mcpTools(other.client, { prefix: "other_" });
    const tools = { current: () => [...mine.current(), ...theirs.current()] };
    const run = async (hook: Hook): Promise<[string, string][]> => {
      const managers = new LoopManagers().withHook(hook).withAskResolver(new SyncAskResolver(() => false));
      const model = new ScriptedModel([
        {
          toolCalls: [
            { id: "c1", name: "mine_read_note", input: { name: "todo" } },
            { id: "c2", name: "other_echo", input: {} },
          ],
        },
        { text: "ok" },
      ]);
      const result = await new Agent({ model, tools, managers }).run("go");
      return result.records.map((r) => [r.tool, r.verdict]);
    };
    // `other_echo` claims to be read-only: a trusted hook takes the claim, whoever makes it.
    expect(await run(mcpAnnotationHook({ trusted: true }))).toEqual([
      ["mine_read_note", "allow"],
      ["other_echo", "allow"],
    ]);
    const trusted = mcpAnnotationHook({ trusted: true });
    const untrusted = mcpAnnotationHook();
    const routed: Hook = {
      name: "mcp",
      preToolUse: (call, context) =>
        (mine.tools.some((tool) => tool.descriptor === context.descriptor) ? trusted : untrusted).preToolUse(
          call,
          context,
        ),
    };
    expect(await run(routed)).toEqual([
      ["mine_read_note", "allow"],
      ["other_echo", "ask_denied"],
    ]);
    mine.close();
    theirs.close();
  });
});

describe("mcpAnnotationHook across copies of the package (the ESM and the CommonJS build in one process)", () => {
  let builds: Builds;
  let cjs: McpModule;
  beforeAll(async () => {
    builds = await bundleBuilds("mcp");
    cjs = createRequire(import.meta.url)(builds.cjs) as McpModule;
  }, 60_000);
  afterAll(() => builds?.dispose());

  it("a tool that flips to read-only still asks when the toolset and the trusted hook come from different copies", async () => {
    expect(cjs.mcpTools).not.toBe(mcpTools);
    const server = await startFixture("mutable");
    const ours = changes();
    const theirs = changes();
    const fromEsm = await mcpTools(server.client, { onChange: ours.onChange });
    const fromCjs = await cjs.mcpTools(server.client, { onChange: theirs.onChange });
    server.signal("SIGUSR2");
    await Promise.all([ours.next(), theirs.next()]);
    for (const [toolset, hook] of [
      [fromEsm, cjs.mcpAnnotationHook({ trusted: true })],
      [fromCjs, mcpAnnotationHook({ trusted: true })],
    ] as const) {
      const asks: PendingAsk[] = [];
      const managers = new LoopManagers()
        .withHook(hook)
        .withAskResolver(new SyncAskResolver((a) => (asks.push(a), false)));
      const model = new ScriptedModel([
        { toolCalls: [{ id: "c1", name: "delete_note", input: { name: "todo" } }] },
        { text: "ok" },
      ]);
      const result = await new Agent({ model, tools: toolset, managers }).run("go");
      expect(result.records.map((r) => [r.tool, r.verdict])).toEqual([["delete_note", "ask_denied"]]);
      expect(asks[0]!.prompt).toContain("This tool changed on the server since it was first listed.");
    }
    expect(server.lines.some((l) => l.startsWith("called delete_note"))).toBe(false);
  });
});
