import { z } from "zod";
import type { ToolDescriptor } from "../grant/index.js";
import { zodIssuesLine } from "../zod-issues.js";
import { describeError } from "./errors.js";
import type { ToolCall } from "./model.js";

/** Parses a hook's answer; anything else fails closed. */
export const HookDecisionSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("allow") }),
  z.object({ type: z.literal("block"), reason: z.string() }),
  z.object({ type: z.literal("ask"), prompt: z.string() }),
  z.object({ type: z.literal("modify"), input: z.unknown() }),
]);

/**
 * A pre-tool-use hook's answer: `allow` (no objection), `block` (refuse; the
 * model receives `reason`), `ask` (park and ask a human `prompt`), `modify`
 * (continue with `input` instead of the model's arguments).
 */
export type HookDecision = Readonly<z.infer<typeof HookDecisionSchema>>;

/** What a hook sees besides the call. */
export interface HookContext {
  readonly turn: number;
  readonly callId: string;
  readonly sessionId: string;
  readonly runId: string;
  /** The called tool's descriptor. */
  readonly descriptor: ToolDescriptor;
  /** Aborts when the call is cancelled. */
  readonly signal: AbortSignal;
}

/**
 * Sits in front of every tool call. Hooks run in the order they were added;
 * the first answer that is not `allow` wins. A hook that throws, rejects or
 * answers anything but a {@link HookDecision} denies the call. The call a
 * hook receives is frozen: its `input` is the gate's snapshot of the
 * arguments, already validated against the tool's schema.
 */
export interface Hook {
  /** Optional name, used in failure records. */
  readonly name?: string;
  preToolUse(call: ToolCall, context: HookContext): HookDecision | Promise<HookDecision>;
}

/** What an approval hook's allow says approved the call: its record's `ruleId` and `reason`. */
export interface ApprovedBy {
  readonly ruleId: string;
  readonly reason: string;
}

const approvals = new WeakMap<object, ApprovedBy>();

/**
 * An `allow` for an adapter's approval hook (see `callFor`) that
 * says what approved the call, so its record says so instead of "no hook
 * objected". Only this module's objects carry it: a hook cannot claim an
 * approval by the shape of its answer. Internal.
 */
export function approvedAllow(by: ApprovedBy): HookDecision {
  const decision: HookDecision = Object.freeze({ type: "allow" });
  approvals.set(decision, Object.freeze({ ruleId: by.ruleId, reason: by.reason }));
  return decision;
}

/** What `decision` says approved the call, when it is an {@link approvedAllow}. Internal. */
export function approvedByOf(decision: unknown): ApprovedBy | undefined {
  return typeof decision === "object" && decision !== null ? approvals.get(decision) : undefined;
}

/** The combined verdict of the hook chain. */
export type HookOutcome =
  | { readonly type: "decided"; readonly decision: HookDecision; readonly hook: string }
  | { readonly type: "failed"; readonly hook: string; readonly reason: string }
  | { readonly type: "cancelled" };

function hookName(hook: Hook, index: number): string {
  return typeof hook.name === "string" && hook.name !== "" ? hook.name : `#${index}`;
}

/** Runs the hooks in order on the (frozen) call; none starts once the call is cancelled. */
export async function runHooks(hooks: readonly Hook[], call: ToolCall, context: HookContext): Promise<HookOutcome> {
  for (let index = 0; index < hooks.length; index++) {
    if (context.signal.aborted) return { type: "cancelled" };
    const hook = hooks[index] as Hook;
    const name = hookName(hook, index);
    let raw: unknown;
    try {
      raw = await hook.preToolUse(call, context);
    } catch (error) {
      return { type: "failed", hook: name, reason: `hook ${name} failed: ${describeError(error)}` };
    }
    let parsed: ReturnType<typeof HookDecisionSchema.safeParse> | undefined;
    try {
      parsed = HookDecisionSchema.safeParse(raw);
    } catch {
      // A decision whose reads throw (a proxy, a getter) is as invalid as a malformed one.
    }
    if (parsed?.success !== true) {
      // What is wrong, field by field, so a misnamed `prompt` or `reason` is found from the record.
      const problem = parsed === undefined ? "" : `: ${zodIssuesLine(parsed.error)}`;
      return { type: "failed", hook: name, reason: `hook ${name} returned an invalid decision${problem}` };
    }
    if (parsed.data.type !== "allow") return { type: "decided", decision: parsed.data, hook: name };
  }
  return { type: "decided", decision: { type: "allow" }, hook: "" };
}
