import { describe, expectTypeOf, it } from "vitest";
import { z } from "zod";
import { Agent, Gate, LoopManagers, defineTool, permissionMiddleware } from "loopctl/engine";
import type {
  AgentOptions,
  AssistantMessage,
  ClockInput,
  DispatchResult,
  GateDecision,
  GateExecute,
  GateOutcome,
  GateRequest,
  GateVerdict,
  Hook,
  HookContext,
  HookDecision,
  Message,
  Middleware,
  Model,
  ModelResponse,
  Observer,
  RuleSource,
  RunResult,
  RunStoppedError,
  Tool,
  ToolCall,
  ToolContext,
  ToolDescriptor,
  ToolPostEvent,
  ToolSource,
} from "loopctl/engine";

const deploy = defineTool({
  name: "deploy",
  description: "Deploy a version",
  input: z.object({ env: z.string(), version: z.string() }),
  execute: ({ env, version }) => `${version} to ${env}`,
});

describe("defineTool", () => {
  it("types execute's input as the zod schema's output", () => {
    defineTool({
      name: "read",
      description: "",
      input: z.object({ path: z.string(), limit: z.number().optional() }),
      execute: (input, context) => {
        expectTypeOf(input).toEqualTypeOf<{ path: string; limit?: number | undefined }>();
        expectTypeOf(context).toEqualTypeOf<ToolContext>();
        expectTypeOf(context.signal).toEqualTypeOf<AbortSignal>();
        return input.path;
      },
    });
    // Defaults and transforms are applied before execute: it sees zod's output, not the model's input.
    defineTool({
      name: "page",
      description: "",
      input: z.object({ size: z.number().default(10), at: z.string().transform(Number) }),
      execute: (input) => {
        expectTypeOf(input).toEqualTypeOf<{ size: number; at: number }>();
      },
    });
  });

  it("leaves execute's input unknown for a JSON Schema", () => {
    defineTool({
      name: "raw",
      description: "",
      input: { type: "object", properties: { path: { type: "string" } } },
      execute: (input) => {
        expectTypeOf(input).toBeUnknown();
      },
    });
  });

  it("refuses an execute that reads what the schema does not have", () => {
    defineTool({
      name: "read",
      description: "",
      input: z.object({ path: z.string() }),
      // @ts-expect-error `limit` is not in the schema
      execute: ({ limit }) => limit,
    });
  });

  it("needs a name, a description, an input and an execute", () => {
    // @ts-expect-error no description
    defineTool({ name: "x", input: z.object({}), execute: () => "" });
    // @ts-expect-error no execute
    defineTool({ name: "x", description: "", input: z.object({}) });
  });

  it("returns a Tool whose descriptor is what grants pin", () => {
    expectTypeOf(deploy).toEqualTypeOf<Tool>();
    expectTypeOf(deploy.descriptor).toEqualTypeOf<ToolDescriptor>();
    expectTypeOf(deploy.descriptorFingerprint).toBeString();
  });
});

