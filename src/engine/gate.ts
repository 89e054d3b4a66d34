import { NIL_UUID } from "../ask/index.js";
import { everyKey, shownKey } from "../unknown-option.js";
import { GrantPolicy, canonicalJson } from "../grant/index.js";
import { shownValue } from "../errors.js";
import type { ToolDescriptor } from "../grant/index.js";
import { Attempt } from "./attempt.js";
import { CircuitBreaker } from "./breaker.js";
import { EngineConfigError, ToolDefinitionError, describeError, knownKeys } from "./errors.js";
import type { RunStoppedError } from "./errors.js";
import { isUuid } from "./ids.js";
import { LoopDetector } from "./loop-detector.js";
import { Cancel, callerSignal, followShared } from "./signals.js";
import { frozenJson, isFrozenJson } from "./snapshot.js";
import type { NotJson, Snapshot } from "./snapshot.js";
import { LoopManagers, settingsOf } from "./managers.js";
import type { ManagerSettings } from "./managers.js";
import type { Hook } from "./hooks.js";
import type { GateDecision } from "./records.js";
import { isTool, toolDescriptorOf } from "./tool.js";
import type { Tool } from "./tool.js";
import { compileJsonSchema } from "./validation.js";
import type { ArgumentCheck } from "./validation.js";

/** One call for {@link Gate.call}. */
export interface GateRequest {
  /** The tool called: a `Tool` from `defineTool`, or a bare descriptor (its `inputSchema` a JSON Schema). */
  readonly tool: Tool | ToolDescriptor;
  /** The model's id for the call. */
  readonly callId: string;
  /** The arguments as the model sent them; the gate reads them once (see {@link Gate}). */
  readonly input: unknown;
  /**
   * Cancels the call: the gate rejects with `CancelledError`, after its one
   * record (`cancelled`, or the approval or grant allow that came before the cancel).
   */
  readonly signal?: AbortSignal;
  /** @default the nil UUID */
  readonly sessionId?: string;
  /** Loop-detection counts are kept per run. @default the nil UUID */
  readonly runId?: string;
  /** The 0-based model turn. @default 0 */
  readonly turn?: number;
}

/**
 * Runs the allowed call: `input` is the exact value that was validated,
 * digested, shown to hooks and approved (deeply frozen); `signal` aborts
 * when the call is cancelled. What it returns is the outcome's `output`; a
 * throw is the outcome `failed`.
 */
export type GateExecute = (input: unknown, options: { readonly signal: AbortSignal }) => unknown;

/**
 * How a gated call ended, with its one record:
 * - `ran`: the gate allowed the call and `execute` returned `output`;
 * - `failed`: the gate allowed the call and `execute` threw `error`;
 *   `message` is `Tool '<tool>' failed: <error>`;
 * - `refused`: the call never ran (or a middleware refused what it gave);
 *   `message` is the text the model should read. `stop` is set when the
 *   refusal ends the run (a loop-detection stop): the loop should stop
 *   with that error.
 */
export type GateOutcome =
  | { readonly type: "ran"; readonly output: unknown; readonly record: GateDecision }
  | { readonly type: "failed"; readonly error: unknown; readonly message: string; readonly record: GateDecision }
  | {
      readonly type: "refused";
      readonly message: string;
      readonly record: GateDecision;
      readonly stop?: RunStoppedError;
    };

/** A tool as the gate holds it: its descriptor and its compiled validation. */
export interface GatedTool {
  readonly name: string;
  readonly descriptor: ToolDescriptor;
  readonly check: (input: unknown) => ArgumentCheck;
  /**
   * Checks arguments a hook's `modify` changed, in place of `check`, when
   * the tool's own validation may answer only asynchronously (see
   * {@link checkChangedWith}).
   */
  readonly checkChanged: ((input: unknown) => PromiseLike<ArgumentCheck>) | undefined;
  /**
   * Why every call of the tool is refused, as its record says (its input
   * schema does not compile, or an adapter refused to describe it), if so.
   */
  readonly broken: string | undefined;
  /** Aborts once the tool's calls can no longer be sent (see {@link withdrawnWith}). */
  readonly withdrawn: AbortSignal | undefined;
}

/** Runs whose loop-detection counts a gate keeps (the least recently used go first). */
const RUNS_KEPT = 1024;

