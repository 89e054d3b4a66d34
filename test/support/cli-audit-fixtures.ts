import type { GateDecision } from "../../src/engine/index.js";

/** A valid gate record, distinct per `i`. */
export function gateRecord(i: number, overrides: Partial<GateDecision> = {}): GateDecision {
  return {
    tool: `tool_${i}`,
    argsDigest: "f1ed61cd8ca5e26b",
    verdict: i % 2 === 0 ? "allow" : "ask_denied",
    ruleId: i % 2 === 0 ? "rule-1" : "ask",
    ruleSource: i % 2 === 0 ? "middleware" : "ask_resolver",
    matchedPattern: null,
    reason: i % 2 === 0 ? null : "denied by approver",
    ts: 1_700_000_000_000 + i,
    ...overrides,
  };
}
