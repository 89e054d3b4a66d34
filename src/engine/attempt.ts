import type { AskResolution } from "../ask/index.js";
import { BREAKER_OPEN_TEXT } from "./breaker.js";
import type { Clock } from "./clock.js";
import { CancelledError, LoopDetectedError, describeError } from "./errors.js";
import type { GateOutcome, GateState, InternalRequest } from "./gate.js";
import { approvedByOf, runHooks } from "./hooks.js";
import type { ApprovedBy, Hook, HookContext } from "./hooks.js";
import { NOT_STARTED, dispatch } from "./dispatch.js";
import type { DispatchResult } from "./middleware.js";
import type { ToolCall } from "./model.js";
import { checkedId } from "./ids.js";
import { notify } from "./observer.js";
import { park } from "./park.js";
import { RecordSlot, timestamp } from "./records-slot.js";
import type { RecordDraft } from "./records-slot.js";
import type { GateDecision } from "./records.js";
import { CANCELLED, cancelledBy } from "./signals.js";
import type { Cancel } from "./signals.js";
import { isSnapshot, snapshot } from "./snapshot.js";
import type { NotJson, Snapshot } from "./snapshot.js";
import { answeredCheck } from "./validation.js";
import { shownKey } from "../unknown-option.js";
import type { ArgumentCheck } from "./validation.js";

/** Exact texts the model receives (those of docs/records.md, and the engine's own endings). */
export const TEXTS = {
  denied: (tool: string) => `Permission denied by approver for tool ${shownKey(tool)}`,
  expired: (tool: string) => `Permission ask expired unanswered for tool ${shownKey(tool)}`,
  grantDenied: (tool: string) => `Permission denied by remembered grant for tool ${shownKey(tool)}`,
  grantStoreFailed: (tool: string) => `Permission denied: grant store unavailable for tool ${shownKey(tool)}`,
  hookFailed: (tool: string) => `Permission denied: pre-tool-use hook failed for tool ${shownKey(tool)}`,
  unknownTool: (tool: string) => `Unknown tool ${shownKey(tool)}`,
  engineFailed: (tool: string) => `Permission denied: internal error for tool ${shownKey(tool)}`,
  notJson: (tool: string) => `Invalid arguments for tool ${shownKey(tool)}: arguments must be JSON values`,
  invalid: (tool: string, problems: readonly string[]) =>
    `Invalid arguments for tool ${shownKey(tool)}: ${problems.join("; ")}`,
  cancelledAfterRun: (tool: string) => `Tool ${shownKey(tool)} ran, but its output was withheld: the run was cancelled`,
  stoppedBeforeRun: (tool: string) => `Tool ${shownKey(tool)} did not run: the run stopped before it`,
  stoppedWhileRunning: (tool: string) =>
    `Tool ${shownKey(tool)} was still running when the run stopped: it may have done some or all of its work`,
  withdrawn: (tool: string, reason: string) =>
    `Tool ${shownKey(tool)} was withdrawn while awaiting approval: ${reason}`,
  toolFailed: (tool: string, error: unknown) => `Tool ${shownKey(tool)} failed: ${describeError(error)}`,
  preDetection: (error: string) => `dispatch refused before execution: ${error}`,
  toolChanged: (prompt: string, tool: string) =>
    `${prompt}\n\n(The tool ${shownKey(tool)} changed since this was last answered; it needs a new answer.)`,
} as const;

/**
 * The record of a cancel, by the step it interrupted: one table, so every
 * cancel reads the same. The park's is the one docs/records.md gives.
 */
const CANCELS = {
  deciding: ["cancel", "cancelled before the gate decided"],
  parked: ["hook", "cancelled while awaiting approval"],
  beforeExecution: ["cancel", "cancelled before execution"],
  executing: ["cancel", "cancelled during execution"],
} as const;

type Step = (typeof CANCELS)[keyof typeof CANCELS];

/**
 * A remembered answer's `createdAtMs`: the clock's time as whole epoch ms.
 * A grant holds a non-negative integer; a clock that gives a fraction, a time
 * before the epoch or past the safe integers, or throws, must not cost the
 * human's answer its grant, so such a time is floored, or read as 0
 * ("unknown"), and a throwing clock falls back as a record's `ts` does.
 */
