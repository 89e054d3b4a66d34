import { mkdtemp, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditClosedError, AuditPathError, AuditSink, auditObserver, verifyAuditLog } from "../src/audit/index.js";
import type { AuditError } from "../src/audit/index.js";
import { Agent, CancelledError, Gate, LoopManagers, ModelError, defineTool } from "../src/engine/index.js";
import type { GateDecision, GateOutcome, Hook, Middleware } from "../src/engine/index.js";
import type { AskResolver } from "../src/ask/index.js";
import { MemoryGrantStore, argsDigest, argsSha256 } from "../src/grant/index.js";
import type { ToolDescriptor } from "../src/grant/index.js";
import { ManualClock, ScriptedModel } from "../src/testing/index.js";
import { z } from "zod";
import { deferred } from "./support/engine-fixtures.js";

let dir: string;
let logs = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-one-record-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const deploy: ToolDescriptor = {
  name: "deploy",
  description: "Deploy",
  inputSchema: { type: "object", properties: { env: { type: "string" } }, required: ["env"] },
};

const PROD = { env: "prod" };

const askAll: Hook = { preToolUse: () => ({ type: "ask", prompt: "May I?" }) };

const resolver = (resolve: AskResolver["resolve"]): AskResolver => ({ resolve });

const never = <T>(): Promise<T> => new Promise<T>(() => {});

const macrotask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

interface Setup {
  readonly gate: Gate;
  /** What an observer after the audit observer received, in order. */
  readonly seen: GateDecision[];
  readonly sinkErrors: AuditError[];
  /** Flushes and closes the sink, verifies the log against its anchor, and gives the records it holds. */
  readonly logged: () => Promise<readonly GateDecision[]>;
}

/**
 * A gate whose records go to an observer that throws, then to an AuditSink,
 * then to an observer that keeps them: the throw must cost neither of the
 * others its record, nor give either a second one.
 */
async function setup(build: (managers: LoopManagers) => LoopManagers = (m) => m): Promise<Setup> {
  const path = join(dir, `gates-${++logs}.jsonl`);
  const sinkErrors: AuditError[] = [];
  const sink = await AuditSink.open(path, { onError: (error) => sinkErrors.push(error) });
  const seen: GateDecision[] = [];
  const managers = build(
    new LoopManagers()
      .withClock(new ManualClock(1_700_000_000_000))
      .withObserver({
        onGate: () => {
          throw new Error("this observer is broken");
        },
      })
      .withObserver(auditObserver(sink))
      .withObserver({ onGate: ({ decision }) => void seen.push(decision) }),
  );
  return {
    gate: new Gate(managers),
    seen,
    sinkErrors,
    logged: async () => {
      await sink.flush();
      await sink.close();
      const verified = await verifyAuditLog(path, { anchor: sink.anchor });
      if (!verified.ok) throw new Error(`the log does not verify: ${verified.message}`);
      return verified.records;
    },
  };
}

async function ended(outcome: Promise<GateOutcome>): Promise<GateOutcome | CancelledError> {
  try {
    return await outcome;
  } catch (error) {
    if (error instanceof CancelledError) return error;
    throw error;
  }
}

const said = (records: readonly GateDecision[]) => records.map((r) => [r.verdict, r.ruleId, r.ruleSource, r.reason]);

/**
 * Calls `deploy` through `s` and cancels the call once it waits; checks that it rejects with
 * `CancelledError` and that the log holds what the observers saw, and resolves to those records as
 * `said` gives them. `cancelled` runs after the cancel (a held lookup let go, say).
 */
async function cancelWhileWaiting(
  s: Setup,
  execute: (input: unknown) => unknown = () => "ran",
  cancelled: () => void = () => undefined,
): Promise<unknown[][]> {
  const controller = new AbortController();
  const call = ended(s.gate.call({ tool: deploy, callId: "c1", input: PROD, signal: controller.signal }, execute));
  await macrotask();
  controller.abort();
  expect(await call).toBeInstanceOf(CancelledError);
  cancelled();
  const logged = await s.logged();
  expect(logged).toEqual(s.seen);
  return said(logged);
}

