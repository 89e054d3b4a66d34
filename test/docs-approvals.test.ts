import { describe, expect, it } from "vitest";
import { z } from "zod";
import { SyncAskResolver } from "loopctl/ask";
import type { Approver, AskResolver, PendingAsk } from "loopctl/ask";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";
import { codeBlocks, runSnippet } from "./support/doc-snippets.js";

const blocks = codeBlocks("docs/approvals.md", "ts");

const tools = [
  defineTool({
    name: "read",
    description: "Read a file",
    input: z.object({ path: z.string() }),
    execute: ({ path }) => `contents of ${path}`,
  }),
  defineTool({
    name: "deploy",
    description: "Deploy a version to an environment",
    input: z.object({ env: z.string(), version: z.string() }),
    execute: ({ env, version }) => `deployed ${version} to ${env}`,
  }),
];

/** A run whose hook asks about a read, then a deploy, answered by `resolver`. */
function run(resolver: AskResolver) {
  const managers = new LoopManagers()
    .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name}?` }) })
    .withAskResolver(resolver)
    .withAskTimeout(60_000);
  const model = new ScriptedModel([
    { toolCalls: [{ id: "c1", name: "read", input: { path: "NOTES.md" } }] },
    { toolCalls: [{ id: "c2", name: "deploy", input: { env: "staging", version: "1.4.0" } }] },
    { text: "done" },
  ]);
  return new Agent({ model, tools, managers }).run("ship");
}

describe("docs/approvals.md: its snippets run and do what they say", () => {
  it("has the two snippets this test runs", () => {
    expect(blocks).toHaveLength(2);
  });

  it("the resolvers: the closure approves all but deploy; the channel's pair makes the managers", async () => {
    const { sync, channel, approver, managers } = await runSnippet(blocks[0] as string, {});
    expect(sync).toBeInstanceOf(SyncAskResolver);
    expect(managers).toBeInstanceOf(LoopManagers);
    expect(typeof (approver as Approver).resolve).toBe("function");
    const result = await run(sync as AskResolver);
    expect(result.records.map((r) => `${r.tool} ${r.verdict}`)).toEqual(["read ask_allowed", "deploy ask_denied"]);
    (approver as Approver).close();
    expect(channel).toBeDefined();
  });

  it("the approver loop answers every ask of the run by id, and ends when the approver closes", async () => {
    const { channel, approver } = await runSnippet(blocks[0] as string, {});
    const seen: string[] = [];
    const askTheHuman = async (ask: PendingAsk): Promise<boolean> => {
      seen.push(ask.tool);
      return ask.tool === "read";
    };
    const running = run(channel as AskResolver);
    const answering = runSnippet(blocks[1] as string, { approver, askTheHuman });
    const result = await running.finally(() => (approver as Approver).close());
    await answering;
    expect(seen).toEqual(["read", "deploy"]);
    expect(result.records.map((r) => `${r.tool} ${r.verdict}`)).toEqual(["read ask_allowed", "deploy ask_denied"]);
    expect(result.records[1]?.reason).toContain("not today");
  });
});