function grantTime(clock: Clock): number {
  const whole = Math.floor(timestamp(clock));
  return Number.isSafeInteger(whole) && whole >= 0 ? whole : 0;
}

/** The outcome, frozen: `onToolPost` observers see it before the loop acts on it, and none may change it. */
const withRecord = (ending: Ending, record: GateDecision): GateOutcome => {
  switch (ending.type) {
    case "ran":
      return Object.freeze({ type: "ran", output: ending.output, record });
    case "failed":
      return Object.freeze({ type: "failed", error: ending.error, message: ending.message, record });
    case "refused":
      return Object.freeze(
        ending.stop === undefined
          ? { type: "refused", message: ending.message, record }
          : { type: "refused", message: ending.message, record, stop: ending.stop },
      );
  }
};

const dispatchEnding = (tool: string, result: DispatchResult): Ending => {
  switch (result.type) {
    case "ran":
      return { type: "ran", output: result.output };
    case "failed":
      return { type: "failed", error: result.error, message: TEXTS.toolFailed(tool, result.error) };
    case "refused":
      return { type: "refused", message: result.message };
  }
};

const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  (typeof value === "object" || typeof value === "function") &&
  value !== null &&
  typeof (value as { then?: unknown }).then === "function";

const draft = (
  verdict: RecordDraft["verdict"],
  ruleId: string,
  ruleSource: RecordDraft["ruleSource"],
  reason: string | null,
  matchedPattern: string | null = null,
): RecordDraft => ({ verdict, ruleId, ruleSource, matchedPattern, reason });

/** An outcome before its record: what a step that ends the attempt returns. */
type Ending = GateOutcome extends infer O ? (O extends GateOutcome ? Omit<O, "record"> : never) : never;

/**
 * One tool-call attempt, its steps in the order docs/gate.md draws:
 * snapshot → validation → hooks → grants and the
 * park → pre-detection → circuit breaker → dispatch → the record. A step
 * that ends the attempt lands its record and returns the ending; one that
 * returns `undefined` lets the call go on. Exactly one record lands.
 *
 * Cancel: every wait on outside code (hooks, the grant store, the resolver,
 * middleware and the tool) races the call's signal, and the steps check it
 * between waits. Whatever settled first decides; the record names the step
 * the cancel interrupted ({@link CANCELS}), and the attempt rejects with
 * `CancelledError`.
 */
export class Attempt {
  readonly #gate: GateState;
  readonly #request: InternalRequest;
  readonly #slot: RecordSlot;
  readonly #cancel: Cancel;
  /**
   * The arguments as the gate read them, once, before anything outside the
   * gate runs: an `onToolPre` observer that changes the model's object in
   * place must not change what is decided and run.
   */
  readonly #read: Snapshot | NotJson;
  /** The arguments the call goes on with (the snapshot, or a hook's modified one). */
  #args: Snapshot = { value: undefined, argsDigest: "", argsSha256: "" };
  #call: ToolCall;
  /** The error a cancel ends the attempt with, once its record has landed. */
  #cancelled: CancelledError | undefined;
  /** How dispatch ended, once it has: a tool that ran is reported as it ended, whatever throws afterwards. */
  #dispatched: Ending | undefined;
  /**
   * How the tool itself ended, once it has: watched on what `execute`
   * returned, not on the chain after it, so a tool that settled before a
   * cancel came is known to have run.
   */
  #toolEnded: "succeeded" | "failed" | undefined;

