import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { SyncAskResolver } from "../src/ask/index.js";
import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import { FileGrantStore, Grant, GrantScope, MemoryGrantStore, argsDigest } from "../src/grant/index.js";
import type { GrantStore } from "../src/grant/index.js";
import { LoopDetectedError, LoopManagers, defineTool, permissionMiddleware } from "../src/engine/index.js";
import type { Tool } from "../src/engine/index.js";
import { ManualClock } from "../src/testing/index.js";
import { askAll, build, call, eventLog, readTool, script, shape } from "./support/engine-fixtures.js";

const A = { path: "a.rs" };
const B = { path: "b.rs" };

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const stores: [string, () => GrantStore][] = [
  ["MemoryGrantStore", () => new MemoryGrantStore()],
  [
    "FileGrantStore",
    () => {
      const dir = mkdtempSync(join(tmpdir(), "loopctl-engine-"));
      dirs.push(dir);
      return new FileGrantStore(join(dir, "root"), join(dir, "project"));
    },
  ],
];

function answering(answer: (ask: PendingAsk) => AskResolution): { asks: PendingAsk[]; resolver: SyncAskResolver } {
  const asks: PendingAsk[] = [];
  return { asks, resolver: new SyncAskResolver((ask) => (asks.push(ask), answer(ask))) };
}

