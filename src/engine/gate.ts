import type { AskResolution, PendingAsk } from "../ask/index.js";
import { argsDigest as digestArgs } from "../grant/index.js";
import type { GrantDecision, GrantPolicy } from "../grant/index.js";
import { BREAKER_OPEN_TEXT } from "./breaker.js";
import type { CircuitBreaker } from "./breaker.js";
import { CancelledError, LoopDetectedError, describeError } from "./errors.js";
import type { RunStoppedError } from "./errors.js";
import { runHooks } from "./hooks.js";
import type { HookContext } from "./hooks.js";
import type { LoopDetector } from "./loop-detector.js";
import type { ManagerSettings } from "./managers.js";
import { dispatch } from "./dispatch.js";
import type { ToolResult } from "./middleware.js";
import type { ToolCall } from "./model.js";
import { notify } from "./observer.js";
import { ANSWER_GRACE_TURNS, park } from "./park.js";
import type { GateDecision } from "./records.js";
import { RecordSlot } from "./records-slot.js";
import type { RecordDraft } from "./records-slot.js";
import { cancelledBy, raceAbort } from "./signals.js";
import type { RunSignal } from "./signals.js";
import type { Tool, ToolContext } from "./tool.js";

/** Exact texts the model receives (spec §5 and the engine's own endings). */
export const TEXTS = {
  denied: (tool: string) => `Permission denied by approver for tool '${tool}'`,
  expired: (tool: string) => `Permission ask expired unanswered for tool '${tool}'`,
  grantDenied: (tool: string) => `Permission denied by remembered grant for tool '${tool}'`,
  grantStoreFailed: (tool: string) => `Permission denied: grant store unavailable for tool '${tool}'`,
  hookFailed: (tool: string) => `Permission denied: pre-tool-use hook failed for tool '${tool}'`,
  unknownTool: (tool: string) => `Unknown tool '${tool}'`,
  engineFailed: (tool: string) => `Permission denied: internal error for tool '${tool}'`,
  notJson: (tool: string) => `Invalid arguments for tool '${tool}': arguments must be JSON values`,
  preDetection: (error: string) => `dispatch refused before execution: ${error}`,
  toolChanged: (prompt: string, tool: string) =>
    `${prompt}\n\n(The tool '${tool}' changed since this was last answered; it needs a new answer.)`,
} as const;

/** Everything one run shares between its attempts. */
export interface RunState {
  readonly settings: ManagerSettings;
  readonly tools: ReadonlyMap<string, Tool>;
  readonly sessionId: string;
  readonly runId: string;
  readonly loopDetector: LoopDetector | undefined;
  readonly breaker: CircuitBreaker | undefined;
  readonly grantPolicy: GrantPolicy | undefined;
  /** Lands one record: appends it to the run's records and calls `onGate`. */
  emit(turn: number, callId: string, decision: GateDecision): void;
}

/** How an attempt ended, when it did not throw `CancelledError`. */
export type AttemptOutcome =
  | { readonly type: "result"; readonly result: ToolResult }
  | { readonly type: "stop"; readonly result: ToolResult; readonly error: RunStoppedError };

const draft = (
  verdict: RecordDraft["verdict"],
  ruleId: string,
  ruleSource: RecordDraft["ruleSource"],
  reason: string | null,
  matchedPattern: string | null = null,
): RecordDraft => ({ verdict, ruleId, ruleSource, matchedPattern, reason });

const error = (content: string): ToolResult => ({ content, isError: true });

function tryDigest(input: unknown): string | undefined {
  try {
    return digestArgs(input);
  } catch {
    return undefined;
  }
}

/**
 * One tool-call attempt, in the spec's order: `onToolPre` → hooks → the park
 * (on Ask) → pre-detection → breaker → dispatch → `onGate` → `onToolPost`.
 * Exactly one record lands per attempt. Throws `CancelledError` (after
 * landing its record) when `signal` aborts; `onToolPost` then does not fire.
 */
export async function attempt(run: RunState, call: ToolCall, turn: number, signal: RunSignal): Promise<AttemptOutcome> {
  const { settings } = run;
  const observe = <K extends "onToolPre" | "onToolPost" | "onGrantError">(
    event: K,
    payload: Parameters<typeof notify<K>>[3],
  ): void => notify(settings.observers, settings.observerErrorHandler, event, payload);

  observe("onToolPre", { turn, call });
  // Digested once, after the last code that could still see the model's
  // call before the gate reads it: the record, the ask and pre-detection
  // all carry this digest (a hook's `modify` gets its own).
  const digest = tryDigest(call.input);
  const slot = new RecordSlot(call.name, digest ?? "", settings.clock, (decision) =>
    run.emit(turn, call.id, decision),
  );
  let outcome: AttemptOutcome;
  try {
    outcome = await gateAndDispatch(run, call, digest, turn, signal, slot);
  } catch (thrown) {
    if (thrown instanceof CancelledError) throw thrown;
    // A seam that throws (a clock, an id generator, a store's remember…) must
    // not let the call through, nor leave it without its record.
    slot.land(draft("deny", "engine", "engine", `engine failure: ${describeError(thrown)}`));
    outcome = { type: "result", result: error(TEXTS.engineFailed(call.name)) };
  }
  observe("onToolPost", { turn, call, result: outcome.result });
  return outcome;
}