describe("one record per gate decision, the same in observers and in the audit log", () => {
  it("a cancel while the hooks run", async () => {
    const s = await setup((m) => m.withHook({ preToolUse: () => never() }));
    expect(await cancelWhileWaiting(s)).toEqual([
      ["cancelled", "cancel", "engine", "cancelled before the gate decided"],
    ]);
  });

  it("a cancel while the grants are looked up, before the hooks' allow runs and before an ask parks", async () => {
    const ran: unknown[] = [];
    for (const [hooks, expected] of [
      [[], ["cancelled", "cancel", "engine", "cancelled before execution"]],
      [[askAll], ["cancelled", "hook", "engine", "cancelled while awaiting approval"]],
    ] as const) {
      const lookup = deferred<void>();
      class SlowStore extends MemoryGrantStore {
        override async covering(...args: Parameters<MemoryGrantStore["covering"]>) {
          await lookup.promise;
          return super.covering(...args);
        }
      }
      const s = await setup((m) =>
        hooks.reduce(
          (with_, hook) => with_.withHook(hook),
          m.withGrantStore(new SlowStore()).withAskResolver(resolver(async () => ({ type: "approve" }))),
        ),
      );
      expect(
        await cancelWhileWaiting(
          s,
          (input) => ran.push(input),
          () => lookup.resolve(),
        ),
      ).toEqual([expected]);
    }
    expect(ran).toEqual([]);
  });

  it("a cancel while parked, after the approval, and while the tool runs", async () => {
    {
      const s = await setup((m) => m.withHook(askAll).withAskResolver(resolver(() => never())));
      expect(await cancelWhileWaiting(s)).toEqual([
        ["cancelled", "hook", "engine", "cancelled while awaiting approval"],
      ]);
    }
    {
      // Approved, then cancelled in a middleware before next(): the approval is the record, nothing ran.
      const controller = new AbortController();
      const cancelling: Middleware = async (_call, _context, next) => {
        controller.abort();
        await macrotask();
        return next();
      };
      const s = await setup((m) =>
        m
          .withHook(askAll)
          .withAskResolver(resolver(async () => ({ type: "approve" })))
          .withMiddleware(cancelling),
      );
      const ran: unknown[] = [];
      const call = ended(
        s.gate.call({ tool: deploy, callId: "c1", input: PROD, signal: controller.signal }, (input) => ran.push(input)),
      );
      expect(await call).toBeInstanceOf(CancelledError);
      const logged = await s.logged();
      expect(logged).toEqual(s.seen);
      expect(said(logged)).toEqual([["ask_allowed", "ask", "ask_resolver", null]]);
      expect(ran).toEqual([]);
    }
    {
      const s = await setup();
      const controller = new AbortController();
      const call = ended(
        s.gate.call({ tool: deploy, callId: "c1", input: PROD, signal: controller.signal }, () => {
          controller.abort();
          return never();
        }),
      );
      expect(await call).toBeInstanceOf(CancelledError);
      const logged = await s.logged();
      expect(logged).toEqual(s.seen);
      expect(said(logged)).toEqual([["cancelled", "cancel", "engine", "cancelled during execution"]]);
    }
  });

  it("a deadline, a resolver that throws, a hook that throws, a tool that throws, an answer remembered", async () => {
    const clock = new ManualClock(1_700_000_000_000);
    const cases: {
      readonly build: (m: LoopManagers) => LoopManagers;
      readonly execute?: () => unknown;
      readonly advance?: number;
      readonly outcome: GateOutcome["type"];
      readonly record: ReturnType<typeof said>[number];
    }[] = [
      {
        build: (m) =>
          m
            .withClock(clock)
            .withHook(askAll)
            .withAskTimeout(50)
            .withAskResolver(resolver(() => never())),
        advance: 60,
        outcome: "refused",
        record: ["ask_expired", "hook", "engine", "ask expired unanswered"],
      },
      {
        build: (m) =>
          m.withHook(askAll).withAskResolver(
            resolver(() => {
              throw new Error("resolver broke");
            }),
          ),
        outcome: "refused",
        record: ["ask_denied", "ask", "ask_resolver", "ask resolver failed: resolver broke"],
      },
      {
        build: (m) =>
          m.withHook({
            name: "guard",
            preToolUse: () => {
              throw new Error("hook broke");
            },
          }),
        outcome: "refused",
        record: ["deny", "hook", "context", "hook guard failed: hook broke"],
      },
      {
        build: (m) => m,
        execute: () => {
          throw new Error("tool broke");
        },
        outcome: "failed",
        record: ["allow", "hook", "context", null],
      },
      {
        build: (m) =>
          m
            .withHook(askAll)
            .withGrantStore(new MemoryGrantStore())
            .withAskResolver(resolver(async () => ({ type: "approve", remember: "this_tool" }))),
        outcome: "ran",
        record: ["ask_allowed", "ask", "ask_resolver", null],
      },
    ];
    for (const c of cases) {
      const s = await setup(c.build);
      const call = s.gate.call({ tool: deploy, callId: "c1", input: PROD }, c.execute ?? (() => "ran"));
      if (c.advance !== undefined) {
        await macrotask();
        await clock.advance(c.advance);
      }
      expect((await call).type).toBe(c.outcome);
      const logged = await s.logged();
      expect(logged).toEqual(s.seen);
      expect(said(logged)).toEqual([c.record]);
      expect(logged[0]!.argsDigest).toBe(argsDigest(PROD));
    }
  });

  it("a grant that decides, and a middleware that withholds the output", async () => {
    const grants = new MemoryGrantStore();
    {
      // The first call's answer is remembered; the second is decided by that grant, asking nobody.
      const asked: string[] = [];
      const s = await setup((m) =>
        m
          .withHook(askAll)
          .withGrantStore(grants)
          .withAskResolver(
            resolver(async (ask) => {
              asked.push(ask.callId);
              return { type: "approve", remember: "this_tool" };
            }),
          ),
      );
      await s.gate.call({ tool: deploy, callId: "c1", input: PROD }, () => "ran");
      await s.gate.call({ tool: deploy, callId: "c2", input: { env: "dev" } }, () => "ran");
      const logged = await s.logged();
      expect(logged).toEqual(s.seen);
      expect(asked).toEqual(["c1"]);
      expect(said(logged)).toEqual([
        ["ask_allowed", "ask", "ask_resolver", null],
        ["allow", "grant", "context", "allowed by remembered grant"],
      ]);
      expect(logged.map((r) => r.argsSha256)).toEqual([argsSha256(PROD), argsSha256({ env: "dev" })]);
    }
    {
      const withholding: Middleware = async (_call, context, next) => {
        await next();
        return context.deny({ ruleId: "no-secrets", message: "output withheld", reason: "it held a secret" });
      };
      const s = await setup((m) => m.withMiddleware(withholding));
      const outcome = await s.gate.call({ tool: deploy, callId: "c1", input: PROD }, () => "secret");
      expect(outcome).toMatchObject({ type: "refused", message: "output withheld" });
      const logged = await s.logged();
      expect(logged).toEqual(s.seen);
      expect(said(logged)).toEqual([
        ["allow", "hook", "context", "output withheld by middleware rule 'no-secrets': it held a secret"],
      ]);
    }
  });

  it("two calls under one call id at once land a record each, with the digests of what each ran", async () => {
    const release = deferred<void>();
    const s = await setup();
    const ran: unknown[] = [];
    const run = async (input: unknown) => {
      await release.promise;
      ran.push(input);
      return "ran";
    };
    const first = s.gate.call({ tool: deploy, callId: "same", input: { env: "a" } }, run);
    const second = s.gate.call({ tool: deploy, callId: "same", input: { env: "b" } }, run);
    release.resolve();
    await Promise.all([first, second]);
    const logged = await s.logged();
    expect(logged).toEqual(s.seen);
    expect(logged.map((r) => r.argsDigest)).toEqual(ran.map((input) => argsDigest(input)));
    expect(new Set(ran.map((input) => JSON.stringify(input)))).toEqual(new Set(['{"env":"a"}', '{"env":"b"}']));
  });

  it("records whose texts would not fit an audit line still land in it, cut, the same as observers get", async () => {
    const huge = "x".repeat(5_000_000);
    const ran: unknown[] = [];
    // A middleware whose error echoes the tool's output, after the tool ran.
    const checking: Middleware = async (_call, _context, next) => {
      const result = await next();
      throw new Error(`the output failed its check: ${JSON.stringify(result)}`);
    };
    const s = await setup((m) => m.withMiddleware(checking));
    const outcome = await s.gate.call({ tool: deploy, callId: "c1", input: PROD }, () => {
      ran.push(PROD);
      return huge;
    });
    // The model still reads the whole refusal; the record keeps the head of it.
    expect(outcome.type).toBe("refused");
    expect(outcome.type === "refused" && outcome.message.length).toBeGreaterThan(5_000_000);
    const blocking = await setup((m) =>
      m.withHook({ name: "guard", preToolUse: () => ({ type: "block", reason: `refused: ${huge}` }) }),
    );
    await blocking.gate.call({ tool: { ...deploy, name: `deploy${huge}` }, callId: "c2", input: PROD }, () => "ran");
    for (const s_ of [s, blocking]) {
      const logged = await s_.logged();
      expect(s_.sinkErrors).toEqual([]);
      expect(logged).toEqual(s_.seen);
      expect(logged).toHaveLength(1);
    }
    expect(ran).toEqual([PROD]);
    // Compared by parts: a failure message showing a 16 KiB text helps nobody.
    const [withheld] = s.seen;
    expect(withheld!.verdict).toBe("allow");
    const reason = withheld!.reason!;
    expect(reason.startsWith('output withheld: middleware failed: the output failed its check: {"type":"ran"')).toBe(
      true,
    );
    const cut =
      `output withheld: middleware failed: the output failed its check: ${JSON.stringify({ type: "ran", output: huge })}`
        .length - 16_384;
    expect(reason.slice(16_384)).toBe(`… [${cut} characters cut]`);
    const [blocked] = blocking.seen;
    expect(blocked!.verdict).toBe("deny");
    expect(blocked!.reason!.slice(0, 16_384)).toBe(`refused: ${huge}`.slice(0, 16_384));
    expect(blocked!.reason!.slice(16_384)).toBe(`… [${9 + 5_000_000 - 16_384} characters cut]`);
    expect(blocked!.tool.slice(0, 16_384)).toBe(`deploy${huge}`.slice(0, 16_384));
    expect(blocked!.tool.slice(16_384)).toBe(`… [${6 + 5_000_000 - 16_384} characters cut]`);
    expect(blocked!.ruleId).toBe("hook");
  });

  it("a model that calls a tool by a name of megabytes still leaves its one record in the audit log", async () => {
    const path = join(dir, `agent-${++logs}.jsonl`);
    const sink = await AuditSink.open(path);
    const seen: GateDecision[] = [];
    const name = "n".repeat(5_000_000);
    const result = await new Agent({
      model: new ScriptedModel([{ toolCalls: [{ id: "c1", name, input: {} }] }, { text: "done" }]),
      tools: [],
      managers: new LoopManagers()
        .withObserver(auditObserver(sink))
        .withObserver({ onGate: ({ decision }) => void seen.push(decision) }),
    }).run("go");
    await sink.flush();
    await sink.close();
    const verified = await verifyAuditLog(path, { anchor: sink.anchor });
    expect(verified.ok && verified.records).toEqual(seen);
    expect(result.records).toEqual(seen);
    expect(seen.map((r) => [r.verdict, r.ruleId, r.tool.length, r.reason!.length])).toEqual([
      [
        "deny",
        "unknown_tool",
        16_384 + `… [${5_000_000 - 16_384} characters cut]`.length,
        16_384 + `… [${5_000_016 - 16_384} characters cut]`.length,
      ],
    ]);
  });

  it("a cut never leaves half of a character", async () => {
    const s = await setup((m) =>
      m.withHook({ preToolUse: () => ({ type: "block", reason: `${"a".repeat(16_383)}${"😀".repeat(10)}` }) }),
    );
    await s.gate.call({ tool: deploy, callId: "c1", input: PROD }, () => "ran");
    const logged = await s.logged();
    expect(logged).toEqual(s.seen);
    expect(logged[0]!.reason).toBe(`${"a".repeat(16_383)}… [20 characters cut]`);
  });
});

