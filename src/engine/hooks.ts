import { z } from "zod";
import type { ToolDescriptor } from "../grant/index.js";
import { describeError } from "./errors.js";
import type { ToolCall } from "./model.js";
import { cloneValue } from "./transcript.js";

/**
 * A pre-tool-use hook's answer: `allow` (no objection), `block` (refuse; the
 * model receives `reason`), `ask` (park and ask a human `prompt`), `modify`
 * (continue with `input` instead of the model's arguments).
 */
export type HookDecision =
  | { readonly type: "allow" }
  | { readonly type: "block"; readonly reason: string }
  | { readonly type: "ask"; readonly prompt: string }
  | { readonly type: "modify"; readonly input: unknown };

/** Parses a hook's answer; anything else fails closed. */
export const HookDecisionSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("allow") }),
  z.object({ type: z.literal("block"), reason: z.string() }),
  z.object({ type: z.literal("ask"), prompt: z.string() }),
  z.object({ type: z.literal("modify"), input: z.unknown() }),
]);

/** What a hook sees besides the call. */
export interface HookContext {
  readonly turn: number;
  readonly callId: string;
  readonly sessionId: string;
  readonly runId: string;
  /** The called tool's descriptor. */
  readonly descriptor: ToolDescriptor;
  /** Aborts when the run is cancelled. */
  readonly signal: AbortSignal;
}

/**
 * Sits in front of every tool call. Hooks run in the order they were added;
 * the first answer that is not `allow` wins. A hook that throws, rejects or
 * answers anything but a {@link HookDecision} denies the call.
 */
export interface Hook {
  /** Optional name, used in failure records. */
  readonly name?: string;
  preToolUse(call: ToolCall, context: HookContext): HookDecision | Promise<HookDecision>;
}

/** The combined verdict of the hook chain. */
export type HookOutcome =
  | { readonly type: "decided"; readonly decision: HookDecision; readonly hook: string }
  | { readonly type: "failed"; readonly hook: string; readonly reason: string; readonly error: unknown };

function isPlainAllow(raw: unknown): boolean {
  if (typeof raw !== "object" || raw === null) return false;
  try {
    return Object.getPrototypeOf(raw) === Object.prototype && (raw as { type?: unknown }).type === "allow";
  } catch {
    // A proxy or a throwing getter: the schema decides, as before.
    return false;
  }
}

function hookName(hook: Hook, index: number): string {
  return typeof hook.name === "string" && hook.name !== "" ? hook.name : `#${index}`;
}

/**
 * Runs the hooks in order. Each hook gets its own copy of the call, so a
 * hook that mutates its argument cannot change what was digested or approved.
 */
export async function runHooks(hooks: readonly Hook[], call: ToolCall, context: HookContext): Promise<HookOutcome> {
  for (let index = 0; index < hooks.length; index++) {
    const hook = hooks[index] as Hook;
    const name = hookName(hook, index);
    let raw: unknown;
    try {
      raw = await hook.preToolUse(cloneValue(call), context);
    } catch (error) {
      return { type: "failed", hook: name, reason: `hook ${name} failed: ${describeError(error)}`, error };
    }
    // The common answer, a plain `{ type: "allow" }`, needs no schema: the
    // schema would accept any plain object whose type is "allow" (it drops
    // unknown keys), and it is the only answer that changes nothing.
    if (isPlainAllow(raw)) continue;
    let parsed: ReturnType<typeof HookDecisionSchema.safeParse>;
    try {
      parsed = HookDecisionSchema.safeParse(raw);
    } catch (error) {
      // A decision whose reads throw (a proxy, a getter) is as invalid as a malformed one, not a cancel.
      return { type: "failed", hook: name, reason: `hook ${name} returned an invalid decision`, error };
    }
    if (!parsed.success) {
      return { type: "failed", hook: name, reason: `hook ${name} returned an invalid decision`, error: parsed.error };
    }
    const decision = parsed.data as HookDecision;
    if (decision.type !== "allow") return { type: "decided", decision, hook: name };
  }
  return { type: "decided", decision: { type: "allow" }, hook: "" };
}
