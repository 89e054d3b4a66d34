import { describe, expect, it } from "vitest";
import { z } from "zod";
import { SyncAskResolver } from "../src/ask/index.js";
import { argsDigest } from "../src/grant/index.js";
import {
  BudgetExceededError,
  CancelledError,
  EngineConfigError,
  Gate,
  LoopDetectedError,
  LoopManagers,
  ModelError,
  defineTool,
  permissionMiddleware,
} from "../src/engine/index.js";
import type { DispatchResult, Middleware } from "../src/engine/index.js";
import { ManualClock, ScriptExhaustedError } from "../src/testing/index.js";
import { thrownBy } from "./support/thrown.js";
import {
  askAll,
  build,
  call,
  deferred,
  until,
  eventLog,
  readTool,
  script,
  shape,
  writeTool,
} from "./support/engine-fixtures.js";

const A = { path: "a.rs" };
const lastResult = (model: { requests: { messages: readonly unknown[] }[] }, turn: number): unknown =>
  model.requests[turn]?.messages.at(-1);

describe("permission middleware", () => {
  const rules = permissionMiddleware({
    rules: [
      { id: "no-etc", tool: "write", args: { path: "/etc/*" }, action: "deny" },
      { id: "tmp-writes", tool: /^wr/, args: { path: /^\/tmp\// }, action: "allow" },
      { id: "reads", tool: "rea?", action: "allow" },
    ],
  });

  it("records its allow (replacing the plain hook allow) with the rule id and pattern", async () => {
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withMiddleware(rules),
    });
    const result = await agent.run("go");
    expect(result.records.map(shape)).toEqual([
      {
        tool: "read",
        argsDigest: argsDigest(A),
        verdict: "allow",
        ruleId: "reads",
        ruleSource: "middleware",
        matchedPattern: "rea?",
        reason: null,
      },
    ]);
  });

  it("denies by glob on an argument, and the first matching rule decides", async () => {
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "write", { path: "/etc/passwd" }), call("c2", "write", { path: "/tmp/x" })),
      tools: [writeTool(executed)],
      managers: new LoopManagers().withMiddleware(rules),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([{ path: "/tmp/x" }]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.matchedPattern])).toEqual([
      ["deny", "no-etc", 'write {"path":"/etc/*"}'],
      ["allow", "tmp-writes", '/^wr/ {"path":/^\\/tmp\\//}'],
    ]);
    expect(model.requests[1]?.messages[2]).toMatchObject({
      content: "Permission denied by rule 'no-etc' for tool 'write'",
      isError: true,
    });
  });

  it("where several rules match, the first decides; a global or sticky RegExp matches every call alike", async () => {
    const executed: unknown[] = [];
    const overlapping = permissionMiddleware({
      rules: [
        { id: "no-secrets", tool: "write", args: { path: /secret/g }, action: "deny" },
        { id: "no-keys", tool: "write", args: { path: /^\/keys/y }, action: "deny" },
        { id: "writes", tool: "write", action: "allow" },
      ],
      defaultAction: "allow",
    });
    const paths = ["/a/secret", "/b/secret", "/c/secret", "/keys/1", "/keys/2", "/ok"];
    const { agent } = build({
      turns: script(...paths.map((path, i) => call(`c${i}`, "write", { path }))),
      tools: [writeTool(executed)],
      managers: new LoopManagers().withMiddleware(overlapping),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([{ path: "/ok" }]);
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["deny", "no-secrets"],
      ["deny", "no-secrets"],
      ["deny", "no-secrets"],
      ["deny", "no-keys"],
      ["deny", "no-keys"],
      ["allow", "writes"],
    ]);
  });

  it("denies by default when no rule matches (fail closed)", async () => {
    const executed: unknown[] = [];
    const { agent } = build({
      turns: script(call("c1", "write", { path: "/home/me" })),
      tools: [writeTool(executed)],
      managers: new LoopManagers().withMiddleware(rules),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.matchedPattern, r.reason])).toEqual([
      ["deny", "default", null, "denied by rule 'default'"],
    ]);
  });

  it("holds its rules as they were when it was made: changing the caller's objects later changes no decision", async () => {
    const executed: unknown[] = [];
    const noEtc = { id: "no-etc", tool: "write", args: { path: "/etc/*" }, action: "deny" } as {
      id: string;
      tool: string;
      args: { path: string };
      action: "allow" | "deny";
    };
    const held = permissionMiddleware({ rules: [noEtc], defaultAction: "allow" });
    // Read once: a getter met while the rules are made is not asked again at each call.
    let reads = 0;
    const guarded = permissionMiddleware({
      rules: [
        {
          id: "no-root",
          action: "deny",
          get args() {
            reads += 1;
            return reads === 1 ? { path: "/root/*" } : {};
          },
        },
      ],
      defaultAction: "allow",
    });
    noEtc.args.path = "/nowhere/*";
    noEtc.tool = "other";
    noEtc.action = "allow";
    const { agent } = build({
      turns: script(call("c1", "write", { path: "/etc/passwd" }), call("c2", "write", { path: "/root/.ssh" })),
      tools: [writeTool(executed)],
      managers: new LoopManagers().withMiddleware(held).withMiddleware(guarded),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.matchedPattern])).toEqual([
      ["deny", "no-etc", 'write {"path":"/etc/*"}'],
      ["deny", "no-root", '* {"path":"/root/*"}'],
    ]);
  });

  /** What `mw` decides for `input` to the `write` tool: the id of the rule that decided. */
  const decide = (mw: Middleware, input: unknown): string => {
    let ruleId = "";
    const context = {
      deny: (d: { ruleId: string; message: string }) => ((ruleId = d.ruleId), { type: "refused", message: d.message }),
      allow: (d: { ruleId: string }) => void (ruleId = d.ruleId),
    } as unknown as Parameters<Middleware>[1];
    void mw({ id: "c", name: "write", input }, context, () => Promise.resolve({ type: "ran", output: "" }));
    return ruleId;
  };

  it("a glob's `?` is one character (an astral one too), `*` any run, line breaks included", () => {
    const globs = permissionMiddleware({
      rules: [
        { id: "one", args: { path: "a?c" }, action: "deny" },
        { id: "run", args: { path: "x*y*z" }, action: "deny" },
      ],
      defaultAction: "allow",
    });
    expect(["abc", "a😀c", "a\nc", "ac", "abbc", "a😀😀c"].map((path) => decide(globs, { path }))).toEqual([
      "one",
      "one",
      "one",
      "default",
      "default",
      "default",
    ]);
    expect(
      ["xyz", "x\ny\nz", "xaybz", "xyzyz", "xzy", "xy", "axyz", "xyza"].map((path) => decide(globs, { path })),
    ).toEqual(["run", "run", "run", "run", "default", "default", "default", "default"]);
  });

  it("an argument named __proto__ in a rule read from JSON is matched like any other, not dropped from the rule", () => {
    const fromJson = permissionMiddleware({
      rules: [JSON.parse('{"id":"safe-only","action":"allow","args":{"__proto__":"safe","mode":{"__proto__":1}}}')],
      defaultAction: "deny",
    });
    const args = (text: string): unknown => JSON.parse(text);
    expect(decide(fromJson, args('{"__proto__":"safe","mode":{"__proto__":1}}'))).toBe("safe-only");
    expect(decide(fromJson, args('{"__proto__":"evil","mode":{"__proto__":1}}'))).toBe("default");
    expect(decide(fromJson, args('{"__proto__":"safe","mode":{}}'))).toBe("default");
    expect(decide(fromJson, { other: 1 })).toBe("default");
  });

  it("a glob decides in time proportional to the argument: a long one the model wrote does not stall the process", () => {
    const globs = permissionMiddleware({
      rules: [{ id: "config", args: { path: "/srv/*/config/*.yaml" }, action: "deny" }],
      defaultAction: "allow",
    });
    // Matched as a backtracking RegExp (`^\/srv\/.*\/config\/.*\.yaml$`), this took quadratic time: minutes.
    const path = `/srv/${"/config/".repeat(64 * 1024)}x`;
    const started = performance.now();
    expect(decide(globs, { path })).toBe("default");
    expect(decide(globs, { path: `${path}.yaml` })).toBe("config");
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it.each([
    [{ rules: [{ id: "", action: "deny" }] }, /id must be a non-empty string/],
    [
      {
        rules: [
          { id: "a", action: "deny" },
          { id: "a", action: "allow" },
        ],
      },
      /already used/,
    ],
    [{ rules: [{ id: "a", action: "maybe" }] }, /action must be/],
    [{ rules: [{ id: "a", action: "deny", tool: 3 }] }, /tool must be a string or a RegExp/],
    [{ rules: [{ id: "a", action: "deny", args: { path: () => true } }] }, /not a valid argument pattern/],
    [{ rules: [], defaultAction: "perhaps" }, /defaultAction/],
    [{}, /rules must be an array/],
  ])("rejects invalid options with EngineConfigError (%#)", (options, message) => {
    expect(() => permissionMiddleware(options as never)).toThrow(EngineConfigError);
    expect(() => permissionMiddleware(options as never)).toThrow(message);
  });
});