/**
 * A tool as the gate last read it: `source` is the descriptor object it read
 * (the tool itself, or a `Tool`'s `descriptor`), and `text` the canonical
 * JSON of what it read there, unless that object is one loopctl froze and
 * can never change.
 */
interface Prepared {
  readonly gated: GatedTool;
  readonly source: unknown;
  readonly text: string | undefined;
}

const prepared = new WeakMap<object, Prepared>();

const changedChecks = new WeakMap<object, (input: unknown) => PromiseLike<ArgumentCheck>>();

/**
 * Gives `tool` (a Tool or a descriptor, before the gate first sees it) the
 * check of arguments a hook's `modify` changed: for an adapter whose SDK
 * validates a call's own arguments with the tool's schema, which may answer
 * only asynchronously, before handing them to the gate, so the gate's
 * synchronous `check` cannot stand in for it on arguments a hook changed.
 * What it rejects with, or throws, refuses the call. Internal.
 */
export function checkChangedWith<T extends Tool | ToolDescriptor>(
  tool: T,
  check: (input: unknown) => PromiseLike<ArgumentCheck>,
): T {
  changedChecks.set(tool, check);
  return tool;
}

const refusedTools = new WeakMap<object, string>();

/**
 * Gives `descriptor` (before the gate first sees it) the reason every call
 * of it is refused for, before any hook or approver sees it: for an adapter
 * that refuses a call because it cannot describe the tool as its SDK shows
 * it, so that the refusal lands its record (`deny`, `schema`, `engine`,
 * with `reason` as its reason) like any other. Internal.
 */
export function refusedWith<T extends ToolDescriptor>(descriptor: T, reason: string): T {
  refusedTools.set(descriptor, reason);
  return descriptor;
}

const withdrawals = new WeakMap<object, AbortSignal>();

/**
 * Gives `tool` (a Tool or a descriptor, before the gate first sees it) a
 * signal that aborts once its calls can no longer be sent: for an adapter
 * whose tools live on a connection that may end (an MCP toolset closed, its
 * server gone). A call of it parked for approval then ends refused, its ask
 * withdrawn, instead of waiting for an answer that could only let it fail;
 * one that reaches the park after the signal aborted is refused without
 * asking. The signal's reason is the refusal's. Internal.
 */
export function withdrawnWith<T extends Tool | ToolDescriptor>(tool: T, signal: AbortSignal): T {
  withdrawals.set(tool, signal);
  return tool;
}

/**
 * The gate's view of `tool`, made again only when its descriptor changed (see {@link agentTool}).
 * @throws {EngineConfigError} naming `Gate.call` when `tool` is neither a
 *   Tool nor a descriptor, is a Tool whose name is not its descriptor's (or
 *   whose descriptor is not one; `cause`: the {@link ToolDefinitionError}),
 *   or cannot be read (a proxy, a getter that throws).
 */
export function gatedTool(tool: Tool | ToolDescriptor): GatedTool {
  try {
    return agentTool(tool);
  } catch (error) {
    if (error instanceof EngineConfigError) throw error;
    if (error instanceof ToolDefinitionError) throw new EngineConfigError("Gate.call", error.message, { cause: error });
    throw new EngineConfigError("Gate.call", `the tool cannot be read: ${describeError(error)}`, { cause: error });
  }
}

/**
 * {@link gatedTool} for `Agent`: a Tool whose name is not its descriptor's
 * throws its {@link ToolDefinitionError} as is; what its reads throw is
 * thrown as is. Internal.
 *
 * Read at each call: a descriptor changed in place since the last one (a
 * description, annotations or schema set anew) is read and compiled again,
 * so its grants' pins and its validation are those of the tool as it is now.
 * One loopctl froze (`defineTool`'s, or the gate's own copy handed back)
 * cannot change, and is not read again.
 */
export function agentTool(tool: Tool | ToolDescriptor): GatedTool {
  const known = prepared.get(tool);
  const source: unknown = isTool(tool) ? tool.descriptor : tool;
  if (known !== undefined && known.source === source && (known.text === undefined || known.text === textOf(source)))
    return known.gated;
  const gated = prepare(tool);
  prepared.set(tool, {
    gated,
    source,
    text: isFrozenJson(source) ? undefined : canonicalJson(gated.descriptor),
  });
  return gated;
}

