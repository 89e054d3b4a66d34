import {
  Agent,
  OpenAIProvider,
  RunContext,
  RunState,
  Runner,
  Usage,
  applyPatchTool,
  ToolGuardrailFunctionOutputFactory,
  computerTool,
  defineToolInputGuardrail,
  hostedMcpTool,
  setDefaultModelProvider,
  shellTool,
  tool,
  toolNamespace,
  toolSearchTool,
} from "@openai/agents";
import type { Computer, ModelRequest, ModelResponse, RunToolApprovalItem } from "@openai/agents";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ApprovalChannel, SyncAskResolver } from "loopctl/ask";
import type { AskResolution, AskResolver, PendingAsk } from "loopctl/ask";
import { CancelledError, LoopDetectedError, LoopManagers } from "loopctl/engine";
import type { GateDecision, Hook } from "loopctl/engine";
import { Grant, GrantScope, MemoryGrantStore, argsDigest } from "loopctl/grant";
import { AgentApprovals, AgentsApprovalError, AgentsConfigError } from "loopctl/openai-agents";
import { gcChildResult } from "./support/child-process.js";
import { FakeModel, shownResults } from "./support/openai-agents-fixtures.js";
import type { FakeTurn } from "./support/openai-agents-fixtures.js";

function tools(executed: unknown[], description = "Deploy a version") {
  return {
    deploy: tool({
      name: "deploy",
      description,
      parameters: z.object({ env: z.string(), version: z.string() }),
      needsApproval: true,
      execute: async (input) => {
        executed.push(input);
        return `deployed ${input.version} to ${input.env}`;
      },
    }),
    status: tool({
      name: "status",
      description: "Read the deploy status",
      parameters: z.object({ env: z.string() }),
      execute: async ({ env }) => `${env} is green`,
    }),
  };
}

/** A tool that wants approval only for prod, recording what it restarted in `restarted`. */
function restartTool(restarted: unknown[]) {
  return tool({
    name: "restart",
    description: "Restart a service",
    parameters: z.object({ env: z.string() }),
    needsApproval: async (_context, { env }) => env === "prod",
    execute: async (input) => (restarted.push(input), `restarted ${input.env}`),
  });
}

interface Setup {
  readonly approvals: AgentApprovals;
  readonly records: GateDecision[];
  readonly asks: PendingAsk[];
  readonly executed: unknown[];
  readonly runner: Runner;
  agent(turns: readonly FakeTurn[], description?: string): { agent: Agent; model: FakeModel };
}

function setup(
  answer: (ask: PendingAsk) => AskResolution | Promise<AskResolution>,
  options: { store?: MemoryGrantStore; managers?: LoopManagers; prompt?: { maxArgsChars?: number } } = {},
): Setup {
  const records: GateDecision[] = [];
  const asks: PendingAsk[] = [];
  const executed: unknown[] = [];
  const resolver: AskResolver = { resolve: async (ask) => (asks.push(ask), answer(ask)) };
  const managers = (options.managers ?? new LoopManagers()).withObserver({
    onGate: ({ decision }) => records.push(decision),
  });
  const approvals = new AgentApprovals({
    resolver,
    managers,
    ...(options.store === undefined ? {} : { grants: options.store }),
    ...(options.prompt === undefined ? {} : { prompt: options.prompt }),
  });
  return {
    approvals,
    records,
    asks,
    executed,
    runner: new Runner(),
    agent(turns, description) {
      const model = new FakeModel(turns);
      const { deploy, status } = tools(executed, description);
      return {
        agent: new Agent({
          name: "ops",
          instructions: "Deploy when asked.",
          model,
          tools: approvals.tools([deploy, status]),
        }),
        model,
      };
    },
  };
}

const deployTurn = (callId: string, version: string): FakeTurn => ({
  calls: [[callId, "deploy", { env: "prod", version }]],
});

/** An agent `ops` on `model` with the hosted MCP server `ops` (every call approved first) and the wrapped `deploy`. */
function hostedAndWrapped(s: Setup, model: FakeModel): Agent {
  const { deploy } = tools(s.executed);
  return new Agent({
    name: "ops",
    model,
    tools: [
      hostedMcpTool({ serverLabel: "ops", serverUrl: "https://mcp.example", requireApproval: "always" }),
      ...s.approvals.tools([deploy]),
    ],
  });
}

/** A model whose first turn is the hosted MCP server's `approvalRequest`, and whose next says "not deployed". */
function modelAnswering(approvalRequest: ReturnType<typeof mcpApprovalRequest>): FakeModel {
  const model = new FakeModel([{ text: "not deployed" }]);
  const scripted = model.getResponse.bind(model);
  let requested = false;
  model.getResponse = async (request) =>
    requested ? scripted(request) : ((requested = true), { usage: new Usage(), output: [approvalRequest] });
  return model;
}

/** The output item a hosted MCP server's approval request for its `deploy` (id `mcpr_1`) is, with `args`. */
function mcpApprovalRequest(args: string) {
  return {
    type: "hosted_tool_call" as const,
    name: "mcp_approval_request",
    status: "completed" as const,
    providerData: {
      type: "mcp_approval_request",
      server_label: "ops",
      name: "deploy" as string,
      id: "mcpr_1",
      arguments: args,
    },
  };
}