describe("permission middleware options refused as every options object is", () => {
  it.each([
    // Ignored, a misspelt defaultAction would leave every call no rule matches denied when it was to be allowed.
    [{ rules: [], defaultaction: "allow" }, "unknown option 'defaultaction' (did you mean defaultAction?)"],
    [{ rule: [] }, "unknown option 'rule' (did you mean rules?)"],
    [{ rules: [], tools: ["read"] }, "unknown option 'tools' (the options are rules and defaultAction)"],
    ["deny", "options must be an object, got a string"],
    [[{ id: "a", action: "deny" }], "options must be an object, got an array"],
    [new AbortController().signal, "options must be an object, got an AbortSignal"],
  ])("%j is an EngineConfigError naming it", (options, message) => {
    expect(() => permissionMiddleware(options as never)).toThrow(EngineConfigError);
    expect(() => permissionMiddleware(options as never)).toThrow(`permissionMiddleware: ${message}`);
  });
});

describe("permission rules with a key no rule has", () => {
  // Ignored, a misspelt `tool` would leave a rule that matches every tool: an allow meant for one tool allows them all.
  it.each([
    [{ id: "ls", tools: "list_dir", action: "allow" }, "rules[0]: unknown key 'tools' (did you mean tool?)"],
    [{ id: "ls", Tool: "list_dir", action: "allow" }, "rules[0]: unknown key 'Tool' (did you mean tool?)"],
    [
      { id: "ls", tool: "list_dir", arg: { path: "/tmp/*" }, action: "allow" },
      "rules[0]: unknown key 'arg' (did you mean args?)",
    ],
    [
      { id: "ls", tool: "list_dir", when: "always", action: "allow" },
      "rules[0]: unknown key 'when' (a rule's keys are id, action, tool and args)",
    ],
    [{ id: "x\u202e", tool: "list_dir", "x\u202e": 1, action: "allow" }, 'rules[0]: unknown key "x\\u202e"'],
  ])("%j is an EngineConfigError naming the rule and the key", (rule, message) => {
    const refused = thrownBy(() => permissionMiddleware({ rules: [rule as never], defaultAction: "deny" }));
    expect(refused).toBeInstanceOf(EngineConfigError);
    expect((refused as Error).message).toContain(`permissionMiddleware: ${message}`);
  });
});