describe("an audit log that cannot take the record does not hold the call back", () => {
  it("a sink whose write fails, or that was closed while the call was in flight: the call ends as decided, the loss is reported", async () => {
    for (const failing of ["moved aside", "closed"] as const) {
      const path = join(dir, `failing-${++logs}.jsonl`);
      const sinkErrors: unknown[] = [];
      const sink = await AuditSink.open(path, { onError: (error) => sinkErrors.push(error) });
      const seen: GateDecision[] = [];
      const gate = new Gate(
        new LoopManagers()
          .withObserver(auditObserver(sink))
          .withObserver({ onGate: ({ decision }) => void seen.push(decision) }),
      );
      const release = deferred<void>();
      const call = gate.call({ tool: deploy, callId: "c1", input: PROD }, async () => {
        await release.promise;
        return "ran";
      });
      if (failing === "moved aside") await rename(path, `${path}.old`);
      else await sink.close();
      release.resolve();
      expect(await call).toMatchObject({ type: "ran", output: "ran", record: seen[0] });
      expect(said(seen)).toEqual([["allow", "hook", "context", null]]);
      const flushed: unknown = await sink.flush().catch((error: unknown) => error);
      expect(flushed).toBe(sinkErrors[0]);
      expect(sinkErrors).toHaveLength(1);
      expect(sinkErrors[0]).toBeInstanceOf(failing === "closed" ? AuditClosedError : AuditPathError);
      await sink.close();
    }
  });
});

