import { describe, expect, it } from "vitest";
import { SyncAskResolver } from "loopctl/ask";
import type { PendingAsk } from "loopctl/ask";
import { Agent, LoopManagers } from "loopctl/engine";
import { argsDigest } from "loopctl/grant";
import { ScriptedModel } from "loopctl/testing";
import { readTool } from "./support/engine-fixtures.js";

/**
 * Runs one `read` call whose arguments are `input` (handed over as the model's
 * own object, never copied by the script), with a hook that asks and an
 * approver that approves, calling `onAsk` while the call is parked.
 */
async function approvedRun(input: unknown, onAsk: () => void = () => undefined) {
  const executed: unknown[] = [];
  const seenByHook: unknown[] = [];
  const asks: PendingAsk[] = [];
  const agent = new Agent({
    model: new ScriptedModel([() => ({ toolCalls: [{ id: "c1", name: "read", input }] }), { text: "done" }]),
    tools: [readTool(executed)],
    managers: new LoopManagers()
      .withHook({
        preToolUse: (call) => (
          seenByHook.push(JSON.parse(JSON.stringify(call.input))),
          { type: "ask", prompt: "read it?" }
        ),
      })
      .withAskResolver(new SyncAskResolver((ask) => (asks.push(ask), onAsk(), true))),
  });
  const result = await agent.run("go");
  return { executed, seenByHook, asks, records: result.records };
}

describe("the arguments are read once: what runs is what was validated, shown, digested and approved", () => {
  it("a getter that answers differently on a later read cannot change what runs", async () => {
    let reads = 0;
    const input = {
      get path(): string {
        reads += 1;
        return reads === 1 ? "a.rs" : "/etc/shadow";
      },
    };
    const { executed, seenByHook, asks } = await approvedRun(input);
    expect(executed).toEqual([{ path: "a.rs" }]);
    expect(seenByHook).toEqual([{ path: "a.rs" }]);
    expect(asks.map((ask) => ask.argsDigest)).toEqual([argsDigest({ path: "a.rs" })]);
  });

  it("a mutation of the model's object while the call is parked cannot change what runs", async () => {
    const input = { path: "a.rs" };
    const { executed, asks, records } = await approvedRun(input, () => {
      input.path = "/etc/shadow";
    });
    expect(executed).toEqual([{ path: "a.rs" }]);
    expect(asks[0]!.argsDigest).toBe(argsDigest({ path: "a.rs" }));
    expect(records.map((r) => [r.verdict, r.argsDigest])).toEqual([["ask_allowed", argsDigest({ path: "a.rs" })]]);
  });

  it("an inherited property nobody was shown never reaches the tool", async () => {
    const input = Object.create({ path: "/etc/shadow" }) as object;
    const { executed, asks, records } = await approvedRun(input);
    expect(executed).toEqual([]);
    expect(asks).toEqual([]);
    // An object that only inherits its data is not a JSON value: refused before any schema sees it.
    expect(records.map((r) => [r.verdict, r.ruleId, r.ruleSource])).toEqual([["deny", "invalid_arguments", "engine"]]);
  });

  it("a toJSON that shows one thing cannot run another: the call runs with what was digested", async () => {
    const input = { path: "/etc/shadow", toJSON: () => ({ path: "a.rs" }) };
    const { executed, asks } = await approvedRun(input);
    expect(executed).toEqual([{ path: "a.rs" }]);
    expect(asks[0]!.argsDigest).toBe(argsDigest({ path: "a.rs" }));
  });
});