async function gateAndDispatch(
  run: RunState,
  call: ToolCall,
  digest: string | undefined,
  turn: number,
  signal: RunSignal,
  slot: RecordSlot,
): Promise<AttemptOutcome> {
  const { settings } = run;
  const tool = run.tools.get(call.name);
  // Calls refused before the hooks never reach the pre-detection step after
  // the park, so they meet it here, at their refusal: a model repeating one of
  // them forever is stopped like any other loop, not left to run to the budget.
  if (tool === undefined) {
    const stopped = preDetect(run, call.name, digest ?? "", slot);
    if (stopped !== undefined) return stopped;
    slot.land(draft("deny", "unknown_tool", "engine", `unknown tool '${call.name}'`));
    return { type: "result", result: error(TEXTS.unknownTool(call.name)) };
  }
  if (digest === undefined) {
    const stopped = preDetect(run, tool.name, "", slot);
    if (stopped !== undefined) return stopped;
    slot.land(draft("deny", "invalid_arguments", "engine", "arguments are not JSON values"));
    return { type: "result", result: error(TEXTS.notJson(tool.name)) };
  }

  const hookContext: HookContext = {
    turn,
    callId: call.id,
    sessionId: run.sessionId,
    runId: run.runId,
    descriptor: tool.descriptor,
    signal: signal.signal,
  };
  let hooks;
  try {
    hooks = await raceAbort(runHooks(settings.hooks, call, hookContext), signal, ANSWER_GRACE_TURNS);
  } catch (thrown) {
    slot.land(draft("cancelled", "cancel", "engine", "cancelled before the gate decided"));
    throw thrown instanceof CancelledError ? thrown : cancelledBy(signal);
  }
  if (hooks.type === "failed") {
    slot.land(draft("deny", "hook", "context", hooks.reason));
    return { type: "result", result: error(TEXTS.hookFailed(tool.name)) };
  }

  let input = call.input;
  let inputDigest = digest;
  const decision = hooks.decision;
  switch (decision.type) {
    case "block":
      slot.land(draft("deny", "hook", "context", decision.reason));
      return { type: "result", result: error(decision.reason) };
    case "allow":
      slot.hold(draft("allow", "hook", "context", null), "plain");
      break;
    case "modify": {
      const modified = tryDigest(decision.input);
      if (modified === undefined) {
        slot.land(draft("deny", "hook", "context", `hook ${hooks.hook} modified the input to something that is not JSON`));
        return { type: "result", result: error(TEXTS.hookFailed(tool.name)) };
      }
      input = decision.input;
      inputDigest = modified;
      slot.setArgsDigest(modified);
      slot.hold(draft("allow_modified", "hook", "context", `input modified by hook ${hooks.hook} (original args ${digest})`), "modified");
      break;
    }
    case "ask": {
      const ended = await ask(run, tool, call, digest, decision.prompt, turn, signal, slot);
      if (ended !== undefined) return ended;
      break;
    }
  }

  if (decision.type !== "ask" && signal.aborted) {
    slot.exit(draft("cancelled", "cancel", "engine", "cancelled before execution"));
    throw cancelledBy(signal);
  }
  return afterGate(run, tool, { ...call, input }, inputDigest, turn, signal, slot);
}

/** The Ask branch: grants, then the park. Returns an ending, or `undefined` to continue to dispatch. */
async function ask(
  run: RunState,
  tool: Tool,
  call: ToolCall,
  digest: string,
  prompt: string,
  turn: number,
  signal: RunSignal,
  slot: RecordSlot,
): Promise<AttemptOutcome | undefined> {
  const { settings } = run;
  const cancelledInPark = (): never => {
    slot.land(draft("cancelled", "hook", "engine", "cancelled while awaiting approval"));
    throw cancelledBy(signal);
  };
  if (signal.aborted) cancelledInPark();

  let askPrompt = prompt;
  if (run.grantPolicy !== undefined) {
    let grant: GrantDecision;
    try {
      grant = await raceAbort(run.grantPolicy.decide(tool.descriptor, call.input), signal);
    } catch (thrown) {
      if (signal.aborted) cancelledInPark();
      slot.land(draft("deny", "grant", "engine", `grant store failed: ${describeError(thrown)}`));
      return { type: "result", result: error(TEXTS.grantStoreFailed(tool.name)) };
    }
    switch (grant.type) {
      case "allow":
        slot.hold(draft("allow", "grant", "context", "allowed by remembered grant", grant.grant.id), "approved");
        return undefined;
      case "deny":
        slot.land(draft("deny", "grant", "context", "denied by remembered grant", grant.grant.id));
        return { type: "result", result: error(TEXTS.grantDenied(tool.name)) };
      case "ask":
        if (grant.reason === "tool_changed") askPrompt = TEXTS.toolChanged(prompt, tool.name);
        break;
    }
  }

  const pending: PendingAsk = {
    id: settings.idGen(),
    sessionId: run.sessionId,
    runId: run.runId,
    turn,
    callId: call.id,
    tool: tool.name,
    argsDigest: digest,
    prompt: askPrompt,
  };
  const outcome = await park({
    ask: pending,
    resolver: settings.askResolver,
    timeoutMs: settings.askTimeoutMs,
    clock: settings.clock,
    signal,
  });
  switch (outcome.type) {
    case "cancelled":
      return cancelledInPark();
    case "unresolved":
      slot.land(draft("ask_unresolved", "hook", "engine", `permission required: ${askPrompt}`));
      return { type: "result", result: error(askPrompt) };
    case "expired":
      slot.land(draft("ask_expired", "hook", "engine", "ask expired unanswered"));
      return { type: "result", result: error(TEXTS.expired(tool.name)) };
    case "denied":
      await remember(run, tool, call, turn, outcome.resolution, "deny", signal);
      slot.land(draft("ask_denied", "ask", "ask_resolver", outcome.reason));
      return { type: "result", result: error(TEXTS.denied(tool.name)) };
    case "approved":
      await remember(run, tool, call, turn, outcome.resolution, "allow", signal);
      slot.hold(draft("ask_allowed", "ask", "ask_resolver", null), "approved");
      if (signal.aborted) {
        slot.exit(draft("cancelled", "hook", "engine", "cancelled while awaiting approval"));
        throw cancelledBy(signal);
      }
      return undefined;
  }
}