/** The canonical JSON of `source` as it is now, or `undefined` when it has none (then read again, and refused). */
function textOf(source: unknown): string | undefined {
  try {
    return canonicalJson(source);
  } catch {
    return undefined;
  }
}

function prepare(tool: Tool | ToolDescriptor): GatedTool {
  let gated: GatedTool;
  if (isTool(tool)) {
    // Read once, and checked: a tool whose name is not its descriptor's is refused here.
    const descriptor = toolDescriptorOf(tool);
    gated = {
      name: descriptor.name,
      descriptor,
      check: (input) => tool.check(input),
      checkChanged: changedChecks.get(tool),
      broken: undefined,
      withdrawn: withdrawals.get(tool),
    };
  } else {
    const shape = tool as Partial<ToolDescriptor> | null;
    const name: unknown = typeof tool === "object" ? shape?.name : undefined;
    if (typeof name !== "string" || name === "" || typeof shape?.description !== "string") {
      throw new EngineConfigError(
        "Gate.call",
        "tool must be a Tool or a descriptor { name, description, inputSchema }",
      );
    }
    // One read: the call goes on with this copy, whatever is done to the object meanwhile.
    let descriptor: ToolDescriptor;
    try {
      descriptor = frozenJson(tool);
    } catch (error) {
      throw new EngineConfigError(
        "Gate.call",
        `the descriptor of tool ${shownKey(name)} is not JSON: ${describeError(error)}`,
      );
    }
    // Read twice (the check, the copy): a getter that answers otherwise the second time is caught here,
    // on the copy every step goes on with (a name that is no string would cost the call its record).
    const copied = descriptor as Partial<ToolDescriptor>;
    if (typeof copied.name !== "string" || copied.name === "")
      throw new EngineConfigError(
        "Gate.call",
        `the descriptor's name must be a non-empty string, and read otherwise when copied (${shownValue(copied.name)})`,
      );
    if (typeof copied.description !== "string")
      throw new EngineConfigError(
        "Gate.call",
        `the descriptor of tool ${shownKey(copied.name)} must have a string description, and read otherwise when copied`,
      );
    let check: GatedTool["check"] = () => ({ type: "invalid", problems: [] });
    // An adapter's refusal stands in for the schema's own: nothing of that descriptor is compiled.
    let broken = refusedTools.get(tool);
    if (broken === undefined) {
      try {
        const schema = descriptor.inputSchema;
        if (typeof schema !== "boolean" && (typeof schema !== "object" || schema === null || Array.isArray(schema))) {
          throw new TypeError("the input schema must be a JSON Schema object");
        }
        check = compileJsonSchema(schema as Readonly<Record<string, unknown>>);
      } catch (error) {
        broken = `the tool's input schema does not compile: ${describeError(error)}`;
      }
    }
    gated = {
      name: descriptor.name,
      descriptor,
      check,
      checkChanged: changedChecks.get(tool),
      broken,
      withdrawn: withdrawals.get(tool),
    };
  }
  return gated;
}

/** What an {@link Attempt} reads from its gate. */
export interface GateState {
  readonly settings: ManagerSettings;
  readonly breaker: CircuitBreaker | undefined;
  readonly grantPolicy: GrantPolicy | undefined;
  loopDetector(runId: string): LoopDetector | undefined;
}

/** A call for the engine's own loop: the tool may be unknown (`undefined`), and records are handed over as they land. */
export interface InternalRequest {
  readonly tool: GatedTool | undefined;
  readonly name: string;
  readonly callId: string;
  readonly input: unknown;
  /** The arguments already read (the loop read them for its transcript); read here when absent. */
  readonly read?: Snapshot | NotJson | undefined;
  readonly cancel: Cancel;
  readonly sessionId: string;
  readonly runId: string;
  readonly turn: number;
  readonly execute: GateExecute;
  /**
   * Turns what `execute` gave into the outcome's `output` (a throw is the
   * tool's failure). `execute` then hands back the tool's own result, so
   * the gate sees the moment the tool itself settles.
   */
  readonly output?: ((value: unknown) => unknown) | undefined;
  readonly onRecord?: (record: GateDecision) => void;
  /** This call's own approval hook, run after the managers' (see {@link AdapterCall}). */
  readonly approvalHook?: Hook | undefined;
  /** The tool's check of `read`'s value, run already (see {@link AdapterCall}): taken in place of `tool.check`. */
  readonly checked?: ArgumentCheck | undefined;
}

