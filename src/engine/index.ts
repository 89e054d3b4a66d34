export { GATE_VERDICTS, RULE_SOURCES, GateDecisionSchema } from "./records.js";
export type { GateDecision, GateVerdict, RuleSource } from "./records.js";