describe("permission middleware options whose reads throw", () => {
  const bomb = new Error("getter bomb");
  const fail = (): never => {
    throw bomb;
  };
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  it.each([
    [
      {
        get rules(): never {
          return fail();
        },
      },
    ],
    [
      {
        rules: [
          {
            id: "a",
            action: "deny",
            get args(): never {
              return fail();
            },
          },
        ],
      },
    ],
    [{ rules: [{ id: "a", action: "deny", args: { path: proxy } }] }],
    [{ rules: [proxy] }],
  ])("are an EngineConfigError naming permissionMiddleware, what was thrown its cause (%#)", (options) => {
    let thrown: unknown;
    try {
      permissionMiddleware(options as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(EngineConfigError);
    expect((thrown as Error).message).toMatch(/^permissionMiddleware: the options cannot be read: /);
    expect((thrown as Error).cause).toBeDefined();
  });
});

describe("middleware chain", () => {
  it("a middleware's context is frozen like a hook's: one that writes to it fails (denies), and every middleware after it reads the gate's values", async () => {
    const seen: unknown[] = [];
    const writes: Middleware = (_call, context, next) => {
      (context as { argsDigest: string }).argsDigest = "forged";
      return next();
    };
    const reads: Middleware = (_call, context, next) => {
      seen.push(context.argsDigest);
      return next();
    };
    const tool = { name: "echo", description: "echo", inputSchema: { type: "object" } };
    let executed = 0;
    const outcome = await new Gate(new LoopManagers().withMiddleware(writes).withMiddleware(reads)).call(
      { tool, callId: "c1", input: { a: 1 } },
      () => (executed += 1),
    );
    expect(seen).toEqual([]);
    expect(executed).toBe(0);
    expect(outcome).toMatchObject({ type: "refused", record: { verdict: "deny", ruleId: "middleware" } });
    expect(outcome.record.reason).toMatch(/^middleware failed: .*read only|^middleware failed: .*argsDigest/);
    expect(argsDigest({ a: 1 })).toBe(outcome.record.argsDigest);
  });
  it("runs in the order added, after validation, on the frozen approved call; the tool's result comes back through it", async () => {
    const executed: unknown[] = [];
    const order: string[] = [];
    const outer: Middleware = async (_c, _ctx, next) => {
      order.push("outer");
      const result = await next();
      order.push(`outer saw ${result.type}:${result.type === "ran" ? String(result.output) : ""}`);
      return result;
    };
    const inner: Middleware = (c, ctx, next) => {
      order.push(
        `inner:${(c.input as { path: string }).path}:${ctx.argsDigest === argsDigest(A)}:${Object.isFrozen(c.input)}`,
      );
      return next();
    };
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withMiddleware(outer).withMiddleware(inner),
    });
    await agent.run("go");
    expect(order).toEqual(["outer", "inner:a.rs:true:true", "outer saw ran:contents of a.rs"]);
    expect(executed).toEqual([A]);
    expect(lastResult(model, 1)).toMatchObject({ content: "contents of a.rs", status: "ran" });
  });

  it("a middleware that returns something of its own (not next()'s result nor a deny) denies the call", async () => {
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      managers: new LoopManagers().withMiddleware(() => ({ type: "ran", output: "forged" })),
    });
    const result = await agent.run("go");
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource])).toEqual([
      ["deny", "middleware", "middleware"],
    ]);
    expect(lastResult(model, 1)).toMatchObject({ status: "refused", isError: true });
  });

  it("invalid arguments never reach middleware or the tool", async () => {
    const executed: unknown[] = [];
    let middlewareCalls = 0;
    const { agent, model } = build({
      turns: script(call("c1", "read", { path: 1 })),
      tools: [readTool(executed)],
      managers: new LoopManagers().withMiddleware((_c, _ctx, next) => ((middlewareCalls += 1), next())),
    });
    const result = await agent.run("go");
    expect(middlewareCalls).toBe(0);
    expect(executed).toEqual([]);
    expect(lastResult(model, 1)).toEqual({
      type: "tool_result",
      callId: "c1",
      tool: "read",
      content: "Invalid arguments for tool 'read': $.path: Invalid input: expected string, received number",
      status: "refused",
      isError: true,
    });
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource])).toEqual([["deny", "schema", "engine"]]);
  });

  it("a middleware that throws denies the call with a middleware record; the tool never runs", async () => {
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withMiddleware(() => {
        throw new Error("policy service down");
      }),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["deny", "middleware", "middleware", "middleware failed: policy service down"],
    ]);
    expect(lastResult(model, 1)).toMatchObject({
      isError: true,
      content: "Permission denied: middleware failed: policy service down for tool 'read'",
    });
  });

  it("a middleware that denies and still calls next does not run the tool", async () => {
    const executed: unknown[] = [];
    const sneaky: Middleware = async (_c, ctx, next) => {
      ctx.deny({ ruleId: "sneaky", message: "no" });
      return next();
    };
    const { agent, model } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withMiddleware(sneaky),
    });
    const result = await agent.run("go");
    expect(executed).toEqual([]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["deny", "sneaky", "middleware", null],
    ]);
    // docs/records.md: what next() gave, returned by the middleware, is the model's text.
    expect(lastResult(model, 1)).toMatchObject({
      isError: true,
      content: "Permission denied by middleware for tool 'read'",
    });
  });

  const failed = (what: string): string => `Permission denied: middleware failed: ${what} for tool 'read'`;
  const late: [
    string,
    (ctx: Parameters<Middleware>[1], next: () => Promise<DispatchResult>) => Promise<DispatchResult>,
    { content: string; reason: string },
  ][] = [
    [
      "denies",
      async (ctx, next) => (await next(), ctx.deny({ ruleId: "late", message: "hidden", reason: "a key" })),
      { content: "hidden", reason: "output withheld by middleware rule 'late': a key" },
    ],
    [
      "denies while the tool still runs",
      async (ctx, next) => (void next(), ctx.deny({ ruleId: "late", message: "hidden" })),
      { content: "hidden", reason: "output withheld by middleware rule 'late'" },
    ],
    [
      "throws",
      async (_ctx, next) => {
        await next();
        throw new Error("audit service down");
      },
      { content: failed("audit service down"), reason: "output withheld: middleware failed: audit service down" },
    ],
    [
      "returns something of its own",
      async (_ctx, next) => (await next(), { type: "ran", output: "forged" }),
      {
        content: failed("returned something that is not the result of next() or deny()"),
        reason: "output withheld: middleware failed: returned something that is not the result of next() or deny()",
      },
    ],
    [
      "calls next twice",
      async (_ctx, next) => (await next(), next()),
      {
        content: "middleware called next twice for tool 'read'",
        reason: "output withheld: middleware called next twice for tool 'read'",
      },
    ],
  ];

  it.each(late)(
    "a middleware that %s after next() started the tool withholds its output, and the record still says the call ran",
    async (_label, after, { content, reason }) => {
      for (const approved of [false, true]) {
        const executed: unknown[] = [];
        const managers = new LoopManagers().withMiddleware((_c, ctx, next) => after(ctx, next));
        const { agent, model } = build({
          turns: script(call("c1", "read", A)),
          tools: [readTool(executed)],
          managers: approved ? managers.withHook(askAll()).withAskResolver(new SyncAskResolver(() => true)) : managers,
        });
        const result = await agent.run("go");
        expect(executed).toEqual([A]);
        expect(result.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
          approved ? ["ask_allowed", "ask", "ask_resolver", reason] : ["allow", "hook", "context", reason],
        ]);
        expect(lastResult(model, 1)).toMatchObject({ content, status: "refused", isError: true });
      }
    },
  );

  it("a middleware that withholds the output without waiting for the tool: the call ends when the tool has", async () => {
    const finished = deferred<string>();
    const log: string[] = [];
    const slow = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: async () => {
        const text = await finished.promise;
        log.push("tool ended");
        return text;
      },
    });
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [slow],
      managers: new LoopManagers()
        .withObserver({ onGate: ({ decision }) => void log.push(`record ${decision.verdict}`) })
        .withMiddleware((_c, ctx, next) => (void next(), ctx.deny({ ruleId: "late", message: "hidden" }))),
    });
    const running = agent.run("go");
    await until(() => true);
    expect(log).toEqual([]);
    finished.resolve("contents");
    const result = await running;
    expect(log).toEqual(["tool ended", "record allow"]);
    expect(result.records[0]?.reason).toBe("output withheld by middleware rule 'late'");
  });

  it("a tool that failed and whose output a middleware withholds still counts as a failure for the breaker", async () => {
    let calls = 0;
    const broken = defineTool({
      name: "read",
      description: "Read a file",
      input: z.object({ path: z.string() }),
      execute: () => {
        calls += 1;
        throw new Error("disk gone");
      },
    });
    const { agent, model } = build({
      turns: script(call("c1", "read", A), call("c2", "read", A)),
      tools: [broken],
      managers: new LoopManagers()
        .withCircuitBreaker({ failureThreshold: 1, cooldownMs: 60_000 })
        .withMiddleware(async (_c, ctx, next) => (await next(), ctx.deny({ ruleId: "late", message: "hidden" }))),
    });
    const result = await agent.run("go");
    expect(calls).toBe(1);
    expect(model.requests[1]?.messages.slice(-2)).toMatchObject([
      { callId: "c1", content: "hidden", status: "refused" },
      { callId: "c2", content: "tool temporarily unavailable: circuit breaker open", status: "refused" },
    ]);
    expect(result.records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["allow", "hook", "output withheld by middleware rule 'late'"],
      ["deny", "circuit_breaker", "tool temporarily unavailable: circuit breaker open"],
    ]);
  });

  it("a run cancelled while a middleware waits never runs the tool when that middleware calls next() later", async () => {
    const executed: unknown[] = [];
    const entered = deferred<void>();
    const release = deferred<void>();
    const late = deferred<DispatchResult>();
    const lookup: Middleware = async (_c, _ctx, next) => {
      entered.resolve();
      await release.promise;
      const result = await next();
      late.resolve(result);
      return result;
    };
    const { agent } = build({
      turns: script(call("c1", "read", A)),
      tools: [readTool(executed)],
      managers: new LoopManagers().withMiddleware(lookup),
    });
    const controller = new AbortController();
    const running = agent.run("go", { signal: controller.signal });
    await entered.promise;
    controller.abort();
    const error = (await running.catch((e: unknown) => e)) as CancelledError;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error.records.map((r) => [r.verdict, r.reason])).toEqual([["cancelled", "cancelled during execution"]]);
    release.resolve();
    expect((await late.promise).type).toBe("refused");
    expect(executed).toEqual([]);
  });

  it("a tool that throws becomes an error result for the model", async () => {
    const broken = defineTool({
      name: "broken",
      description: "",
      input: z.object({}),
      execute: async () => {
        throw new Error("kaput");
      },
    });
    const { agent, model } = build({ turns: script(call("c1", "broken", {})), tools: [broken] });
    await agent.run("go");
    expect(lastResult(model, 1)).toMatchObject({ content: "Tool 'broken' failed: kaput", isError: true });
  });

  it("non-string results go to the model as JSON", async () => {
    const executed: unknown[] = [];
    const { agent, model } = build({
      turns: script(call("c1", "write", { path: "x", text: "y" })),
      tools: [writeTool(executed)],
    });
    await agent.run("go");
    expect(lastResult(model, 1)).toMatchObject({ content: '{"ok":true}', isError: false });
  });
});

