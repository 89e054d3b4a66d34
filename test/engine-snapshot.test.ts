import { describe, expect, it } from "vitest";
import { SyncAskResolver } from "loopctl/ask";
import type { PendingAsk } from "loopctl/ask";
import { Agent, LoopManagers } from "loopctl/engine";
import type { Message } from "loopctl/engine";
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

/** The providerData of the assistant message at `index` of `messages`. */
function providerDataAt(messages: readonly Message[], index: number): unknown {
  const message = messages[index];
  if (message?.type !== "assistant") throw new Error(`messages[${index}] is not an assistant message`);
  return message.providerData;
}

/**
 * Runs from `input` with one `read` call, asked and approved; `onAsk` is
 * called while the call is parked.
 */
async function parkedRun(
  input: string | readonly Message[],
  turns: ConstructorParameters<typeof ScriptedModel>[0],
  onAsk: () => void,
  managers = new LoopManagers(),
) {
  const model = new ScriptedModel(turns);
  const agent = new Agent({
    model,
    tools: [readTool()],
    managers: managers
      .withHook({ preToolUse: () => ({ type: "ask", prompt: "read it?" }) })
      .withAskResolver(new SyncAskResolver(() => (onAsk(), true))),
  });
  const result = await agent.run(input);
  return { model, result };
}

describe("providerData is taken in once: the model is shown again what it sent, whoever held the object", () => {
  const sent = (): { id: string; items: { sig: string }[] } => ({ id: "resp_1", items: [{ sig: "s1" }] });

  it("an onModelResponse observer cannot change what later turns show the model, nor the run's messages", async () => {
    const reported: string[] = [];
    const { model, result } = await parkedRun(
      "go",
      [{ toolCalls: [{ id: "c1", name: "read", input: { path: "a" } }], providerData: sent() }, { text: "done" }],
      () => undefined,
      new LoopManagers()
        .withObserver({
          onModelResponse: ({ response }) => {
            const data = response.providerData as ReturnType<typeof sent> | undefined;
            if (data === undefined) return;
            try {
              data.items[0]!.sig = "forged";
            } finally {
              data.id = "forged";
            }
          },
        })
        .withObserverErrorHandler((error, event) => reported.push(`${event}:${(error as Error).name}`)),
    );
    expect(providerDataAt(model.requests[1]!.messages, 1)).toEqual(sent());
    expect(providerDataAt(result.messages, 1)).toEqual(sent());
    expect(reported).toEqual(["onModelResponse:TypeError"]);
  });

  it("the model changing its own object after answering changes nothing the run holds", async () => {
    const own = sent();
    const { model, result } = await parkedRun(
      "go",
      [() => ({ toolCalls: [{ id: "c1", name: "read", input: { path: "a" } }], providerData: own }), { text: "done" }],
      () => {
        own.id = "changed";
        own.items[0]!.sig = "changed";
      },
    );
    expect(providerDataAt(model.requests[1]!.messages, 1)).toEqual(sent());
    expect(providerDataAt(result.messages, 1)).toEqual(sent());
  });

  it("a caller changing the providerData it passed in its starting messages, while the run is parked, changes nothing", async () => {
    const own = sent();
    const earlier: Message[] = [
      { type: "user", text: "hello" },
      { type: "assistant", text: "hi", toolCalls: [], providerData: own },
      { type: "user", text: "read a" },
    ];
    const { model, result } = await parkedRun(
      earlier,
      [{ toolCalls: [{ id: "c1", name: "read", input: { path: "a" } }] }, { text: "done" }],
      () => {
        own.id = "changed";
        own.items.push({ sig: "added" });
      },
    );
    expect(providerDataAt(model.requests[1]!.messages, 1)).toEqual(sent());
    expect(providerDataAt(result.messages, 1)).toEqual(sent());
  });

  it("what the run holds is a deeply frozen JSON copy, with its keys in the order they were given", async () => {
    const shared = { s: true };
    const own = { z: 1, a: { y: [1, { b: null }], x: "s" }, dropped: undefined, shared: [shared, shared] };
    const earlier: Message[] = [
      { type: "user", text: "hello" },
      { type: "assistant", text: "hi", toolCalls: [], providerData: own },
      { type: "user", text: "again" },
    ];
    const model = new ScriptedModel([{ text: "done", toolCalls: [], providerData: { when: new Date(0) } }]);
    const result = await new Agent({ model, tools: [] }).run(earlier);
    const kept = providerDataAt(result.messages, 1) as typeof own;
    expect(kept).not.toBe(own);
    expect(JSON.stringify(kept)).toBe(JSON.stringify(own));
    expect(kept).not.toHaveProperty("dropped");
    // An object held twice is no cycle: each place gets its copy.
    expect(kept.shared).toEqual([{ s: true }, { s: true }]);
    for (const part of [kept, kept.a, kept.a.y, kept.a.y[1], kept.shared[1]]) expect(Object.isFrozen(part)).toBe(true);
    // As a transcript stored as JSON would give it back.
    expect(providerDataAt(result.messages, 3)).toEqual({ when: "1970-01-01T00:00:00.000Z" });
  });
});
