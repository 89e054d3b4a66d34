import { z } from "zod";

/** Every verdict a gate record can carry. */
export const GATE_VERDICTS = [
  "allow",
  "allow_modified",
  "deny",
  "ask",
  "ask_allowed",
  "ask_denied",
  "ask_unresolved",
  "ask_expired",
  "cancelled",
] as const;

/** The verdict of one gate decision. */
export type GateVerdict = (typeof GATE_VERDICTS)[number];

/** Who decided: a middleware rule, context (hooks, grants), the ask resolver, or the engine itself. */
export const RULE_SOURCES = ["middleware", "context", "ask_resolver", "engine"] as const;

/** The source of one gate decision. */
export type RuleSource = (typeof RULE_SOURCES)[number];

/**
 * One audit record: exactly one lands per ending of a gated tool call.
 * `ts` is epoch milliseconds from the engine's clock seam.
 */
export interface GateDecision {
  readonly tool: string;
  readonly argsDigest: string;
  readonly verdict: GateVerdict;
  readonly ruleId: string;
  readonly ruleSource: RuleSource;
  readonly matchedPattern: string | null;
  readonly reason: string | null;
  readonly ts: number;
}

/** Parses a {@link GateDecision} from untrusted JSON (an audit log line, a wire message). */
export const GateDecisionSchema = z.object({
  tool: z.string(),
  argsDigest: z.string(),
  verdict: z.enum(GATE_VERDICTS),
  ruleId: z.string(),
  ruleSource: z.enum(RULE_SOURCES),
  matchedPattern: z.string().nullable(),
  reason: z.string().nullable(),
  ts: z.number(),
});
