import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { AskResolver } from "../src/ask/index.js";
import { argsDigest } from "../src/grant/index.js";
import { GateDecisionSchema, LoopManagers, permissionMiddleware } from "../src/engine/index.js";
import type { GateVerdict, Hook } from "../src/engine/index.js";
import { build, call, readTool } from "./support/engine-fixtures.js";

const FUZZ_RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 60);

type HookPlan = "allow" | "block" | "modify" | "throw" | "ask";
type AnswerPlan = "approve" | "deny" | "throw" | "garbage";
interface CallPlan {
  readonly path: string;
  readonly hook: HookPlan;
  readonly answer: AnswerPlan;
}

const callPlan = fc.record({
  path: fc.constantFrom("a", "b", "deny-c", "deny-d"),
  hook: fc.constantFrom<HookPlan>("allow", "block", "modify", "throw", "ask"),
  answer: fc.constantFrom<AnswerPlan>("approve", "deny", "throw", "garbage"),
});

/** The one verdict the contract gives each plan. */
function expected(plan: CallPlan): GateVerdict {
  const middlewareDenies = plan.path.startsWith("deny");
  switch (plan.hook) {
    case "block":
    case "throw":
      return "deny";
    case "allow":
      return middlewareDenies ? "deny" : "allow";
    case "modify":
      return middlewareDenies ? "deny" : "allow_modified";
    case "ask":
      if (plan.answer !== "approve") return "ask_denied";
      return middlewareDenies ? "deny" : "ask_allowed";
  }
}

describe("records", () => {
  it("property: exactly one record per call, the one the contract gives; the tool runs exactly when allowed", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(callPlan, { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 3 }),
        fc.integer({ min: 1, max: 4 }),
        async (turns, concurrency) => {
          const plans = new Map<string, CallPlan>();
          const scripted = turns.map((calls, t) => ({
            toolCalls: calls.map((plan, i) => {
              const id = `t${t}c${i}`;
              plans.set(id, plan);
              return call(id, "read", { path: plan.path });
            }),
          }));
          const hook: Hook = {
            preToolUse: (c) => {
              const plan = plans.get(c.id)!;
              switch (plan.hook) {
                case "throw":
                  throw new Error("hook bug");
                case "modify":
                  return { type: "modify", input: { path: `${plan.path}.m` } };
                case "ask":
                  return Promise.resolve({ type: "ask", prompt: c.id });
                default:
                  return plan.hook === "block" ? { type: "block", reason: "no" } : { type: "allow" };
              }
            },
          };
          const resolver: AskResolver = {
            resolve: async (ask) => {
              const plan = plans.get(ask.callId)!;
              if (plan.answer === "throw") throw new Error("resolver down");
              if (plan.answer === "garbage") return { type: "perhaps" } as never;
              return { type: plan.answer };
            },
          };
          const executed: unknown[] = [];
          const gates: { callId: string; verdict: GateVerdict }[] = [];
          const { agent } = build({
            turns: [...scripted, { text: "done" }],
            tools: [readTool(executed)],
            managers: new LoopManagers()
              .withHook(hook)
              .withAskResolver(resolver)
              .withMaxConcurrency(concurrency)
              .withObserver({ onGate: ({ callId, decision }) => gates.push({ callId, verdict: decision.verdict }) })
              .withMiddleware(
                permissionMiddleware({
                  rules: [{ id: "deny-prefix", args: { path: "deny*" }, action: "deny" }],
                  defaultAction: "allow",
                }),
              ),
          });
          const result = await agent.run("go");
          const ids = [...plans.keys()];
          expect(result.records).toHaveLength(ids.length);
          for (const record of result.records) expect(GateDecisionSchema.parse(record)).toEqual(record);
          const toolResults = result.messages.filter((m) => m.type === "tool_result");
          expect(toolResults.map((m) => m.callId)).toEqual(ids);
          expect(gates.map((g) => g.verdict)).toEqual(result.records.map((r) => r.verdict));
          for (const id of ids) {
            expect(gates.filter((g) => g.callId === id).map((g) => g.verdict)).toEqual([expected(plans.get(id)!)]);
          }
          const allowed = ids.filter((id) =>
            ["allow", "allow_modified", "ask_allowed"].includes(expected(plans.get(id)!)),
          );
          expect(executed).toHaveLength(allowed.length);
          for (const id of ids) {
            const plan = plans.get(id)!;
            const message = toolResults.find((m) => m.callId === id)!;
            expect(message.isError).toBe(!allowed.includes(id));
            if (plan.hook === "ask") {
              expect(result.records.some((r) => r.argsDigest === argsDigest({ path: plan.path }))).toBe(true);
            }
          }
        },
      ),
      { numRuns: FUZZ_RUNS },
    );
  });
});