/** Saves the answer as a grant when it asks to be remembered. A failed save never changes the answer. */
async function remember(
  run: RunState,
  tool: Tool,
  call: ToolCall,
  turn: number,
  resolution: AskResolution | undefined,
  verdict: "allow" | "deny",
  signal: RunSignal,
): Promise<void> {
  const scope = resolution?.remember;
  if (scope === undefined || run.grantPolicy === undefined) return;
  try {
    // Best effort, but never past a cancel: a store whose save never returns must not hold the run.
    await raceAbort(run.grantPolicy.remember(tool.descriptor, call.input, verdict, scope, { nowMs: run.settings.clock.now() }), signal);
  } catch (thrown) {
    if (signal.aborted) return;
    notify(run.settings.observers, run.settings.observerErrorHandler, "onGrantError", { turn, callId: call.id, error: thrown });
  }
}

/**
 * Pre-detection: counts the call (tool and `digest`, `""` for arguments that
 * are not JSON values) and, past the limit, ends the attempt with the loop
 * stop instead of its own ending. Returns `undefined` to go on.
 */
function preDetect(run: RunState, tool: string, digest: string, slot: RecordSlot): AttemptOutcome | undefined {
  const repeats = run.loopDetector?.observe(tool, digest);
  if (repeats === undefined) return undefined;
  const stop = new LoopDetectedError(tool, digest, repeats);
  const text = TEXTS.preDetection(stop.message);
  slot.exit(draft("deny", "loop_detector", "engine", text));
  return { type: "stop", result: error(text), error: stop };
}

/** Pre-detection → breaker → dispatch, then the held record lands. `digest` is `argsDigest(call.input)`. */
async function afterGate(
  run: RunState,
  tool: Tool,
  call: ToolCall,
  digest: string,
  turn: number,
  signal: RunSignal,
  slot: RecordSlot,
): Promise<AttemptOutcome> {
  const { settings } = run;
  const stopped = preDetect(run, tool.name, digest, slot);
  if (stopped !== undefined) return stopped;
  if (run.breaker?.isOpen(tool.name, settings.clock.now()) === true) {
    slot.exit(draft("deny", "circuit_breaker", "engine", BREAKER_OPEN_TEXT));
    return { type: "result", result: error(BREAKER_OPEN_TEXT) };
  }

  const toolContext: ToolContext = { signal: signal.signal, callId: call.id, turn, sessionId: run.sessionId, runId: run.runId };
  let dispatched;
  try {
    dispatched = await raceAbort(
      dispatch({
        tool,
        call,
        argsDigest: digest,
        middleware: settings.middleware,
        toolContext,
        sink: {
          middlewareDeny: (d) => slot.middlewareDeny(draft("deny", d.ruleId, "middleware", d.reason ?? null, d.matchedPattern ?? null)),
          middlewareAllow: (d) => slot.middlewareAllow(draft("allow", d.ruleId, "middleware", d.reason ?? null, d.matchedPattern ?? null)),
        },
      }),
      signal,
    );
  } catch (thrown) {
    slot.exit(draft("cancelled", "cancel", "engine", "cancelled during execution"));
    throw thrown instanceof CancelledError ? thrown : cancelledBy(signal);
  }
  if (dispatched.execution !== "none") {
    try {
      run.breaker?.report(tool.name, dispatched.execution === "succeeded", settings.clock.now());
    } catch {
      // The tool has run: a clock that throws now must not turn its ending
      // into a denial. The breaker misses this one report.
    }
  }
  slot.settle();
  return { type: "result", result: dispatched.result };
}
