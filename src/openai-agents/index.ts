/**
 * `loopctl/openai-agents`: loopctl approvals for the OpenAI Agents SDK
 * (`@openai/agents` 0.14): remembered grants decide `needsApproval`,
 * interruptions are answered by any `AskResolver` through the gate, and every
 * call leaves one record. Needs `@openai/agents` for the types; importing
 * this module loads no SDK.
 *
 * @packageDocumentation
 */
export { AgentApprovals } from "./approvals.js";
export type { AgentApprovalsOptions, InterruptedResult } from "./approvals.js";
export { AgentsApprovalError, AgentsConfigError } from "./errors.js";
