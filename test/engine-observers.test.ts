import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { SyncAskResolver } from "../src/ask/index.js";
import { LoopDetectedError, LoopManagers } from "../src/engine/index.js";
import type { Observer, ObserverEventName } from "../src/engine/index.js";
import { askAll, build, call, eventLog, readTool, script } from "./support/engine-fixtures.js";

const A = { path: "a.rs" };

describe("observers", () => {
  it("see every event in the spec's order across turns and calls", async () => {
    const { log, observer } = eventLog();
    const { agent } = build({
      turns: [
        { toolCalls: [call("c1", "read", A), call("c2", "read", A)] },
        { toolCalls: [call("c3", "read", A)] },
        { text: "done" },
      ],
      managers: new LoopManagers()
        .withHook(askAll())
        .withAskResolver(new SyncAskResolver((ask) => ask.callId !== "c2"))
        .withObserver(observer),
    });
    await agent.run("go");
    expect(log).toEqual([
      "model-request:0",
      "model-response:0",
      "pre:c1",
      "gate:c1:ask_allowed",
      "post:c1:ok",
      "pre:c2",
      "gate:c2:ask_denied",
      "post:c2:error",
      "model-request:1",
      "model-response:1",
      "pre:c3",
      "gate:c3:ask_allowed",
      "post:c3:ok",
      "model-request:2",
      "model-response:2",
    ]);
  });

  it("onGate carries the turn, the call id and the same record the run returns", async () => {
    const gates: unknown[] = [];
    const { agent } = build({
      turns: [{ toolCalls: [call("x", "read", A)] }, { toolCalls: [call("y", "read", A)] }, { text: "done" }],
      managers: new LoopManagers().withObserver({ onGate: (event) => gates.push(event) }),
    });
    const result = await agent.run("go");
    expect(gates).toEqual([
      { turn: 0, callId: "x", decision: result.records[0] },
      { turn: 1, callId: "y", decision: result.records[1] },
    ]);
  });

  it("onModelRequest shows the transcript and tools; onModelResponse the answer", async () => {
    const requests: unknown[] = [];
    const responses: unknown[] = [];
    const { agent } = build({
      turns: [{ text: "hi", usage: { inputTokens: 1, outputTokens: 2 } }],
      managers: new LoopManagers().withObserver({
        // The event holds the run's own array, which grows after the turn: keep this turn's list.
        onModelRequest: (e) => requests.push({ ...e, messages: [...e.messages] }),
        onModelResponse: (e) => responses.push(e),
      }),
    });
    await agent.run("hello");
    expect(requests).toEqual([
      { turn: 0, messages: [{ type: "user", text: "hello" }], tools: [expect.objectContaining({ name: "read" })] },
    ]);
    expect(responses).toEqual([
      { turn: 0, response: { text: "hi", toolCalls: [], usage: { inputTokens: 1, outputTokens: 2 } } },
    ]);
  });

  it("an observer that throws (or rejects) never breaks a run; errors go to the handler; other observers still run", async () => {
    const names: ObserverEventName[] = ["onModelRequest", "onModelResponse", "onToolPre", "onGate", "onToolPost"];
    const thrower: Observer = Object.fromEntries(
      names.map((name) => [
        name,
        () => {
          throw new Error(name);
        },
      ]),
    );
    const rejecter: Observer = { onGate: () => Promise.reject(new Error("async onGate")) as never };
    const reported: string[] = [];
    const { log, observer } = eventLog();
    const executed: unknown[] = [];
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers()
        .withObserver(thrower)
        .withObserver(rejecter)
        .withObserver(observer)
        .withObserverErrorHandler((error, event) => {
          reported.push(`${event}:${(error as Error).message}`);
          throw new Error("the handler fails too");
        }),
    });
    const result = await agent.run("go");
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(result.text).toBe("done");
    expect(executed).toEqual([A]);
    expect(log).toHaveLength(7);
    expect(reported).toEqual(expect.arrayContaining([...names.map((n) => `${n}:${n}`), "onGate:async onGate"]));
  });

  it("a rejection an observer returns from another realm, or as a bare thenable, reaches the handler, never unhandled", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on("unhandledRejection", onUnhandled);
    try {
      // A promise of another realm (a vm context, an iframe) is not an instance of this one's Promise.
      const foreign = (): unknown => runInNewContext("Promise.reject(new Error('foreign onGate'))");
      const thenable = (): unknown => ({
        then: (_: unknown, reject: (error: Error) => void) => reject(new Error("thenable onToolPost")),
      });
      const reported: string[] = [];
      const { agent } = build({
        turns: script(call("c1", "read", A)),
        tools: [readTool()],
        managers: new LoopManagers()
          .withObserver({ onGate: foreign, onToolPost: thenable })
          .withObserverErrorHandler((error, event) => {
            reported.push(`${event}:${(error as Error).message}`);
          }),
      });
      expect((await agent.run("go")).text).toBe("done");
      for (let i = 0; i < 3; i += 1) await new Promise<void>((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
      expect(reported.sort()).toEqual(["onGate:foreign onGate", "onToolPost:thenable onToolPost"]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("onModelResponse cannot change the answer the run acts on: no call the model did not make runs", async () => {
    const executed: unknown[] = [];
    const reported: string[] = [];
    const tamper: Observer = {
      onModelResponse: ({ response }) => {
        const writable = response as { text?: unknown; toolCalls: unknown };
        try {
          (response.toolCalls as unknown[]).push({ id: "forged", name: "read", input: A });
        } finally {
          writable.text = 42;
          writable.toolCalls = [{ id: "forged", name: 7, input: A }];
        }
      },
    };
    const { agent } = build({
      turns: [{ text: "the model's answer" }],
      tools: [readTool(executed)],
      managers: new LoopManagers()
        .withObserver(tamper)
        .withObserverErrorHandler((error, event) => reported.push(`${event}:${(error as Error).name}`)),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records).toEqual([]);
    expect(result.text).toBe("the model's answer");
    expect(result.messages.at(-1)).toEqual({ type: "assistant", text: "the model's answer", toolCalls: [] });
    expect(reported).toEqual(["onModelResponse:TypeError"]);
  });

  it("onToolPost cannot change the outcome the run acts on: the tool's output and a loop stop stand", async () => {
    const reported: string[] = [];
    const tamper: Observer = {
      onToolPost: ({ outcome }) => {
        const writable = outcome as { type: string; output?: unknown; stop?: unknown };
        try {
          if (writable.type === "ran") writable.output = "forged";
        } finally {
          delete writable.stop;
        }
      },
    };
    const { agent } = build({
      turns: [{ toolCalls: [call("c1", "read", A), call("c2", "read", A)] }, { text: "went on" }],
      managers: new LoopManagers()
        .withLoopDetection({ maxRepeats: 1 })
        .withObserver(tamper)
        .withObserverErrorHandler((error, event) => reported.push(`${event}:${(error as Error).name}`)),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    const results = error.messages.filter((m) => m.type === "tool_result");
    expect(results.map((m) => [m.callId, m.status, m.content])).toEqual([
      ["c1", "ran", "contents of a.rs"],
      ["c2", "refused", `dispatch refused before execution: ${error.message}`],
    ]);
    expect(reported).toEqual(["onToolPost:TypeError", "onToolPost:TypeError"]);
  });

  it("an observer cannot change what the observers after it receive: the audit sees the record that landed", async () => {
    const seen: unknown[] = [];
    const reported: string[] = [];
    const forge: Observer = {
      onGate: (event) => {
        (event as { decision: unknown }).decision = { ...event.decision, verdict: "deny" };
      },
    };
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers()
        .withObserver(forge)
        .withObserver({ onGate: ({ decision }) => seen.push(decision) })
        .withObserverErrorHandler((error, event) => reported.push(`${event}:${(error as Error).name}`)),
    });
    const result = await agent.run("go");
    expect(result.records.map((r) => r.verdict)).toEqual(["allow"]);
    expect(seen).toEqual(result.records);
    expect(reported).toEqual(["onGate:TypeError"]);
  });
});
