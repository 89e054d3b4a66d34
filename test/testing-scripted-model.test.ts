import { describe, expect, it } from "vitest";
import { ManualClock, ScriptExhaustedError, ScriptedModel } from "../src/testing/index.js";
import { Agent, ModelError } from "../src/engine/index.js";
import type { Message, ModelRequest, ToolCall } from "../src/engine/index.js";

const request = (text: string): ModelRequest => ({
  messages: [{ type: "user", text }],
  tools: [{ name: "t", description: "", inputSchema: { type: "object" } }],
  signal: new AbortController().signal,
});

describe("ScriptedModel", () => {
  it("plays turns in order and records every request as it was at that turn", async () => {
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "t", input: { a: 1 } }] },
      { text: "done", usage: { inputTokens: 1, outputTokens: 1 }, providerData: { id: "r1" } },
    ]);
    const first = request("one");
    await expect(model.generate(first)).resolves.toEqual({ toolCalls: [{ id: "c1", name: "t", input: { a: 1 } }] });
    // The engine appends to the array it handed over once generate returns; the record keeps this turn's list.
    (first.messages as Message[]).push({ type: "user", text: "later" });
    await expect(model.generate({ ...request("two"), instructions: "be brief" })).resolves.toEqual({
      text: "done",
      toolCalls: [],
      usage: { inputTokens: 1, outputTokens: 1 },
      providerData: { id: "r1" },
    });
    expect(model.requests.map((r) => r.messages.map((m) => (m as { text: string }).text))).toEqual([["one"], ["two"]]);
    expect(model.requests.map((r) => r.instructions)).toEqual([undefined, "be brief"]);
    expect(model.requests[0]).not.toHaveProperty("signal");
    expect(model.remaining).toBe(0);
  });

  it("records requests and plays scripted calls whose arguments cannot be cloned (a function, 100 000 levels) without throwing", async () => {
    let deep: unknown = "a";
    for (let i = 0; i < 100_000; i += 1) deep = [deep];
    const fn = (): string => "a";
    const model = new ScriptedModel([
      { toolCalls: [{ id: "c1", name: "t", input: { fn } }] },
      (seen) => ({ text: String(seen.messages.length), toolCalls: [] }),
    ]);
    await expect(model.generate(request("one"))).resolves.toEqual({
      toolCalls: [{ id: "c1", name: "t", input: { fn } }],
    });
    const shown: ModelRequest = {
      ...request("two"),
      messages: [
        { type: "user", text: "two" },
        {
          type: "assistant",
          toolCalls: [
            { id: "c1", name: "t", input: { fn } },
            { id: "c2", name: "t", input: deep },
            { id: "c3", name: "t", input: { a: [1] } },
          ],
        },
      ],
    };
    await expect(model.generate(shown)).resolves.toEqual({ text: "2", toolCalls: [] });
    const callsOf = (message: Message | undefined): readonly ToolCall[] =>
      message?.type === "assistant" ? message.toolCalls : [];
    const recorded = { toolCalls: callsOf(model.requests[1]!.messages[1]) };
    expect(recorded.toolCalls[0]!.input).toEqual({ fn });
    expect(recorded.toolCalls[1]!.input).toBe(deep);
    expect(recorded.toolCalls[2]!.input).toEqual({ a: [1] });
  });

  it("records what the model was shown even when the loop changes its messages and tools afterwards", async () => {
    // A loop that reuses its objects (a bug the test should catch): what it sent must stay as it was sent.
    const model = new ScriptedModel([{ text: "one" }, { text: "two" }]);
    const asked = { type: "user", text: "read a" };
    const call = { id: "c1", name: "t", input: { path: "a" } };
    const providerData = { id: "resp_1" };
    const messages = [asked, { type: "assistant", toolCalls: [call], providerData }] as Message[];
    const tool = { name: "t", description: "reads", inputSchema: { type: "object" } };
    await model.generate({ messages, tools: [tool], signal: new AbortController().signal });
    asked.text = "delete everything";
    call.input.path = "/";
    providerData.id = "resp_2";
    tool.description = "deletes";
    await model.generate({ messages, tools: [tool], signal: new AbortController().signal });
    const [first, second] = model.requests;
    expect(first!.messages).toEqual([
      { type: "user", text: "read a" },
      { type: "assistant", toolCalls: [{ id: "c1", name: "t", input: { path: "a" } }], providerData: { id: "resp_1" } },
    ]);
    expect(first!.tools).toEqual([{ name: "t", description: "reads", inputSchema: { type: "object" } }]);
    expect((second!.messages[0] as { text: string }).text).toBe("delete everything");
    expect(second!.tools[0]!.description).toBe("deletes");
    // What the engine hands over is deeply frozen and cannot change: it is kept as it is, not copied.
    const frozen = Object.freeze({ type: "user", text: "kept" } as const);
    const keeping = new ScriptedModel([{ text: "x" }]);
    await keeping.generate({ messages: [frozen], tools: [], signal: new AbortController().signal });
    expect(keeping.requests[0]!.messages[0]).toBe(frozen);
  });

  it("records a frozen message whose provider data refers back to itself, looking through each object once", async () => {
    // A proxy over a frozen object that holds the proxy: listing its keys more than a few times means the walk loops.
    let listed = 0;
    const target: { self?: unknown } = {};
    const looped = new Proxy(target, {
      ownKeys(inner) {
        if (++listed > 10) throw new Error("the same object was looked through again and again");
        return Reflect.ownKeys(inner);
      },
    });
    target.self = looped;
    Object.freeze(target);
    const message = Object.freeze({
      type: "assistant",
      text: "",
      toolCalls: Object.freeze([]),
      providerData: looped,
    } as const);
    const model = new ScriptedModel([{ text: "x" }]);
    await model.generate({ messages: [message], tools: [], signal: new AbortController().signal });
    expect(model.requests[0]!.messages[0]).toBe(message);
  });

  it("copies a frozen Map or Date in a message: freezing does not stop set() or setTime()", async () => {
    const map = Object.freeze(new Map([["id", "resp_1"]]));
    const date = Object.freeze(new Date(0));
    const message = Object.freeze({
      type: "assistant",
      text: "",
      toolCalls: Object.freeze([]),
      providerData: Object.freeze({ map, date }),
    } as const);
    const model = new ScriptedModel([{ text: "x" }]);
    await model.generate({ messages: [message], tools: [], signal: new AbortController().signal });
    map.set("id", "resp_2");
    date.setTime(1);
    const recorded = model.requests[0]!.messages[0] as unknown as {
      providerData: { map: Map<string, string>; date: Date };
    };
    expect(recorded.providerData.map.get("id")).toBe("resp_1");
    expect(recorded.providerData.date.getTime()).toBe(0);
  });

  it("throws ScriptExhaustedError when the script runs out, and still records the request", async () => {
    const model = new ScriptedModel([{ text: "only" }]);
    await model.generate(request("a"));
    const error = (await model.generate(request("b")).catch((e: unknown) => e)) as ScriptExhaustedError;
    expect(error).toBeInstanceOf(ScriptExhaustedError);
    expect(error.code).toBe("SCRIPT_EXHAUSTED");
    expect(error.turns).toBe(1);
    expect(model.requests).toHaveLength(2);
  });

  it("plays { error } turns as a throw, and function turns against the request", async () => {
    const boom = new Error("boom");
    const model = new ScriptedModel([
      { error: boom },
      (req) => ({ text: `saw ${(req.messages[0] as { text: string }).text}`, toolCalls: [] }),
    ]);
    await expect(model.generate(request("x"))).rejects.toBe(boom);
    await expect(model.generate(request("y"))).resolves.toEqual({ text: "saw y", toolCalls: [] });
  });

  it("a scripted turn cannot be changed through a returned response", async () => {
    const turn = {
      toolCalls: [{ id: "c", name: "t", input: { a: 1 } }],
      usage: { inputTokens: 1, outputTokens: 1 },
      providerData: { items: [{ id: "r1" }] },
    };
    // One turn object played twice: what the caller did to the first answer must not reach the second.
    const model = new ScriptedModel([turn, turn]);
    const response = await model.generate(request("x"));
    (response.toolCalls[0]!.input as { a: number }).a = 2;
    (response.usage as { inputTokens: number }).inputTokens = 99;
    (response.providerData as { items: { id: string }[] }).items[0]!.id = "changed";
    expect(turn).toEqual({
      toolCalls: [{ id: "c", name: "t", input: { a: 1 } }],
      usage: { inputTokens: 1, outputTokens: 1 },
      providerData: { items: [{ id: "r1" }] },
    });
    await expect(model.generate(request("y"))).resolves.toEqual(turn);
  });

  it("plays a malformed scripted answer as it is, for the engine to refuse as a model answer, never a TypeError of its own", async () => {
    const model = new ScriptedModel([
      { toolCalls: { id: "c1", name: "t", input: {} } as never },
      { toolCalls: [null] as never },
    ]);
    await expect(model.generate(request("a"))).resolves.toEqual({ toolCalls: { id: "c1", name: "t", input: {} } });
    await expect(model.generate(request("b"))).resolves.toEqual({ toolCalls: [null] });
    const engine = await new Agent({ model: new ScriptedModel([{ toolCalls: [null] as never }]), tools: [] })
      .run("go")
      .catch((e: unknown) => e);
    expect(engine).toBeInstanceOf(ModelError);
    expect((engine as Error).message).toContain(
      "the model answered turn 0 with something that is not a model response: toolCalls.0",
    );
  });

  it("refuses a turn that is neither an object nor a function, naming it, when made", () => {
    expect(() => new ScriptedModel([{ text: "a" }, null as never])).toThrow(
      new TypeError("ScriptedModel: turn 2 must be an object or a function, got null"),
    );
    expect(() => new ScriptedModel(["hi" as never])).toThrow(
      new TypeError('ScriptedModel: turn 1 must be an object or a function, got "hi"'),
    );
  });
});