describe("pre-detection: the loop detector", () => {
  it("stops the run when the same call reaches dispatch past maxRepeats; deny record with the exact text", async () => {
    const executed: unknown[] = [];
    const turns = [1, 2, 3].map((n) => ({ toolCalls: [call(`c${n}`, "read", A)] }));
    const { agent } = build({
      turns: [...turns, { text: "never" }],
      tools: [readTool(executed)],
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 2 }),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(error).toMatchObject({ code: "LOOP_DETECTED", tool: "read", argsDigest: argsDigest(A), repeats: 3 });
    expect(executed).toEqual([A, A]);
    const text = `dispatch refused before execution: ${error.message}`;
    expect(error.records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason])).toEqual([
      ["allow", "hook", "context", null],
      ["allow", "hook", "context", null],
      ["deny", "loop_detector", "engine", text],
    ]);
    expect(error.messages.at(-1)).toMatchObject({ callId: "c3", content: text, isError: true });
  });

  it("different arguments are different calls", async () => {
    const turns = [1, 2, 3].map((n) => ({ toolCalls: [call(`c${n}`, "read", { path: `f${n}` })] }));
    const { agent } = build({
      turns: [...turns, { text: "done" }],
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 1 }),
    });
    await expect(agent.run("go")).resolves.toMatchObject({ text: "done" });
  });

  it("repeats refused before the hooks count at their refusal: an unknown tool is stopped like any loop", async () => {
    const turns = [1, 2, 3].map((n) => ({ toolCalls: [call(`c${n}`, "rm", A)] }));
    const { agent, model } = build({
      turns: [...turns, { text: "never" }],
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 2 }),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(error).toMatchObject({ tool: "rm", argsDigest: argsDigest(A), repeats: 3 });
    expect(error.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["deny", "unknown_tool"],
      ["deny", "unknown_tool"],
      ["deny", "loop_detector"],
    ]);
    expect(error.messages.at(-1)).toMatchObject({
      callId: "c3",
      content: `dispatch refused before execution: ${error.message}`,
      isError: true,
    });
    expect(model.remaining).toBe(1);
  });

  it("arguments that are not JSON values have no digest: all of them, for one tool, count as one repeated call", async () => {
    const inputs = [{ path: 1n }, { path: () => "a" }, { path: Symbol("a") }];
    const turns = inputs.map((input, n) => ({ toolCalls: [call(`c${n}`, "read", input)] }));
    const { agent } = build({
      turns: [...turns, { text: "never" }],
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 2 }),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as LoopDetectedError;
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(error).toMatchObject({ tool: "read", argsDigest: "", repeats: 3 });
    expect(error.message).toBe("loop detected: tool 'read' called 3 times with arguments that are not JSON values");
    expect(error.records.map((r) => r.ruleId)).toEqual(["invalid_arguments", "invalid_arguments", "loop_detector"]);
  });

  it("repeats a hook refuses end before pre-detection (spec order) and are not counted", async () => {
    const turns = [1, 2, 3].map((n) => ({ toolCalls: [call(`c${n}`, "read", A)] }));
    const { agent } = build({
      turns: [...turns, { text: "done" }],
      managers: new LoopManagers()
        .withLoopDetection({ maxRepeats: 1 })
        .withHook({ preToolUse: () => ({ type: "block", reason: "no" }) }),
    });
    const result = await agent.run("go");
    expect(result.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["deny", "hook"],
      ["deny", "hook"],
      ["deny", "hook"],
    ]);
  });

  it("counts per run, not per agent", async () => {
    const { agent } = build({
      turns: [
        { toolCalls: [call("c1", "read", A)] },
        { text: "one" },
        { toolCalls: [call("c2", "read", A)] },
        { text: "two" },
      ],
      managers: new LoopManagers().withLoopDetection({ maxRepeats: 1 }),
    });
    await agent.run("first");
    await expect(agent.run("second")).resolves.toMatchObject({ text: "two" });
  });
});

