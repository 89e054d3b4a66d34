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
 * Parses a {@link GateDecision} from untrusted JSON (an audit log line, a
 * wire message). `argsSha256` is optional so that records written before it
 * existed still parse; the engine always sets it.
 */
export const GateDecisionSchema = z.object({
  tool: z.string(),
  argsDigest: z.string(),
  argsSha256: z.string().optional(),
  verdict: z.enum(GATE_VERDICTS),
  ruleId: z.string(),
  ruleSource: z.enum(RULE_SOURCES),
  matchedPattern: z.string().nullable(),
  reason: z.string().nullable(),
  ts: z.number(),
});

/**
 * One audit record: exactly one lands per ending of a gated tool call.
 * `argsDigest` is FNV-1a 64 and `argsSha256` sha256 (64 hex), both over the
 * canonical JSON of the arguments (`""` when they are not JSON values, and
 * on run-level records); `ts` is epoch milliseconds from the engine's clock seam.
 */
export type GateDecision = Readonly<z.infer<typeof GateDecisionSchema>>;