describe("AgentApprovals: loopctl approvals on the OpenAI Agents SDK's Runner", () => {
  it("an interrupted run is answered by the resolver, remembered, and the next run is decided by the grant without an interruption", async () => {
    const store = new MemoryGrantStore();
    const first = setup(() => ({ type: "approve", remember: "this_tool" }), { store });
    const { agent, model } = first.agent([deployTurn("c1", "1.2"), { text: "deployed" }]);
    const interrupted = await first.runner.run(agent, "ship 1.2");
    expect(interrupted.interruptions.map((i) => i.name)).toEqual(["deploy"]);
    expect(first.executed).toEqual([]);
    const result = await first.approvals.settle(interrupted, (state) => first.runner.run(agent, state));
    expect(result.finalOutput).toBe("deployed");
    expect(first.executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(first.asks).toHaveLength(1);
    expect(first.asks[0]).toMatchObject({ tool: "deploy", callId: "c1" });
    expect(first.asks[0]!.prompt).toBe(
      'Allow the tool "deploy" to run?\nArguments:\n{\n  "env": "prod",\n  "version": "1.2"\n}',
    );
    expect(first.records).toMatchObject([{ tool: "deploy", verdict: "ask_allowed", ruleSource: "ask_resolver" }]);
    expect(shownResults(model)).toEqual({ c1: "deployed 1.2 to prod" });
    expect((await store.load()).map((g) => [g.tool, g.verdict, g.scope.type])).toEqual([
      ["deploy", "allow", "this_tool"],
    ]);

    // Another process over the same store: no interruption at all, one record by the grant.
    const next = setup(() => Promise.reject(new Error("nobody should be asked")), { store });
    const again = next.agent([deployTurn("c2", "1.3"), { text: "deployed again" }]);
    const direct = await next.runner.run(again.agent, "ship 1.3");
    expect(direct.interruptions).toEqual([]);
    expect(direct.finalOutput).toBe("deployed again");
    expect(next.executed).toEqual([{ env: "prod", version: "1.3" }]);
    expect(next.records).toMatchObject([{ verdict: "allow", ruleId: "grant", ruleSource: "context" }]);
  });

  it("a grant store given in managers decides needsApproval as grants does: a covered call is not interrupted for", async () => {
    const store = new MemoryGrantStore();
    const first = setup(() => ({ type: "approve", remember: "this_tool" }), {
      managers: new LoopManagers().withGrantStore(store),
    });
    const { agent } = first.agent([deployTurn("c1", "1.2"), { text: "deployed" }]);
    await first.approvals.run((input) => first.runner.run(agent, input), "ship 1.2");
    expect((await store.load()).map((g) => [g.tool, g.verdict])).toEqual([["deploy", "allow"]]);

    const next = setup(() => Promise.reject(new Error("nobody should be asked")), {
      managers: new LoopManagers().withGrantStore(store),
    });
    const again = next.agent([deployTurn("c2", "1.3"), { text: "deployed again" }]);
    const direct = await next.runner.run(again.agent, "ship 1.3");
    expect(direct.interruptions).toEqual([]);
    expect(next.executed).toEqual([{ env: "prod", version: "1.3" }]);
    expect(next.records).toMatchObject([{ verdict: "allow", ruleId: "grant", ruleSource: "context" }]);

    // A deny remembered there refuses without an interruption too.
    await store.save(new Grant("deploy", "deny", GrantScope.thisTool()));
    const denied = setup(() => Promise.reject(new Error("nobody should be asked")), {
      managers: new LoopManagers().withGrantStore(store),
    });
    const refused = denied.agent([deployTurn("c3", "1.4"), { text: "not deployed" }]);
    const result = await denied.runner.run(refused.agent, "ship 1.4");
    expect(result.interruptions).toEqual([]);
    expect(shownResults(refused.model)).toEqual({ c3: "Permission denied by remembered grant for tool 'deploy'" });
    expect(denied.executed).toEqual([]);
  });

  it("a call a tool input guardrail rejects before it is invoked never reaches the gate; one approved first leaves its ask_allowed, unexecuted", async () => {
    const cases = [
      // The SDK's default: the guardrails run once the call is approved, before it is invoked.
      { needsApproval: true, preApproval: false, asked: ["c1"], records: ["ask_allowed"] },
      // Before it interrupts for the approval: nobody is asked, and the gate sees no call.
      { needsApproval: true, preApproval: true, asked: [], records: [] },
      // A call that needs no approval is gated where it is invoked, after the guardrails.
      { needsApproval: false, preApproval: false, asked: [], records: [] },
    ];
    for (const { needsApproval, preApproval, asked, records } of cases) {
      const s = setup(() => ({ type: "approve" }));
      const guarded = tool({
        name: "deploy",
        description: "Deploy a version",
        parameters: z.object({ env: z.string(), version: z.string() }),
        needsApproval,
        inputGuardrails: [
          defineToolInputGuardrail({
            name: "freeze",
            run: async () => ToolGuardrailFunctionOutputFactory.rejectContent("deploys are frozen"),
          }),
        ],
        execute: async (input) => (s.executed.push(input), "deployed"),
      });
      const model = new FakeModel([deployTurn("c1", "1.2"), { text: "done" }]);
      const agent = new Agent({ name: "ops", model, tools: s.approvals.tools([guarded]) });
      const runner = new Runner({ toolExecution: { preApprovalInputGuardrails: preApproval } });
      const result = await s.approvals.run((input) => runner.run(agent, input), "ship 1.2");
      expect(result.finalOutput).toBe("done");
      expect(s.executed).toEqual([]);
      expect(shownResults(model)).toEqual({ c1: "deploys are frozen" });
      expect(s.asks.map((a) => a.callId)).toEqual(asked);
      expect(s.records.map((r) => r.verdict)).toEqual(records);
    }
  });

  it("a refusal is applied with state.reject: the model reads the gate's text, the tool never runs, one record", async () => {
    const store = new MemoryGrantStore();
    const s = setup(() => ({ type: "deny", reason: "not on a Friday", remember: "this_tool" }), { store });
    const { agent, model } = s.agent([deployTurn("c1", "1.2"), { text: "not deployed" }]);
    const result = await s.approvals.run((input) => s.runner.run(agent, input), "ship");
    expect(result.finalOutput).toBe("not deployed");
    expect(s.executed).toEqual([]);
    expect(shownResults(model)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });
    expect(s.records).toMatchObject([{ verdict: "ask_denied", reason: "denied by approver: not on a Friday" }]);

    // A remembered deny rejects without interrupting: the model reads the refusal, nobody is asked.
    const next = setup(() => Promise.reject(new Error("nobody should be asked")), { store });
    const again = next.agent([deployTurn("c2", "1.3"), { text: "still not" }]);
    const direct = await next.runner.run(again.agent, "ship");
    expect(direct.interruptions).toEqual([]);
    expect(next.executed).toEqual([]);
    expect(shownResults(again.model)).toEqual({ c2: "Permission denied by remembered grant for tool 'deploy'" });
    expect(next.records).toMatchObject([{ verdict: "deny", ruleId: "grant" }]);
    expect(next.asks).toEqual([]);
  });

  it("a tool that needs no approval runs through the gate without an interruption; the managers' hooks still decide", async () => {
    const managers = new LoopManagers().withHook({
      preToolUse: (call) =>
        (call.input as { env: string }).env === "prod"
          ? { type: "block", reason: "prod status is private" }
          : { type: "allow" },
    });
    const s = setup(() => ({ type: "approve" }), { managers });
    const { agent, model } = s.agent([
      {
        calls: [
          ["c1", "status", { env: "staging" }],
          ["c2", "status", { env: "prod" }],
        ],
      },
      { text: "ok" },
    ]);
    const result = await s.runner.run(agent, "status?");
    expect(result.interruptions).toEqual([]);
    expect(shownResults(model)).toEqual({ c1: "staging is green", c2: "prod status is private" });
    expect(s.records.map((r) => r.verdict).sort()).toEqual(["allow", "deny"]);
  });

  it("a hook's modify never skips the approval the SDK required: the resolver is asked about the modified arguments", async () => {
    const pin: Hook = {
      name: "pin",
      preToolUse: (call) => ({ type: "modify", input: { ...(call.input as object), version: "1.2.1" } }),
    };
    const refused = setup(() => ({ type: "deny" }), { managers: new LoopManagers().withHook(pin) });
    const one = refused.agent([deployTurn("c1", "1.2"), { text: "not deployed" }]);
    await refused.approvals.run((input) => refused.runner.run(one.agent, input), "ship");
    expect(refused.asks).toHaveLength(1);
    expect(refused.asks[0]).toMatchObject({ callId: "c1", argsDigest: argsDigest({ env: "prod", version: "1.2.1" }) });
    expect(refused.asks[0]!.prompt).toContain('"version": "1.2.1"');
    expect(refused.executed).toEqual([]);
    expect(refused.records).toMatchObject([{ verdict: "ask_denied" }]);
    expect(shownResults(one.model)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });

    const approved = setup(() => ({ type: "approve" }), { managers: new LoopManagers().withHook(pin) });
    const two = approved.agent([deployTurn("c2", "1.2"), { text: "deployed" }]);
    await approved.approvals.run((input) => approved.runner.run(two.agent, input), "ship");
    expect(approved.asks).toHaveLength(1);
    expect(approved.executed).toEqual([{ env: "prod", version: "1.2.1" }]);
    expect(approved.records).toMatchObject([
      { verdict: "ask_allowed", argsDigest: argsDigest({ env: "prod", version: "1.2.1" }) },
    ]);
    expect(shownResults(two.model)).toEqual({ c2: "deployed 1.2.1 to prod" });
  });

  it("a hook that writes to its context never skips the approval the SDK required", async () => {
    // Writing another run id into the context would have hidden the call from the adapter's approval hook.
    const sloppy: Hook = {
      name: "sloppy",
      preToolUse: (_call, context) => {
        try {
          (context as { runId: string }).runId = "00000000-0000-0000-0000-000000000000";
        } catch {
          // Refused: the context is the gate's.
        }
        return { type: "allow" };
      },
    };
    const refused = setup(() => ({ type: "deny" }), { managers: new LoopManagers().withHook(sloppy) });
    const one = refused.agent([deployTurn("c1", "1.2"), { text: "not deployed" }]);
    await refused.approvals.run((input) => refused.runner.run(one.agent, input), "ship");
    expect(refused.executed).toEqual([]);
    expect(refused.asks).toMatchObject([{ callId: "c1" }]);
    expect(refused.records).toMatchObject([{ verdict: "ask_denied" }]);
  });

  it("a hook's block refuses an interrupted call without asking anyone", async () => {
    const freeze: Hook = { preToolUse: () => ({ type: "block", reason: "release freeze" }) };
    const s = setup(() => Promise.reject(new Error("nobody should be asked")), {
      managers: new LoopManagers().withHook(freeze),
    });
    const { agent, model } = s.agent([deployTurn("c1", "1.2"), { text: "frozen" }]);
    await s.approvals.run((input) => s.runner.run(agent, input), "ship");
    expect(s.asks).toEqual([]);
    expect(s.executed).toEqual([]);
    expect(s.records).toMatchObject([{ verdict: "deny", ruleId: "hook", reason: "release freeze" }]);
    expect(shownResults(model)).toEqual({ c1: "release freeze" });
  });

  it("a hook that modifies arguments into ones the tool wants approved is asked about, though the SDK did not interrupt", async () => {
    const restarted: unknown[] = [];
    const restart = restartTool(restarted);
    const toProd: Hook = {
      preToolUse: (call) => ({ type: "modify", input: { ...(call.input as object), env: "prod" } }),
    };
    const asks: PendingAsk[] = [];
    const approvals = new AgentApprovals({
      resolver: { resolve: async (ask) => (asks.push(ask), { type: "deny" }) },
      managers: new LoopManagers().withHook(toProd),
    });
    const model = new FakeModel([{ calls: [["c1", "restart", { env: "staging" }]] }, { text: "ok" }]);
    const agent = new Agent({ name: "ops", model, tools: approvals.tools([restart]) });
    const result = await new Runner().run(agent, "restart staging");
    expect(result.interruptions).toEqual([]);
    expect(asks).toMatchObject([{ tool: "restart", argsDigest: argsDigest({ env: "prod" }) }]);
    expect(restarted).toEqual([]);
    expect(shownResults(model)).toEqual({ c1: "Permission denied by approver for tool 'restart'" });
  });

  it("several interruptions in one turn: each is asked once and takes its own answer", async () => {
    const s = setup((ask) => (ask.callId === "a" ? { type: "approve" } : { type: "deny" }));
    const { agent, model } = s.agent([
      {
        calls: [
          ["a", "deploy", { env: "prod", version: "1" }],
          ["b", "deploy", { env: "prod", version: "2" }],
        ],
      },
      { text: "half" },
    ]);
    const result = await s.approvals.run((input) => s.runner.run(agent, input), "ship both");
    expect(result.finalOutput).toBe("half");
    expect(s.executed).toEqual([{ env: "prod", version: "1" }]);
    expect(shownResults(model)).toEqual({
      a: "deployed 1 to prod",
      b: "Permission denied by approver for tool 'deploy'",
    });
    expect(s.records.map((r) => r.verdict).sort()).toEqual(["ask_allowed", "ask_denied"]);
    expect(s.asks.map((a) => a.callId).sort()).toEqual(["a", "b"]);
  });

  it("an approval pinned to the tool's descriptor: a changed tool interrupts again", async () => {
    const store = new MemoryGrantStore();
    const s = setup(() => ({ type: "approve", remember: "this_tool" }), { store });
    const one = s.agent([deployTurn("c1", "1"), { text: "ok" }]);
    await s.approvals.run((input) => s.runner.run(one.agent, input), "go");
    const changed = s.agent([deployTurn("c2", "2"), { text: "ok" }], "Deploy a version, and delete the old one");
    const interrupted = await s.runner.run(changed.agent, "go");
    expect(interrupted.interruptions).toHaveLength(1);
    await s.approvals.settle(interrupted, (state) => s.runner.run(changed.agent, state));
    expect(s.asks).toHaveLength(2);
    expect(s.asks[1]!.prompt).toContain("changed since this was last answered");
  });

  it("an approval pinned to the tool's output schema too: a tool whose output schema changed interrupts again", async () => {
    const store = new MemoryGrantStore();
    const asks: PendingAsk[] = [];
    const approvals = new AgentApprovals({
      resolver: new SyncAskResolver((ask) => (asks.push(ask), { type: "approve", remember: "this_tool" })),
      grants: store,
      managers: new LoopManagers().withHook({ preToolUse: () => ({ type: "ask", prompt: "count?" }) }),
    });
    const counter = (output: z.ZodObject) =>
      tool({
        name: "count",
        description: "Count",
        parameters: z.object({ n: z.number() }),
        outputSchema: output,
        execute: async ({ n }) => ({ total: n, deleted: [] }),
      });
    const runWith = async (output: z.ZodObject, callId: string): Promise<void> => {
      const model = new FakeModel([{ calls: [[callId, "count", { n: 1 }]] }, { text: "done" }]);
      const agent = new Agent({ name: "a", model, tools: approvals.tools([counter(output)]) });
      await new Runner().run(agent, "go");
    };
    await runWith(z.object({ total: z.number() }), "c1");
    await runWith(z.object({ total: z.number() }), "c2");
    expect(asks.map((ask) => ask.callId)).toEqual(["c1"]);
    // The same name, description and parameters, now saying it deletes: the approval given before does not cover it.
    await runWith(z.object({ total: z.number(), deleted: z.array(z.string()) }), "c3");
    expect(asks.map((ask) => ask.callId)).toEqual(["c1", "c3"]);
    expect(asks[1]!.prompt).toContain("changed since this was last answered");
  });

  it("an interruption is answered for the tool of its name the SDK called, not for a disabled one of the same name", async () => {
    const store = new MemoryGrantStore();
    const s = setup(() => ({ type: "approve", remember: "this_tool" }), { store });
    const legacy = { ...tools(s.executed, "Deploy a version (legacy)").deploy, isEnabled: async () => false };
    const current = tools(s.executed, "Deploy a version, and delete the old one").deploy;
    // A grant for the legacy deploy, which the model can no longer call.
    const old = new Agent({
      name: "ops",
      model: new FakeModel([deployTurn("c1", "1"), { text: "ok" }]),
      tools: s.approvals.tools([tools(s.executed, "Deploy a version (legacy)").deploy]),
    });
    await s.approvals.run((input) => s.runner.run(old, input), "go");
    expect(s.asks).toHaveLength(1);

    const model = new FakeModel([deployTurn("c2", "2"), { text: "done" }]);
    const agent = new Agent({ name: "ops", model, tools: s.approvals.tools([legacy, current]) });
    const result = await s.approvals.run((input) => s.runner.run(agent, input), "go");
    expect(result.finalOutput).toBe("done");
    expect(s.asks).toHaveLength(2);
    expect(s.executed).toEqual([
      { env: "prod", version: "1" },
      { env: "prod", version: "2" },
    ]);
    expect(shownResults(model)).toEqual({ c2: "deployed 2 to prod" });
  });

  it("an isEnabled that throws when settle reads it is a typed error naming the tool, before anyone is asked", async () => {
    const s = setup(() => ({ type: "approve" }));
    let reads = 0;
    const broken = new Error("flag service down");
    const deploy = {
      ...tools(s.executed).deploy,
      isEnabled: async () => {
        if (++reads > 1) throw broken;
        return true;
      },
    };
    const agent = new Agent({
      name: "ops",
      model: new FakeModel([deployTurn("c1", "1"), { text: "x" }]),
      tools: s.approvals.tools([deploy]),
    });
    const error = (await s.approvals
      .run((input) => s.runner.run(agent, input), "go")
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect(error).toMatchObject({ tool: "deploy", cause: broken });
    expect(s.asks).toEqual([]);
    expect(s.executed).toEqual([]);
  });

  it("a hosted MCP tool's name holding a newline or a quote is shown in JSON's escapes in an AgentsApprovalError", async () => {
    const name = "deploy'\n\u001b[31mforged";
    const s = setup(() => ({ type: "approve" }));
    const approvalRequest = mcpApprovalRequest("{}");
    approvalRequest.providerData.name = name;
    const agent = hostedAndWrapped(s, modelAnswering(approvalRequest));
    const interrupted = await s.runner.run(agent, "ship");
    expect(interrupted.interruptions.map((i) => i.name)).toEqual([name]);
    const error = (await s.approvals
      .settle(interrupted, (state) => s.runner.run(agent, state))
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect(error).toMatchObject({ tool: name });
    expect(error.message.startsWith(`tool ${JSON.stringify(name)}: `)).toBe(true);
    expect(error.message).not.toContain("\n");
    expect(s.asks).toEqual([]);
  });

  it("fails closed: a resolver that throws refuses, arguments that are not JSON are refused before anyone is asked", async () => {
    const s = setup(() => {
      throw new Error("approver offline");
    });
    const { agent, model } = s.agent([deployTurn("c1", "1"), { text: "ok" }]);
    await s.approvals.run((input) => s.runner.run(agent, input), "go");
    expect(s.executed).toEqual([]);
    expect(s.records).toMatchObject([{ verdict: "ask_denied", reason: "ask resolver failed: approver offline" }]);
    expect(shownResults(model)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });

    const t = setup(() => ({ type: "approve" }));
    const bad = t.agent([{ calls: [["c9", "deploy", '{"env": "prod"']] }, { text: "sorry" }]);
    await t.approvals.run((input) => t.runner.run(bad.agent, input), "go");
    expect(t.asks).toEqual([]);
    expect(t.executed).toEqual([]);
    expect(t.records).toMatchObject([{ verdict: "deny", ruleId: "invalid_arguments" }]);
    // For arguments it could not parse, the SDK shows its own rejection text, not the message given to reject().
    expect(shownResults(bad.model)).toEqual({ c9: "Tool execution was not approved." });
  });

  for (const stream of [false, true])
    it(`arguments that are JSON but not an object${stream ? " (streamed)" : ""}: the SDK interrupts, settle refuses without asking, the tool never runs`, async () => {
      const s = setup(() => ({ type: "approve" }));
      const { agent, model } = s.agent([
        {
          calls: [
            ["c1", "deploy", "[1, 2]"],
            ["c2", "deploy", '{"env": "prod"'],
            // A tool that needs no approval: wrapped, its needsApproval is a function too.
            ["c3", "status", "7"],
          ],
        },
        { text: "sorry" },
      ]);
      const first = stream ? await s.runner.run(agent, "go", { stream: true }) : await s.runner.run(agent, "go");
      if ("completed" in first) await first.completed;
      // The SDK asks a wrapped tool's needsApproval nothing about arguments it cannot inspect: it interrupts for them.
      expect(first.interruptions.map((i) => (i.rawItem as { callId?: string }).callId)).toEqual(["c1", "c2", "c3"]);
      const result = await s.approvals.settle(first, (state) =>
        stream ? s.runner.run(agent, state, { stream: true }) : s.runner.run(agent, state),
      );
      expect(result.finalOutput).toBe("sorry");
      expect(s.asks).toEqual([]);
      expect(s.executed).toEqual([]);
      expect(s.records.map((r) => [r.verdict, r.ruleId]).sort()).toEqual([
        ["deny", "invalid_arguments"],
        ["deny", "schema"],
        ["deny", "schema"],
      ]);
      expect(shownResults(model)).toEqual({
        c1: "Invalid arguments for tool 'deploy': $: must be object",
        c2: "Tool execution was not approved.",
        c3: "Invalid arguments for tool 'status': $: must be object",
      });
    });

  /** A tool that wants approval only for prod, keeping every input its own needsApproval was asked about. */
  const watchedRestart = (restarted: unknown[], seen: unknown[]) =>
    tool({
      name: "restart",
      description: "Restart a service",
      parameters: z.object({ env: z.string() }),
      needsApproval: async (_context, input) => (seen.push(input), input.env === "prod"),
      execute: async (input) => (restarted.push(input), `restarted ${input.env}`),
    });

  for (const stream of [false, true])
    it(`an object call that fails the tool's schema${stream ? " (streamed)" : ""} is not interrupted: the gate refuses it where it runs, with its one record`, async () => {
      const s = setup(() => Promise.reject(new Error("nobody should be asked")));
      const restarted: unknown[] = [];
      const seen: unknown[] = [];
      const model = new FakeModel([
        {
          calls: [
            // deploy always needs approval; restart's own needsApproval would say yes to "prod" too.
            ["c1", "deploy", { env: 5, version: "1.2" }],
            ["c2", "restart", { env: ["prod"] }],
          ],
        },
        { text: "fixed the arguments" },
      ]);
      const agent = new Agent({
        name: "ops",
        model,
        tools: s.approvals.tools([tools(s.executed).deploy, watchedRestart(restarted, seen)]),
      });
      const direct = stream ? await s.runner.run(agent, "go", { stream: true }) : await s.runner.run(agent, "go");
      if ("completed" in direct) await direct.completed;
      expect(direct.interruptions).toEqual([]);
      expect(direct.finalOutput).toBe("fixed the arguments");
      expect(s.executed).toEqual([]);
      expect(restarted).toEqual([]);
      expect(s.asks).toEqual([]);
      // The tool's own needsApproval is never asked about arguments that can never run.
      expect(seen).toEqual([]);
      expect(s.records.map((r) => [r.tool, r.verdict, r.ruleId, r.ruleSource]).sort()).toEqual([
        ["deploy", "deny", "schema", "engine"],
        ["restart", "deny", "schema", "engine"],
      ]);
      expect(shownResults(model)).toEqual({
        c1: "Invalid arguments for tool 'deploy': $.env: must be string",
        c2: "Invalid arguments for tool 'restart': $.env: must be string",
      });
    });

  it("a tool whose input schema the gate cannot compile is never interrupted for: every call is refused where it runs", async () => {
    const s = setup(() => Promise.reject(new Error("nobody should be asked")));
    const ran: unknown[] = [];
    const model = new FakeModel([{ calls: [["c1", "tag", { name: "v1" }]] }, { text: "could not" }]);
    const tag = tool({
      name: "tag",
      description: "Tag a release",
      // A format the gate's validator does not know: it refuses to guess, so no call can pass.
      parameters: {
        type: "object" as const,
        properties: { name: { type: "string", format: "release-tag" } },
        required: ["name"],
        additionalProperties: false as const,
      },
      needsApproval: true,
      execute: async (input) => (ran.push(input), "tagged"),
    });
    const agent = new Agent({ name: "ops", model, tools: s.approvals.tools([tag]) });
    const direct = await s.runner.run(agent, "tag it");
    expect(direct.interruptions).toEqual([]);
    expect(direct.finalOutput).toBe("could not");
    expect(ran).toEqual([]);
    expect(s.asks).toEqual([]);
    expect(s.records).toMatchObject([{ tool: "tag", verdict: "deny", ruleId: "schema" }]);
    expect(shownResults(model)).toEqual({
      c1: "Invalid arguments for tool 'tag': the tool's input schema does not compile",
    });
  });

  it("a valid call still interrupts as before, and its tool's needsApproval sees its arguments", async () => {
    const s = setup(() => ({ type: "approve" }));
    const restarted: unknown[] = [];
    const seen: unknown[] = [];
    const model = new FakeModel([
      {
        calls: [
          ["c1", "restart", { env: "prod" }],
          ["c2", "restart", { env: "dev" }],
        ],
      },
      { text: "restarted" },
    ]);
    const agent = new Agent({ name: "ops", model, tools: s.approvals.tools([watchedRestart(restarted, seen)]) });
    const interrupted = await s.runner.run(agent, "restart");
    expect(interrupted.interruptions.map((i) => (i.rawItem as { callId?: string }).callId)).toEqual(["c1"]);
    // Asked by the SDK, and for the call that runs without an interruption by the gate again, where it runs.
    expect(new Set(seen.map((input) => JSON.stringify(input)))).toEqual(new Set(['{"env":"prod"}', '{"env":"dev"}']));
    const result = await s.approvals.settle(interrupted, (state) => s.runner.run(agent, state));
    expect(result.finalOutput).toBe("restarted");
    expect(restarted.sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))).toEqual([
      { env: "dev" },
      { env: "prod" },
    ]);
    expect(s.asks.map((a) => a.callId)).toEqual(["c1"]);
    expect(s.records.map((r) => [r.verdict, r.argsDigest]).sort()).toEqual([
      ["allow", argsDigest({ env: "dev" })],
      ["ask_allowed", argsDigest({ env: "prod" })],
    ]);
  });

  it("fails closed on a grant store that fails: the call is refused where it runs, without an interruption, and nobody is asked", async () => {
    const down = (): Promise<never> => Promise.reject(new Error("disk gone"));
    const store = new MemoryGrantStore();
    Object.assign(store, { load: down, covering: down, save: down, revoke: down, clear: down });
    const s = setup(() => Promise.reject(new Error("nobody should be asked")), { store });
    const { agent, model } = s.agent([deployTurn("c1", "1.2"), { text: "could not" }]);
    const direct = await s.runner.run(agent, "ship");
    expect(direct.interruptions).toEqual([]);
    expect(direct.finalOutput).toBe("could not");
    expect(s.executed).toEqual([]);
    expect(s.asks).toEqual([]);
    expect(shownResults(model)).toEqual({ c1: "Permission denied: grant store unavailable for tool 'deploy'" });
    expect(s.records).toMatchObject([
      { verdict: "deny", ruleId: "grant", ruleSource: "engine", reason: "grant store failed: disk gone" },
    ]);
  });

  it("an interruption of a tool it did not wrap is a typed error, raised before anyone is asked", async () => {
    const s = setup(() => ({ type: "approve" }));
    const model = new FakeModel([{ calls: [["c1", "raw", {}]] }, { text: "x" }]);
    const raw = tool({
      name: "raw",
      description: "Not wrapped",
      parameters: z.object({}),
      needsApproval: true,
      execute: async () => "ran",
    });
    const agent = new Agent({ name: "ops", model, tools: [raw] });
    const error = (await s.approvals
      .run((input) => s.runner.run(agent, input), "go")
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect(error).toMatchObject({ code: "OPENAI_AGENTS_APPROVAL", tool: "raw" });
    expect(s.asks).toEqual([]);
  });

  it("an interruption for a hosted MCP call named like a wrapped tool is a typed error: nobody is asked, and no record lands for the wrapped tool", async () => {
    const s = setup(() => ({ type: "approve" }));
    const approvalRequest = mcpApprovalRequest(JSON.stringify({ env: "prod", version: "1.2" }));
    const agent = hostedAndWrapped(s, modelAnswering(approvalRequest));
    const interrupted = await s.runner.run(agent, "ship");
    expect(interrupted.interruptions.map((i) => [i.rawItem.type, i.name])).toEqual([["hosted_tool_call", "deploy"]]);
    const error = (await s.approvals
      .settle(interrupted, (state) => s.runner.run(agent, state))
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect(error).toMatchObject({ code: "OPENAI_AGENTS_APPROVAL", tool: "deploy" });
    expect(error.message).toMatch(/hosted_tool_call/);
    expect(s.asks).toEqual([]);
    expect(s.records).toEqual([]);
  });

  /**
   * A turn in which the model sends a hosted MCP server's approval request (`mcpr_1`, for the server `ops`'s tool
   * `deploy`) and a call `c1` of the wrapped `deploy`, then ends with text; the agent has both tools.
   */
  const hostedAndGated = (s: Setup) => {
    const model = new FakeModel([
      {
        output: [
          mcpApprovalRequest(JSON.stringify({ env: "prod", version: "9.9" })),
          {
            type: "function_call",
            callId: "c1",
            name: "deploy",
            arguments: JSON.stringify({ env: "prod", version: "1.2" }),
            status: "completed",
          },
        ],
      },
      { text: "done" },
    ]);
    const agent = hostedAndWrapped(s, model);
    return { model, agent };
  };

  /** The answers to hosted MCP approval requests the model was shown in its last request, by request id. */
  const hostedAnswers = (model: FakeModel): Record<string, unknown> => {
    const out: Record<string, unknown> = {};
    for (const item of model.inputs.at(-1) ?? []) {
      if (item.type !== "hosted_tool_call" || item.name !== "mcp_approval_response") continue;
      const data = item.providerData as { approval_request_id: string; approve: boolean };
      out[data.approval_request_id] = data.approve;
    }
    return out;
  };

  it.each([
    ["approved", true],
    ["rejected", false],
  ] as const)(
    "a hosted MCP approval %s by hand on the RunState is left to that answer: settle asks only about the function call of the turn, resumes, and the server is told the answer",
    async (_, approve) => {
      const s = setup(() => ({ type: "approve" }));
      const { model, agent } = hostedAndGated(s);
      const interrupted = await s.runner.run(agent, "ship");
      expect(interrupted.interruptions.map((i) => [i.rawItem.type, i.name])).toEqual([
        ["function_call", "deploy"],
        ["hosted_tool_call", "deploy"],
      ]);
      const hosted = interrupted.interruptions.find((i) => i.rawItem.type === "hosted_tool_call")!;
      if (approve) interrupted.state.approve(hosted);
      else interrupted.state.reject(hosted, { message: "not from here" });
      const result = await s.approvals.settle(interrupted, (state) => s.runner.run(agent, state));
      expect(result.finalOutput).toBe("done");
      expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([["deploy", "c1"]]);
      expect(s.records).toEqual([
        expect.objectContaining({
          tool: "deploy",
          verdict: "ask_allowed",
          argsDigest: argsDigest({ env: "prod", version: "1.2" }),
        }),
      ]);
      expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
      expect(shownResults(model)).toEqual({ c1: "deployed 1.2 to prod" });
      // A refused request is not run by the server.
      expect(hostedAnswers(model)).toEqual({ mcpr_1: approve });
    },
  );

  it("a hosted MCP approval nobody answered on the RunState makes settle throw before anyone is asked: nothing of the turn is decided or resumed", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { model, agent } = hostedAndGated(s);
    const interrupted = await s.runner.run(agent, "ship");
    let resumed = 0;
    const error = (await s.approvals
      .settle(interrupted, (state) => (resumed++, s.runner.run(agent, state)))
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect(error).toMatchObject({ code: "OPENAI_AGENTS_APPROVAL", tool: "deploy" });
    expect(error.message).toMatch(/hosted_tool_call.*answer it on the RunState/);
    expect(s.asks).toEqual([]);
    expect(s.records).toEqual([]);
    expect(resumed).toBe(0);
    expect(s.executed).toEqual([]);
    expect(model.inputs).toHaveLength(1);
    // Nothing was applied to the state: the function call is still unanswered there.
    expect(interrupted.state._context.isToolApproved({ toolName: "deploy", callId: "c1" })).toBeUndefined();
  });

  it("a turn whose only interruption is a hosted MCP approval answered by hand resumes with nobody asked; a resume that interrupts for it again throws instead of resuming for ever", async () => {
    const s = setup(() => ({ type: "approve" }));
    const approvalRequest = mcpApprovalRequest("{}");
    const model = new FakeModel([{ output: [approvalRequest] }, { text: "done" }, { output: [approvalRequest] }]);
    const agent = new Agent({
      name: "ops",
      model,
      tools: [hostedMcpTool({ serverLabel: "ops", serverUrl: "https://mcp.example", requireApproval: "always" })],
    });
    const interrupted = await s.runner.run(agent, "ship");
    interrupted.state.approve(interrupted.interruptions[0]!);
    const result = await s.approvals.settle(interrupted, (state) => s.runner.run(agent, state));
    expect(result.finalOutput).toBe("done");
    expect(hostedAnswers(model)).toEqual({ mcpr_1: true });
    expect(s.asks).toEqual([]);
    expect(s.records).toEqual([]);

    // A resume that hands back the interrupted turn as it was (its answer never read): resuming again would never end.
    const again = await s.runner.run(agent, "ship again");
    again.state.reject(again.interruptions[0]!);
    let resumed = 0;
    const error = (await s.approvals
      .settle(again, () => (resumed++, Promise.resolve(again)))
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect(error).toMatchObject({ code: "OPENAI_AGENTS_APPROVAL", tool: "deploy" });
    expect(error.message).toMatch(/interrupted again/);
    expect(resumed).toBe(1);
    expect(s.asks).toEqual([]);
  });

  /** One deploy call on a runner of its own, its records and executions kept, and a controller to cancel with. */
  const cancellable = (resolver: AskResolver) => {
    const records: GateDecision[] = [];
    const approvals = new AgentApprovals({
      resolver,
      managers: new LoopManagers().withObserver({ onGate: ({ decision }) => records.push(decision) }),
    });
    const executed: unknown[] = [];
    const agent = new Agent({
      name: "ops",
      model: new FakeModel([deployTurn("c1", "1"), { text: "x" }]),
      tools: approvals.tools([tools(executed).deploy]),
    });
    return { approvals, records, executed, agent, runner: new Runner(), controller: new AbortController() };
  };

  it("a cancel while an ask waits rejects with CancelledError after the call's cancelled record; nothing runs", async () => {
    const [channel, approver] = ApprovalChannel.pair(2);
    const { approvals, records, executed, agent, runner, controller } = cancellable(channel);
    const settling = approvals.run((input) => runner.run(agent, input), "go", { signal: controller.signal });
    await approver.next();
    controller.abort(new Error("user left"));
    await expect(settling).rejects.toBeInstanceOf(CancelledError);
    expect(records).toMatchObject([{ verdict: "cancelled", reason: "cancelled while awaiting approval" }]);
    expect(executed).toEqual([]);
  });

  for (const stream of [false, true])
    it(`the SDK's own run cancelled while a call waits in the gate ends as the SDK ends a cancelled run${stream ? " (streamed: cancelled, not failed)" : " (its signal's reason)"}, with the call's cancelled record`, async () => {
      const [channel, approver] = ApprovalChannel.pair(2);
      const records: GateDecision[] = [];
      const approvals = new AgentApprovals({
        resolver: channel,
        managers: new LoopManagers()
          .withHook({ preToolUse: () => ({ type: "ask", prompt: "status of prod?" }) })
          .withObserver({ onGate: ({ decision }) => records.push(decision) }),
      });
      const model = new FakeModel([{ calls: [["c1", "status", { env: "prod" }]] }, { text: "x" }]);
      const agent = new Agent({ name: "ops", model, tools: approvals.tools([tools([]).status]) });
      const controller = new AbortController();
      const reason = new Error("user left");
      const ended = stream
        ? new Runner()
            .run(agent, "go", { signal: controller.signal, stream: true })
            .then(async (result) => (await result.completed, { cancelled: result.cancelled }))
        : new Runner().run(agent, "go", { signal: controller.signal });
      const ask = await approver.next();
      expect(ask?.callId).toBe("c1");
      controller.abort(reason);
      if (stream) await expect(ended).resolves.toEqual({ cancelled: true });
      else await expect(ended).rejects.toBe(reason);
      expect(records).toMatchObject([{ verdict: "cancelled", reason: "cancelled while awaiting approval" }]);
      expect(approver.resolve(ask!.id, { type: "approve" })).toBe(false);
    });

  it("an answer the approver was told reached the wait (true) is the call's, even when a cancel follows in the same breath: ask_allowed lands, nothing runs", async () => {
    const [channel, approver] = ApprovalChannel.pair(2);
    const { approvals, records, executed, agent, runner, controller } = cancellable(channel);
    const settling = approvals.run((input) => runner.run(agent, input), "go", { signal: controller.signal });
    const ask = (await approver.next())!;
    expect(approver.resolve(ask.id, { type: "approve" })).toBe(true);
    controller.abort(new Error("user left"));
    await expect(settling).rejects.toBeInstanceOf(CancelledError);
    expect(records).toMatchObject([{ verdict: "ask_allowed", ruleSource: "ask_resolver" }]);
    expect(executed).toEqual([]);
  });

  it("run() with a signal already aborted starts no run: CancelledError, the agent never called, nothing runs", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent, model } = s.agent([
      { calls: [["c1", "status", { env: "prod" }]] },
      deployTurn("c2", "1"),
      { text: "x" },
    ]);
    let started = 0;
    const reason = new Error("user left");
    const error: unknown = await s.approvals
      .run((input) => (started++, s.runner.run(agent, input)), "go", { signal: AbortSignal.abort(reason) })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(CancelledError);
    expect((error as CancelledError).cause).toBe(reason);
    expect(started).toBe(0);
    expect(model.inputs).toEqual([]);
    expect(s.records).toEqual([]);
    expect(s.asks).toEqual([]);
  });

  it("settle with its signal aborted resumes nothing: a function call and a shell call answered by hand do not run", async () => {
    const s = setup(() => ({ type: "approve" }));
    const shelled: unknown[] = [];
    const model = new FakeModel([
      {
        output: [
          { type: "shell_call", callId: "k1", status: "completed", action: { commands: ["rm -rf build"] } },
          {
            type: "function_call",
            callId: "c1",
            name: "deploy",
            arguments: '{"env":"prod","version":"1"}',
            status: "completed",
          },
        ],
      },
      { text: "x" },
    ]);
    const shell = shellTool({
      needsApproval: true,
      shell: { run: async (action) => (shelled.push(action), { output: [] }) },
    });
    const agent = new Agent({ name: "ops", model, tools: [shell, ...s.approvals.tools([tools(s.executed).deploy])] });
    const interrupted = await s.runner.run(agent, "go");
    for (const item of interrupted.interruptions) interrupted.state.approve(item);
    const reason = new Error("user left");
    let resumed = 0;
    const error: unknown = await s.approvals
      .settle(interrupted, (state) => (resumed++, s.runner.run(agent, state)), { signal: AbortSignal.abort(reason) })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CancelledError);
    expect((error as CancelledError).cause).toBe(reason);
    expect([resumed, s.executed, shelled, s.asks, s.records]).toEqual([0, [], [], [], []]);
    expect(model.inputs).toHaveLength(1);
  });

  it("a cancel after the approval, before the resumed run reaches the call: the call does not run", async () => {
    const { approvals, records, executed, agent, runner, controller } = cancellable({
      resolve: async () => ({ type: "approve" }),
    });
    const settling = approvals.run(
      (input) => {
        // The user leaves as the run resumes, and the runner was not given the signal.
        if (typeof input !== "string") controller.abort(new Error("user left"));
        return runner.run(agent, input);
      },
      "go",
      { signal: controller.signal },
    );
    const error = (await settling.catch((e: unknown) => e)) as { error?: unknown };
    expect(executed).toEqual([]);
    expect(error.error).toBeInstanceOf(CancelledError);
    expect(records).toMatchObject([{ verdict: "ask_allowed" }]);
  });

  it("an approved call the run never executes still ends, with its one record", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent } = s.agent([deployTurn("c1", "1"), { text: "x" }]);
    const interrupted = await s.runner.run(agent, "go");
    await expect(s.approvals.settle(interrupted, () => Promise.reject(new Error("resume failed")))).rejects.toThrow(
      "resume failed",
    );
    expect(s.records).toMatchObject([{ verdict: "ask_allowed" }]);
    expect(s.executed).toEqual([]);
  });

  it("an approved call the run never executes ends as the tool's failure (AgentsApprovalError), seen by onToolPost; nothing reads it as cancelled", async () => {
    const ended: { type: string; error?: unknown; verdict: string }[] = [];
    const managers = new LoopManagers().withObserver({
      onToolPost: ({ outcome }) =>
        ended.push({
          type: outcome.type,
          verdict: outcome.record.verdict,
          ...(outcome.type === "failed" ? { error: outcome.error } : {}),
        }),
    });
    const s = setup(() => ({ type: "approve" }), { managers });
    const { agent } = s.agent([deployTurn("c1", "1"), { text: "x" }]);
    const interrupted = await s.runner.run(agent, "go");
    await expect(s.approvals.settle(interrupted, () => Promise.reject(new Error("resume failed")))).rejects.toThrow(
      "resume failed",
    );
    expect(ended).toMatchObject([{ type: "failed", verdict: "ask_allowed" }]);
    expect(ended[0]!.error).toBeInstanceOf(AgentsApprovalError);
    expect((ended[0]!.error as AgentsApprovalError).message).toMatch(/the run did not execute the approved call/);
    expect(s.records).toMatchObject([{ verdict: "ask_allowed" }]);
    expect(s.executed).toEqual([]);
  });

  for (const [answer, verdict, ran] of [
    ["approve", "ask_allowed", true],
    ["deny", "ask_denied", false],
  ] as const)
    it(`a settle retried after its resume failed (${answer}) resumes with the answer already given: one ask`, async () => {
      const s = setupWithOutcomes(() => ({ type: answer }));
      const { agent, model } = s.agent([deployTurn("c1", "1"), { text: "done" }]);
      const interrupted = await s.runner.run(agent, "go");
      let failures = 1;
      const resume = (state: typeof interrupted.state) =>
        failures-- > 0 ? Promise.reject(new Error("model unreachable")) : s.runner.run(agent, state);
      await expect(s.approvals.settle(interrupted, resume)).rejects.toThrow("model unreachable");
      // The resume failed before the run moved on: the interruption is still the result's, its answer on the state.
      expect(interrupted.interruptions).toHaveLength(1);
      const result = await s.approvals.settle(interrupted, resume);
      expect(result.finalOutput).toBe("done");
      expect(s.asks).toHaveLength(1);
      expect(s.executed).toEqual(ran ? [{ env: "prod", version: "1" }] : []);
      expect(shownResults(model)).toEqual({
        c1: ran ? "deployed 1 to prod" : "Permission denied by approver for tool 'deploy'",
      });
      // An approval: its record when the first settle ended (unexecuted), and the call that ran on the retry.
      // A refusal: its one record.
      expect(s.records.map((r) => r.verdict)).toEqual(ran ? [verdict, verdict] : [verdict]);
      expect(s.outcomes).toEqual(ran ? ["failed", "ran"] : ["refused"]);
    });

  it("two settles at once over one interruption: the second is a typed error before anyone is asked again", async () => {
    const [channel, approver] = ApprovalChannel.pair(2);
    const approvals = new AgentApprovals({ resolver: channel });
    const executed: unknown[] = [];
    const model = new FakeModel([deployTurn("c1", "1"), { text: "done" }]);
    const agent = new Agent({ name: "ops", model, tools: approvals.tools([tools(executed).deploy]) });
    const runner = new Runner();
    const interrupted = await runner.run(agent, "go");
    const first = approvals.settle(interrupted, (state) => runner.run(agent, state));
    const asked = (await approver.next())!;
    await expect(approvals.settle(interrupted, (state) => runner.run(agent, state))).rejects.toBeInstanceOf(
      AgentsApprovalError,
    );
    expect(approver.pending).toBe(1);
    expect(approver.resolve(asked.id, { type: "approve" })).toBe(true);
    expect((await first).finalOutput).toBe("done");
    expect(executed).toEqual([{ env: "prod", version: "1" }]);
    // Settled again once done: nothing is left to answer, nobody is asked.
    expect((await approvals.settle(interrupted, (state) => runner.run(agent, state))).finalOutput).toBe("done");
    expect(approver.pending).toBe(0);
    expect(executed).toHaveLength(1);
  });

  it("a resume that drops the approval (a state restored from text saved before it) is a typed error: asked once, never run", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent } = s.agent([deployTurn("c1", "1"), { text: "x" }]);
    const interrupted = await s.runner.run(agent, "go");
    const saved = interrupted.state.toString();
    // Bounded: were the interruption asked about again on every resume, the third resume fails the test.
    let resumes = 0;
    const error = await s.approvals
      .settle(interrupted, async () => {
        if (++resumes > 2) throw new Error("resumed more than twice");
        return s.runner.run(agent, await RunState.fromString(agent, saved));
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect((error as AgentsApprovalError).message).toMatch(/^tool 'deploy': the call "c1" was approved/);
    expect(resumes).toBe(1);
    expect(s.asks).toHaveLength(1);
    expect(s.executed).toEqual([]);
    expect(s.records).toMatchObject([{ verdict: "ask_allowed" }]);
  }, 10_000);

  it("settle leaves an interruption answered by hand on the RunState to that answer: nobody is asked, one record at most", async () => {
    // Approved by hand: a resolver that would deny is not asked, and its refusal never meets the approval.
    const approved = setup(() => ({ type: "deny" }));
    const one = approved.agent([deployTurn("c1", "1"), { text: "ok" }]);
    const first = await approved.runner.run(one.agent, "go");
    first.state.approve(first.interruptions[0]!);
    expect((await approved.approvals.settle(first, (state) => approved.runner.run(one.agent, state))).finalOutput).toBe(
      "ok",
    );
    expect(approved.asks).toEqual([]);
    expect(approved.executed).toEqual([{ env: "prod", version: "1" }]);
    expect(approved.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(shownResults(one.model)).toEqual({ c1: "deployed 1 to prod" });

    // Rejected by hand: a resolver that would approve is not asked; the tool never runs.
    const rejected = setup(() => ({ type: "approve" }));
    const two = rejected.agent([deployTurn("c1", "1"), { text: "not deployed" }]);
    const second = await rejected.runner.run(two.agent, "go");
    second.state.reject(second.interruptions[0]!, { message: "no deploys today" });
    expect(
      (await rejected.approvals.settle(second, (state) => rejected.runner.run(two.agent, state))).finalOutput,
    ).toBe("not deployed");
    expect(rejected.asks).toEqual([]);
    expect(rejected.executed).toEqual([]);
    expect(rejected.records).toEqual([]);
    expect(shownResults(two.model)).toEqual({ c1: "no deploys today" });

    // Approved by hand on a state restored from text (or saved with an approval written in): this object never saw
    // the run interrupted, so the resolver is asked when the call runs, once, and its refusal holds.
    const restored = setup(() => ({ type: "deny" }));
    const three = restored.agent([{ text: "not deployed" }]);
    const saved = (await restored.runner.run(restored.agent([deployTurn("c1", "1")]).agent, "go")).state.toString();
    const state = await RunState.fromString(three.agent, saved);
    state.approve(state.getInterruptions()[0]!);
    await restored.approvals.settle({ state, interruptions: state.getInterruptions() }, (resumed) =>
      restored.runner.run(three.agent, resumed),
    );
    expect(restored.asks.map((a) => a.callId)).toEqual(["c1"]);
    expect(restored.executed).toEqual([]);
    expect(restored.records.map((r) => r.verdict)).toEqual(["ask_denied"]);
    expect(shownResults(three.model)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });
  });

  for (const [byHand, answer] of [
    ["approved", "deny"],
    ["rejected", "approve"],
  ] as const)
    it(`a call ${byHand} by hand on the RunState while the resolver was asked, which answered ${answer}: settle throws, resumes nothing, the call never runs`, async () => {
      let answerByHand = (): void => undefined;
      const s = setupWithOutcomes(() => {
        answerByHand();
        return { type: answer };
      });
      const { agent, model } = s.agent([deployTurn("c1", "1"), { text: "x" }]);
      const interrupted = await s.runner.run(agent, "go");
      // Another screen answers the same interruption on the SDK's state while the resolver is asked.
      answerByHand = () => {
        const item = interrupted.interruptions[0]!;
        if (byHand === "approved") interrupted.state.approve(item);
        else interrupted.state.reject(item);
      };
      let resumed = 0;
      const error: unknown = await s.approvals
        .settle(interrupted, (state) => (resumed++, s.runner.run(agent, state)))
        .catch((e: unknown) => e);
      // The SDK lets an approval win over a refusal: resumed, the run would run a call one of them refused.
      expect(error).toBeInstanceOf(AgentsApprovalError);
      expect((error as AgentsApprovalError).message).toMatch(
        new RegExp(
          `^tool 'deploy': the call "c1" was ${byHand} on the RunState while the resolver was asked, and the resolver`,
        ),
      );
      expect([resumed, s.executed]).toEqual([0, []]);
      expect(s.records.map((r) => r.verdict)).toEqual([answer === "approve" ? "ask_allowed" : "ask_denied"]);
      expect(s.outcomes).toEqual(answer === "approve" ? ["failed"] : ["refused"]);
      expect(model.inputs).toHaveLength(1);
    });

  it("a call approved by hand on the RunState is let through by the gate when it runs, with its one record", async () => {
    const s = setup(() => Promise.reject(new Error("nobody should be asked")));
    const { agent, model } = s.agent([deployTurn("c1", "1"), { text: "ok" }]);
    const interrupted = await s.runner.run(agent, "go");
    interrupted.state.approve(interrupted.interruptions[0]!);
    const result = await s.runner.run(agent, interrupted.state);
    expect(result.finalOutput).toBe("ok");
    expect(s.asks).toEqual([]);
    expect(s.records).toMatchObject([{ verdict: "ask_allowed" }]);
    expect(shownResults(model)).toEqual({ c1: "deployed 1 to prod" });
  });

  it("a call approved by hand, then modified by a hook, is asked about: the approval given by hand was for other arguments", async () => {
    const pin: Hook = {
      name: "pin",
      preToolUse: (call) => ({ type: "modify", input: { ...(call.input as object), version: "6.6.6" } }),
    };
    const s = setup(() => ({ type: "deny" }), { managers: new LoopManagers().withHook(pin) });
    const { agent, model } = s.agent([deployTurn("c1", "1.2"), { text: "not deployed" }]);
    const interrupted = await s.runner.run(agent, "go");
    // What the person approving by hand saw: version 1.2.
    expect(JSON.parse(interrupted.interruptions[0]!.arguments!)).toEqual({ env: "prod", version: "1.2" });
    interrupted.state.approve(interrupted.interruptions[0]!);
    const result = await s.runner.run(agent, interrupted.state);
    expect(result.finalOutput).toBe("not deployed");
    expect(s.asks).toMatchObject([{ callId: "c1", argsDigest: argsDigest({ env: "prod", version: "6.6.6" }) }]);
    expect(s.executed).toEqual([]);
    expect(s.records).toMatchObject([{ verdict: "ask_denied" }]);
    expect(shownResults(model)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });
  });

  it("a model that sends a call id again gets its new call asked about, not let through by the earlier approval", async () => {
    const s = setup((ask) => (ask.prompt.includes('"1.2"') ? { type: "approve" } : { type: "deny" }));
    const { agent, model } = s.agent([deployTurn("call_0", "1.2"), deployTurn("call_0", "6.6"), { text: "x" }]);
    await s.approvals.run((input) => s.runner.run(agent, input), "go");
    expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(s.asks.map((ask) => ask.callId)).toEqual(["call_0", "call_0"]);
    expect(s.records).toMatchObject([{ verdict: "ask_allowed" }, { verdict: "ask_denied" }]);
    expect(shownResults(model)).toEqual({ call_0: "Permission denied by approver for tool 'deploy'" });
  });

  it("an interruption of one tool never lets another tool's call under its id through: the resolver is asked about it", async () => {
    const s = setup(() => ({ type: "deny" }));
    const ran: string[] = [];
    const envTool = (name: string) =>
      tool({
        name,
        description: `${name} a service`,
        parameters: z.object({ env: z.string() }),
        needsApproval: true,
        execute: async ({ env }) => (ran.push(`${name} ${env}`), `${name}ed ${env}`),
      });
    const model = new FakeModel([
      { calls: [["c1", "restart", { env: "prod" }]] },
      { calls: [["c2", "stop", { env: "prod" }]] },
      { calls: [["c2", "restart", { env: "prod" }]] },
      { text: "x" },
    ]);
    const agent = new Agent({ name: "ops", model, tools: s.approvals.tools([envTool("restart"), envTool("stop")]) });
    // Restarts are approved for the rest of the run, by hand: the SDK interrupts for none of them again.
    const first = await s.runner.run(agent, "go");
    first.state.approve(first.interruptions[0]!, { alwaysApprove: true });
    // The stop under c2 is rejected by hand, with the same arguments the next restart will have.
    const second = await s.runner.run(agent, first.state);
    expect(second.interruptions.map((i) => [i.name, (i.rawItem as { callId?: string }).callId])).toEqual([
      ["stop", "c2"],
    ]);
    second.state.reject(second.interruptions[0]!);
    await s.runner.run(agent, second.state);
    // Nobody saw the restart under c2 interrupted: the resolver is asked, and its refusal holds.
    expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([["restart", "c2"]]);
    expect(ran).toEqual(["restart prod"]);
    expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([
      ["restart", "ask_allowed"],
      ["restart", "ask_denied"],
    ]);
  });

  it("a run state restored from toString() keeps an approval used: a model that sends its call id again is asked about", async () => {
    // One process approves call_0, runs it, and is interrupted again; it saves the state.
    const before = setup(() => Promise.reject(new Error("nobody should be asked")));
    const first = before.agent([deployTurn("call_0", "1.2"), deployTurn("call_1", "2")]);
    const interrupted = await before.runner.run(first.agent, "go");
    interrupted.state.approve(interrupted.interruptions[0]!);
    const saved = (await before.runner.run(first.agent, interrupted.state)).state.toString();
    expect(before.executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(before.records).toMatchObject([{ verdict: "ask_allowed" }]);

    // Another process restores it; the model sends call_0 again, with other arguments.
    const after = setup((ask) => (ask.callId === "call_1" ? { type: "approve" } : { type: "deny" }));
    const second = after.agent([deployTurn("call_0", "6.6"), { text: "x" }]);
    const state = await RunState.fromString(second.agent, saved);
    await after.approvals.settle({ state, interruptions: state.getInterruptions() }, (resumed) =>
      after.runner.run(second.agent, resumed),
    );
    expect(after.executed).toEqual([{ env: "prod", version: "2" }]);
    expect(after.asks.map((ask) => [ask.callId, ask.argsDigest])).toEqual([
      ["call_1", argsDigest({ env: "prod", version: "2" })],
      ["call_0", argsDigest({ env: "prod", version: "6.6" })],
    ]);
    expect(after.records).toMatchObject([{ verdict: "ask_allowed" }, { verdict: "ask_denied" }]);
    expect(shownResults(second.model)).toEqual({
      call_1: "deployed 2 to prod",
      call_0: "Permission denied by approver for tool 'deploy'",
    });
  });

  it("an approval given by hand on a restored run state is not taken for unused: the resolver is asked about the call", async () => {
    const before = setup(() => Promise.reject(new Error("nobody should be asked")));
    const first = before.agent([deployTurn("c1", "1")]);
    const saved = (await before.runner.run(first.agent, "go")).state.toString();

    const after = setup(() => ({ type: "deny" }));
    const second = after.agent([{ text: "x" }]);
    const state = await RunState.fromString(second.agent, saved);
    state.approve(state.getInterruptions()[0]!);
    await after.runner.run(second.agent, state);
    expect(after.asks).toMatchObject([{ callId: "c1", argsDigest: argsDigest({ env: "prod", version: "1" }) }]);
    expect(after.executed).toEqual([]);
    expect(after.records).toMatchObject([{ verdict: "ask_denied" }]);
    expect(shownResults(second.model)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });
  });

  it("a run state restored from text in settle's resume is another run: its approved call is asked about again, and runs once", async () => {
    const s = setupWithOutcomes(() => ({ type: "approve" }));
    const { agent, model } = s.agent([deployTurn("c1", "1"), { text: "done" }]);
    const result = await s.approvals.run(
      async (input) =>
        s.runner.run(agent, input instanceof RunState ? await RunState.fromString(agent, input.toString()) : input),
      "go",
    );
    expect(result.finalOutput).toBe("done");
    expect(s.asks.map((a) => a.callId)).toEqual(["c1", "c1"]);
    expect(s.asks[0]!.runId).not.toBe(s.asks[1]!.runId);
    expect(s.executed).toEqual([{ env: "prod", version: "1" }]);
    expect(shownResults(model)).toEqual({ c1: "deployed 1 to prod" });
    // The approval given on the state before it was saved ends unexecuted; the restored run's call ran on its own ask.
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed"]);
    expect(s.outcomes).toEqual(["ran", "failed"]);
  });

  for (const edited of ["the interruption", "the call the run executes"] as const)
    it(`a saved run state edited to other arguments (${edited}): the approved call does not run, and the error says why`, async () => {
      const s = setupWithOutcomes(() => ({ type: "approve" }));
      const before = s.agent([deployTurn("c1", "1")]);
      const saved = JSON.parse((await s.runner.run(before.agent, "go")).state.toString()) as {
        currentStep: { data: { interruptions: { rawItem: { arguments: string } }[] } };
        generatedItems: { type: string; rawItem: { arguments: string } }[];
        lastProcessedResponse: { functions: { toolCall: { arguments: string } }[] };
      };
      const other = JSON.stringify({ env: "prod", version: "6.6.6" });
      if (edited === "the interruption") {
        for (const item of [
          ...saved.currentStep.data.interruptions,
          ...saved.generatedItems.filter((i) => i.type === "tool_approval_item"),
        ])
          item.rawItem.arguments = other;
      } else saved.lastProcessedResponse.functions[0]!.toolCall.arguments = other;
      const after = s.agent([{ text: "x" }]);
      const state = await RunState.fromString(after.agent, JSON.stringify(saved));
      const error = (await s.approvals
        .settle({ state, interruptions: state.getInterruptions() }, (resumed) => s.runner.run(after.agent, resumed))
        .then(
          () => undefined,
          (e: unknown) => e,
        )) as { error?: unknown };
      expect(error.error).toBeInstanceOf(AgentsApprovalError);
      expect((error.error as AgentsApprovalError).message).toMatch(
        /^tool 'deploy': the run executed the call "c1" with arguments other than the ones approved in its interruption/,
      );
      expect(s.asks).toHaveLength(1);
      expect(s.executed).toEqual([]);
      expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
      expect(s.outcomes).toEqual(["failed"]);
    });

  it("an approval saved with the run state is not let through when the state is restored, by the same AgentApprovals or another", async () => {
    const s = setup(() => ({ type: "deny" }));
    const { agent } = s.agent([deployTurn("c1", "1")]);
    const interrupted = await s.runner.run(agent, "go");
    interrupted.state.approve(interrupted.interruptions[0]!);
    const saved = interrupted.state.toString();
    for (const t of [s, setup(() => ({ type: "deny" }))]) {
      const again = t.agent([{ text: "x" }]);
      const restored = await RunState.fromString(again.agent, saved);
      await t.runner.run(again.agent, restored);
      expect(t.asks.map((a) => a.callId)).toEqual(["c1"]);
      expect(t.executed).toEqual([]);
      expect(shownResults(again.model)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });
      t.asks.length = 0;
    }
  });

  it("a handoff's wrapped tool is asked about once and runs once in the run that handed off", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent: deployer, model } = s.agent([deployTurn("c1", "1"), { text: "deployed" }]);
    const lead = new Agent({
      name: "lead",
      model: new FakeModel([{ calls: [["h1", `transfer_to_${deployer.name}`, {}]] }]),
      handoffs: [deployer],
    });
    const result = await s.approvals.run((input) => s.runner.run(lead, input), "go");
    expect(result.finalOutput).toBe("deployed");
    expect(s.asks.map((a) => a.callId)).toEqual(["c1"]);
    expect(s.executed).toEqual([{ env: "prod", version: "1" }]);
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(shownResults(model)).toMatchObject({ c1: "deployed 1 to prod" });
  });

  for (const stream of [false, true])
    it(`one wrapped tool in two agents: after a handoff, the other agent's call under the same id and arguments is asked about and runs${stream ? " (streamed)" : ""}`, async () => {
      const s = setup(() => ({ type: "approve" }));
      const [deploy] = s.approvals.tools([tools(s.executed).deploy]);
      // A model that numbers its calls afresh each turn: the second agent's call is c1 again, with the same arguments.
      const secondModel = new FakeModel([deployTurn("c1", "1"), { text: "deployed again" }]);
      const second = new Agent({ name: "second", model: secondModel, tools: [deploy] });
      const first = new Agent({
        name: "first",
        model: new FakeModel([deployTurn("c1", "1"), { calls: [["h1", "transfer_to_second", {}]] }]),
        tools: [deploy],
        handoffs: [second],
      });
      const result = await s.approvals.run(
        (input) => (stream ? s.runner.run(first, input, { stream: true }) : s.runner.run(first, input)),
        "go",
      );
      expect(result.finalOutput).toBe("deployed again");
      expect(s.asks.map((a) => a.callId)).toEqual(["c1", "c1"]);
      expect(s.executed).toEqual([
        { env: "prod", version: "1" },
        { env: "prod", version: "1" },
      ]);
      expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed"]);
      expect(shownResults(secondModel)).toMatchObject({ c1: "deployed 1 to prod" });
    });

  for (const refusal of ["by the resolver", "by hand"] as const)
    it(`a call the other agent's approval covers is asked about: an interruption under its id and arguments refused ${refusal} never lets it through`, async () => {
      // The first agent's c1 is approved and runs; the SDK keeps that approval for the first agent. After a
      // handoff the second agent's c1, with the same arguments, is refused; back in the first agent, the model
      // sends c1 again: the SDK lets it through to the tool by the first approval, and the gate must ask.
      let answers = 0;
      const s = setup(() => (answers++ === 0 ? { type: "approve" } : { type: "deny" }));
      const [deploy] = s.approvals.tools([tools(s.executed).deploy]);
      const second = new Agent({
        name: "second",
        model: new FakeModel([deployTurn("c1", "1"), { calls: [["h2", "transfer_to_first", {}]] }]),
        tools: [deploy],
      });
      const firstModel = new FakeModel([
        deployTurn("c1", "1"),
        { calls: [["h1", "transfer_to_second", {}]] },
        deployTurn("c1", "1"),
        { text: "done" },
      ]);
      const first: Agent = new Agent({ name: "first", model: firstModel, tools: [deploy], handoffs: [second] });
      second.handoffs = [first];
      const seen: string[] = [];
      const result = await s.approvals.run(async (input) => {
        const next = await s.runner.run(first, input);
        for (const item of next.interruptions) {
          seen.push(item.agent.name);
          if (refusal === "by hand" && item.agent === second) next.state.reject(item);
        }
        return next;
      }, "go");
      expect(seen).toEqual(["first", "second"]);
      expect(result.finalOutput).toBe("done");
      expect(s.asks.map((a) => a.callId)).toEqual(refusal === "by hand" ? ["c1", "c1"] : ["c1", "c1", "c1"]);
      expect(s.executed).toEqual([{ env: "prod", version: "1" }]);
      expect(s.records.map((r) => r.verdict)).toEqual(
        refusal === "by hand" ? ["ask_allowed", "ask_denied"] : ["ask_allowed", "ask_denied", "ask_denied"],
      );
      expect(shownResults(firstModel)).toMatchObject({ c1: "Permission denied by approver for tool 'deploy'" });
    });

  it("an interruption the resolver refused is not taken for another agent's call under its id, that an alwaysApprove given by hand later lets through", async () => {
    const s = setup(() => ({ type: "deny" }));
    const [deploy] = s.approvals.tools([tools(s.executed).deploy]);
    const firstModel = new FakeModel([deployTurn("c0", "0"), deployTurn("c1", "1"), { text: "done" }]);
    const first = new Agent({ name: "first", model: firstModel, tools: [deploy] });
    const second = new Agent({
      name: "second",
      model: new FakeModel([deployTurn("c1", "1"), { calls: [["h1", "transfer_to_first", {}]] }]),
      tools: [deploy],
      handoffs: [first],
    });
    // The second agent's c1 is refused by the resolver; after the handoff, the first agent's deploy is approved by
    // hand for the run (alwaysApprove), and its c0 runs; its c1, with the refused call's arguments, is asked about.
    const result = await s.approvals.run(async (input) => {
      const next = await s.runner.run(second, input);
      for (const item of next.interruptions)
        if (item.agent === first && item.rawItem.type === "function_call" && item.rawItem.callId === "c0")
          next.state.approve(item, { alwaysApprove: true });
      return next;
    }, "go");
    expect(result.finalOutput).toBe("done");
    expect(s.executed).toEqual([{ env: "prod", version: "0" }]);
    expect(s.asks.map((a) => a.callId)).toEqual(["c1", "c1"]);
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_denied", "ask_allowed", "ask_denied"]);
    expect(shownResults(firstModel)).toMatchObject({ c1: "Permission denied by approver for tool 'deploy'" });
  });

  it("a later call under a refused call's tool and id is refused by the SDK's kept refusal: nobody asked, no record, nothing run", async () => {
    const s = setup(() => ({ type: "deny" }));
    const { agent, model } = s.agent([deployTurn("call_0", "1"), deployTurn("call_0", "2"), { text: "done" }]);
    const result = await s.approvals.run((input) => s.runner.run(agent, input), "go");
    expect(result.finalOutput).toBe("done");
    expect(s.asks.map((a) => a.callId)).toEqual(["call_0"]);
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_denied"]);
    expect(s.executed).toEqual([]);
    expect(shownResults(model)).toEqual({ call_0: "Permission denied by approver for tool 'deploy'" });
  });

  it("two streamed runs at once whose models both number their call call_0: each takes its own answer", async () => {
    const s = setup((ask) =>
      ask.argsDigest === argsDigest({ env: "prod", version: "1" }) ? { type: "approve" } : { type: "deny" },
    );
    const runs = ["1", "2"].map((version) => s.agent([deployTurn("call_0", version), { text: `done ${version}` }]));
    const results = await Promise.all(
      runs.map(({ agent }) => s.approvals.run((input) => s.runner.run(agent, input, { stream: true }), "ship")),
    );
    expect(results.map((r) => r.finalOutput)).toEqual(["done 1", "done 2"]);
    expect(new Set(s.asks.map((a) => a.runId)).size).toBe(2);
    expect(s.executed).toEqual([{ env: "prod", version: "1" }]);
    expect(shownResults(runs[0]!.model)).toEqual({ call_0: "deployed 1 to prod" });
    expect(shownResults(runs[1]!.model)).toEqual({ call_0: "Permission denied by approver for tool 'deploy'" });
  });

  it("calls that share a call id in one turn are a typed error before anyone is asked", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent } = s.agent([
      {
        calls: [
          ["c1", "deploy", { env: "prod", version: "1" }],
          ["c1", "deploy", { env: "prod", version: "2" }],
        ],
      },
      { text: "x" },
    ]);
    const twice = (await s.approvals
      .run((input) => s.runner.run(agent, input), "go")
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(twice).toBeInstanceOf(AgentsApprovalError);
    expect(twice).toMatchObject({ tool: "deploy", message: expect.stringContaining('"c1"') as unknown });
    expect(s.asks).toEqual([]);
    expect(s.executed).toEqual([]);
    expect(s.records).toEqual([]);
  });

  it("two runs at once whose models both number their call call_0: each is asked in its own run and takes its own answer", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const records: GateDecision[] = [];
    const approvals = new AgentApprovals({
      resolver: channel,
      managers: new LoopManagers().withObserver({ onGate: ({ decision }) => records.push(decision) }),
    });
    const executed: unknown[] = [];
    const runner = new Runner();
    const deploy = approvals.tools([tools(executed).deploy]);
    const first = new FakeModel([deployTurn("call_0", "1"), { text: "done 1" }]);
    const second = new FakeModel([deployTurn("call_0", "2"), { text: "done 2" }]);
    const running = [first, second].map((model) =>
      approvals.run((input) => runner.run(new Agent({ name: "ops", model, tools: deploy }), input), "ship"),
    );
    const asks = [(await approver.next())!, (await approver.next())!];
    const askOf = (version: string): PendingAsk =>
      asks.find((ask) => ask.argsDigest === argsDigest({ env: "prod", version }))!;
    expect(askOf("1")).toMatchObject({ callId: "call_0" });
    expect(askOf("2")).toMatchObject({ callId: "call_0" });
    expect(askOf("1").runId).not.toBe(askOf("2").runId);
    // The second run's refusal comes first; neither answer reaches the other run's call.
    expect(approver.resolve(askOf("2").id, { type: "deny" })).toBe(true);
    expect(approver.resolve(askOf("1").id, { type: "approve" })).toBe(true);
    const [one, two] = await Promise.all(running);
    expect(one!.finalOutput).toBe("done 1");
    expect(two!.finalOutput).toBe("done 2");
    expect(executed).toEqual([{ env: "prod", version: "1" }]);
    expect(shownResults(first)).toEqual({ call_0: "deployed 1 to prod" });
    expect(shownResults(second)).toEqual({ call_0: "Permission denied by approver for tool 'deploy'" });
    expect(records).toHaveLength(2);
    expect(records).toContainEqual(
      expect.objectContaining({ verdict: "ask_denied", argsDigest: argsDigest({ env: "prod", version: "2" }) }),
    );
    expect(records).toContainEqual(
      expect.objectContaining({ verdict: "ask_allowed", argsDigest: argsDigest({ env: "prod", version: "1" }) }),
    );
    expect(approver.pending).toBe(0);
  });

  it("another run's call under the id of a call in flight is checked as its own call", async () => {
    const restarted: unknown[] = [];
    const restart = restartTool(restarted);
    // A hook that takes its time over a restart, then moves it to prod.
    let hooked!: () => void;
    const inHook = new Promise<void>((resolve) => (hooked = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const toProd: Hook = {
      preToolUse: async (call) => {
        if (call.name !== "restart") return { type: "allow" };
        hooked();
        await released;
        return { type: "modify", input: { env: "prod" } };
      },
    };
    const asks: PendingAsk[] = [];
    const approvals = new AgentApprovals({
      resolver: { resolve: async (ask) => (asks.push(ask), { type: "deny" }) },
      managers: new LoopManagers().withHook(toProd),
    });
    const runner = new Runner();
    // Two runs whose models both number their first call "call_0"; neither call needs approval as sent.
    const restarting = new FakeModel([{ calls: [["call_0", "restart", { env: "staging" }]] }, { text: "ok" }]);
    const first = runner.run(
      new Agent({ name: "ops", model: restarting, tools: approvals.tools([restart]) }),
      "restart staging",
    );
    await inHook;
    const reading = new FakeModel([{ calls: [["call_0", "status", { env: "staging" }]] }, { text: "green" }]);
    const second = await runner.run(
      new Agent({ name: "ops", model: reading, tools: approvals.tools([tools([]).status]) }),
      "status?",
    );
    expect(second.finalOutput).toBe("green");
    expect(shownResults(reading)).toEqual({ call_0: "staging is green" });
    release();
    expect((await first).finalOutput).toBe("ok");
    // The restart, modified into prod, is still asked about as its own call.
    expect(asks).toMatchObject([{ tool: "restart", argsDigest: argsDigest({ env: "prod" }) }]);
    expect(restarted).toEqual([]);
    expect(shownResults(restarting)).toEqual({ call_0: "Permission denied by approver for tool 'restart'" });
  });

  it("an approved call waiting for its run to resume is run by that run alone; another run's calls under its id are their own", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { deploy, status } = tools(s.executed);
    const shared = s.approvals.tools([deploy, status]);
    const model = new FakeModel([deployTurn("call_0", "1"), { text: "deployed" }]);
    const agent = new Agent({ name: "ops", model, tools: shared });
    const reading = new FakeModel([{ calls: [["call_0", "status", { env: "staging" }]] }, { text: "ok" }]);
    const otherModel = new FakeModel([deployTurn("call_0", "2"), { text: "deployed too" }]);
    const other = new Agent({ name: "ops", model: otherModel, tools: shared });
    const seen: unknown[] = [];
    const result = await s.approvals.run(async (input) => {
      if (typeof input !== "string") {
        // While this run's approved deploy waits to resume: another run's status call under its id,
        seen.push(
          (await s.runner.run(new Agent({ name: "ops", model: reading, tools: shared }), "status?")).finalOutput,
        );
        // and another run of the same tool, interrupted under its id and approved by hand on its own state.
        const interrupted = await s.runner.run(other, "ship 2");
        interrupted.state.approve(interrupted.interruptions[0]!);
        seen.push((await s.runner.run(other, interrupted.state)).finalOutput);
      }
      return s.runner.run(agent, input);
    }, "ship 1");
    expect(seen).toEqual(["ok", "deployed too"]);
    expect(shownResults(reading)).toEqual({ call_0: "staging is green" });
    expect(shownResults(otherModel)).toEqual({ call_0: "deployed 2 to prod" });
    expect(result.finalOutput).toBe("deployed");
    expect(shownResults(model)).toEqual({ call_0: "deployed 1 to prod" });
    // Each approved call ran once, with its own arguments; only the run settle answered asked anyone.
    expect(s.executed).toEqual([
      { env: "prod", version: "2" },
      { env: "prod", version: "1" },
    ]);
    expect(s.asks).toHaveLength(1);
    expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([
      ["status", "allow"],
      ["deploy", "ask_allowed"],
      ["deploy", "ask_allowed"],
    ]);
  });

  it("runs that share one RunContext share its approvals: their calls under one id are a typed error, and none takes another's approval", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const records: GateDecision[] = [];
    const approvals = new AgentApprovals({
      resolver: channel,
      managers: new LoopManagers().withObserver({ onGate: ({ decision }) => records.push(decision) }),
    });
    const executed: unknown[] = [];
    const runner = new Runner();
    const deploy = approvals.tools([tools(executed).deploy]);
    const context = new RunContext({});
    const model = new FakeModel([deployTurn("call_0", "1"), deployTurn("call_0", "3"), { text: "deployed" }]);
    const agent = new Agent({ name: "ops", model, tools: deploy });
    let third: unknown;
    const running = approvals.run(async (input) => {
      // As the approved call_0 waits to resume, a run of the same agent on the same context sends its own call_0,
      // with other arguments: the SDK finds it approved on the shared context.
      if (typeof input !== "string") third = await runner.run(agent, "ship 3", { context }).catch((e: unknown) => e);
      return runner.run(agent, input, { context });
    }, "ship 1");
    const asked = (await approver.next())!;
    // Another run on the context, interrupted under the same id while the first call is asked about.
    const otherModel = new FakeModel([deployTurn("call_0", "2"), { text: "x" }]);
    const collided = (await approvals
      .run(
        (input) => runner.run(new Agent({ name: "ops", model: otherModel, tools: deploy }), input, { context }),
        "ship 2",
      )
      .catch((e: unknown) => e)) as AgentsApprovalError;
    expect(collided).toBeInstanceOf(AgentsApprovalError);
    expect(collided.message).toContain('"call_0"');
    expect(approver.pending).toBe(1);
    expect(approver.resolve(asked.id, { type: "approve" })).toBe(true);
    const result = await running;
    expect((third as { error?: unknown }).error).toBeInstanceOf(AgentsApprovalError);
    expect(result.finalOutput).toBe("deployed");
    expect(executed).toEqual([{ env: "prod", version: "1" }]);
    expect(shownResults(model)).toEqual({ call_0: "deployed 1 to prod" });
    expect(approver.pending).toBe(0);
    // The calls refused for their id never reached the gate: the one call that did has the one record.
    expect(records.map((r) => [r.tool, r.verdict, r.argsDigest])).toEqual([
      ["deploy", "ask_allowed", argsDigest({ env: "prod", version: "1" })],
    ]);
  });

  it("settles a streamed run: waits for each stream to end, so every interruption is answered once and every approved call runs", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent } = s.agent([deployTurn("c1", "1.2"), deployTurn("c2", "1.3"), { text: "deployed both" }]);
    const result = await s.approvals.run((input) => s.runner.run(agent, input, { stream: true }), "ship");
    expect(result.interruptions).toEqual([]);
    expect(result.finalOutput).toBe("deployed both");
    expect(s.asks.map((a) => a.callId)).toEqual(["c1", "c2"]);
    expect(s.executed).toEqual([
      { env: "prod", version: "1.2" },
      { env: "prod", version: "1.3" },
    ]);
    expect(s.records.map((r) => [r.verdict, r.argsDigest])).toEqual([
      ["ask_allowed", argsDigest({ env: "prod", version: "1.2" })],
      ["ask_allowed", argsDigest({ env: "prod", version: "1.3" })],
    ]);

    // Settling a streamed result by hand, resuming with streamed runs: the same.
    const t = setup(() => ({ type: "approve" }));
    const other = t.agent([deployTurn("c1", "2.0"), deployTurn("c2", "2.1"), { text: "deployed again" }]);
    const interrupted = await t.runner.run(other.agent, "ship", { stream: true });
    const settled = await t.approvals.settle(interrupted, (state) =>
      t.runner.run(other.agent, state, { stream: true }),
    );
    expect(settled.finalOutput).toBe("deployed again");
    expect(t.asks.map((a) => a.callId)).toEqual(["c1", "c2"]);
    expect(t.executed).toHaveLength(2);
    expect(t.records.map((r) => [r.verdict, r.argsDigest])).toEqual([
      ["ask_allowed", argsDigest({ env: "prod", version: "2.0" })],
      ["ask_allowed", argsDigest({ env: "prod", version: "2.1" })],
    ]);
  });

  it("typed errors for options and tools it cannot use", () => {
    expect(() => new AgentApprovals({} as never)).toThrow(AgentsConfigError);
    expect(() => new AgentApprovals({ resolver: new SyncAskResolver(() => true), managers: {} as never })).toThrow(
      AgentsConfigError,
    );
    expect(() => new AgentApprovals({ resolver: new SyncAskResolver(() => true), sessionId: "s1" })).toThrow(
      /sessionId: must be a UUID/,
    );
    const approvals = new AgentApprovals({ resolver: new SyncAskResolver(() => true) });
    expect(() => approvals.tool({ type: "hosted_tool", name: "web" } as never)).toThrow(AgentsConfigError);
    const hosted = { type: "hosted_tool", name: "web_search" };
    expect(approvals.tools([hosted])[0]).toBe(hosted);
    expect(() => approvals.tools("deploy" as never)).toThrow(
      expect.objectContaining({ code: "OPENAI_AGENTS_CONFIG", option: "tools" }),
    );
  });

  it("run and settle refuse what is not a run's result, or a way to run, with AgentsConfigError naming it; an approved call ends with its one record", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent } = s.agent([deployTurn("c1", "1"), { text: "x" }]);
    const config = (option: string, message: RegExp) =>
      expect.objectContaining({ code: "OPENAI_AGENTS_CONFIG", option, message: expect.stringMatching(message) });
    // A block body that forgets its return: the run's result is undefined.
    await expect(s.approvals.run(() => undefined as never, "go")).rejects.toEqual(
      config("runAgent", /^runAgent: must resolve with .*RunResult.*, got undefined$/),
    );
    await expect(s.approvals.run("run" as never, "go")).rejects.toEqual(config("runAgent", /must be a function/));
    await expect(s.approvals.settle(undefined as never, () => s.runner.run(agent, "go"))).rejects.toEqual(
      config("result", /got undefined$/),
    );
    await expect(s.approvals.settle({ state: {} } as never, () => s.runner.run(agent, "go"))).rejects.toEqual(
      config("result", /interruptions/),
    );
    const interrupted = await s.runner.run(agent, "go");
    await expect(s.approvals.settle(interrupted, undefined as never)).rejects.toEqual(
      config("resume", /must be a function/),
    );
    expect(s.asks).toEqual([]);
    await expect(s.approvals.settle(interrupted, async () => undefined as never)).rejects.toEqual(
      config("resume", /got undefined$/),
    );
    expect(s.asks.map((a) => a.callId)).toEqual(["c1"]);
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    expect(s.executed).toEqual([]);
  });

  it("settle refuses a state that is no RunState, and interruptions that are not the SDK's, with AgentsConfigError naming them", async () => {
    const s = setup(() => ({ type: "approve" }));
    const { agent } = s.agent([deployTurn("c1", "1"), { text: "x" }]);
    const interrupted = await s.runner.run(agent, "go");
    const config = (option: string, message: RegExp) =>
      expect.objectContaining({ code: "OPENAI_AGENTS_CONFIG", option, message: expect.stringMatching(message) });
    let resumed = 0;
    const resume = (state: RunState<unknown, Agent>) => (resumed++, s.runner.run(agent, state));
    // The saved text parsed, not restored with RunState.fromString: a plain object.
    const parsed = JSON.parse(interrupted.state.toString()) as unknown;
    for (const state of [parsed, {}])
      await expect(
        s.approvals.settle({ state, interruptions: interrupted.interruptions } as never, resume),
      ).rejects.toEqual(
        config("result", /^result: must be the run's result .*, got an object whose state is not a RunState/),
      );
    for (const [interruptions, at] of [
      [[null], "interruptions\\[0\\] is null"],
      [[interrupted.interruptions[0], {}], "interruptions\\[1\\] is not a RunToolApprovalItem"],
    ] as const)
      await expect(s.approvals.settle({ state: interrupted.state, interruptions } as never, resume)).rejects.toEqual(
        config("result", new RegExp(`, got an object whose ${at}`)),
      );
    // A runAgent resolving with such a result is named the same way.
    await expect(s.approvals.run(async () => ({ state: parsed, interruptions: [] }) as never, "go")).rejects.toEqual(
      config("runAgent", /whose state is not a RunState/),
    );
    expect([resumed, s.asks, s.records, s.executed]).toEqual([0, [], [], []]);
  });

  it("a function tool gated by one AgentApprovals is refused by another, naming it; the tool as written can be given to each", async () => {
    const first = setup(() => ({ type: "approve" }));
    const second = setup(() => ({ type: "deny" }));
    const { deploy } = tools(first.executed);
    const [gated] = first.approvals.tools([deploy]);
    // Both gates would read the one answer the SDK keeps for a call: the inner one would take the outer one's
    // approval on the run state for one given by hand, its resolver never asked.
    const error = (() => {
      try {
        second.approvals.tools([gated]);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(AgentsConfigError);
    expect(error).toMatchObject({ option: "tools[0]" });
    expect((error as Error).message).toMatch(/tool "deploy" is gated by another AgentApprovals/);
    expect(() => second.approvals.tool(gated)).toThrow(AgentsConfigError);
    // The tool as written, given to each: each run is asked about by its own gate, once.
    for (const [s, answer] of [
      [first, "deployed 1 to prod"],
      [second, "Permission denied by approver for tool 'deploy'"],
    ] as const) {
      const model = new FakeModel([deployTurn("c1", "1"), { text: "x" }]);
      const agent = new Agent({ name: "ops", model, tools: s.approvals.tools([deploy]) });
      await s.approvals.run((input) => s.runner.run(agent, input), "go");
      expect(s.asks.map((a) => a.callId)).toEqual(["c1"]);
      expect(s.records).toHaveLength(1);
      expect(shownResults(model)).toEqual({ c1: answer });
    }
    expect(first.executed).toEqual([{ env: "prod", version: "1" }]);
  });

  it("tools() refuses an entry that is not a tool, naming its index and what it is, and keeps the SDK's other tools as they are", () => {
    const approvals = new AgentApprovals({ resolver: new SyncAskResolver(() => true) });
    const { deploy } = tools([]);
    const hosted = hostedMcpTool({ serverLabel: "docs", serverUrl: "https://example.com/mcp" });
    const search = toolSearchTool();
    const kept = approvals.tools([hosted, search]);
    expect(kept[0]).toBe(hosted);
    expect(kept[1]).toBe(search);
    for (const [entries, said] of [
      [[null], "tools[0]: must be a tool of @openai/agents, got null"],
      [[deploy, 42], "tools[1]: must be a tool of @openai/agents, got 42"],
      [[undefined], "tools[0]: must be a tool of @openai/agents, got undefined"],
      [
        [deploy, deploy, { name: "deploy" }],
        "tools[2]: must be a tool of @openai/agents, got an object without a type",
      ],
      [[{ type: "web_search" }], 'tools[0]: must be a tool of @openai/agents, got an object of type "web_search"'],
      [
        [{ type: "function", name: "deploy" }],
        'tools[0]: must be a tool of @openai/agents, got an object of type "function" that is no function tool made by tool()',
      ],
      [["deploy"], 'tools[0]: must be a tool of @openai/agents, got "deploy"'],
    ] as const) {
      let error: unknown;
      try {
        approvals.tools(entries as never);
      } catch (thrown) {
        error = thrown;
      }
      expect(error, said).toBeInstanceOf(AgentsConfigError);
      expect(error, said).toMatchObject({ option: said.slice(0, said.indexOf(":")) });
      expect((error as Error).message, said).toContain(said);
    }
    const bomb = new Error("getter bomb");
    const hostile = {
      get type(): never {
        throw bomb;
      },
    };
    let error: unknown;
    try {
      approvals.tools([deploy, hostile]);
    } catch (thrown) {
      error = thrown;
    }
    expect(error).toBeInstanceOf(AgentsConfigError);
    expect(error).toMatchObject({ option: "tools[1]", cause: bomb });
    expect((error as Error).message).toBe("tools[1]: cannot be read: getter bomb");
  });

  it("refuses an approver given as the resolver, and grants that are not a GrantStore, naming the option", () => {
    const refused = (options: unknown): unknown => {
      try {
        new AgentApprovals(options as never);
      } catch (error) {
        return error;
      }
      return undefined;
    };
    const [channel, approver] = ApprovalChannel.pair(1);
    // An approver has resolve(id, answer): taken for the resolver, it would deny every ask, nobody asked.
    const wrongHalf = refused({ resolver: approver });
    expect(wrongHalf).toBeInstanceOf(AgentsConfigError);
    expect(wrongHalf).toMatchObject({ code: "OPENAI_AGENTS_CONFIG", option: "resolver" });
    expect((wrongHalf as Error).message).toMatch(/^resolver: got an approver .*the first of ApprovalChannel\.pair\(\)/);
    for (const grants of [{}, null, "grants.json", { load: () => [], save: () => undefined }]) {
      const error = refused({ resolver: channel, grants });
      expect(error).toBeInstanceOf(AgentsConfigError);
      expect(error).toMatchObject({ code: "OPENAI_AGENTS_CONFIG", option: "grants" });
      expect((error as Error).message).toMatch(
        /^grants: must be a GrantStore \(load, save, revoke and clear as functions\), got /,
      );
    }
    expect(refused({ resolver: channel, grants: new MemoryGrantStore() })).toBeUndefined();
    approver.close();
  });

  it("refuses prompt options callPrompt cannot use when constructed, with AgentsConfigError naming the option", () => {
    const resolver = new SyncAskResolver(() => true);
    const refused = (prompt: unknown): unknown => {
      try {
        new AgentApprovals({ resolver, prompt: prompt as never });
      } catch (error) {
        return error;
      }
      return undefined;
    };
    for (const [prompt, option, message] of [
      [{ maxArgsChars: 0 }, "prompt.maxArgsChars", "prompt.maxArgsChars: must be a positive integer, got 0"],
      [{ maxArgsChars: 1.5 }, "prompt.maxArgsChars", "prompt.maxArgsChars: must be a positive integer, got 1.5"],
      [{ maxArgsChars: "80" }, "prompt.maxArgsChars", "prompt.maxArgsChars: must be a positive integer, got string"],
      [{ redact: "secrets" }, "prompt.redact", "prompt.redact: must be a function or false"],
      [null, "prompt", "prompt: must be an object: { redact?, maxArgsChars? }, got null"],
    ] as const) {
      const error = refused(prompt);
      expect(error).toBeInstanceOf(AgentsConfigError);
      expect(error).toMatchObject({ code: "OPENAI_AGENTS_CONFIG", option, message });
    }
    expect(refused({ maxArgsChars: 1, redact: false })).toBeUndefined();
  });

  it("refuses an option it does not take, naming it, rather than running without it", async () => {
    const resolver = new SyncAskResolver(() => true);
    const config = (option: string, message: RegExp) =>
      expect.objectContaining({ code: "OPENAI_AGENTS_CONFIG", option, message: expect.stringMatching(message) });
    const block: Hook = { name: "block", preToolUse: () => ({ type: "block", reason: "frozen" }) };
    // Ignored, each would run what the caller meant to stop: no grant would refuse, no hook would block, nothing
    // would be redacted from the prompt shown.
    expect(() => new AgentApprovals({ resolver, grant: new MemoryGrantStore() } as never)).toThrow(
      config("grant", /^grant: unknown option 'grant' \(did you mean grants\?\)$/),
    );
    expect(() => new AgentApprovals({ resolver, hooks: [block] } as never)).toThrow(
      config("hooks", /^hooks: unknown option 'hooks' \(it goes in managers: new LoopManagers\(\)\.withHook\(…\)\)$/),
    );
    // The managers' resolver is replaced by the resolver option: moved there, an askResolver would be no answer.
    expect(() => new AgentApprovals({ askResolver: resolver } as never)).toThrow(
      config("askResolver", /^askResolver: unknown option 'askResolver' \(did you mean resolver\?\)$/),
    );
    expect(() => new AgentApprovals({ resolver, prompt: { redcat: () => "[secret]" } } as never)).toThrow(
      config("prompt.redcat", /^prompt\.redcat: unknown option 'redcat' \(did you mean redact\?\)$/),
    );
    expect(() => new AgentApprovals({ resolver, prompt: { notes: ["x"] } } as never)).toThrow(
      config("prompt.notes", /unknown option 'notes'/),
    );

    // A misspelt signal, or one that is no AbortSignal, would let the run start and resume after the cancel.
    const s = setup(() => ({ type: "approve" }));
    const { agent, model } = s.agent([
      { calls: [["c1", "status", { env: "prod" }]] },
      deployTurn("c2", "1"),
      { text: "x" },
    ]);
    const aborted = new AbortController();
    aborted.abort(new Error("user left"));
    let started = 0;
    const runAgent = (input: Parameters<Parameters<AgentApprovals["run"]>[0]>[0]) => (
      started++,
      s.runner.run(agent, input)
    );
    for (const [options, option, message] of [
      [{ sginal: aborted.signal }, "sginal", /^sginal: unknown option 'sginal' \(did you mean signal\?\)$/],
      [
        aborted.signal,
        "options",
        /^options: must be an object: \{ signal\? \}, got an AbortSignal \(give it as \{ signal \}\)$/,
      ],
      [{ signal: aborted }, "signal", /^signal: must be an AbortSignal or undefined, got an object$/],
      [null, "options", /^options: must be an object: \{ signal\? \}, got null$/],
    ] as const) {
      await expect(s.approvals.run(runAgent, "go", options as never)).rejects.toEqual(config(option, message));
      const other = s.agent([deployTurn("c3", "2"), { text: "x" }]);
      const interrupted = await s.runner.run(other.agent, "go");
      await expect(
        s.approvals.settle(interrupted, (state) => (started++, s.runner.run(other.agent, state)), options as never),
      ).rejects.toEqual(config(option, message));
    }
    expect(started).toBe(0);
    expect(model.inputs).toEqual([]);
    expect([s.asks, s.executed, s.records]).toEqual([[], [], []]);
  });

  it("shows the arguments in an ask's prompt as its prompt options say", async () => {
    const s = setup(() => ({ type: "approve" }), { prompt: { maxArgsChars: 10 } });
    const { agent } = s.agent([deployTurn("c1", "1.2"), { text: "deployed" }]);
    const result = await s.approvals.run((input) => s.runner.run(agent, input), "ship 1.2");
    expect(result.finalOutput).toBe("deployed");
    expect(s.asks[0]!.prompt).toBe(
      'Allow the tool "deploy" to run?\nArguments:\n{\n  "env":\n… 29 more characters not shown',
    );
  });
});

/**
 * An outer agent whose one tool is an inner agent's `asTool` (with structured input when `parameters`
 * is set: the SDK then runs the inner agent on a fork of the outer run's context, a new fork on resume),
 * the inner agent's deploy wrapped by `s.approvals`.
 */
function nested(
  s: Setup,
  innerTurns: readonly FakeTurn[],
  asTool: Partial<Parameters<Agent["asTool"]>[0]> = { parameters: z.object({ input: z.string() }) },
) {
  const innerModel = new FakeModel(innerTurns);
  const { deploy } = tools(s.executed);
  const inner = new Agent({ name: "deployer", model: innerModel, tools: s.approvals.tools([deploy]) });
  const outerModel = new FakeModel([{ calls: [["o1", "deployer", { input: "ship" }]] }, { text: "outer done" }]);
  const outer = new Agent({
    name: "lead",
    model: outerModel,
    tools: [
      inner.asTool({ toolName: "deployer", toolDescription: "Deploys", ...asTool } as Parameters<Agent["asTool"]>[0]),
    ],
  });
  return { outer, innerModel, outerModel };
}

/** A setup whose `outcomes` lists each gate call's outcome (`ran`, `failed`, `refused`) as it ends. */
function setupWithOutcomes(answer: (ask: PendingAsk) => AskResolution): Setup & { readonly outcomes: string[] } {
  const outcomes: string[] = [];
  const managers = new LoopManagers().withObserver({ onToolPost: ({ outcome }) => outcomes.push(outcome.type) });
  return { ...setup(answer, { managers }), outcomes };
}

describe("AgentApprovals: a wrapped tool of an agent used as a tool (agent.asTool)", () => {
  for (const [kind, asTool] of [
    ["structured input (a forked context)", { parameters: z.object({ input: z.string() }) }],
    ["text input (the outer context)", {}],
  ] as const) {
    it(`with ${kind}: the nested call is asked about once and runs once, with the approved arguments`, async () => {
      const s = setupWithOutcomes(() => ({ type: "approve" }));
      const { outer, innerModel, outerModel } = nested(s, [deployTurn("c1", "1.2"), { text: "inner done" }], asTool);
      const first = await s.runner.run(outer, "go");
      expect(first.interruptions.map((i) => [i.name, i.agent.name])).toEqual([["deploy", "deployer"]]);
      const result = await s.approvals.settle(first, (state) => s.runner.run(outer, state));
      expect(result.finalOutput).toBe("outer done");
      expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([["deploy", "c1"]]);
      expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
      expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([["deploy", "ask_allowed"]]);
      expect(s.outcomes).toEqual(["ran"]);
      expect(shownResults(innerModel)).toEqual({ c1: "deployed 1.2 to prod" });
      expect(shownResults(outerModel)).toEqual({ o1: "inner done" });
    });
  }

  it("a later nested call under the approved call id, with other arguments, is asked about and runs only if approved", async () => {
    const s = setup((ask) => (ask.argsSha256 === s.asks[0]!.argsSha256 ? { type: "approve" } : { type: "deny" }));
    const { outer, innerModel } = nested(s, [deployTurn("c1", "1.2"), deployTurn("c1", "1.3"), { text: "inner done" }]);
    const result = await s.approvals.run((input) => s.runner.run(outer, input), "go");
    expect(result.finalOutput).toBe("outer done");
    expect(s.asks.map((a) => [a.tool, a.callId, a.runId === s.asks[0]!.runId])).toEqual([
      ["deploy", "c1", true],
      ["deploy", "c1", true],
    ]);
    expect(s.asks[1]!.prompt).toContain('"version": "1.3"');
    expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_denied"]);
    expect(shownResults(innerModel)).toEqual({ c1: "Permission denied by approver for tool 'deploy'" });
  });

  it("another run's nested call under the same id and arguments takes nothing of this run's approval", async () => {
    const s = setupWithOutcomes(() => ({ type: "approve" }));
    const a = nested(s, [deployTurn("c1", "1.2"), { text: "a done" }]);
    const b = nested(s, [deployTurn("c1", "1.2"), { text: "b done" }]);
    const firstA = await s.runner.run(a.outer, "go");
    const firstB = await s.runner.run(b.outer, "go");
    const [resultA, resultB] = await Promise.all([
      s.approvals.settle(firstA, (state) => s.runner.run(a.outer, state)),
      s.approvals.settle(firstB, (state) => s.runner.run(b.outer, state)),
    ]);
    expect([resultA.finalOutput, resultB.finalOutput]).toEqual(["outer done", "outer done"]);
    expect(s.asks).toHaveLength(2);
    expect(new Set(s.asks.map((ask) => ask.runId)).size).toBe(2);
    expect(s.executed).toEqual([
      { env: "prod", version: "1.2" },
      { env: "prod", version: "1.2" },
    ]);
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed"]);
    expect(s.outcomes).toEqual(["ran", "ran"]);
  });

  it("a nested run resumed from its serialized state (preferSerialized) that lost the approval is a typed error: asked once, never run", async () => {
    const s = setupWithOutcomes(() => ({ type: "approve" }));
    const { outer, innerModel } = nested(s, [deployTurn("c1", "1.2"), { text: "inner done" }], {
      parameters: z.object({ input: z.string() }),
      resumeState: { contextStrategy: "preferSerialized" },
    });
    // Bounded: were the interruption asked about again on every resume, the third resume fails the test.
    let resumes = 0;
    const settled = s.approvals.run((input) => {
      if (input instanceof RunState && ++resumes > 2) throw new Error("resumed more than twice");
      return s.runner.run(outer, input);
    }, "go");
    const error = await settled.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect((error as AgentsApprovalError).tool).toBe("deploy");
    expect((error as AgentsApprovalError).message).toMatch(/did not carry the approval into the resumed run/);
    expect(resumes).toBe(1);
    expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([["deploy", "c1"]]);
    expect(s.executed).toEqual([]);
    expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([["deploy", "ask_allowed"]]);
    // The approval ends unexecuted (its one record, the tool's failure to observers); the tool never ran.
    expect(s.outcomes).toEqual(["failed"]);
    expect(shownResults(innerModel)).toEqual({});
  }, 10_000);

  it("a settle retried after its resume failed, whose resumed run lost the answer again (preferSerialized), is a typed error: asked once, never run", async () => {
    const s = setupWithOutcomes(() => ({ type: "approve" }));
    const { outer } = nested(s, [deployTurn("c1", "1.2"), { text: "inner done" }], {
      parameters: z.object({ input: z.string() }),
      resumeState: { contextStrategy: "preferSerialized" },
    });
    const interrupted = await s.runner.run(outer, "go");
    let resumes = 0;
    const resume = (state: typeof interrupted.state) => {
      if (++resumes === 1) return Promise.reject(new Error("model unreachable"));
      // Bounded: were the interruption resumed with (or asked about) again on every resume, the fourth fails the test.
      if (resumes > 3) throw new Error("resumed more than three times");
      return s.runner.run(outer, state);
    };
    await expect(s.approvals.settle(interrupted, resume)).rejects.toThrow("model unreachable");
    const error = await s.approvals.settle(interrupted, resume).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect((error as AgentsApprovalError).message).toMatch(/did not carry the answer into the resumed run/);
    expect(resumes).toBe(2);
    expect(s.asks).toHaveLength(1);
    expect(s.executed).toEqual([]);
    expect(s.outcomes).toEqual(["failed"]);
  }, 10_000);

  for (const [kind, asTool] of [["runOptions.context", { runOptions: { context: { tenant: "acme" } } }]] as const)
    it(`a nested run resumed on a context of its own (${kind}) is asked about again, and runs once`, async () => {
      const s = setupWithOutcomes(() => ({ type: "approve" }));
      const { outer, innerModel } = nested(s, [deployTurn("c1", "1.2"), { text: "inner done" }], asTool);
      const result = await s.approvals.run((input) => s.runner.run(outer, input), "go");
      expect(result.finalOutput).toBe("outer done");
      expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([
        ["deploy", "c1"],
        ["deploy", "c1"],
      ]);
      expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
      // The first approval ends unexecuted, once the resumed run is over; the call that ran was approved on its own ask.
      expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed"]);
      expect(s.outcomes).toEqual(["ran", "failed"]);
      expect(shownResults(innerModel)).toEqual({ c1: "deployed 1.2 to prod" });
    });

  it("an agent tool is gated by one AgentApprovals: passed again to it, it is gated once; another refuses it, naming it, and leaves it as it was", async () => {
    const first = setup(() => ({ type: "approve" }));
    const second = setup(() => ({ type: "approve" }));
    const inner = new Agent({ name: "deployer", model: new FakeModel([{ text: "inner done" }]) });
    const asTool = inner.asTool({ toolName: "deployer", toolDescription: "Deploys", needsApproval: true });
    expect(first.approvals.tools([asTool])).toEqual([asTool]);
    // Gated in place (the SDK knows an agent tool by identity): a second gate would stand in front of the first
    // for every agent the tool is given to, and the two would take each other's answers for their own.
    for (const [given, option] of [
      [() => second.approvals.tools([asTool]), "tools[0]"],
      [() => second.approvals.tool(asTool), "tool"],
      [() => second.approvals.tools([{ ...asTool }]), "tools[0]"],
    ] as const) {
      const error = (() => {
        try {
          given();
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error).toBeInstanceOf(AgentsConfigError);
      expect(error).toMatchObject({ option });
      expect((error as Error).message).toMatch(/agent tool .*deployer.* gated by another AgentApprovals/);
    }
    expect(first.approvals.tools([asTool])).toEqual([asTool]);
    const outerModel = new FakeModel([{ calls: [["o1", "deployer", { input: "ship" }]] }, { text: "outer done" }]);
    const outer = new Agent({ name: "lead", model: outerModel, tools: [asTool] });
    const result = await first.approvals.run((input) => first.runner.run(outer, input), "go");
    expect(result.finalOutput).toBe("outer done");
    expect(first.asks.map((a) => [a.tool, a.callId])).toEqual([["deployer", "o1"]]);
    expect(first.records.map((r) => [r.tool, r.verdict])).toEqual([["deployer", "ask_allowed"]]);
    expect([second.asks, second.records]).toEqual([[], []]);
    expect(shownResults(outerModel)).toEqual({ o1: "inner done" });
  });

  it("tools() that refuses one entry gates none of the others: an agent tool before it is left as it was", () => {
    const first = setup(() => ({ type: "approve" }));
    const second = setup(() => ({ type: "approve" }));
    const inner = new Agent({ name: "deployer", model: new FakeModel([{ text: "inner done" }]) });
    const asTool = inner.asTool({ toolName: "deployer", toolDescription: "Deploys", needsApproval: true });
    expect(() => first.approvals.tools([asTool, null])).toThrow(
      expect.objectContaining({ name: "AgentsConfigError", option: "tools[1]" }),
    );
    // Not gated in place by the refused list: another AgentApprovals may still gate it.
    expect(second.approvals.tools([asTool])).toEqual([asTool]);
  });

  it("an agent tool that cannot be gated in place (frozen) is refused with AgentsConfigError naming it, and an agent tool before it is left as it was", () => {
    const s = setup(() => ({ type: "approve" }));
    const other = setup(() => ({ type: "approve" }));
    const inner = new Agent({ name: "deployer", model: new FakeModel([{ text: "inner done" }]) });
    const open = inner.asTool({ toolName: "deployer", toolDescription: "Deploys" });
    const frozen = Object.freeze(inner.asTool({ toolName: "frozen", toolDescription: "Deploys", needsApproval: true }));
    const { invoke, needsApproval } = frozen;
    for (const [given, option] of [
      [() => s.approvals.tools([open, frozen]), "tools[1]"],
      [() => s.approvals.tool(frozen), "tool"],
    ] as const) {
      expect(given).toThrow(
        expect.objectContaining({
          name: "AgentsConfigError",
          option,
          message: expect.stringMatching(/agent tool "frozen" cannot be gated in place/),
        }),
      );
      expect(frozen).toMatchObject({ invoke, needsApproval });
    }
    // Not gated by the refused list: another AgentApprovals may still gate it.
    expect(other.approvals.tools([open])).toEqual([open]);
  });

  it("an agent tool passed through approvals.tools() stays the SDK's agent tool: a nested interruption restored from text is answered, and runs once", async () => {
    const s = setup(() => ({ type: "approve" }));
    const innerModel = new FakeModel([deployTurn("c1", "1.2"), { text: "inner done" }]);
    const inner = new Agent({
      name: "deployer",
      model: innerModel,
      tools: s.approvals.tools([tools(s.executed).deploy]),
    });
    const outer = new Agent({
      name: "lead",
      model: new FakeModel([{ calls: [["o1", "deployer", { input: "ship" }]] }, { text: "outer done" }]),
      tools: s.approvals.tools([
        inner.asTool({ toolName: "deployer", toolDescription: "Deploys", parameters: z.object({ input: z.string() }) }),
      ]),
    });
    const first = await s.runner.run(outer, "go");
    const restored = await RunState.fromString(outer, first.state.toString());
    expect(restored.getInterruptions().map((i) => [i.name, i.agent.name])).toEqual([["deploy", "deployer"]]);
    const resumed = await s.runner.run(outer, restored);
    const result = await s.approvals.settle(resumed, (state) => s.runner.run(outer, state));
    expect(result.finalOutput).toBe("outer done");
    expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([["deploy", "c1"]]);
    expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(shownResults(innerModel)).toEqual({ c1: "deployed 1.2 to prod" });
  });

  for (const needsApproval of [false, true])
    it(`an agent tool passed through approvals.tools()${needsApproval ? " that needs approval" : ""} runs its nested agent with the calling run's config, as the SDK does`, async () => {
      const s = setup(() => ({ type: "approve" }));
      // The SDK hands the nested run the calling run's config (model, provider, tool execution) on the tool's
      // details: the nested agent, which names no model, runs on the Runner's, not on the default provider's.
      const runModel = new FakeModel([
        { calls: [["o1", "deployer", { input: "ship" }]] },
        { text: "nested, on the run's model" },
        { text: "outer done" },
      ]);
      const defaultModel = new FakeModel([{ text: "nested, on the default model" }]);
      setDefaultModelProvider({ getModel: () => defaultModel });
      try {
        const inner = new Agent({ name: "deployer" });
        const deployer = inner.asTool({
          toolName: "deployer",
          toolDescription: "Deploys",
          needsApproval,
          parameters: z.object({ input: z.string() }),
        });
        const outer = new Agent({ name: "lead", tools: s.approvals.tools([deployer]) });
        const runner = new Runner({ model: runModel });
        const result = await s.approvals.run((input) => runner.run(outer, input), "go");
        expect(result.finalOutput).toBe("outer done");
        expect(shownResults(runModel)).toEqual({ o1: "nested, on the run's model" });
        expect(defaultModel.inputs).toEqual([]);
        expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([
          ["deployer", needsApproval ? "ask_allowed" : "allow"],
        ]);
      } finally {
        // As @openai/agents sets it when loaded.
        setDefaultModelProvider(new OpenAIProvider({ cacheResponsesWebSocketModels: false }));
      }
    });
});

describe("AgentApprovals: the gate's middleware on an approved call", () => {
  /** A middleware that lets every call run, then withholds its output. */
  const withholding = new LoopManagers().withMiddleware(async (_call, context, next) => {
    const result = await next();
    return result.type === "ran" ? context.deny({ ruleId: "no-output", message: "The output was withheld" }) : result;
  });

  for (const [kind, turn, ran, verdict] of [
    ["interrupted, approved and run on resume", deployTurn("c1", "1.2"), "deploy", "ask_allowed"],
    ["run without an interruption", { calls: [["c1", "status", { env: "prod" }]] }, "status", "allow"],
  ] as const)
    it(`a call ${kind}: the model reads what the middleware passed, not the tool's own output`, async () => {
      const outcomes: string[] = [];
      const managers = withholding.withObserver({ onToolPost: ({ outcome }) => outcomes.push(outcome.type) });
      const s = setup(() => ({ type: "approve" }), { managers });
      const { agent, model } = s.agent([turn, { text: "done" }]);
      const result = await s.approvals.run((input) => s.runner.run(agent, input), "go");
      expect(result.finalOutput).toBe("done");
      if (ran === "deploy") expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
      expect(shownResults(model)).toEqual({ c1: "The output was withheld" });
      expect(outcomes).toEqual(["refused"]);
      expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([[ran, verdict]]);
      expect(s.records[0]!.reason).toMatch(/withheld/);
    });
});

describe("AgentApprovals: a refused call of a tool with an output schema", () => {
  /** A tool with a zod output schema, which `errorFunction` (when given) answers for on a failure. */
  function counter(errorFunction?: (context: unknown, error: unknown) => unknown) {
    return tool({
      name: "count",
      description: "Count",
      parameters: z.object({ n: z.number() }),
      outputSchema: z.object({ total: z.number() }),
      ...(errorFunction === undefined ? {} : { errorFunction: errorFunction as () => { total: number } }),
      execute: async ({ n }) => ({ total: n }),
    });
  }
  const blocking = new LoopManagers().withHook({ preToolUse: () => ({ type: "block", reason: "counting is off" }) });

  it("is answered by the tool's errorFunction, handed the AgentsApprovalError: the model reads its fallback and the run goes on", async () => {
    const errors: unknown[] = [];
    const approvals = new AgentApprovals({ resolver: new SyncAskResolver(() => true), managers: blocking });
    const model = new FakeModel([{ calls: [["c1", "count", { n: 2 }]] }, { text: "done" }]);
    const agent = new Agent({
      name: "a",
      model,
      tools: approvals.tools([counter((_context, error) => (errors.push(error), { total: -1 }))]),
    });
    const result = await new Runner().run(agent, "go");
    expect(result.finalOutput).toBe("done");
    expect(shownResults(model)).toEqual({ c1: JSON.stringify({ total: -1 }) });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(AgentsApprovalError);
    expect((errors[0] as AgentsApprovalError).message).toBe("tool 'count': counting is off");
  });

  it("an errorFunction's fallback that breaks the output schema is refused as the SDK refuses it; without an errorFunction the run fails", async () => {
    const approvals = new AgentApprovals({ resolver: new SyncAskResolver(() => true), managers: blocking });
    const run = async (errorFunction?: () => unknown) => {
      const model = new FakeModel([{ calls: [["c1", "count", { n: 2 }]] }, { text: "done" }]);
      const agent = new Agent({ name: "a", model, tools: approvals.tools([counter(errorFunction)]) });
      return (await new Runner().run(agent, "go").then(
        () => undefined,
        (e: unknown) => e,
      )) as { error?: unknown };
    };
    expect((await run(() => ({ total: "many" })))?.error).toHaveProperty("name", "InvalidToolOutputError");
    expect((await run())?.error).toBeInstanceOf(AgentsApprovalError);
  });
});

describe("AgentApprovals: a loop-detection stop ends the run", () => {
  const looping = new LoopManagers().withLoopDetection({ maxRepeats: 2 });

  it("a call repeated past maxRepeats without an interruption fails the SDK's run with the LoopDetectedError: the model is not asked again", async () => {
    const s = setup(() => ({ type: "approve" }), { managers: looping });
    const status = (id: string): FakeTurn => ({ calls: [[id, "status", { env: "prod" }]] });
    const { agent, model } = s.agent([status("s1"), status("s2"), status("s3"), { text: "kept going" }]);
    const error = (await s.approvals
      .run((input) => s.runner.run(agent, input), "watch")
      .then(
        () => undefined,
        (e: unknown) => e,
      )) as { error?: unknown };
    expect(error.error).toBeInstanceOf(LoopDetectedError);
    expect((error.error as LoopDetectedError).tool).toBe("status");
    expect((error.error as LoopDetectedError).repeats).toBe(3);
    expect(model.inputs).toHaveLength(3);
    expect(s.records.map((r) => [r.verdict, r.ruleId])).toEqual([
      ["allow", "hook"],
      ["allow", "hook"],
      ["deny", "loop_detector"],
    ]);
  });

  it("an interrupted call repeated past maxRepeats makes settle reject with the LoopDetectedError: nothing is resumed, the call never runs", async () => {
    const s = setup(() => ({ type: "approve" }), { managers: looping });
    const { agent, model } = s.agent([
      deployTurn("c1", "1"),
      deployTurn("c2", "1"),
      deployTurn("c3", "1"),
      { text: "x" },
    ]);
    const error = await s.approvals
      .run((input) => s.runner.run(agent, input), "ship")
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect((error as LoopDetectedError).tool).toBe("deploy");
    expect(model.inputs).toHaveLength(3);
    expect(s.asks.map((a) => a.callId)).toEqual(["c1", "c2", "c3"]);
    expect(s.executed).toHaveLength(2);
    // The approval still lands at that exit (docs/records.md): one record per call.
    expect(s.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed", "ask_allowed"]);
  });

  it("a stop in a turn cancels the asks of that turn still waiting: no answer is waited for", async () => {
    const resolver: AskResolver = {
      resolve: (ask, { signal }) =>
        ask.callId === "w1"
          ? new Promise((_resolve, reject) => signal.addEventListener("abort", () => reject(signal.reason)))
          : Promise.resolve({ type: "approve" }),
    };
    const records: GateDecision[] = [];
    const approvals = new AgentApprovals({
      resolver,
      managers: looping.withObserver({ onGate: ({ decision }) => records.push(decision) }),
    });
    const model = new FakeModel([
      deployTurn("c1", "1"),
      deployTurn("c2", "1"),
      {
        calls: [
          ["c3", "deploy", { env: "prod", version: "1" }],
          ["w1", "deploy", { env: "prod", version: "2" }],
        ],
      },
    ]);
    const agent = new Agent({ name: "ops", model, tools: approvals.tools([tools([]).deploy]) });
    const error = await approvals
      .run((input) => new Runner().run(agent, input), "ship")
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(LoopDetectedError);
    expect(records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_allowed", "ask_allowed", "cancelled"]);
  });
});

/** A FakeModel whose calls to `namespace.name` are sent as the Responses API sends a namespaced call. */
class NamespacedModel extends FakeModel {
  override async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const response = await super.getResponse(request);
    return {
      ...response,
      output: response.output.map((item) => {
        if (item.type !== "function_call" || !item.name.includes(".")) return item;
        const [namespace, name] = item.name.split(".") as [string, string];
        return { ...item, name, namespace };
      }),
    };
  }
}

describe("AgentApprovals: tools grouped by toolNamespace()", () => {
  type Order = "namespaced, then wrapped" | "wrapped, then namespaced";

  /**
   * One `deploy` tool in each of the namespaces `staging` and `prod`, alike but for where they deploy,
   * wrapped by `approvals` before or after `toolNamespace()`. Staging's needs no approval of the SDK's
   * when `stagingNeedsApproval` is false.
   */
  function namespaced(executed: string[], approvals: AgentApprovals, order: Order, stagingNeedsApproval = true) {
    const deploy = (where: string, needsApproval: boolean) =>
      tool({
        name: "deploy",
        description: "Deploy a version",
        parameters: z.object({ version: z.string() }),
        needsApproval,
        execute: async ({ version }) => (executed.push(`${where} ${version}`), `deployed ${version} to ${where}`),
      });
    const group = (name: string, description: string, needsApproval: boolean) =>
      order === "namespaced, then wrapped"
        ? approvals.tools(toolNamespace({ name, description, tools: [deploy(name, needsApproval)] }))
        : toolNamespace({ name, description, tools: approvals.tools([deploy(name, needsApproval)]) });
    return [
      ...group("staging", "The staging cluster", stagingNeedsApproval),
      ...group("prod", "The production cluster", true),
    ];
  }

  it("a wrapped tool put in a namespace and wrapped again is gated once: one ask, one record", async () => {
    const executed: string[] = [];
    const s = setup(() => ({ type: "approve" }));
    const [deploy] = namespaced(executed, s.approvals, "wrapped, then namespaced").slice(1);
    const model = new NamespacedModel([{ calls: [["c1", "prod.deploy", { version: "1.2" }]] }, { text: "done" }]);
    const agent = new Agent({ name: "ops", model, tools: s.approvals.tools([deploy!]) });
    await s.approvals.run((input) => s.runner.run(agent, input), "ship");
    expect(executed).toEqual(["prod 1.2"]);
    expect(s.asks).toHaveLength(1);
    expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([["prod.deploy", "ask_allowed"]]);
  });

  for (const order of ["namespaced, then wrapped", "wrapped, then namespaced"] as const) {
    it(`(${order}) an interruption of a namespaced tool is asked about under its qualified name, and the approved call runs once`, async () => {
      const executed: string[] = [];
      const s = setup(() => ({ type: "approve" }));
      const model = new NamespacedModel([{ calls: [["c1", "prod.deploy", { version: "1.2" }]] }, { text: "done" }]);
      const agent = new Agent({ name: "ops", model, tools: namespaced(executed, s.approvals, order) });
      const result = await s.approvals.run((input) => s.runner.run(agent, input), "ship");
      expect(result.finalOutput).toBe("done");
      expect(executed).toEqual(["prod 1.2"]);
      expect(s.asks).toMatchObject([{ tool: "prod.deploy", callId: "c1" }]);
      expect(s.asks[0]!.prompt).toContain('Allow the tool "prod.deploy" to run?');
      expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([["prod.deploy", "ask_allowed"]]);
      expect(shownResults(model)).toEqual({ c1: "deployed 1.2 to prod" });
    });

    it(`(${order}) a grant remembered for a tool of one namespace does not cover the tool of the same name in another`, async () => {
      const executed: string[] = [];
      const store = new MemoryGrantStore();
      // Staging's deploy needs no approval of the SDK's; a hook asks about it, and the answer is remembered.
      const askStaging: Hook = {
        preToolUse: (call) => (call.name === "prod.deploy" ? { type: "allow" } : { type: "ask", prompt: "staging?" }),
      };
      const s = setup(() => ({ type: "approve", remember: "this_tool" }), {
        store,
        managers: new LoopManagers().withHook(askStaging),
      });
      const model = new NamespacedModel([
        { calls: [["c1", "staging.deploy", { version: "1.2" }]] },
        { text: "on staging" },
        { calls: [["c2", "prod.deploy", { version: "1.2" }]] },
        { text: "on prod" },
      ]);
      const agent = new Agent({ name: "ops", model, tools: namespaced(executed, s.approvals, order, false) });
      const first = await s.runner.run(agent, "ship to staging");
      expect(first.interruptions).toEqual([]);
      expect(executed).toEqual(["staging 1.2"]);
      expect(s.asks).toHaveLength(1);

      const second = await s.runner.run(agent, "ship to prod");
      expect(second.interruptions.map((i) => i.name)).toEqual(["prod.deploy"]);
      expect(executed).toEqual(["staging 1.2"]);
      expect((await store.load()).map((g) => g.tool)).toEqual(["staging.deploy"]);
    });
  }
});

describe("AgentApprovals: shell, computer and apply-patch calls answered by hand on the RunState", () => {
  type Kind = "shell" | "apply_patch" | "computer";
  const KINDS: readonly Kind[] = ["shell", "apply_patch", "computer"];
  const named: Record<Kind, string> = { shell: "a shell", apply_patch: "an apply-patch", computer: "a computer" };

  /** The SDK's tool of `kind`, every call wanting approval, recording what it did in `did`. */
  function kindTool(kind: Kind, did: unknown[]) {
    if (kind === "shell")
      return shellTool({
        needsApproval: true,
        shell: {
          run: async (action) => (
            did.push(action),
            { output: [{ stdout: "ran", stderr: "", outcome: { type: "exit", exitCode: 0 } }] }
          ),
        },
      });
    if (kind === "apply_patch")
      return applyPatchTool({
        needsApproval: true,
        editor: {
          createFile: async (operation) => (did.push(operation), { status: "completed", output: "ran" }),
          updateFile: async (operation) => (did.push(operation), { status: "completed", output: "ran" }),
          deleteFile: async (operation) => (did.push(operation), { status: "completed", output: "ran" }),
        },
      });
    const none = () => undefined;
    const computer: Computer = {
      environment: "browser",
      dimensions: [8, 8],
      screenshot: () => "cmFu",
      click: (x, y, button) => void did.push({ type: "click", x, y, button }),
      doubleClick: none,
      scroll: none,
      type: none,
      wait: none,
      move: none,
      keypress: none,
      drag: none,
    };
    return computerTool({ needsApproval: true, computer });
  }

  /** The model's call `k1` of the tool of `kind`, and what the tool is given for it. */
  function kindCall(kind: Kind) {
    if (kind === "shell") {
      const action = { commands: ["rm -rf build"] };
      return { given: action, item: { type: "shell_call", callId: "k1", status: "completed", action } } as const;
    }
    if (kind === "apply_patch") {
      const operation = { type: "create_file", path: "notes.txt", diff: "+ship it" } as const;
      return {
        given: operation,
        item: { type: "apply_patch_call", callId: "k1", status: "completed", operation },
      } as const;
    }
    const action = { type: "click", x: 1, y: 2, button: "left" } as const;
    return { given: action, item: { type: "computer_call", callId: "k1", status: "completed", action } } as const;
  }

  /** What the model was shown for `k1` in its last request: the tool's output, or the rejection's text. */
  function shownFor(model: FakeModel): string | undefined {
    for (const item of model.inputs.at(-1) ?? []) {
      const raw = item as { type: string; callId?: string; output?: unknown };
      if (raw.callId !== "k1") continue;
      if (raw.type === "shell_call_output") {
        const [first] = raw.output as { stdout: string; stderr: string }[];
        return first!.stdout || first!.stderr;
      }
      if (raw.type === "apply_patch_call_output") return raw.output as string;
      if (raw.type === "computer_call_result") {
        const output = raw.output as { data: string; providerData?: { message?: string } };
        return output.providerData?.message ?? (output.data.endsWith("cmFu") ? "ran" : output.data);
      }
    }
    return undefined;
  }

  /** The model's turn that calls the tool of `kind` (`k1`) and the wrapped `deploy` (`c1`). */
  const bothTurn = (kind: Kind): FakeTurn => ({
    output: [
      kindCall(kind).item,
      {
        type: "function_call",
        callId: "c1",
        name: "deploy",
        arguments: JSON.stringify({ env: "prod", version: "1.2" }),
        status: "completed",
      },
    ],
  });

  /** An agent `ops` with the tool of `kind` and the wrapped `deploy`, on a model that plays `turns`. */
  function kindAndDeploy(
    s: Setup,
    kind: Kind,
    did: unknown[],
    turns: readonly FakeTurn[] = [bothTurn(kind), { text: "done" }],
  ) {
    const model = new FakeModel(turns);
    const agent = new Agent({
      name: "ops",
      model,
      tools: [kindTool(kind, did), ...s.approvals.tools([tools(s.executed).deploy])],
    });
    return { agent, model };
  }

  const handItem = (interruptions: readonly RunToolApprovalItem[]) =>
    interruptions.find((item) => item.rawItem.type !== "function_call")!;

  /** The turn's function call was asked about once, approved, run once and recorded once. */
  const expectDeployAskedOnce = (s: Setup) => {
    expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([["deploy", "c1"]]);
    expect(s.executed).toEqual([{ env: "prod", version: "1.2" }]);
    expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([["deploy", "ask_allowed"]]);
  };

  for (const kind of KINDS) {
    for (const approve of [true, false])
      it(`${named[kind]} call ${approve ? "approved" : "rejected"} by hand is left to that answer: settle asks only about the turn's function call, and it runs only if approved`, async () => {
        const s = setup(() => ({ type: "approve" }));
        const did: unknown[] = [];
        const { agent, model } = kindAndDeploy(s, kind, did);
        const interrupted = await s.runner.run(agent, "go");
        expect(interrupted.interruptions.map((i) => i.rawItem.type).sort()).toEqual(
          ["function_call", kindCall(kind).item.type].sort(),
        );
        const item = handItem(interrupted.interruptions);
        if (approve) interrupted.state.approve(item);
        else interrupted.state.reject(item, { message: "not on this machine" });
        const result = await s.approvals.settle(interrupted, (state) => s.runner.run(agent, state));
        expect(result.finalOutput).toBe("done");
        expectDeployAskedOnce(s);
        expect(did).toEqual(approve ? [kindCall(kind).given] : []);
        expect(shownFor(model)).toBe(approve ? "ran" : "not on this machine");
        expect(shownResults(model)).toEqual({ c1: "deployed 1.2 to prod" });
      });

    it(`${named[kind]} call nobody answered on the RunState makes settle throw before anyone is asked: nothing is decided, resumed or run`, async () => {
      const s = setup(() => ({ type: "approve" }));
      const did: unknown[] = [];
      const { agent, model } = kindAndDeploy(s, kind, did);
      const interrupted = await s.runner.run(agent, "go");
      let resumed = 0;
      const error = await s.approvals
        .settle(interrupted, (state) => (resumed++, s.runner.run(agent, state)))
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AgentsApprovalError);
      expect(error).toMatchObject({ tool: handItem(interrupted.interruptions).name });
      expect((error as Error).message).toMatch(new RegExp(`"${kindCall(kind).item.type}".*answer it on the RunState`));
      expect([resumed, s.asks, s.records, s.executed, did]).toEqual([0, [], [], [], []]);
      expect(model.inputs).toHaveLength(1);
    });

    it(`${named[kind]} call approved by hand on a run state restored from text in another process is left to that answer; the function call is asked about there`, async () => {
      const before = setup(() => Promise.reject(new Error("nobody should be asked")));
      const saved = (await before.runner.run(kindAndDeploy(before, kind, []).agent, "go")).state.toString();
      const after = setup(() => ({ type: "approve" }));
      const did: unknown[] = [];
      // The restored run goes on from its interruption: its model's next turn ends it.
      const { agent } = kindAndDeploy(after, kind, did, [{ text: "done" }]);
      const state = await RunState.fromString(agent, saved);
      state.approve(handItem(state.getInterruptions()));
      const result = await after.approvals.settle({ state, interruptions: state.getInterruptions() }, (resumed) =>
        after.runner.run(agent, resumed),
      );
      expect((result as { finalOutput?: unknown }).finalOutput).toBe("done");
      expectDeployAskedOnce(after);
      expect(did).toEqual([kindCall(kind).given]);
      expect(before.asks).toEqual([]);
    });

    it(`${named[kind]} call approved by hand on a streamed run is left to that answer, and runs once`, async () => {
      const s = setup(() => ({ type: "approve" }));
      const did: unknown[] = [];
      const { agent } = kindAndDeploy(s, kind, did);
      const interrupted = await s.runner.run(agent, "go", { stream: true });
      await interrupted.completed;
      interrupted.state.approve(handItem(interrupted.interruptions));
      const result = await s.approvals.settle(interrupted, (state) => s.runner.run(agent, state, { stream: true }));
      expect(result.finalOutput).toBe("done");
      expectDeployAskedOnce(s);
      expect(did).toEqual([kindCall(kind).given]);
    });

    it(`${named[kind]} call of an agent used as a tool, approved by hand on the calling run's state, is left to that answer and runs once`, async () => {
      const s = setup(() => ({ type: "approve" }));
      const did: unknown[] = [];
      const { agent: inner } = kindAndDeploy(s, kind, did, [bothTurn(kind), { text: "inner done" }]);
      const outerModel = new FakeModel([{ calls: [["o1", "ops", { input: "ship" }]] }, { text: "outer done" }]);
      const outer = new Agent({
        name: "lead",
        model: outerModel,
        tools: [inner.asTool({ toolName: "ops", toolDescription: "Ops", parameters: z.object({ input: z.string() }) })],
      });
      const interrupted = await s.runner.run(outer, "go");
      expect(interrupted.interruptions.map((i) => i.agent.name)).toEqual(["ops", "ops"]);
      interrupted.state.approve(handItem(interrupted.interruptions));
      const result = await s.approvals.settle(interrupted, (state) => s.runner.run(outer, state));
      expect(result.finalOutput).toBe("outer done");
      expectDeployAskedOnce(s);
      expect(did).toEqual([kindCall(kind).given]);
      expect(shownResults(outerModel)).toEqual({ o1: "inner done" });
    });

    it(`${named[kind]} call answered by hand that the resumed run interrupts for again makes settle throw instead of resuming for ever`, async () => {
      const s = setup(() => ({ type: "approve" }));
      const did: unknown[] = [];
      const model = new FakeModel([{ output: [kindCall(kind).item] }]);
      const agent = new Agent({ name: "ops", model, tools: [kindTool(kind, did)] });
      const interrupted = await s.runner.run(agent, "go");
      interrupted.state.reject(interrupted.interruptions[0]!);
      // A resume that hands back the interrupted turn as it was (its answer never read).
      let resumed = 0;
      const error = await s.approvals
        .settle(interrupted, () => (resumed++, Promise.resolve(interrupted)))
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AgentsApprovalError);
      expect((error as Error).message).toMatch(/interrupted again/);
      expect([resumed, s.asks, s.records, did]).toEqual([1, [], [], []]);
    });
  }
});

describe("AgentApprovals: tools loaded at run time by tool search", () => {
  /** A deploy tool hidden until tool search loads it, recording what it deployed in `executed`. */
  const deferred = (executed: unknown[]) =>
    tool({
      name: "deploy",
      description: "Deploy a version",
      parameters: z.object({ env: z.string() }),
      needsApproval: true,
      deferLoading: true,
      execute: async (input) => (executed.push(input), `deployed to ${input.env}`),
    });
  /** The model searches for `deploy`, calls it, then ends. */
  const turns: readonly FakeTurn[] = [
    {
      output: [
        {
          type: "tool_search_call",
          id: "ts_1",
          callId: "ts_1",
          execution: "client",
          arguments: { paths: ["deploy"] },
          status: "completed",
        },
      ],
    },
    { calls: [["c1", "deploy", { env: "prod" }]] },
    { text: "done" },
  ];

  /** Runs `agent` on "ship" with these approvals: deploy c1 asked about once, approved, run once, recorded once. */
  async function expectAskedOnceRanOnce(s: ReturnType<typeof setup>, agent: Agent, executed: unknown[]): Promise<void> {
    const result = await s.approvals.run((input) => s.runner.run(agent, input), "ship");
    expect(result.finalOutput).toBe("done");
    expect(s.asks.map((a) => [a.tool, a.callId])).toEqual([["deploy", "c1"]]);
    expect(executed).toEqual([{ env: "prod" }]);
    expect(s.records.map((r) => [r.tool, r.verdict])).toEqual([["deploy", "ask_allowed"]]);
  }

  it("a wrapped tool with deferLoading, loaded by the built-in client tool search, is asked about once and runs once", async () => {
    const s = setup(() => ({ type: "approve" }));
    const executed: unknown[] = [];
    const model = new FakeModel(turns);
    const agent = new Agent({
      name: "ops",
      model,
      tools: [toolSearchTool({ execution: "client" }), ...s.approvals.tools([deferred(executed)])],
    });
    await expectAskedOnceRanOnce(s, agent, executed);
    expect(shownResults(model)).toEqual({ c1: "deployed to prod" });
  });

  it("a wrapped tool a client tool search's execute loads into the run, listed nowhere on the agent, is asked about once and runs once", async () => {
    const s = setup(() => ({ type: "approve" }));
    const executed: unknown[] = [];
    const [deploy] = s.approvals.tools([deferred(executed)]);
    const model = new FakeModel(turns);
    const agent = new Agent({
      name: "ops",
      model,
      tools: [toolSearchTool({ execution: "client", execute: () => [deploy] })],
    });
    await expectAskedOnceRanOnce(s, agent, executed);
  });

  it("a tool a client tool search loads that these approvals did not wrap is a typed error: nobody asked, nothing run", async () => {
    const s = setup(() => ({ type: "approve" }));
    const executed: unknown[] = [];
    const model = new FakeModel(turns);
    const agent = new Agent({
      name: "ops",
      model,
      tools: [toolSearchTool({ execution: "client", execute: () => [deferred(executed)] })],
    });
    const error = await s.approvals.run((input) => s.runner.run(agent, input), "ship").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AgentsApprovalError);
    expect(error).toMatchObject({ tool: "deploy" });
    expect(s.asks).toEqual([]);
    expect(executed).toEqual([]);
    expect(s.records).toEqual([]);
  });
});

describe("runs that have ended", () => {
  it("leave nothing in the gate: once a run is collected, its loop-detection counts are forgotten", async () => {
    expect(await gcChildResult("test/support/openai-runs-gc-child.ts", [], 60_000)).toEqual({
      runs: 300,
      detectors: 0,
    });
  }, 90_000);
});