describe("calls an Agent run never hands the gate", () => {
  it("have no record: the calls after the one a cancel ended, and a turn whose calls share an id", async () => {
    const controller = new AbortController();
    const ran: number[] = [];
    const count = defineTool({
      name: "count",
      description: "Count",
      input: z.object({ n: z.number() }),
      execute: ({ n }) => {
        ran.push(n);
        if (n === 2) {
          controller.abort();
          return never();
        }
        return "counted";
      },
    });
    const turn = (...ids: string[]) => ({
      toolCalls: ids.map((id, n) => ({ id, name: "count", input: { n: n + 1 } })),
    });
    const path = join(dir, `agent-${++logs}.jsonl`);
    const sink = await AuditSink.open(path);
    const seen: GateDecision[] = [];
    const run = (model: ScriptedModel, signal?: AbortSignal) =>
      new Agent({
        model,
        tools: [count],
        managers: new LoopManagers()
          .withObserver(auditObserver(sink))
          .withObserver({ onGate: ({ decision }) => void seen.push(decision) }),
      })
        .run("count", signal === undefined ? {} : { signal })
        .catch((error: unknown) => error);
    const cancelled = await run(new ScriptedModel([turn("c1", "c2", "c3"), { text: "done" }]), controller.signal);
    expect(cancelled).toBeInstanceOf(CancelledError);
    expect(ran).toEqual([1, 2]);
    expect((cancelled as CancelledError).records.map((r) => [r.verdict, r.reason])).toEqual([
      ["allow", null],
      ["cancelled", "cancelled during execution"],
    ]);
    const shared = await run(new ScriptedModel([turn("same", "same"), { text: "done" }]));
    expect(shared).toBeInstanceOf(ModelError);
    expect((shared as ModelError).records).toEqual([]);
    expect(ran).toEqual([1, 2]);
    await sink.flush();
    await sink.close();
    const verified = await verifyAuditLog(path, { anchor: sink.anchor });
    expect(verified.ok && verified.records).toEqual(seen);
    expect(seen).toHaveLength(2);
  });
});