describe.each(stores)("ask once and remember, with a %s", (_name, makeStore) => {
  it("remember this_call on approve: the same call is then allowed by the grant without parking; other args park", async () => {
    const store = makeStore();
    const clock = new ManualClock(1_700_000_000_000);
    const executed: unknown[] = [];
    const tool = readTool(executed);
    const { asks, resolver } = answering((ask) =>
      ask.argsDigest === argsDigest(A) ? { type: "approve", remember: "this_call" } : { type: "deny" },
    );
    const { agent } = build({
      turns: [
        { toolCalls: [call("c1", "read", A)] },
        { toolCalls: [call("c2", "read", A), call("c3", "read", B)] },
        { text: "done" },
      ],
      tools: [tool],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withGrantStore(store).withClock(clock),
    });
    const result = await agent.run("go");
    const grants = await store.load();
    expect(grants).toHaveLength(1);
    const grant = grants[0]!;
    expect(grant).toMatchObject({
      tool: "read",
      verdict: "allow",
      scope: { type: "this_call", args: A },
      pinnedDescriptor: tool.descriptorFingerprint,
      createdAtMs: 1_700_000_000_000,
    });
    expect(asks.map((a) => a.callId)).toEqual(["c1", "c3"]);
    expect(executed).toEqual([A, A]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "ask_allowed",
        ruleId: "ask",
        ruleSource: "ask_resolver",
        matchedPattern: null,
        reason: null,
      },
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "allow",
        ruleId: "grant",
        ruleSource: "context",
        matchedPattern: grant.id,
        reason: "allowed by remembered grant",
      },
      {
        tool: "read",
        argsDigest: argsDigest(B),
        verdict: "ask_denied",
        ruleId: "ask",
        ruleSource: "ask_resolver",
        matchedPattern: null,
        reason: "denied by approver",
      },
    ]);
  });

  it("remember this_tool on approve covers any arguments, across runs of a new agent", async () => {
    const store = makeStore();
    const executed: unknown[] = [];
    const first = answering(() => ({ type: "approve", remember: "this_tool" }));
    await build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(first.resolver).withGrantStore(store),
    }).agent.run("go");
    const second = answering(() => ({ type: "deny" }));
    const result = await build({
      turns: script(call("c2", "read", B)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(second.resolver).withGrantStore(store),
    }).agent.run("again");
    expect(second.asks).toEqual([]);
    expect(executed).toEqual([A, B]);
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([["allow", "grant"]]);
  });

  it("remember on deny: the next matching call is denied by the grant, with the grant's text", async () => {
    const store = makeStore();
    const executed: unknown[] = [];
    const { asks, resolver } = answering(() => ({ type: "deny", reason: "never", remember: "this_tool" }));
    const { agent, model } = build({
      turns: [{ toolCalls: [call("c1", "read", A)] }, { toolCalls: [call("c2", "read", B)] }, { text: "done" }],
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withGrantStore(store),
    });
    const result = await agent.run("go");
    const [grant] = await store.load();
    expect(grant).toMatchObject({ verdict: "deny", scope: { type: "this_tool" } });
    expect(asks).toHaveLength(1);
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.matchedPattern, r.reason])).toEqual([
      ["ask_denied", "ask", "ask_resolver", null, "denied by approver: never"],
      ["deny", "grant", "context", grant!.id, "denied by remembered grant"],
    ]);
    expect(model.requests[2]?.messages.at(-1)).toMatchObject({
      content: "Permission denied by remembered grant for tool 'read'",
      isError: true,
    });
  });

  const clocks: [string, () => number, number | undefined][] = [
    ["fractional", () => 1_700_000_000_000.75, 1_700_000_000_000],
    ["before the epoch", () => -5, 0],
    [
      "throwing",
      () => {
        throw new Error("clock broken");
      },
      undefined,
    ],
  ];
  it.each(clocks)("an answer given with remember is saved under a %s clock", async (_clock, now, createdAtMs) => {
    const store = makeStore();
    const errors: unknown[] = [];
    const { agent } = build({
      turns: script(call("c1", "read", A), call("c2", "read", B)),
      managers: new LoopManagers()
        .withHook(askAll())
        .withAskResolver(new SyncAskResolver(() => ({ type: "approve", remember: "this_tool" })))
        .withGrantStore(store)
        .withClock({ now })
        .withObserver({ onGrantError: (e) => errors.push(e) }),
    });
    const result = await agent.run("go");
    expect(errors).toEqual([]);
    const saved = await store.load();
    expect(saved.map((g) => [g.tool, g.verdict, g.scope.type])).toEqual([["read", "allow", "this_tool"]]);
    if (createdAtMs !== undefined) expect(saved[0]?.createdAtMs).toBe(createdAtMs);
    else expect(Number.isSafeInteger(saved[0]?.createdAtMs)).toBe(true);
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["ask_allowed", "ask"],
      ["allow", "grant"],
    ]);
  });

  it("a changed tool (the rug-pull) is asked about again, and the prompt says so", async () => {
    const store = makeStore();
    const v1 = readTool();
    const v2: Tool = defineTool({
      name: "read",
      description: "Read a file (and upload it)",
      input: z.object({ path: z.string() }),
      execute: () => "x",
    });
    const first = answering(() => ({ type: "approve", remember: "this_tool" }));
    await build({
      turns: script(call("c1", "read", A)),
      tools: [v1],
      managers: new LoopManagers().withHook(askAll("Read?")).withAskResolver(first.resolver).withGrantStore(store),
    }).agent.run("go");
    const second = answering(() => ({ type: "deny" }));
    const result = await build({
      turns: script(call("c2", "read", A)),
      tools: [v2],
      managers: new LoopManagers().withHook(askAll("Read?")).withAskResolver(second.resolver).withGrantStore(store),
    }).agent.run("go");
    expect(second.asks).toHaveLength(1);
    expect(second.asks[0]?.prompt).toBe(
      "Read?\n\n(The tool 'read' changed since this was last answered; it needs a new answer.)",
    );
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_denied"]);
  });

  it("a remembered deny beats a hook's allow: refused, one deny record naming the grant", async () => {
    const store = makeStore();
    const tool = readTool([]);
    const grant = await store.save(
      new Grant("read", "deny", GrantScope.thisCall(A)).withPinnedDescriptor(tool.descriptorFingerprint),
    );
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: [{ toolCalls: [call("c1", "read", A), call("c2", "read", B)] }, { text: "done" }],
      tools: [readTool(executed)],
      managers: new LoopManagers().withGrantStore(store).withHook({ preToolUse: () => ({ type: "allow" }) }),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([B]);
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "deny",
        ruleId: "grant",
        ruleSource: "context",
        matchedPattern: grant.id,
        reason: "denied by remembered grant",
      },
      {
        tool: "read",
        argsDigest: argsDigest(B),
        verdict: "allow",
        ruleId: "hook",
        ruleSource: "context",
        matchedPattern: null,
        reason: null,
      },
    ]);
    expect(model.requests[1]?.messages[2]).toMatchObject({
      status: "refused",
      content: "Permission denied by remembered grant for tool 'read'",
    });
  });

  it("over a hook's allow, an unpinned deny counts but one pinned to another descriptor does not; allow grants decide only when a hook asks", async () => {
    const store = makeStore();
    await store.save(new Grant("read", "deny", GrantScope.thisCall(A)));
    await store.save(
      new Grant("read", "deny", GrantScope.thisCall(B)).withPinnedDescriptor(`sha256:${"0".repeat(64)}`),
    );
    await store.save(new Grant("read", "allow", GrantScope.thisTool()));
    const executed: unknown[] = [];
    const { agent } = build({
      turns: [
        { toolCalls: [call("c1", "read", A), call("c2", "read", B), call("c3", "read", { path: "c.rs" })] },
        { text: "done" },
      ],
      tools: [readTool(executed)],
      managers: new LoopManagers().withGrantStore(store),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([B, { path: "c.rs" }]);
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["deny", "grant"],
      ["allow", "hook"],
      ["allow", "hook"],
    ]);
  });

  it("over a hook's allow, a current this_tool deny counts even beside a stale this_call deny of the same call", async () => {
    const store = makeStore();
    const tool = readTool([]);
    const current = await store.save(
      new Grant("read", "deny", GrantScope.thisTool()).withPinnedDescriptor(tool.descriptorFingerprint),
    );
    // An older deny of exactly this call, pinned to an earlier version of the tool: decide() names it first.
    await store.save(
      new Grant("read", "deny", GrantScope.thisCall(A)).withPinnedDescriptor(`sha256:${"0".repeat(64)}`),
    );
    const executed: unknown[] = [];
    const result = await build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withGrantStore(store).withHook({ preToolUse: () => ({ type: "allow" }) }),
    }).agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.matchedPattern])).toEqual([["deny", "grant", current.id]]);
  });
});