describe("hooks", () => {
  it("answer one of four decisions", () => {
    expectTypeOf<HookDecision>().toEqualTypeOf<
      | { readonly type: "allow" }
      | { readonly type: "block"; readonly reason: string }
      | { readonly type: "ask"; readonly prompt: string }
      | { readonly type: "modify"; readonly input: unknown }
    >();
  });

  it("may answer synchronously or with a promise", () => {
    const sync: Hook = { preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name}?` }) };
    const later: Hook = {
      name: "policy",
      preToolUse: async (_call, context) => ({ type: "block", reason: context.descriptor.name }),
    };
    expectTypeOf<Parameters<Hook["preToolUse"]>>().toEqualTypeOf<[call: ToolCall, context: HookContext]>();
    void [sync, later];
  });

  it("does not compile with a wrong shape", () => {
    // @ts-expect-error an ask carries a prompt
    const noPrompt: HookDecision = { type: "ask" };
    // @ts-expect-error a block's text is its reason, not a prompt
    const blockPrompt: HookDecision = { type: "block", prompt: "no" };
    // @ts-expect-error a hook blocks; "deny" is an answer to an ask
    const deny: HookDecision = { type: "deny", reason: "no" };
    // @ts-expect-error the prompt is text
    const numeric: HookDecision = { type: "ask", prompt: 1 };
    // @ts-expect-error a hook answers one of the four decisions, nothing else
    const maybe: Hook = { preToolUse: () => ({ type: "maybe" }) };
    void [noPrompt, blockPrompt, deny, numeric, maybe];
  });

  it("get a frozen call", () => {
    const hook: Hook = {
      preToolUse: (call) => {
        // @ts-expect-error the call is the gate's snapshot: read-only
        call.input = {};
        return { type: "allow" };
      },
    };
    void hook;
  });
});

describe("Gate", () => {
  const gate = new Gate(new LoopManagers());

  it("takes a Tool or a bare descriptor", () => {
    expectTypeOf<GateRequest["tool"]>().toEqualTypeOf<Tool | ToolDescriptor>();
    const descriptor: ToolDescriptor = { name: "deploy", description: "", inputSchema: { type: "object" } };
    void gate.call({ tool: descriptor, callId: "c1", input: {} }, () => "ok");
    void gate.call({ tool: deploy, callId: "c1", input: {}, signal: AbortSignal.timeout(1), turn: 2 }, async () => 1);
    // @ts-expect-error a descriptor has an input schema (any JSON Schema, but present)
    const noSchema: ToolDescriptor = { name: "deploy", description: "" };
    // @ts-expect-error the model's call id is required
    void gate.call({ tool: deploy, input: {} }, () => "ok");
    void noSchema;
  });

  it("hands execute the approved arguments and a signal", () => {
    expectTypeOf<GateExecute>().parameters.toEqualTypeOf<[input: unknown, options: { readonly signal: AbortSignal }]>();
  });

  it("resolves an outcome that narrows by type", async () => {
    const outcome = await gate.call({ tool: deploy, callId: "c1", input: {} }, () => "ok");
    expectTypeOf(outcome).toEqualTypeOf<GateOutcome>();
    expectTypeOf(outcome.record).toEqualTypeOf<GateDecision>();
    switch (outcome.type) {
      case "ran":
        expectTypeOf(outcome.output).toBeUnknown();
        // @ts-expect-error a call that ran has an output, not a refusal message
        void outcome.message;
        break;
      case "failed":
        expectTypeOf(outcome.error).toBeUnknown();
        expectTypeOf(outcome.message).toBeString();
        break;
      case "refused":
        expectTypeOf(outcome.message).toBeString();
        expectTypeOf(outcome.stop).toEqualTypeOf<RunStoppedError | undefined>();
        // @ts-expect-error a refused call never ran: no output
        void outcome.output;
        break;
      default:
        expectTypeOf(outcome).toBeNever();
    }
  });
});

describe("GateDecision", () => {
  it("carries a verdict from a closed set of literals", () => {
    expectTypeOf<GateDecision["verdict"]>().toEqualTypeOf<GateVerdict>();
    expectTypeOf<GateVerdict>().toEqualTypeOf<
      | "allow"
      | "allow_modified"
      | "deny"
      | "ask"
      | "ask_allowed"
      | "ask_denied"
      | "ask_unresolved"
      | "ask_expired"
      | "cancelled"
    >();
    expectTypeOf<RuleSource>().toEqualTypeOf<"middleware" | "context" | "ask_resolver" | "engine">();
  });

  it("is a read-only record with nullable pattern and reason", () => {
    expectTypeOf<GateDecision>().toEqualTypeOf<{
      readonly tool: string;
      readonly argsDigest: string;
      readonly argsSha256?: string | undefined;
      readonly verdict: GateVerdict;
      readonly ruleId: string;
      readonly ruleSource: RuleSource;
      readonly matchedPattern: string | null;
      readonly reason: string | null;
      readonly ts: number;
    }>();
    const record = {} as GateDecision;
    // @ts-expect-error records are read-only
    record.verdict = "allow";
  });
});

describe("LoopManagers", () => {
  type Builders = {
    [K in keyof LoopManagers as K extends `with${string}` ? K : never]: LoopManagers[K] extends (
      ...args: never[]
    ) => infer R
      ? R
      : never;
  };

  it("is a builder whose every with… returns LoopManagers", () => {
    expectTypeOf<Builders[keyof Builders]>().toEqualTypeOf<LoopManagers>();
    expectTypeOf<keyof Builders>().toEqualTypeOf<
      | "withAskResolver"
      | "withAskTimeout"
      | "withHook"
      | "withMiddleware"
      | "withObserver"
      | "withObserverErrorHandler"
      | "withIdGen"
      | "withClock"
      | "withMaxConcurrency"
      | "withGrantStore"
      | "withBudget"
      | "withLoopDetection"
      | "withCircuitBreaker"
    >();
    const managers = new LoopManagers()
      .withHook({ preToolUse: () => ({ type: "allow" }) })
      .withAskTimeout(60_000)
      .withBudget({ maxTurns: 5 })
      .withClock({ now: () => 0 });
    expectTypeOf(managers).toEqualTypeOf<LoopManagers>();
  });

  it("takes a clock with only now()", () => {
    expectTypeOf<{ now(): number }>().toExtend<ClockInput>();
  });

  it("keeps its settings to itself", () => {
    // @ts-expect-error the settings are internal
    void new LoopManagers().settings;
  });
});

describe("middleware", () => {
  it("continues with next(), which takes no call", () => {
    const audit: Middleware = async (_call, context, next) => {
      expectTypeOf(next).toEqualTypeOf<() => Promise<DispatchResult>>();
      if (context.descriptor.name === "rm") return context.deny({ ruleId: "no-rm", message: "not here" });
      return next();
    };
    // @ts-expect-error the tool runs with the approved arguments: next takes no new call
    const swap: Middleware = (call, _context, next) => next({ ...call, input: {} });
    expectTypeOf(permissionMiddleware).returns.toEqualTypeOf<Middleware>();
    void [audit, swap];
  });

  it("ends in ran, failed or refused", () => {
    expectTypeOf<DispatchResult["type"]>().toEqualTypeOf<"ran" | "failed" | "refused">();
  });
});

describe("observers", () => {
  it("see the gate's outcome after each call", () => {
    expectTypeOf<ToolPostEvent["outcome"]>().toEqualTypeOf<GateOutcome>();
    const observer: Observer = {
      onToolPost: ({ outcome }) => {
        if (outcome.type === "refused") expectTypeOf(outcome.message).toBeString();
      },
    };
    // @ts-expect-error observers are named callbacks; there is no catch-all
    const wrong: Observer = { onEvent: () => undefined };
    void [observer, wrong];
  });
});

describe("Agent", () => {
  const model: Model = { generate: async () => ({ text: "done", toolCalls: [] }) };
  const agent = new Agent({ model, tools: [deploy], managers: new LoopManagers(), instructions: "Be brief." });

  it("runs from a string or from earlier messages, to a RunResult", () => {
    expectTypeOf(agent.run("ship it")).toEqualTypeOf<Promise<RunResult>>();
    const earlier: readonly Message[] = [{ type: "user", text: "ship it" }];
    expectTypeOf(agent.run(earlier, { signal: AbortSignal.timeout(1_000) })).toEqualTypeOf<Promise<RunResult>>();
    expectTypeOf(agent.run).parameter(0).toEqualTypeOf<string | readonly Message[]>();
    // @ts-expect-error a user message has text, not content
    void agent.run([{ type: "user", content: "ship it" }]);
    // @ts-expect-error a run starts from text or messages
    void agent.run(42);
  });

  it("resolves the transcript, the records and the final text", () => {
    expectTypeOf<RunResult["records"]>().toEqualTypeOf<readonly GateDecision[]>();
    expectTypeOf<RunResult["messages"]>().toEqualTypeOf<readonly Message[]>();
    expectTypeOf<RunResult["text"]>().toBeString();
    expectTypeOf<Message["type"]>().toEqualTypeOf<"user" | "assistant" | "tool_result">();
    expectTypeOf<AssistantMessage["providerData"]>().toBeUnknown();
  });

  it("takes tools as an array of Tools or a live ToolSource", () => {
    expectTypeOf<AgentOptions["tools"]>().toEqualTypeOf<readonly Tool[] | ToolSource>();
    const live: ToolSource = { current: () => [deploy] };
    void new Agent({ model, tools: live });
    const descriptor: ToolDescriptor = deploy.descriptor;
    // @ts-expect-error Agent runs tools: a bare descriptor has nothing to execute (give it to Gate.call instead)
    void new Agent({ model, tools: [descriptor] });
  });

  it("needs a model that answers with tool calls", () => {
    expectTypeOf<readonly ToolCall[]>().toExtend<ModelResponse["toolCalls"]>();
    // @ts-expect-error every model turn lists its tool calls, even none
    const silent: Model = { generate: async () => ({ text: "done" }) };
    void silent;
  });
});

describe("the engine's public surface", () => {
  it("keeps internals out", () => {
    // @ts-expect-error ManagerSettings is internal
    type _Settings = import("loopctl/engine").ManagerSettings;
    // @ts-expect-error a gate's prepared tool is internal
    type _Gated = import("loopctl/engine").GatedTool;
  });
});