/** Runs one attempt through `gate`: for `Agent`. */
export let attemptThrough!: (gate: Gate, request: InternalRequest) => Promise<GateOutcome>;

/**
 * Whether `gate` runs dispatch middleware, which sees a tool's output only
 * once `execute` has returned and may still refuse it: for an adapter that
 * would otherwise hand a streaming tool's values on as they come.
 */
export let hasMiddleware!: (gate: Gate) => boolean;

/** The fields of a {@link GateRequest}: any other is refused, never ignored. */
const REQUEST_FIELDS = everyKey<GateRequest>()(["tool", "callId", "input", "signal", "sessionId", "runId", "turn"]);

/** What an adapter hands {@link callFor} besides the request. Internal. */
export interface AdapterCall {
  /**
   * This call's own approval hook: for an adapter whose SDK approved the
   * call (or decides it needs approval) when the application made the gate
   * (`loopctl/ai-sdk`). Like the managers' approval hook, it runs after the
   * hooks whenever they allow or modify, on the arguments the call goes on
   * with, so no hook's `allow` or `modify` can skip the ask it raises.
   */
  readonly approvalHook?: Hook | undefined;
  /** The request's `input` as the adapter read it (a `snapshot`): the gate goes on with that read, not a new one. */
  readonly read?: Snapshot | NotJson | undefined;
  /**
   * The tool's check of `read`'s value, when the adapter ran it ahead of
   * the gate: the gate's validation takes it in place of running the check
   * again (arguments a hook changes are checked as always).
   */
  readonly checked?: ArgumentCheck | undefined;
}

/**
 * Keeps `runId`'s loop-detection counts until {@link Gate.endRun}, however
 * many other runs come and go meanwhile: for `Agent`, which knows when each
 * of its runs ends. Internal.
 */
export let beginRun!: (gate: Gate, runId: string) => void;

/** {@link Gate.call} with what an adapter adds ({@link AdapterCall}); internal. */
export let callFor!: (
  gate: Gate,
  request: GateRequest,
  execute: GateExecute,
  extra: AdapterCall,
) => Promise<GateOutcome>;

/**
 * The approvals gate: every tool call loopctl gates passes through it, in
 * `Agent` or in someone else's loop. One gate serves many calls and many
 * runs at once. It holds what outlives a call: the circuit breaker's tool
 * health, the grant policy, and loop-detection counts per `runId` (the
 * 1024 most recent runs, each with its 1024 most recently seen calls;
 * `endRun` forgets one; an `Agent`'s runs are kept until they end, outside
 * those 1024; calls without a `runId` count under the nil run, for the
 * gate's lifetime).
 *
 * `call` runs the steps of one attempt in order: snapshot of the arguments →
 * validation → hooks → grants and the park → pre-detection → circuit breaker
 * → dispatch (middleware, then `execute`) → the record. See docs/gate.md.
 *
 * @example
 * ```ts
 * const gate = new Gate(new LoopManagers().withHook(guard).withAskResolver(channel));
 * const outcome = await gate.call({ tool: descriptor, callId: "call_1", input: args }, (input) => run(input));
 * if (outcome.type === "ran") reply(outcome.output);
 * else reply(outcome.message);
 * ```
 */
export class Gate {
  readonly #state: GateState;
  readonly #runs = new Map<string, LoopDetector>();
  /** The runs begun with {@link beginRun} and not ended: never forgotten to make room. */
  readonly #begun = new Map<string, LoopDetector>();