describe("grants and the rest of the pipeline", () => {
  it("a grant allow is displaced by a middleware deny, and kept at a pre-detection stop", async () => {
    const store = new MemoryGrantStore([new Grant("read", "allow", GrantScope.thisTool())]);
    const denyAll = permissionMiddleware({ rules: [], defaultAction: "deny" });
    const first = await build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withHook(askAll()).withGrantStore(store).withMiddleware(denyAll),
    }).agent.run("go");
    expect(first.records.map((r) => [r.verdict, r.ruleId, r.ruleSource])).toEqual([["deny", "default", "middleware"]]);

    const error = (await build({
      turns: [{ toolCalls: [call("c1", "read", A)] }, { toolCalls: [call("c2", "read", A)] }, { text: "x" }],
      managers: new LoopManagers().withHook(askAll()).withGrantStore(store).withLoopDetection({ maxRepeats: 1 }),
    })
      .agent.run("go")
      .catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(error.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["allow", "grant"],
      ["allow", "grant"],
    ]);
  });

  it("a store that fails denies (fail closed): a record, the store text, the resolver is never asked", async () => {
    const broken: GrantStore = {
      load: () => Promise.reject(new Error("ledger unreadable")),
      save: (g) => Promise.resolve(g),
      revoke: () => Promise.resolve(undefined),
      clear: () => Promise.resolve(0),
    };
    const executed: unknown[] = [];
    const { asks, resolver } = answering(() => ({ type: "approve" }));
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withHook(askAll()).withAskResolver(resolver).withGrantStore(broken),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(asks).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["deny", "grant", "engine", "grant store failed: ledger unreadable"],
    ]);
    expect(model.requests[1]?.messages.at(-1)).toMatchObject({
      content: "Permission denied: grant store unavailable for tool 'read'",
      isError: true,
    });
  });

  it("a failed save of a remembered answer keeps the answer and is reported to observers", async () => {
    const failing = new MemoryGrantStore();
    failing.save = () => Promise.reject(new Error("disk full"));
    const errors: unknown[] = [];
    const { log, observer } = eventLog();
    const executed: unknown[] = [];
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers()
        .withHook(askAll())
        .withAskResolver(new SyncAskResolver(() => ({ type: "approve", remember: "this_call" })))
        .withGrantStore(failing)
        .withObserver(observer)
        .withObserver({ onGrantError: (e) => errors.push(e) }),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([A]);
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(errors).toEqual([{ turn: 0, callId: "c1", error: new Error("disk full") }]);
    expect(log.slice(2, 5)).toEqual(["pre:c1", "gate:c1:ask_allowed", "post:c1:ok"]);
  });

  it("remember without a grant store is ignored", async () => {
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers()
        .withHook(askAll())
        .withAskResolver(new SyncAskResolver(() => ({ type: "approve", remember: "this_tool" }))),
    });
    await expect(agent.run("go")).resolves.toMatchObject({
      records: [expect.objectContaining({ verdict: "ask_allowed" })],
    });
  });
});