describe("the circuit breaker", () => {
  it("opens after N consecutive failures, refuses for the cool-down on the clock seam, then lets one call through", async () => {
    const clock = new ManualClock(0);
    let runs = 0;
    const flaky = defineTool({
      name: "flaky",
      description: "",
      input: z.object({ n: z.number() }),
      execute: () => {
        runs += 1;
        throw new Error("nope");
      },
    });
    const turn =
      (n: number, advance = 0) =>
      async () => {
        await clock.advance(advance);
        return { toolCalls: [call(`c${n}`, "flaky", { n })] };
      };
    const { agent, model } = build({
      turns: [turn(1), turn(2), turn(3), turn(4, 999), turn(5, 1), { text: "done" }],
      tools: [flaky],
      managers: new LoopManagers().withClock(clock).withCircuitBreaker({ failureThreshold: 2, cooldownMs: 1_000 }),
    });
    const done = await agent.run("go");
    // c3 is refused at t=0, c4 at t=999 (still cooling down); c5 at t=1000 goes through half-open and fails
    expect(runs).toBe(3);
    const contents = model.requests.slice(1).map((r) => (r.messages.at(-1) as { content: string }).content);
    expect(contents).toEqual([
      "Tool 'flaky' failed: nope",
      "Tool 'flaky' failed: nope",
      "tool temporarily unavailable: circuit breaker open",
      "tool temporarily unavailable: circuit breaker open",
      "Tool 'flaky' failed: nope",
    ]);
    expect(done.records.map((r) => [r.verdict, r.ruleId, r.reason])).toEqual([
      ["allow", "hook", null],
      ["allow", "hook", null],
      ["deny", "circuit_breaker", "tool temporarily unavailable: circuit breaker open"],
      ["deny", "circuit_breaker", "tool temporarily unavailable: circuit breaker open"],
      ["allow", "hook", null],
    ]);
  });

  it("a success closes the breaker", async () => {
    const clock = new ManualClock(0);
    const outcomes = [false, true, false, false];
    const tool = defineTool({
      name: "t",
      description: "",
      input: z.object({ n: z.number() }),
      execute: () => {
        if (outcomes.shift() === false) throw new Error("x");
        return "ok";
      },
    });
    const turns = [1, 2, 3, 4, 5].map((n) => ({ toolCalls: [call(`c${n}`, "t", { n })] }));
    const { agent } = build({
      turns: [...turns, { text: "done" }],
      tools: [tool],
      managers: new LoopManagers().withClock(clock).withCircuitBreaker({ failureThreshold: 2, cooldownMs: 10 }),
    });
    const result = await agent.run("go");
    expect(result.records.map((r) => r.ruleId)).toEqual(["hook", "hook", "hook", "hook", "circuit_breaker"]);
  });

  it("breaker state is per agent: it survives into the next run", async () => {
    const clock = new ManualClock(0);
    const bad = defineTool({
      name: "bad",
      description: "",
      input: z.object({}),
      execute: () => {
        throw new Error("x");
      },
    });
    const { agent } = build({
      turns: [
        { toolCalls: [call("c1", "bad", {})] },
        { text: "1" },
        { toolCalls: [call("c2", "bad", {})] },
        { text: "2" },
      ],
      tools: [bad],
      managers: new LoopManagers().withClock(clock).withCircuitBreaker({ failureThreshold: 1, cooldownMs: 10 }),
    });
    await agent.run("a");
    const second = await agent.run("b");
    expect(second.records.map((r) => r.ruleId)).toEqual(["circuit_breaker"]);
  });
});