  constructor(gate: GateState, request: InternalRequest) {
    this.#gate = gate;
    this.#request = request;
    this.#cancel = request.cancel;
    this.#read = request.read ?? snapshot(request.input);
    this.#call = Object.freeze({ id: request.callId, name: request.name, input: request.input });
    this.#slot = new RecordSlot(request.name, gate.settings.clock, (record) => {
      request.onRecord?.(record);
      this.#observe("onGate", { turn: request.turn, callId: request.callId, decision: record });
    });
  }

  /** Runs the steps; resolves with the outcome, or rejects with `CancelledError` after its record. */
  async run(): Promise<GateOutcome> {
    const { turn } = this.#request;
    this.#observe("onToolPre", { turn, call: this.#call });
    let ending: Ending;
    try {
      ending = await this.#steps();
    } catch (thrown) {
      const cancelled = this.#cancelled;
      if (cancelled !== undefined && thrown === cancelled) {
        (cancelled as { records: readonly unknown[] }).records = [this.#slot.record];
        throw cancelled;
      }
      const dispatched = this.#dispatched;
      if (dispatched !== undefined) {
        this.#slot.settle();
        ending = dispatched;
      } else {
        // A seam that throws (a clock, an id generator, a store's remember…)
        // must not let the call through, nor leave it without its record.
        this.#slot.land(draft("deny", "engine", "engine", `engine failure: ${describeError(thrown)}`));
        ending = { type: "refused", message: TEXTS.engineFailed(this.#request.name) };
      }
    } finally {
      // Every ending gives up the half-open breaker's trial if this call holds it: one without a reported
      // outcome (a cancel, a middleware's refusal, a lost report, a throw) must not keep the tool refused.
      this.#gate.breaker?.release(this.#request.name, this);
    }
    const outcome = withRecord(ending, this.#slot.record!);
    this.#observe("onToolPost", { turn, call: this.#call, outcome });
    return outcome;
  }

  async #steps(): Promise<Ending> {
    // A cancel that came before the call wins over any refusal of it: the caller gave the call up.
    if (this.#cancel.aborted) throw this.#cancelledAt(CANCELS.deciding);
    const early = this.#snapshot() ?? this.#validate();
    if (early !== undefined) return early;
    const hooks = await this.#hooks();
    const decided = typeof hooks === "string" ? await this.#ask(hooks) : (hooks ?? (await this.#rememberedDeny()));
    return decided ?? this.#preDetect() ?? this.#breaker() ?? this.#dispatch();
  }

  /** 1. Goes on with the frozen JSON copy of the arguments read when the attempt began; anything else is refused here. */
  #snapshot(): Ending | undefined {
    const read = this.#read;
    if (isSnapshot(read)) this.#use(read);
    const tool = this.#request.tool;
    // Calls refused before the hooks never reach pre-detection after the park,
    // so they meet it at their refusal: a model repeating one of them forever
    // is stopped like any other loop.
    if (tool === undefined) {
      return (
        this.#preDetect() ??
        this.#refuse(
          draft("deny", "unknown_tool", "engine", `unknown tool ${shownKey(this.#request.name)}`),
          TEXTS.unknownTool(this.#request.name),
        )
      );
    }
    if (!isSnapshot(read)) {
      return (
        this.#preDetect() ??
        this.#refuse(
          draft("deny", "invalid_arguments", "engine", "arguments are not JSON values"),
          TEXTS.notJson(tool.name),
        )
      );
    }
    return undefined;
  }

  /** 2. Arguments that fail the tool's schema are refused before anyone is asked about them. */
  #validate(): Ending | undefined {
    const tool = this.#request.tool!;
    if (tool.broken !== undefined) {
      return (
        this.#preDetect() ??
        this.#refuse(
          draft("deny", "schema", "engine", tool.broken),
          TEXTS.invalid(tool.name, [`the tool's input schema does not compile`]),
        )
      );
    }
    const given = this.#request.checked;
    const checked = answeredCheck(() => given ?? tool.check(this.#args.value));
    if (checked.type === "invalid") {
      return (
        this.#preDetect() ??
        this.#refuse(
          draft("deny", "schema", "engine", `invalid arguments: ${checked.problems.join("; ")}`),
          TEXTS.invalid(tool.name, checked.problems),
        )
      );
    }
    return undefined;
  }

  /**
   * 3. The hooks, in order; the first answer that is not `allow` wins.
   * Returns an ending, the prompt of an ask, or `undefined` (allowed, perhaps modified) to go on.
   */
  async #hooks(): Promise<Ending | string | undefined> {
    const { settings } = this.#gate;
    const { turn, callId, sessionId, runId } = this.#request;
    const tool = this.#request.tool!;
    // Frozen, as the call is: every hook after one that writes to it, the adapters' approval hooks
    // included, reads the gate's values (a run id changed here would hide the call from one).
    const context: HookContext = Object.freeze({
      turn,
      callId,
      sessionId,
      runId,
      descriptor: tool.descriptor,
      signal: this.#cancel.signal,
    });
    const hooks = await this.#wait(runHooks(settings.hooks, this.#call, context), CANCELS.deciding);
    if (hooks.type === "cancelled") throw this.#cancelledAt(CANCELS.deciding);
    if (hooks.type === "failed")
      return this.#refuse(draft("deny", "hook", "context", hooks.reason), TEXTS.hookFailed(tool.name));
    const decision = hooks.decision;
    switch (decision.type) {
      case "block":
        return this.#refuse(draft("deny", "hook", "context", decision.reason), decision.reason);
      case "ask":
        return decision.prompt;
      case "allow":
        this.#slot.hold(draft("allow", "hook", "context", null), "plain");
        break;
      case "modify": {
        const original = this.#args.argsDigest;
        const read = snapshot(decision.input);
        if (!isSnapshot(read)) {
          return this.#refuse(
            draft("deny", "hook", "context", `hook ${hooks.hook} modified the input to something that is not JSON`),
            TEXTS.hookFailed(tool.name),
          );
        }
        this.#use(read);
        const checked = await this.#checkChanged(read.value);
        if (checked.type === "invalid") {
          return this.#refuse(
            draft(
              "deny",
              "schema",
              "engine",
              `invalid arguments from hook ${hooks.hook}: ${checked.problems.join("; ")}`,
            ),
            TEXTS.invalid(tool.name, checked.problems),
          );
        }
        this.#slot.hold(
          draft(
            "allow_modified",
            "hook",
            "context",
            `input modified by hook ${hooks.hook} (original args ${original})`,
          ),
          "modified",
        );
        break;
      }
    }
    for (const approvalHook of [settings.approvalHook, this.#request.approvalHook]) {
      if (approvalHook === undefined) continue;
      const approval = await this.#approval(approvalHook, context);
      if (approval !== undefined) return approval;
    }
    if (this.#cancel.aborted) throw this.#cancelledAt(CANCELS.beforeExecution);
    return undefined;
  }

  /**
   * 3a. Validates arguments a hook's `modify` changed: with the tool's own
   * check of changed arguments when it has one (which may be asynchronous),
   * else with its `check`. A check that throws or rejects refuses them.
   */
  async #checkChanged(value: unknown): Promise<ArgumentCheck> {
    const tool = this.#request.tool!;
    const check = tool.checkChanged;
    if (check === undefined) return answeredCheck(() => tool.check(value));
    try {
      const answer = await this.#wait(Promise.resolve(check(value)), CANCELS.deciding);
      return answeredCheck(() => answer);
    } catch (error) {
      if (error === this.#cancelled) throw error;
      return { type: "invalid", problems: [`$: the tool's input schema failed: ${describeError(error)}`] };
    }
  }

  /**
   * 3b. An adapter's approval hook, after the hooks allowed or modified, on
   * the arguments the call goes on with: its ask stands whatever they said.
   */
  async #approval(hook: Hook, context: HookContext): Promise<Ending | string | undefined> {
    const tool = this.#request.tool!;
    // The hook's own answer, before parsing makes a copy of it: an allow that says what approved the call.
    let approvedBy: ApprovedBy | undefined;
    const watched: Hook = {
      ...(hook.name === undefined ? {} : { name: hook.name }),
      preToolUse: async (call, hookContext) => {
        const answer = await hook.preToolUse(call, hookContext);
        approvedBy = approvedByOf(answer);
        return answer;
      },
    };
    const outcome = await this.#wait(runHooks([watched], this.#call, context), CANCELS.deciding);
    switch (outcome.type) {
      case "cancelled":
        throw this.#cancelledAt(CANCELS.deciding);
      case "failed":
        return this.#refuse(draft("deny", "hook", "context", outcome.reason), TEXTS.hookFailed(tool.name));
      case "decided":
        break;
    }
    const decision = outcome.decision;
    switch (decision.type) {
      case "allow":
        // Held like a grant's allow (a middleware deny displaces it, an exit keeps it), and only in place of a
        // plain allow: a hook's modification keeps its own record.
        if (approvedBy !== undefined)
          this.#slot.holdOverPlain(draft("allow", approvedBy.ruleId, "context", approvedBy.reason), "approved");
        return undefined;
      case "ask":
        return decision.prompt;
      case "block":
        return this.#refuse(draft("deny", "hook", "context", decision.reason), decision.reason);
      case "modify":
        return this.#refuse(
          draft("deny", "hook", "context", `hook ${outcome.hook} may not modify the input`),
          TEXTS.hookFailed(tool.name),
        );
    }
  }

  /** 4a. With a grant store, a covering deny whose pin matches refuses a call the hooks allowed. */
  async #rememberedDeny(): Promise<Ending | undefined> {
    const policy = this.#gate.grantPolicy;
    if (policy === undefined) return undefined;
    const tool = this.#request.tool!;
    const value = this.#args.value;
    const consulted = await this.#consultGrants(async () => {
      const decision = await policy.decide(tool.descriptor, value);
      if (decision.type !== "deny") return undefined;
      // decide() keeps a deny in force even when its pin is stale; over a hook's allow only a current one
      // counts. Any covering deny that is current does: the one decide() named may be a stale this_call
      // deny beside a current this_tool one.
      const explained = await policy.explain(tool.name, value, tool.descriptor);
      return explained.covering.find(
        ({ grant, pin }) => grant.verdict === "deny" && (pin.type === "unpinned" || pin.type === "match"),
      )?.grant.id;
    }, CANCELS.beforeExecution);
    if (!consulted.ok) return consulted.ending;
    const grant = consulted.value;
    return grant === undefined
      ? undefined
      : this.#refuse(
          draft("deny", "grant", "context", "denied by remembered grant", grant),
          TEXTS.grantDenied(tool.name),
        );
  }

  /** 4b. A hook asked: remembered grants answer first, else the call parks. */
  async #ask(prompt: string): Promise<Ending | undefined> {
    const { settings, grantPolicy } = this.#gate;
    const tool = this.#request.tool!;
    if (this.#cancel.aborted) throw this.#cancelledAt(CANCELS.parked);
    let askPrompt = prompt;
    if (grantPolicy !== undefined) {
      const consulted = await this.#consultGrants(
        () => grantPolicy.decide(tool.descriptor, this.#args.value),
        CANCELS.parked,
      );
      if (!consulted.ok) return consulted.ending;
      const grant = consulted.value;
      switch (grant.type) {
        case "allow":
          this.#slot.hold(
            draft("allow", "grant", "context", "allowed by remembered grant", grant.grant.id),
            "approved",
          );
          return undefined;
        case "deny":
          return this.#refuse(
            draft("deny", "grant", "context", "denied by remembered grant", grant.grant.id),
            TEXTS.grantDenied(tool.name),
          );
        case "ask":
          if (grant.reason === "tool_changed") askPrompt = TEXTS.toolChanged(prompt, tool.name);
          break;
      }
    }
    const { sessionId, runId, turn, callId } = this.#request;
    const ask = {
      // The resolver is handed a PendingAsk: an id that is no UUID fails the call here, as the generator's fault.
      id: checkedId(settings.idGen()),
      sessionId,
      runId,
      turn,
      callId,
      tool: tool.name,
      argsDigest: this.#args.argsDigest,
      argsSha256: this.#args.argsSha256,
      prompt: askPrompt,
    };
    const outcome = await park({
      ask,
      resolver: settings.askResolver,
      timeoutMs: settings.askTimeoutMs,
      clock: settings.clock,
      cancel: this.#cancel,
      withdrawn: tool.withdrawn,
    });
    switch (outcome.type) {
      case "cancelled":
        throw this.#cancelledAt(CANCELS.parked);
      case "unresolved":
        // No approver to tell that the tool changed: the old headless denial, the hook's prompt verbatim.
        return this.#refuse(draft("ask_unresolved", "hook", "engine", `permission required: ${prompt}`), prompt);
      case "withdrawn":
        return this.#refuse(
          draft("deny", "tool_withdrawn", "engine", `tool withdrawn while awaiting approval: ${outcome.reason}`),
          TEXTS.withdrawn(tool.name, outcome.reason),
        );
      case "expired":
        return this.#refuse(draft("ask_expired", "hook", "engine", "ask expired unanswered"), TEXTS.expired(tool.name));
      case "denied":
        await this.#remember(outcome.resolution, "deny");
        return this.#refuse(draft("ask_denied", "ask", "ask_resolver", outcome.reason), TEXTS.denied(tool.name));
      case "approved":
        await this.#remember(outcome.resolution, "allow");
        this.#slot.hold(draft("ask_allowed", "ask", "ask_resolver", null), "approved");
        if (this.#cancel.aborted) throw this.#cancelledAt(CANCELS.parked);
        return undefined;
    }
  }

  /** 5. Pre-detection: the same call (tool and `argsSha256`) past the run's limit stops the run. */
  #preDetect(): Ending | undefined {
    const { runId, name } = this.#request;
    const repeats = this.#gate.loopDetector(runId)?.observe(name, this.#args.argsSha256);
    if (repeats === undefined) return undefined;
    const stop = new LoopDetectedError(name, this.#args.argsDigest, repeats);
    const text = TEXTS.preDetection(stop.message);
    this.#slot.exit(draft("deny", "loop_detector", "engine", text));
    return { type: "refused", message: text, stop };
  }

  /** 6. The circuit breaker refuses a tool that keeps failing, and while it is half-open every call but its trial. */
  #breaker(): Ending | undefined {
    const { breaker, settings } = this.#gate;
    if (breaker === undefined || breaker.admit(this.#request.name, settings.clock.now(), this)) return undefined;
    this.#slot.exit(draft("deny", "circuit_breaker", "engine", BREAKER_OPEN_TEXT));
    return { type: "refused", message: BREAKER_OPEN_TEXT };
  }

  /** 7. Middleware, then `execute` with the approved arguments; then the held record lands (8). */
  async #dispatch(): Promise<Ending> {
    // The steps since the last wait ran outside code too (the breaker's clock): a cancel there is before execution.
    if (this.#cancel.aborted) throw this.#cancelledAt(CANCELS.beforeExecution);
    const { settings, breaker } = this.#gate;
    const { turn, callId, sessionId, runId, name } = this.#request;
    const slot = this.#slot;
    const signal = this.#cancel.signal;
    const call: ToolCall = Object.freeze({ id: callId, name, input: this.#args.value });
    const work = dispatch({
      call,
      middleware: settings.middleware,
      context: {
        turn,
        callId,
        sessionId,
        runId,
        descriptor: this.#request.tool!.descriptor,
        argsDigest: this.#args.argsDigest,
        argsSha256: this.#args.argsSha256,
        signal,
      },
      sink: {
        middlewareDeny: (d) =>
          slot.middlewareDeny(draft("deny", d.ruleId, "middleware", d.reason ?? null, d.matchedPattern ?? null)),
        middlewareAllow: (d) =>
          slot.middlewareAllow(draft("allow", d.ruleId, "middleware", d.reason ?? null, d.matchedPattern ?? null)),
        outputWithheld: (reason) => slot.outputWithheld(reason),
      },
      run: () => this.#execute(call.input),
    });
    const raced = await this.#cancel.race(work);
    let dispatched: Awaited<typeof work>;
    if (raced !== CANCELLED) dispatched = raced;
    else if (this.#toolEnded === undefined) throw this.#cancelledAt(CANCELS.executing);
    else if (settings.middleware.length === 0) {
      // The tool settled before the cancel came: the call ran, and without middleware its
      // ending follows within a few jobs. It is the call's ending, never a cancel.
      dispatched = await work;
    } else {
      // The tool ran, but a middleware had not returned when the cancel came: what it would have done
      // with the output is unknown, so the output is withheld; the record is the decision that let it run.
      dispatched = {
        result: { type: "refused", message: TEXTS.cancelledAfterRun(name) },
        execution: this.#toolEnded,
      };
      slot.outputWithheld("output withheld: the run was cancelled before middleware returned");
    }
    // A cancel the start of `execute` saw has landed its record: the attempt ends with it.
    if (this.#cancelled !== undefined) throw this.#cancelled;
    this.#dispatched = dispatchEnding(name, dispatched.result);
    if (dispatched.execution !== "none") {
      try {
        breaker?.report(name, dispatched.execution === "succeeded", settings.clock.now());
      } catch {
        // The tool has run: a clock that throws now must not turn its ending
        // into a denial. The breaker misses this one report.
      }
    }
    slot.settle();
    return this.#dispatched;
  }

  /**
   * The one place `execute` starts. A middleware may call `next()` long after
   * the attempt ended (a cancel that won its race, any ending): once the
   * record has landed, or the call is cancelled, nothing runs.
   */
  #execute(input: unknown): unknown {
    if (this.#slot.record !== undefined) return NOT_STARTED;
    if (this.#cancel.aborted) {
      this.#cancelledAt(CANCELS.executing);
      return NOT_STARTED;
    }
    const { execute, output } = this.#request;
    let started: unknown;
    try {
      started = execute(input, { signal: this.#cancel.signal });
    } catch (error) {
      this.#toolEnded = "failed";
      throw error;
    }
    if (!isThenable(started)) {
      this.#toolEnded = "succeeded";
      return output === undefined ? started : output(started);
    }
    // The first reaction on the tool's own promise: a tool that settled before the cancel came runs it before
    // the cancel is heard; one that settled in answer to the cancel (in its abort listener) was still running.
    const watched = Promise.resolve(started).then(
      (value) => {
        if (!this.#cancel.heard) this.#toolEnded ??= "succeeded";
        return value;
      },
      (error: unknown) => {
        if (!this.#cancel.heard) this.#toolEnded ??= "failed";
        throw error;
      },
    );
    return output === undefined ? watched : watched.then(output);
  }

  /** Saves an answer given with `remember` as a grant, before the record lands. A failed save never changes the answer. */
  async #remember(resolution: AskResolution | undefined, verdict: "allow" | "deny"): Promise<void> {
    const { grantPolicy, settings } = this.#gate;
    const scope = resolution?.remember;
    if (scope === undefined || grantPolicy === undefined) return;
    const tool = this.#request.tool!;
    try {
      // Never past a cancel: a store whose save never returns must not hold the call.
      await this.#cancel.race(
        grantPolicy.remember(tool.descriptor, this.#args.value, verdict, scope, { nowMs: grantTime(settings.clock) }),
      );
    } catch (error) {
      this.#observe("onGrantError", { turn: this.#request.turn, callId: this.#request.callId, error });
    }
  }

  /** Runs `consult` against the grant store; a store that fails denies (fail closed). */
  async #consultGrants<T>(
    consult: () => Promise<T>,
    step: Step,
  ): Promise<{ readonly ok: true; readonly value: T } | { readonly ok: false; readonly ending: Ending }> {
    let value: T;
    try {
      value = await this.#wait(consult(), step);
    } catch (error) {
      if (error === this.#cancelled) throw error;
      const ending = this.#refuse(
        draft("deny", "grant", "engine", `grant store failed: ${describeError(error)}`),
        TEXTS.grantStoreFailed(this.#request.name),
      );
      return { ok: false, ending };
    }
    return { ok: true, value };
  }

  /** Waits for `work` unless the call is cancelled first, which ends the attempt at `step`. */
  async #wait<T>(work: Promise<T>, step: Step): Promise<T> {
    const value = await this.#cancel.race(work);
    if (value === CANCELLED) throw this.#cancelledAt(step);
    return value;
  }

  #use(read: Snapshot): void {
    this.#args = read;
    this.#call = Object.freeze({ id: this.#request.callId, name: this.#request.name, input: read.value });
    this.#slot.setDigests(read.argsDigest, read.argsSha256);
  }

  #refuse(record: RecordDraft, message: string): Ending {
    this.#slot.land(record);
    return { type: "refused", message };
  }

  /** Lands the cancel's record and gives the error the attempt rejects with. */
  #cancelledAt([ruleId, reason]: Step): CancelledError {
    this.#slot.exit(draft("cancelled", ruleId, "engine", reason));
    this.#cancelled = cancelledBy(this.#cancel.signal);
    return this.#cancelled;
  }

  #observe<K extends "onToolPre" | "onToolPost" | "onGate" | "onGrantError">(
    event: K,
    payload: Parameters<typeof notify<K>>[3],
  ): void {
    const { settings } = this.#gate;
    notify(settings.observers, settings.observerErrorHandler, event, payload);
  }
}