  static {
    attemptThrough = (gate, request) => new Attempt(gate.#state, request).run();
    beginRun = (gate, runId) => {
      const settings = gate.#state.settings;
      if (settings.loopDetection === undefined || gate.#begun.has(runId)) return;
      const counted = gate.#runs.get(runId);
      gate.#runs.delete(runId);
      gate.#begun.set(runId, counted ?? new LoopDetector(settings.loopDetection));
    };
    hasMiddleware = (gate) => gate.#state.settings.middleware.length > 0;
    callFor = (gate, request, execute, extra) => gate.#call(request, execute, extra);
  }

  /** @throws {EngineConfigError} when `managers` is not a `LoopManagers`. */
  constructor(managers: LoopManagers) {
    if (!(managers instanceof LoopManagers)) throw new EngineConfigError("Gate", "managers must be a LoopManagers");
    const settings = settingsOf(managers);
    const runs = this.#runs;
    const begun = this.#begun;
    this.#state = {
      settings,
      breaker: settings.circuitBreaker === undefined ? undefined : new CircuitBreaker(settings.circuitBreaker),
      grantPolicy: settings.grantStore === undefined ? undefined : new GrantPolicy(settings.grantStore),
      loopDetector(runId) {
        if (settings.loopDetection === undefined) return undefined;
        const kept = begun.get(runId);
        if (kept !== undefined) return kept;
        let detector = runs.get(runId);
        if (detector !== undefined) runs.delete(runId);
        else detector = new LoopDetector(settings.loopDetection);
        runs.set(runId, detector);
        if (runs.size > RUNS_KEPT) runs.delete(runs.keys().next().value as string);
        return detector;
      },
    };
  }

  /**
   * Gates one call and, if it is allowed, runs `execute` (at most once).
   * Resolves with the outcome and its one record (also handed to observers);
   * rejects only with `CancelledError` (after the call's one record, which
   * is its `records[0]`: `cancelled`, or, for a call approved or allowed by
   * a grant before the cancel came, that approval, which lands at that exit
   * as docs/records.md says), or with `EngineConfigError` when the request
   * itself is malformed.
   */
  call(request: GateRequest, execute: GateExecute): Promise<GateOutcome> {
    return this.#call(request, execute, {});
  }

  async #call(request: GateRequest, execute: GateExecute, extra: AdapterCall): Promise<GateOutcome> {
    if (typeof request !== "object" || request === null)
      throw new EngineConfigError("Gate.call", "the request must be { tool, callId, input, … }");
    if (typeof execute !== "function") throw new EngineConfigError("Gate.call", "execute must be a function");
    let fields: Required<Omit<GateRequest, "signal">> & { readonly signal: AbortSignal | undefined };
    try {
      // A misspelt field is refused, never ignored: a `sginal` would leave the call deaf to its cancel.
      knownKeys("Gate.call", request, REQUEST_FIELDS, { what: "the request", shape: "{ tool, callId, input, … }" });
      // Read once: what was checked is what the call goes on with.
      const { tool, callId, input, signal, sessionId = NIL_UUID, runId = NIL_UUID, turn = 0 } = request;
      fields = { tool, callId, input, signal, sessionId, runId, turn };
    } catch (error) {
      if (error instanceof EngineConfigError) throw error;
      throw new EngineConfigError("Gate.call", `the request cannot be read: ${describeError(error)}`, { cause: error });
    }
    const { callId, sessionId, runId, turn } = fields;
    if (typeof callId !== "string") throw new EngineConfigError("Gate.call", "callId must be a string");
    const signal = callerSignal("Gate.call", fields.signal);
    for (const [field, id] of [
      ["sessionId", sessionId],
      ["runId", runId],
    ] as const)
      if (!isUuid(id)) throw new EngineConfigError("Gate.call", `${field} must be a UUID, got ${shownValue(id)}`);
    if (!Number.isSafeInteger(turn) || turn < 0)
      throw new EngineConfigError("Gate.call", "turn must be a non-negative integer");
    const tool = gatedTool(fields.tool);
    // A call nothing can cancel still hands its hooks, resolver and tool a signal. One the caller can
    // cancel follows the cancel its signal's calls share, with a signal of its own: what its tool leaves
    // listening on it goes with the call, not with the last of the calls in flight on the caller's signal.
    const followed = signal === undefined ? undefined : followShared(signal, "Gate.call");
    const cancel = followed?.cancel ?? Cancel.owned(false);
    try {
      return await new Attempt(this.#state, {
        tool,
        name: tool.name,
        callId,
        input: fields.input,
        cancel,
        sessionId,
        runId,
        turn,
        execute,
        approvalHook: extra.approvalHook,
        read: extra.read,
        checked: extra.checked,
      }).run();
    } finally {
      if (followed === undefined) cancel.dispose();
      else followed.release();
    }
  }

  /** Forgets `runId`'s loop-detection counts (an `Agent` does this when a run ends). */
  endRun(runId: string): void {
    this.#runs.delete(runId);
    this.#begun.delete(runId);
  }
}