describe("ManualClock", () => {
  it("fires due timers in due order on advance, never on its own; cleared timers never fire", async () => {
    const clock = new ManualClock(100);
    const fired: string[] = [];
    clock.setTimeout(() => fired.push(`b@${clock.now()}`), 20);
    clock.setTimeout(() => fired.push(`a@${clock.now()}`), 10);
    const c = clock.setTimeout(() => fired.push("c"), 15);
    clock.clearTimeout(c);
    expect(clock.pendingTimers).toBe(2);
    await clock.advance(9);
    expect(fired).toEqual([]);
    await clock.advance(11);
    expect(fired).toEqual(["a@110", "b@120"]);
    expect(clock.now()).toBe(120);
    expect(clock.pendingTimers).toBe(0);
  });

  it("a timer set by a firing timer fires in the same advance when due", async () => {
    const clock = new ManualClock();
    const fired: number[] = [];
    clock.setTimeout(() => {
      fired.push(clock.now());
      clock.setTimeout(() => fired.push(clock.now()), 5);
    }, 5);
    await clock.advance(10);
    expect(fired).toEqual([5, 10]);
  });

  it("a timer that throws does not keep the later due timers from firing, nor the time from moving; advance rejects with it", async () => {
    const clock = new ManualClock();
    const fired: number[] = [];
    const failure = new Error("the callback failed");
    clock.setTimeout(() => {
      throw failure;
    }, 5);
    clock.setTimeout(() => fired.push(clock.now()), 7);
    await expect(clock.advance(10)).rejects.toBe(failure);
    expect(fired).toEqual([7]);
    expect(clock.now()).toBe(10);
    expect(clock.pendingTimers).toBe(0);
  });

  it("fires asynchronously, as the Clock contract asks: never inside advance's own turn, and after the microtasks already queued", async () => {
    const clock = new ManualClock();
    const order: string[] = [];
    clock.setTimeout(() => order.push("timer"), 0);
    const advancing = clock.advance(0);
    order.push("advance returned");
    void Promise.resolve().then(() => order.push("microtask"));
    await advancing;
    expect(order).toEqual(["advance returned", "microtask", "timer"]);
  });

  it("never moves back: advances made at once end at the furthest time any of them reached", async () => {
    const clock = new ManualClock(1_000);
    await Promise.all([clock.advance(100), clock.advance(10)]);
    expect(clock.now()).toBe(1_100);
    const seen: number[] = [];
    clock.setTimeout(() => seen.push(clock.now()), 50);
    await Promise.all([clock.advance(100), clock.advance(10)]);
    expect(seen).toEqual([1_150]);
    expect(clock.now()).toBe(1_200);
  });

  it("fires a timer set for NaN ms at the next advance, as the global timers fire it at once", async () => {
    const clock = new ManualClock(5);
    const fired: number[] = [];
    clock.setTimeout(() => fired.push(clock.now()), Number.NaN);
    await clock.advance(0);
    expect(fired).toEqual([5]);
    expect(clock.pendingTimers).toBe(0);
  });

  it("fires a timer whose delay the global timers cannot keep (none given, past 2^31 - 1 ms) at the next advance, as they do", async () => {
    // Node fires these after 1 ms: a fake that waited out 2^31 ms would pass a test of a deadline that expires at once.
    const clock = new ManualClock(5);
    const fired: string[] = [];
    clock.setTimeout(() => fired.push("none"), undefined as never);
    clock.setTimeout(() => fired.push("text"), "soon" as never);
    clock.setTimeout(() => fired.push("past the maximum"), 2 ** 31);
    clock.setTimeout(() => fired.push("Infinity"), Number.POSITIVE_INFINITY);
    clock.setTimeout(() => fired.push("at the maximum"), 2 ** 31 - 1);
    await clock.advance(0);
    expect(fired).toEqual(["none", "text", "past the maximum", "Infinity"]);
    expect(clock.pendingTimers).toBe(1);
  });

  it("rejects a negative advance", async () => {
    await expect(new ManualClock().advance(-1)).rejects.toThrow(RangeError);
  });

  it("refuses a start that is not a finite number of epoch ms, as the engine would refuse every now() it gave", () => {
    for (const start of [Number.NaN, Number.POSITIVE_INFINITY, "0" as never]) {
      expect(() => new ManualClock(start)).toThrow(
        new RangeError("ManualClock: startMs must be a finite number of epoch ms"),
      );
    }
    expect(new ManualClock(-5).now()).toBe(-5);
  });
});