describe("the budget gate", () => {
  it("maxTurns: checked before each model request; a deny record with ruleId budget.hard, then BudgetExceededError", async () => {
    const clock = new ManualClock(42);
    const { log, observer } = eventLog();
    const { agent, model } = build({
      turns: [{ toolCalls: [call("c1", "read", A)] }, { toolCalls: [call("c2", "read", A)] }, { text: "never" }],
      managers: new LoopManagers().withClock(clock).withObserver(observer).withBudget({ maxTurns: 2 }),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as BudgetExceededError;
    expect(error).toBeInstanceOf(BudgetExceededError);
    expect(error).toMatchObject({ code: "BUDGET_EXCEEDED", kind: "turns", limit: 2, used: 2 });
    expect(model.requests).toHaveLength(2);
    expect(error.records.at(-1)).toEqual({
      tool: "",
      argsDigest: "",
      argsSha256: "",
      verdict: "deny",
      ruleId: "budget.hard",
      ruleSource: "engine",
      matchedPattern: null,
      reason: "turn budget exhausted: 2 of 2 turns used",
      ts: 42,
    });
    expect(log.at(-1)).toBe("gate::deny");
  });

  it("a clock that throws still stops the run with BudgetExceededError, keeping the run's records", async () => {
    const { agent } = build({
      turns: [{ toolCalls: [call("c1", "read", A)] }, { text: "never" }],
      managers: new LoopManagers()
        .withClock({
          now: () => {
            throw new Error("the clock broke");
          },
        })
        .withBudget({ maxTurns: 1 }),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as BudgetExceededError;
    expect(error).toBeInstanceOf(BudgetExceededError);
    expect(error.records.map((r) => [r.tool, r.verdict, r.ruleId])).toEqual([
      ["read", "allow", "hook"],
      ["", "deny", "budget.hard"],
    ]);
    expect(error.records.every((r) => Number.isFinite(r.ts))).toBe(true);
  });

  it("maxTokens: counts the model's reported usage", async () => {
    const { agent } = build({
      turns: [
        { toolCalls: [call("c1", "read", A)], usage: { inputTokens: 60, outputTokens: 30 } },
        { toolCalls: [call("c2", "read", A)], usage: { inputTokens: 10, outputTokens: 5 } },
        { text: "never" },
      ],
      managers: new LoopManagers().withBudget({ maxTokens: 100 }),
    });
    const error = (await agent.run("go").catch((e: unknown) => e)) as BudgetExceededError;
    expect(error).toMatchObject({ kind: "tokens", limit: 100, used: 105 });
    expect(error.records.at(-1)?.reason).toBe("token budget exhausted: 105 of 100 tokens used");
  });

  it("a run within budget reports its usage and turns", async () => {
    const { agent } = build({
      turns: [
        { toolCalls: [call("c1", "read", A)], usage: { inputTokens: 5, outputTokens: 1 } },
        { text: "ok", usage: { inputTokens: 7, outputTokens: 2 } },
      ],
      managers: new LoopManagers().withBudget({ maxTurns: 2, maxTokens: 1_000 }),
    });
    await expect(agent.run("go")).resolves.toMatchObject({
      turns: 2,
      usage: { inputTokens: 12, outputTokens: 3 },
      text: "ok",
    });
  });
});

describe("model failures", () => {
  it("a model that throws rejects the run with ModelError, cause attached", async () => {
    const boom = new Error("rate limited");
    const { agent } = build({ turns: [{ error: boom }] });
    const error = (await agent.run("go").catch((e: unknown) => e)) as ModelError;
    expect(error).toBeInstanceOf(ModelError);
    expect(error.code).toBe("MODEL_ERROR");
    expect(error.cause).toBe(boom);
  });

  it("an exhausted script is a ModelError caused by ScriptExhaustedError", async () => {
    const { agent } = build({ turns: [{ toolCalls: [call("c1", "read", A)] }] });
    const error = (await agent.run("go").catch((e: unknown) => e)) as ModelError;
    expect(error).toBeInstanceOf(ModelError);
    expect(error.cause).toBeInstanceOf(ScriptExhaustedError);
    expect((error.cause as ScriptExhaustedError).code).toBe("SCRIPT_EXHAUSTED");
    // One way of counting turns in the one message: the engine's, from 0.
    expect(error.message).toBe(
      "the model failed on turn 1: ScriptedModel: the script has only 1 turn(s), all of them played",
    );
    expect(error.records.map((r) => r.verdict)).toEqual(["allow"]);
  });

  it("a model answer that is not a response is a ModelError", async () => {
    const { agent } = build({ turns: [() => ({ toolCalls: "lots" }) as never] });
    await expect(agent.run("go")).rejects.toBeInstanceOf(ModelError);
  });
});

describe("model answers the engine refuses", () => {
  it("two tool calls sharing an id are a ModelError", async () => {
    const { agent } = build({
      turns: [{ toolCalls: [call("same", "read", A), call("same", "read", A)] }, { text: "x" }],
    });
    await expect(agent.run("go")).rejects.toThrow(/two tool calls sharing an id/);
  });

  it("the ModelError names what is wrong with the answer: the field and the problem, or the id two calls share", async () => {
    const noId = build({ turns: [() => ({ toolCalls: [{ name: "read", input: A }] }) as never] });
    await expect(noId.agent.run("go")).rejects.toThrow(
      "the model answered turn 0 with something that is not a model response: toolCalls.0.id: Invalid input: expected string, received undefined",
    );
    const shared = build({
      turns: [{ toolCalls: [call("c1", "read", A), call("c7", "read", A), call("c7", "read", A)] }],
    });
    await expect(shared.agent.run("go")).rejects.toThrow(
      "the model answered turn 0 with two tool calls sharing an id ('c7')",
    );
  });

  it("an id generator that does not return UUIDs is refused when the agent is built", async () => {
    const { Agent } = await import("../src/engine/index.js");
    const { ScriptedModel } = await import("../src/testing/index.js");
    expect(
      () =>
        new Agent({ model: new ScriptedModel([]), tools: [], managers: new LoopManagers().withIdGen(() => "id-1") }),
    ).toThrow(EngineConfigError);
  });
});
