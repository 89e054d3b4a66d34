/* eslint-disable @typescript-eslint/no-explicit-any --
   The SDK's own types are generic in the run's context (RunContext<TContext>,
   RunState<TContext, TAgent>, FunctionTool<TContext, …>); a wrapper for every
   agent takes them for any context, as the SDK's own signatures do. */
import type { AgentInputItem, FunctionTool, RunContext, RunState, RunToolApprovalItem } from "@openai/agents";
import { callPrompt } from "../ask/index.js";
import { maxArgsCharsProblem, redactProblem } from "../ask/call-prompt.js";
import type { AskResolution, AskResolver, CallPromptOptions } from "../ask/index.js";
import { Gate, LoopManagers } from "../engine/index.js";
import type { GateOutcome, Hook, RunStoppedError, ToolDescriptor } from "../engine/index.js";
import { gatedTool } from "../engine/gate.js";
import { checkedId } from "../engine/ids.js";
import type { IdGen } from "../engine/ids.js";
import { settingsOf, withApprovalHook } from "../engine/managers.js";
import { CancelledError } from "../engine/errors.js";
import { cancelledBy } from "../engine/signals.js";
import { isSnapshot, snapshot } from "../engine/snapshot.js";
import { GrantPolicy, argsSha256 } from "../grant/index.js";
import type { GrantStore } from "../grant/index.js";
import { everyKey, optionsProblem } from "../unknown-option.js";
import { isGrantStore } from "../grant/store.js";
import { approverGivenAsResolver } from "../ask/wrong-half.js";
import { handOverPark } from "../ask/park-signal.js";
import { isAbortSignal } from "../abort-signal.js";
import { describeError, shownValue } from "../errors.js";
import { shownText } from "../shown.js";
import { AgentsApprovalError, AgentsConfigError } from "./errors.js";

/** Options of {@link AgentApprovals}. */
export interface AgentApprovalsOptions {
  /** Answers every ask: the interruptions `settle` handles, and asks raised while a tool runs. */
  readonly resolver: AskResolver;
  /**
   * The engine's parts (hooks, middleware, observers, clock, ask timeout…).
   * Its ask resolver, if any, is replaced by `resolver`, and its grant store by `grants` when given.
   * @default new LoopManagers()
   */
  readonly managers?: LoopManagers;
  /**
   * Remembers answers given with `remember`; a covering allow then means no
   * approval is needed, a covering deny refuses without interrupting. It
   * replaces the managers' grant store, if any; without it, the managers'
   * store (`withGrantStore`) serves the same way.
   */
  readonly grants?: GrantStore;
  /** How the arguments are shown in an ask's prompt (redaction, length). */
  readonly prompt?: Omit<CallPromptOptions, "notes">;
  /** The session asks and records carry. @default the nil UUID */
  readonly sessionId?: string;
}

/**
 * What `settle` needs of a run's result: the SDK's `RunResult`, or a
 * `StreamedRunResult` (`settle` waits for its `completed` before reading its
 * interruptions).
 */
export interface InterruptedResult {
  readonly interruptions: readonly RunToolApprovalItem[];
  readonly state: RunState<any, any>;
  /** A streamed run's end: its interruptions are known only once it settles. */
  readonly completed?: PromiseLike<unknown>;
}

/**
 * Waits for a streamed run to end (the SDK's `completed`, which settles
 * whether or not its events are read): until then its interruptions read as
 * none, and an approved call it runs later would find its approval gone.
 */
async function ended(result: InterruptedResult): Promise<void> {
  const { completed } = result;
  if (completed !== undefined) await completed;
}

/**
 * `result`, checked to be a run's result (`from` names where it came from:
 * `runAgent`, `resume`, or settle's `result`), once a streamed one has ended:
 * an object with its `interruptions` an array of objects with a `rawItem`,
 * and its `state` a `RunState` (its `_context`, `approve` and `reject`).
 * Something else (a function with a block body that forgets its `return`
 * gives `undefined`) is an `AgentsConfigError` naming `from`.
 */
async function endedResult<R extends InterruptedResult>(result: R, from: string): Promise<R> {
  const verb = from === "result" ? "be" : "resolve with";
  const expected = `${verb} the run's result (the SDK's RunResult or StreamedRunResult: { interruptions, state })`;
  if (typeof result !== "object" || result === null)
    throw new AgentsConfigError(from, `must ${expected}, got ${shownValue(result)}`);
  await ended(result);
  const { interruptions, state } = result as { interruptions?: unknown; state?: unknown };
  if (!Array.isArray(interruptions))
    throw new AgentsConfigError(from, `must ${expected}, got an object whose interruptions are not an array`);
  // A state parsed from its text rather than restored with RunState.fromString has no approvals to read or give.
  const {
    _context: context,
    approve,
    reject,
  } = (state ?? {}) as { _context?: unknown; approve?: unknown; reject?: unknown };
  if (typeof context !== "object" || context === null || typeof approve !== "function" || typeof reject !== "function")
    throw new AgentsConfigError(from, `must ${expected}, got an object whose state is not a RunState`);
  interruptions.forEach((item: unknown, i) => {
    if (typeof item !== "object" || item === null)
      throw new AgentsConfigError(
        from,
        `must ${expected}, got an object whose interruptions[${i}] is ${shownValue(item)}`,
      );
    const { rawItem } = item as { rawItem?: unknown };
    if (typeof rawItem !== "object" || rawItem === null)
      throw new AgentsConfigError(
        from,
        `must ${expected}, got an object whose interruptions[${i}] is not a RunToolApprovalItem (it has no rawItem)`,
      );
  });
  return result;
}

type AnyFunctionTool = FunctionTool<any, any, any>;
type Details = Parameters<AnyFunctionTool["invoke"]>[2];

interface Wrapped {
  readonly original: AnyFunctionTool;
  /** Named by the tool's qualified name (`prod.deploy` for `deploy` in the namespace `prod`). */
  readonly descriptor: ToolDescriptor;
  /** The name the SDK keeps the tool's approvals under (see {@link approvalKeyOf}). */
  readonly approvalKey: string;
}

/** A gated call in progress: whose tool, and (while a tool runs) the run's context. Kept under {@link callKey}. */
interface InFlight {
  readonly wrapped: Wrapped;
  readonly context: RunContext<any> | undefined;
  /** Set when the SDK already decided the call needs approval (an interruption). */
  readonly wantsApproval: boolean | undefined;
}

/** An approved interruption whose gate call waits for the SDK to execute it on resume. Kept under {@link callKey}. */
interface Approved {
  readonly wrapped: Wrapped;
  /** The run ({@link runOf}) of the run state it was approved on: only that run's resume may execute it. */
  readonly run: object;
  /** The arguments as the model sent them in the interruption: only a call with exactly these may execute it. */
  readonly arguments: string | undefined;
  readonly input: unknown;
  readonly signal: AbortSignal;
  readonly done: { resolve(value: unknown): void; reject(error: unknown): void };
  /** The interruption's gate call: how it ends once `done` settled (its middleware may still refuse the output). */
  readonly outcome: () => Promise<GateOutcome>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function parseArguments(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // Not JSON: the gate refuses the call before anyone is asked about it.
    return undefined;
  }
}

/**
 * Where a call's state is kept: under its run's id and its call id. The SDK's
 * call ids are unique only within a run (some servers number calls `call_0`,
 * `call_1`… afresh every turn), so two runs' calls under one id are two calls.
 */
function callKey(runId: string, callId: string): string {
  return `${runId} ${callId}`;
}

/**
 * The run a `RunContext` belongs to: its `usage`, the one aggregate the SDK
 * shares between a run's context and every context it forks for the nested
 * run of an agent used as a tool (`agent.asTool()` with structured input runs
 * the agent on a fork of the caller's context, and a new fork when the run
 * resumes; each fork shares the caller's approvals and usage), and keeps when
 * a run resumes. Every other run has a `usage` of its own (the SDK makes one
 * with every `RunContext`, and one for a state restored from its text).
 * `@openai/agents` 0.14 has no run id that survives `toString()`: a state
 * restored from text is another run here, so nothing given before carries
 * over to it and its calls are asked about (fail closed).
 */
function runOf(context: RunContext<any>): object {
  const usage: unknown = (context as { usage?: unknown }).usage;
  return typeof usage === "object" && usage !== null ? usage : context;
}

/**
 * Whether the gate refuses `input` for failing the tool's schema (its `deny`
 * with `ruleId: "schema"`, before any hook, grant or ask): a call that can
 * never run, not worth an interruption. The check is the gate's own,
 * compiled once per descriptor and shared with its calls. Arguments that
 * pass it are read no further here; ones that fail it are read as the gate
 * reads them (its snapshot) and checked again, so `true` always means the
 * gate refuses them (arguments the snapshot cannot read it refuses as
 * `invalid_arguments`). A descriptor the gate cannot use is left to it.
 */
function failsSchema(wrapped: Wrapped, input: unknown): boolean {
  try {
    const gated = gatedTool(wrapped.descriptor);
    if (gated.broken !== undefined) return true;
    if (gated.check(input).type === "valid") return false;
    const read = snapshot(input);
    return !isSnapshot(read) || gated.check(read.value).type === "invalid";
  } catch {
    return false;
  }
}

/**
 * Whether `context` (a run state's) carries an answer for the interruption `item` of `wrapped`: for the agent
 * whose call it is, as the SDK reads it when the run resumes (it keeps a function call's approvals per agent;
 * `isToolApproved` takes the agent, though its declared type does not say so). A call approved that way runs
 * through the gate as one approved by hand (see the resolver); one rejected never reaches it.
 */
function answeredOn(context: RunContext<any>, item: RunToolApprovalItem, wrapped: Wrapped): boolean {
  return answerOn(context, item, wrapped) !== undefined;
}

/** The answer `context` carries for the interruption `item` of `wrapped` ({@link answeredOn}): approved, rejected, or none. */
function answerOn(context: RunContext<any>, item: RunToolApprovalItem, wrapped: Wrapped): boolean | undefined {
  const scoped = context as unknown as {
    isToolApproved(approval: { toolName: string; callId: string; agent: unknown }): boolean | undefined;
  };
  return scoped.isToolApproved({ toolName: wrapped.approvalKey, callId: callIdOf(item), agent: item.agent });
}

/**
 * Where the SDK keeps the answer to an interruption that is no function call (a hosted MCP server's approval
 * request, a shell, computer or apply-patch call), as it reads it when the run resumes: not per agent, under a
 * hosted MCP request's tool name and its id (its `id`, else its provider data's), or under a shell's, computer's or
 * apply-patch's tool name and its call id (its `callId`, else its `id`). `undefined` for an item without an id the
 * SDK could read an answer under.
 */
function otherApprovalKey(item: RunToolApprovalItem): { toolName: string; callId: string } | undefined {
  const raw = item.rawItem as {
    type?: unknown;
    name?: unknown;
    callId?: unknown;
    id?: unknown;
    providerData?: { id?: unknown };
  };
  const hosted = raw.type === "hosted_tool_call";
  const toolName: unknown = hosted ? raw.name : (item.toolName ?? raw.name);
  const callId: unknown = hosted
    ? (raw.id ?? raw.providerData?.id)
    : typeof raw.callId === "string"
      ? raw.callId
      : raw.id;
  if (typeof toolName !== "string" || typeof callId !== "string" || callId === "") return undefined;
  return { toolName, callId };
}

/** The answer `context` (a run state's) carries for an interruption that is no function call ({@link otherApprovalKey}). */
function otherAnswerOn(context: RunContext<any>, item: RunToolApprovalItem): boolean | undefined {
  const key = otherApprovalKey(item);
  if (key === undefined) return undefined;
  const unscoped = context as unknown as {
    isToolApproved(approval: { toolName: string; callId: string; functionTool: false }): boolean | undefined;
  };
  return unscoped.isToolApproved({ ...key, functionTool: false });
}

/** The entry of `context`'s run ({@link runOf}) in `byRun`, made empty the first time it is asked for. */
function ofRun<V>(byRun: WeakMap<object, Map<string, V>>, context: RunContext<any>): Map<string, V> {
  const run = runOf(context);
  let entry = byRun.get(run);
  if (entry === undefined) byRun.set(run, (entry = new Map<string, V>()));
  return entry;
}

/**
 * The namespace `toolNamespace()` gave a function tool, if any. The SDK keeps
 * it under a symbol of its own (`Symbol("functionToolNamespace")`, not
 * exported), copied onto the wrapped tool with the tool's other properties.
 */
function namespaceOf(tool: AnyFunctionTool): string | undefined {
  for (const key of Object.getOwnPropertySymbols(tool)) {
    if (key.description !== "functionToolNamespace") continue;
    const value: unknown = (tool as unknown as Record<symbol, unknown>)[key];
    return typeof value === "string" && value.length > 0 ? value : undefined;
  }
  return undefined;
}

/**
 * The name the SDK keeps a tool's approvals under, as `isToolApproved` takes
 * it: its state key. A namespaced tool's (`["namespaced","prod","deploy"]`)
 * and a top-level tool's loaded by tool search (`deferLoading`:
 * `["deferred_top_level","deploy"]`) are not reached by the bare name, which
 * an ordinary tool's approvals are kept under.
 */
function approvalKeyOf(tool: AnyFunctionTool, namespace: string | undefined): string {
  if ((namespace === undefined && tool.deferLoading === true) || namespace === tool.name)
    return JSON.stringify(["deferred_top_level", tool.name]);
  return namespace === undefined ? tool.name : JSON.stringify(["namespaced", namespace, tool.name]);
}

/**
 * How `original` is gated in `namespace`: tools of one name in two namespaces are asked about, pinned and
 * recorded apart. Its output schema, when it has one, is part of what a grant is pinned to: the model is
 * told what the tool returns by it, and a tool that now says it returns something else asks again.
 */
function wrappedAs(original: AnyFunctionTool, namespace: string | undefined): Wrapped {
  return {
    original,
    descriptor: {
      name: namespace === undefined ? original.name : `${namespace}.${original.name}`,
      description: original.description,
      inputSchema: original.parameters,
      ...(original.outputSchema === undefined ? {} : { outputSchema: original.outputSchema }),
    },
    approvalKey: approvalKeyOf(original, namespace),
  };
}

/** Where an interrupted call's unused approval is kept in its run: under the name the SDK keeps the tool's approvals under, and its call id. */
function unusedKey(wrapped: Wrapped, callId: string): string {
  return JSON.stringify([wrapped.approvalKey, callId]);
}

/**
 * `details` as the SDK handed them to the wrapped tool, with `signal` in place of theirs, for the tool it wraps.
 * Every property is copied as it is: the SDK keeps the calling run's config (the model, provider and tool
 * execution an agent tool's nested run inherits), its usage recorder and its trace span on properties that are
 * not enumerable, which a spread would drop.
 */
function withSignal(details: Details, signal: AbortSignal): NonNullable<Details> {
  const copy = Object.defineProperties({}, Object.getOwnPropertyDescriptors(details ?? {})) as NonNullable<Details>;
  Object.defineProperty(copy, "signal", { value: signal, enumerable: true, configurable: true, writable: true });
  return copy;
}

type ErrorFunction = (context: RunContext<any>, error: unknown, details: Details) => unknown;

/**
 * `output`, checked as the tool checks what it returns: with the output schema a tool made by `tool()` keeps
 * under a symbol of its own (`Symbol("openai.agents.functionToolOutputValidator")`, not exported), for a zod
 * output schema. A fallback that breaks it throws the SDK's `InvalidToolOutputError`. A tool without one
 * (a JSON Schema output schema) is not checked, as the SDK does not check it.
 */
function checkedOutput(tool: AnyFunctionTool, output: unknown, context: RunContext<any>, details: Details): unknown {
  for (const key of Object.getOwnPropertySymbols(tool)) {
    if (key.description !== "openai.agents.functionToolOutputValidator") continue;
    const validate: unknown = (tool as unknown as Record<symbol, unknown>)[key];
    if (typeof validate === "function")
      return (validate as (output: unknown, context: unknown, details: unknown) => unknown)(output, context, details);
  }
  return output;
}

function callIdOf(item: RunToolApprovalItem): string {
  return (item.rawItem as { callId?: string }).callId ?? "";
}

function isFunctionTool(value: unknown): value is AnyFunctionTool {
  const tool = value as Partial<AnyFunctionTool> | null;
  return (
    typeof value === "object" &&
    value !== null &&
    tool?.type === "function" &&
    typeof tool.invoke === "function" &&
    typeof tool.name === "string"
  );
}

/** The kinds of tool of `@openai/agents` 0.14 besides function tools, which `tools()` returns as they are. */
const OTHER_TOOL_TYPES: ReadonlySet<unknown> = new Set(["hosted_tool", "computer", "shell", "apply_patch"]);

/**
 * What `value` is, when it is no tool of the SDK (a function tool is checked by {@link isFunctionTool} first):
 * `undefined` for a hosted, computer, shell or apply-patch tool.
 */
function notATool(value: unknown): string | undefined {
  if (typeof value !== "object" || value === null) return shownValue(value);
  if (Array.isArray(value)) return "an array";
  const { type, name } = value as { type?: unknown; name?: unknown };
  if (type === undefined) return "an object without a type";
  if (typeof type !== "string") return `an object whose type is ${shownValue(type)}`;
  if (type === "function") return `an object of type "function" that is no function tool made by tool()`;
  if (!OTHER_TOOL_TYPES.has(type)) return `an object of type ${shownText(type)}`;
  if (typeof name !== "string") return `an object of type ${shownText(type)} without a name`;
  return undefined;
}

/**
 * Whether the SDK offers `tool` to the model in this run, as it decides it:
 * its `isEnabled`, a boolean or a function of the run's context and agent.
 */
async function isEnabled(tool: object, context: RunContext<any>, agent: unknown): Promise<boolean> {
  const enabled: unknown = (tool as { isEnabled?: unknown }).isEnabled;
  if (typeof enabled === "boolean") return enabled;
  if (typeof enabled !== "function") return true;
  try {
    return Boolean(await (enabled as (context: unknown, agent: unknown) => unknown)(context, agent));
  } catch (error) {
    throw new AgentsApprovalError(
      String((tool as { name?: unknown }).name),
      "its isEnabled threw: which tool the run called cannot be told",
      { cause: error },
    );
  }
}

/**
 * The tools a client tool search (`toolSearchTool({ execution: "client", execute })`) loaded into the run of
 * `state` for `agent`, which the agent's own `tools` do not list: the SDK keeps them on the run state, per agent.
 */
function loadedTools(state: RunState<any, any>, agent: unknown): readonly object[] {
  const read = (state as { getToolSearchRuntimeTools?: unknown }).getToolSearchRuntimeTools;
  if (agent === undefined || typeof read !== "function") return [];
  const loaded: unknown = read.call(state, agent);
  return Array.isArray(loaded) ? (loaded as object[]) : [];
}

/**
 * Whether `tool` is an agent's `asTool()`: the SDK gives those, and no other
 * function tool, an `on(event, handler)` for the nested run's events.
 */
function isAgentTool(tool: AnyFunctionTool): boolean {
  return typeof (tool as { on?: unknown }).on === "function";
}

/** The `invoke` of every tool an `AgentApprovals` gated: a tool carrying one (or a copy of one) is gated already. */
const gatedInvokes = new WeakSet<object>();

/**
 * Why `tool` cannot be gated by an `AgentApprovals` that did not gate it: another one gated it (or it is a copy
 * of a tool another one gated). The SDK keeps one answer per call on the run state, so two gates cannot decide a
 * call apart: the inner one would take the approval the outer one's `settle` put there for one given by hand,
 * its resolver never asked. An agent tool, gated in place, would moreover carry the second gate to every agent
 * given it. `undefined` for a tool no `AgentApprovals` gated.
 */
function gatedElsewhere(tool: AnyFunctionTool): string | undefined {
  if (!gatedInvokes.has(tool.invoke)) return undefined;
  const instead = isAgentTool(tool)
    ? "make another with agent.asTool() for this one"
    : "give this one the tool as written, not the other's gated copy";
  return `the ${isAgentTool(tool) ? "agent tool" : "tool"} ${shownText(tool.name)} is gated by another AgentApprovals: the SDK keeps one answer per call, which two gates cannot decide apart; ${instead}`;
}

/**
 * Why the agent tool `tool` cannot be gated in place (its `needsApproval` or `invoke` cannot be written: a frozen
 * tool), or `undefined`. Found before any tool of a list is gated, so that a refused list gates none.
 */
function notGatableInPlace(tool: AnyFunctionTool): string | undefined {
  if (!isAgentTool(tool)) return undefined;
  const writable = (key: string): boolean => {
    const property = Object.getOwnPropertyDescriptor(tool, key);
    if (property === undefined) return Object.isExtensible(tool);
    return property.set !== undefined || property.writable === true;
  };
  if (writable("needsApproval") && writable("invoke")) return undefined;
  return `the agent tool ${shownText(tool.name)} cannot be gated in place: its needsApproval or invoke cannot be written (a frozen tool); pass it as agent.asTool() made it`;
}

/**
 * The prompt options as `callPrompt` takes them, checked here so that no ask
 * finds them unusable later (its hook would throw, and every call be denied).
 */
function promptOptions(prompt: unknown): Omit<CallPromptOptions, "notes"> {
  refuseOptions(prompt, PROMPT_OPTIONS, "an object: { redact?, maxArgsChars? }", "prompt", "", "prompt.");
  const { redact, maxArgsChars } = prompt as Omit<CallPromptOptions, "notes">;
  const redactFault = redactProblem(redact);
  if (redactFault !== undefined) throw new AgentsConfigError("prompt.redact", redactFault);
  const maxFault = maxArgsChars === undefined ? undefined : maxArgsCharsProblem(maxArgsChars);
  if (maxFault !== undefined) throw new AgentsConfigError("prompt.maxArgsChars", maxFault);
  return {
    ...(redact === undefined ? {} : { redact }),
    ...(maxArgsChars === undefined ? {} : { maxArgsChars }),
  };
}

/** The options of the constructor, of `prompt`, and of `run` and `settle`: any other is refused, never ignored. */
const OPTIONS = everyKey<AgentApprovalsOptions>()(["resolver", "managers", "grants", "prompt", "sessionId"]);
const PROMPT_OPTIONS = everyKey<Omit<CallPromptOptions, "notes">>()(["redact", "maxArgsChars"]);
const RUN_OPTIONS = everyKey<{ readonly signal?: AbortSignal }>()(["signal"]);

/** Where an unknown option `key` of the constructor's was likely meant to go: a part of `LoopManagers`, or its own. */
function managersHint(key: string): string | undefined {
  const singular = key.replace(/s$/, "");
  const part = `with${singular.charAt(0).toUpperCase()}${singular.slice(1)}`;
  // The managers' own resolver and grant store are the two options here: `resolver` replaces the one.
  const own: Record<string, string> = { withAskResolver: "resolver", withGrantStore: "grants" };
  if (own[part] !== undefined) return `did you mean ${own[part]}?`;
  if (typeof (LoopManagers.prototype as unknown as Record<string, unknown>)[part] === "function")
    return `it goes in managers: new LoopManagers().${part}(…)`;
  return undefined;
}

/**
 * Refuses `value` unless an object of `known` (`shape`), with an `AgentsConfigError` naming `name` (`said` before its
 * problem), or the key that is none of them (under `prefix`): ignored, a misspelt `grants` or `signal`, or hooks
 * given beside `managers`, would run what the caller meant to stop.
 */
function refuseOptions(value: unknown, known: readonly string[], shape: string, name: string, said = "", prefix = "") {
  const wrong = optionsProblem(value, known, { shape, hint: known === OPTIONS ? managersHint : undefined });
  if (wrong?.key !== undefined) throw new AgentsConfigError(`${prefix}${wrong.key}`, wrong.problem);
  if (wrong !== undefined) throw new AgentsConfigError(name, `${said}${wrong.problem}`, { cause: wrong.cause });
}

/** `run`'s and `settle`'s options, checked: an object with at most a `signal`, which is an `AbortSignal`. */
function runOptions(options: unknown): { readonly signal?: AbortSignal } {
  // A signal in place of its options has no keys of its own: read as options, the run would have no cancel.
  refuseOptions(options, RUN_OPTIONS, "an object: { signal? }", "options");
  const { signal } = options as { signal?: unknown };
  if (signal !== undefined && !isAbortSignal(signal))
    throw new AgentsConfigError("signal", `must be an AbortSignal or undefined, got ${shownValue(signal)}`);
  return signal === undefined ? {} : { signal };
}

/**
 * loopctl approvals for the OpenAI Agents SDK (`@openai/agents` 0.14), with
 * the SDK's own interruptions: `tools()` wraps function tools, and `run()`
 * (or `settle()`) answers every interruption with your `AskResolver` and
 * resumes until the run finishes.
 *
 * - **Grants decide `needsApproval`.** When a tool's own `needsApproval`
 *   says yes, a covering allow grant means no approval is needed and a
 *   covering deny refuses without interrupting (the model reads the
 *   refusal); otherwise the run is interrupted. Arguments that fail the
 *   tool's input schema never interrupt (nor reach the tool's own
 *   `needsApproval`): the gate refuses them where the tool runs.
 * - **Interruptions are answered through the gate.** `settle` passes each
 *   one through `gate.call`: hooks, grants, the ask (your resolver gets a
 *   `PendingAsk` whose prompt shows the tool and its arguments), and the
 *   answer's `remember` saved as a grant. A hook's `allow` or `modify`
 *   never skips the ask (a modified call is asked about as modified); only
 *   a `block` refuses without asking. An approval is applied with
 *   `state.approve`, a refusal with `state.reject` carrying the text the
 *   model reads; then the run resumes, and the approved call executes with
 *   exactly the arguments approved.
 * - **One record per decision.** Every call of a wrapped tool passes through
 *   the gate exactly once: when it runs without an interruption, or from
 *   its interruption to the end of its execution. See docs/openai-agents.md.
 *
 * @throws {AgentsConfigError} on an option of the wrong kind (`prompt`
 *   included: a `maxArgsChars` that is not a positive integer, a `redact`
 *   that is neither a function nor `false`), or one it does not take
 *   (`hooks`, a misspelt `grant`: never ignored).
 *
 * @example
 * ```ts
 * const approvals = new AgentApprovals({ resolver: channel, grants: store });
 * const agent = new Agent({ name: "ops", tools: approvals.tools([deploy, readLog]) });
 * const result = await approvals.run((input) => run(agent, input), "ship 1.4");
 * ```
 */
export class AgentApprovals {
  /** The gate every call of a wrapped tool passes through. */
  readonly gate: Gate;
  readonly #resolver: AskResolver;
  /** The resolver the gate parks on: {@link AgentApprovals.#resolve}. */
  readonly #gateResolver: AskResolver = { resolve: (ask, options) => this.#resolve(ask, options) };
  readonly #policy: GrantPolicy | undefined;
  readonly #prompt: Omit<CallPromptOptions, "notes">;
  readonly #sessionId: string | undefined;
  readonly #idGen: IdGen;
  /**
   * The run id of each run ({@link runOf}). The SDK hands a run's tools and
   * its `needsApproval` the run state's own `RunContext` (the object a resume
   * carries on), or for an agent tool's nested run a fork of it that shares
   * its usage: its calls are gated under this id, which the gate's hooks,
   * asks and records carry.
   */
  readonly #runIds = new WeakMap<object, string>();
  /**
   * Ends a run's id on the gate once its run ({@link runOf}) is collected: nothing tells
   * this object a run of the SDK is over, and the gate would keep its loop-detection counts.
   */
  readonly #runsEnded = new FinalizationRegistry<string>((runId) => this.gate.endRun(runId));
  readonly #wrapped = new WeakMap<object, Wrapped>();
  /** The tool each wrapped tool's `invoke` gates: how a copy of a wrapped tool (`toolNamespace()` makes them) is known. */
  readonly #byInvoke = new WeakMap<object, Wrapped>();
  readonly #inFlight = new Map<string, InFlight>();
  readonly #approved = new Map<string, Approved>();
  /**
   * Per run ({@link runOf}), the calls the SDK interrupted here (this object's
   * `needsApproval` said yes) whose approval no call has used yet, by tool and
   * call id ({@link unusedKey}: another tool's call under the id is another
   * call, which the SDK approves apart), each with
   * the sha256 of the arguments it was interrupted with (what a person
   * approving it on the run state saw). The SDK keeps approvals by call id
   * for the whole run, and nothing of a run state can take one back: an
   * approval on the run state lets one call through, for an interruption
   * seen here, with those arguments (a hook's `modify` makes others, which
   * are asked about). One this object did not see given (a state restored
   * from `toString()`, another `AgentApprovals`) may have been used already,
   * so the resolver is asked. The SDK keeps a function call's answer per
   * agent, but the gate cannot tell which agent a call is of: an interruption
   * under an id another agent's approval covers is not kept here, and a
   * refused one is dropped (neither is waiting for an approval to use).
   */
  readonly #unusedApprovals = new WeakMap<object, Map<string, string | undefined>>();

  constructor(options: AgentApprovalsOptions) {
    refuseOptions(options, OPTIONS, "{ resolver, managers?, grants? }", "AgentApprovals", "options ");
    const { resolver, managers = new LoopManagers(), grants, prompt = {}, sessionId } = options;
    if (typeof resolver?.resolve !== "function")
      throw new AgentsConfigError("resolver", "must be an AskResolver (resolve(ask, { signal }))");
    const wrongHalf = approverGivenAsResolver(resolver);
    if (wrongHalf !== undefined) throw new AgentsConfigError("resolver", wrongHalf);
    if (grants !== undefined && !isGrantStore(grants))
      throw new AgentsConfigError(
        "grants",
        `must be a GrantStore (load, save, revoke and clear as functions), got ${shownValue(grants)}`,
      );
    if (!(managers instanceof LoopManagers)) throw new AgentsConfigError("managers", "must be a LoopManagers");
    if (sessionId !== undefined && (typeof sessionId !== "string" || !UUID.test(sessionId)))
      throw new AgentsConfigError("sessionId", `must be a UUID, got ${shownValue(sessionId)}`);
    this.#resolver = resolver;
    this.#prompt = promptOptions(prompt);
    this.#sessionId = sessionId;
    this.#idGen = settingsOf(managers).idGen;
    // The store the gate remembers answers in, and decides by: `grants`, else the managers' own. The SDK's
    // needsApproval asks it first, so a call it covers is not interrupted for, wherever the store was given.
    const store = grants ?? settingsOf(managers).grantStore;
    this.#policy = store === undefined ? undefined : new GrantPolicy(store);
    // The approval hook runs after the application's hooks, on the arguments they let through: a hook's
    // allow or modify never skips the approval the SDK (or the tool's needsApproval) requires.
    let parts = withApprovalHook(managers.withAskResolver(this.#gateResolver), this.#approvalHook());
    if (grants !== undefined) parts = parts.withGrantStore(grants);
    this.gate = new Gate(parts);
  }

  /**
   * Wraps every function tool of `tools`; the SDK's other tools (hosted, computer, shell, apply-patch) are
   * returned as they are.
   * @throws {AgentsConfigError} when `tools` is not an array, or one of its entries is not a tool of the SDK
   *   (`null`, a number, a plain object), or is a tool another `AgentApprovals` gated (see {@link tool}):
   *   `option` names the entry (`tools[1]`), the message what it is.
   */
  tools<T extends readonly unknown[]>(tools: T): T {
    if (!Array.isArray(tools)) throw new AgentsConfigError("tools", "must be an array of tools");
    // Every entry is checked before any is gated: an agent tool is gated in place, and a list refused
    // for a later entry must leave it as it was.
    const functionTools = tools.map((tool: unknown, index) => {
      let problem: string | undefined;
      try {
        if (isFunctionTool(tool)) {
          const elsewhere =
            this.#wrappedOf(tool) === undefined ? (gatedElsewhere(tool) ?? notGatableInPlace(tool)) : undefined;
          if (elsewhere !== undefined) throw new AgentsConfigError(`tools[${index}]`, elsewhere);
          return true;
        }
        problem = notATool(tool);
      } catch (error) {
        if (error instanceof AgentsConfigError) throw error;
        // An entry whose reads throw (a getter, a revoked proxy) is no tool either.
        throw new AgentsConfigError(`tools[${index}]`, `cannot be read: ${describeError(error)}`, { cause: error });
      }
      if (problem !== undefined)
        throw new AgentsConfigError(`tools[${index}]`, `must be a tool of @openai/agents, got ${problem}`);
      return false;
    });
    return tools.map((tool: unknown, index) =>
      functionTools[index] === true ? this.tool(tool as AnyFunctionTool) : tool,
    ) as unknown as T;
  }

  /**
   * Wraps one function tool: its `needsApproval` consults grants, and its calls pass through the gate.
   * Returns a copy, but for an agent's `asTool()`, gated in place (the SDK knows it by identity). A tool
   * gated here already is returned as it is: it is gated once.
   * @throws {AgentsConfigError} (`option: "tool"`) for a tool another `AgentApprovals` gated (or a copy of
   *   one): the SDK keeps one answer per call, which two gates cannot decide apart. Give each `AgentApprovals`
   *   the tool as written (for an agent tool, gated in place, one `agent.asTool()` each).
   */
  tool<T extends AnyFunctionTool>(tool: T): T {
    if (!isFunctionTool(tool))
      throw new AgentsConfigError("tool", "must be a function tool made by tool() from @openai/agents");
    if (this.#wrappedOf(tool) !== undefined) return tool;
    const elsewhere = gatedElsewhere(tool) ?? notGatableInPlace(tool);
    if (elsewhere !== undefined) throw new AgentsConfigError("tool", elsewhere);
    // An agent's asTool() is known to the SDK by identity (how RunState finds the agent of a nested
    // interruption when it is restored from text): it is gated in place, a copy would be a stranger to it.
    const inPlace = isAgentTool(tool);
    const original: T = inPlace ? { ...tool } : tool;
    const wrapped = wrappedAs(original, namespaceOf(tool));
    // The SDK calls them as methods of the tool it runs: a copy of this one that toolNamespace() put in a
    // namespace is another tool, gated under its own qualified name.
    const needsApproval = (self: unknown, context: RunContext<any>, input: unknown, callId?: string) =>
      this.#needsApproval(this.#wrappedOf(self) ?? wrapped, context, input, callId);
    const invoke = (self: unknown, context: RunContext<any>, input: string, details?: Details) =>
      this.#invoke(this.#wrappedOf(self) ?? wrapped, context, input, details);
    const gated: T = {
      ...tool,
      needsApproval(this: unknown, context: RunContext<any>, input: unknown, callId?: string) {
        return needsApproval(this, context, input, callId);
      },
      invoke(this: unknown, context: RunContext<any>, input: string, details?: Details) {
        return invoke(this, context, input, details);
      },
    };
    this.#byInvoke.set(gated.invoke, wrapped);
    gatedInvokes.add(gated.invoke);
    if (inPlace) {
      Object.assign(tool, { needsApproval: gated.needsApproval, invoke: gated.invoke });
      this.#wrapped.set(tool, wrapped);
      return tool;
    }
    this.#wrapped.set(gated, wrapped);
    return gated;
  }

  /**
   * Runs an agent to the end: `runAgent(input)`, then {@link settle} with
   * `runAgent` as the way to resume. With `signal` already aborted, nothing
   * is run: it rejects with `CancelledError` (the signal's reason its
   * `cause`). Pass the signal to the SDK's run in `runAgent` too, for the
   * turns before and between interruptions.
   *
   * @throws {AgentsConfigError} (`option: "runAgent"`) when `runAgent` is
   *   not a function, or resolves with something that is no run's result.
   * @throws {AgentsConfigError} when `options` is not `{ signal? }` with an
   *   `AbortSignal` (`option`: `options`, `signal`, or the unknown option).
   *
   * @example
   * ```ts
   * const result = await approvals.run((input) => run(agent, input), "ship 1.4");
   * ```
   */
  async run<R extends InterruptedResult>(
    runAgent: (input: string | AgentInputItem[] | RunState<any, any>) => Promise<R>,
    input: string | AgentInputItem[],
    options: { readonly signal?: AbortSignal } = {},
  ): Promise<R> {
    if (typeof runAgent !== "function")
      throw new AgentsConfigError("runAgent", `must be a function that runs the agent, got ${shownValue(runAgent)}`);
    // A run cancelled before it starts does not start: its tools that need no approval would run.
    const checked = runOptions(options);
    const { signal } = checked;
    if (signal?.aborted === true) throw cancelledBy(signal, "the run was cancelled before it started");
    return this.#settle(await endedResult(await runAgent(input), "runAgent"), runAgent, checked, "runAgent");
  }

  /**
   * Answers every interruption of `result` through the gate, approves or
   * rejects it on `result.state`, resumes with `resume(state)`, and repeats
   * until a result has no interruptions; resolves with that result. Every
   * interruption must be of a tool wrapped by this object, or one these
   * approvals do not gate (a hosted MCP server's approval request, a shell,
   * computer or apply-patch call) answered by hand on the state before
   * (`state.approve`, `state.reject`): that one is left to its answer, as
   * the SDK reads it when it resumes, while the turn's function calls are
   * decided as usual. A streamed result
   * (`run(agent, input, { stream: true })`) is read once its `completed`
   * settles: read its events in `resume` before returning it.
   *
   * Called again over an interruption a `settle` already answered on the
   * same run state (a retry after `resume` threw), it asks nobody: it
   * resumes with the answer the state carries. So it does for an
   * interruption answered by hand on the state (`state.approve`,
   * `state.reject`): a refusal could not take back an approval there.
   *
   * @throws {AgentsApprovalError} for an interruption of a tool not wrapped
   *   here, for one these approvals do not gate that the state does not
   *   answer, or under a call id another call of its run has, in the turn or
   *   in flight (before anyone is asked anything). Other runs' calls under
   *   the same id are their own.
   * @throws {AgentsApprovalError} for an interruption for a call this settle
   *   approved, or resumed with an answer given before, that the resumed run
   *   did not execute (same tool, call id and arguments), or for one these
   *   approvals do not gate that this settle resumed with its answer on the
   *   state: the resume lost the answer; it is not asked about, nor resumed with, again.
   * @throws {CancelledError} when `signal` aborts while an ask waits, or has aborted when the run would
   *   resume: nothing is applied to the state nor resumed, not even an interruption answered by hand.
   * @throws {LoopDetectedError} when an approved interruption is a call repeated past the managers'
   *   `withLoopDetection` limit: the run ends there, nothing applied nor resumed (a call that runs without
   *   an interruption throws it from the tool, and the SDK fails its run with it).
   * @throws {AgentsConfigError} when `options` is not `{ signal? }` with an
   *   `AbortSignal` (`option`: `options`, `signal`, or the unknown option).
   * @throws {AgentsConfigError} when `resume` is not a function, or `result`
   *   (or what `resume` resolves with) is no run's result: `option` is
   *   `"resume"` or `"result"` (an approved call `resume` did not run ends
   *   with its one record).
   */
  async settle<R extends InterruptedResult>(
    result: R,
    resume: (state: R["state"]) => Promise<R>,
    options: { readonly signal?: AbortSignal } = {},
  ): Promise<R> {
    if (typeof resume !== "function")
      throw new AgentsConfigError("resume", `must be a function that resumes the run, got ${shownValue(resume)}`);
    const checked = runOptions(options);
    return this.#settle(await endedResult(result, "result"), resume, checked, "resume");
  }

  /** {@link settle} on a result already checked and ended; `resumedBy` names `resume` in its errors. */
  async #settle<R extends InterruptedResult>(
    result: R,
    resume: (state: R["state"]) => Promise<R>,
    options: { readonly signal?: AbortSignal },
    resumedBy: string,
  ): Promise<R> {
    let current = result;
    /**
     * The approved calls a resume of this settle did not execute, by call id: a resume may carry the run
     * on another `RunContext` (a state restored from text), which is another run id here.
     */
    const unexecuted = new Map<string, Pick<Approved, "wrapped" | "arguments">>();
    /** The calls this settle resumed with an answer given before (a retry), by call id: each is resumed with once. */
    const resumedWith = new Set<string>();
    /** The interruptions these approvals do not gate that this settle resumed with their answer on the state. */
    const leftToState = new Set<string>();
    while (current.interruptions.length > 0) {
      const { state } = current;
      const context = state._context;
      // An interruption these approvals do not gate (a hosted MCP request, a shell, computer or apply-patch call)
      // that the state answers (by hand) is left to that answer; one it does not answer throws below, before
      // anyone is asked about the turn's other calls.
      const gated: RunToolApprovalItem[] = [];
      for (const item of current.interruptions) {
        if (item.rawItem.type === "function_call" || otherAnswerOn(context, item) === undefined) {
          gated.push(item);
          continue;
        }
        const left = JSON.stringify([item.rawItem.type, otherApprovalKey(item)]);
        if (leftToState.has(left))
          throw new AgentsApprovalError(
            item.name ?? "",
            `the run was interrupted again for a call of type ${shownText(item.rawItem.type)} that its state answers, after resuming with that answer: the resumed run did not take it; it is not resumed again`,
          );
        leftToState.add(left);
      }
      const all = await Promise.all(
        gated.map(async (item) => ({ item, wrapped: await this.#wrappedFor(item, state) })),
      );
      this.#checkCallIds(all, this.#runIdOf(context));
      this.#checkNotApprovedBefore(all, unexecuted);
      // Interruptions answered before on this run state (a settle retried after its resume failed), or answered by
      // hand on it (state.approve or state.reject), resume with that answer: nobody is asked, since an answer
      // settle applied could not take the state's back (the SDK lets an approval win over a refusal). The rest are
      // decided.
      const answered = all.filter(({ item, wrapped }) => answeredOn(context, item, wrapped));
      for (const { item, wrapped } of answered) {
        const callId = callIdOf(item);
        if (resumedWith.has(callId))
          throw new AgentsApprovalError(
            wrapped.descriptor.name,
            `the call ${shownText(callId)} was answered, and the resumed run interrupted for it again: the SDK did not carry the answer into the resumed run; it is not asked about again`,
          );
        resumedWith.add(callId);
      }
      const items = all.filter((entry) => !answered.includes(entry));
      // One signal for the batch: if one decision fails, the others stop waiting too.
      const batch = new AbortController();
      const signal = options.signal === undefined ? batch.signal : AbortSignal.any([options.signal, batch.signal]);
      const settled = await Promise.allSettled(
        items.map(({ item, wrapped }) =>
          this.#decide(wrapped, item, context, signal).then(
            (decision) => {
              // A loop-detection stop ends the run: the other asks stop waiting, as for a decision that fails.
              if (decision.type === "refused" && decision.stop !== undefined) batch.abort(decision.stop);
              return decision;
            },
            (error: unknown) => {
              batch.abort(error);
              throw error;
            },
          ),
        ),
      );
      const decisions = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
      try {
        // The run ends with the stop, unresumed; the decisions it cut short were cancelled by it.
        const stop = decisions.find((decision) => decision.type === "refused" && decision.stop !== undefined);
        if (stop?.type === "refused" && stop.stop !== undefined) throw stop.stop;
        if (failed !== undefined) throw failed.reason;
        // Cancelled: nothing is applied or resumed. The resumed run would execute whatever the state approves,
        // an answer given by hand included, and run() starts nothing once cancelled either.
        if (options.signal?.aborted === true)
          throw cancelledBy(options.signal, "the run was cancelled before it resumed");
        // An answer given by hand on the state while the resolver was asked, that the resolver's contradicts: the SDK
        // lets an approval win over a refusal, so resumed, the run would run a call one of them refused.
        decisions.forEach((decision, i) => {
          const { item, wrapped } = items[i]!;
          const byHand = answerOn(context, item, wrapped);
          if (byHand === undefined || byHand === (decision.type === "approved")) return;
          throw new AgentsApprovalError(
            wrapped.descriptor.name,
            `the call ${shownText(callIdOf(item))} was ${byHand ? "approved" : "rejected"} on the RunState while the resolver was asked, and the resolver ${byHand ? "refused" : "approved"} it: the SDK would let the approval win, so the run is not resumed`,
          );
        });
        decisions.forEach((decision, i) => {
          const { item } = items[i]!;
          if (decision.type === "approved") current.state.approve(item);
          else current.state.reject(item, { message: decision.message });
        });
        // A refused interruption's call never runs, so its approval is not to be waited for: were it left, another
        // agent's call under its tool, id and arguments that the run approves (an alwaysApprove given by hand) would
        // be taken for it, and let through unasked.
        for (const { item, wrapped } of [...items, ...answered])
          if (answerOn(context, item, wrapped) === false)
            this.#approvalsOf(context).delete(unusedKey(wrapped, callIdOf(item)));
        // A streamed run executes the approved calls while it streams: they are still waited for here.
        current = await endedResult(await resume(current.state), resumedBy);
      } finally {
        // An approved call the run did not execute still ends, with its record: as the tool's failure, which
        // its gate call must see before the batch's abort below would end it as cancelled (no onToolPost).
        const ending: Promise<GateOutcome>[] = [];
        for (const decision of decisions) {
          if (decision.type !== "approved") continue;
          const open = this.#approved.get(decision.key);
          if (open !== undefined) {
            this.#approved.delete(decision.key);
            unexecuted.set(decision.callId, { wrapped: open.wrapped, arguments: open.arguments });
            open.done.reject(new AgentsApprovalError(decision.tool, "the run did not execute the approved call"));
            ending.push(decision.outcome);
          }
        }
        await Promise.allSettled(ending);
        batch.abort();
        await Promise.allSettled(decisions.map((decision) => decision.outcome));
      }
    }
    return current;
  }

  /**
   * The SDK keeps a run's approvals by call id: two calls of one run under one
   * id (a model that repeats an id in a turn, a call of the run still in
   * flight, runs that share one `RunContext`) cannot be answered apart, and
   * the approval of one would run the other. Other runs' calls are their own.
   */
  #checkCallIds(
    items: readonly { readonly item: RunToolApprovalItem; readonly wrapped: Wrapped }[],
    runId: string,
  ): void {
    const ids = new Set<string>();
    for (const { item, wrapped } of items) {
      const callId = callIdOf(item);
      if (ids.has(callId) || this.#inFlight.has(callKey(runId, callId)))
        throw new AgentsApprovalError(
          wrapped.descriptor.name,
          `the call id ${shownText(callId)} is also another call's of this run, in this turn or in flight; calls under one id cannot be answered apart`,
        );
      ids.add(callId);
    }
  }

  /**
   * An interruption for a call this settle approved, which the resumed run did
   * not execute but interrupted for again (same tool, call id and arguments):
   * the SDK did not carry the approval into the resumed run, so asking again
   * would go on for as long as someone approves. It fails before anyone is asked.
   */
  #checkNotApprovedBefore(
    items: readonly { readonly item: RunToolApprovalItem; readonly wrapped: Wrapped }[],
    unexecuted: ReadonlyMap<string, Pick<Approved, "wrapped" | "arguments">>,
  ): void {
    for (const { item, wrapped } of items) {
      const callId = callIdOf(item);
      const before = unexecuted.get(callId);
      if (before?.wrapped === wrapped && before.arguments === item.arguments)
        throw new AgentsApprovalError(
          wrapped.descriptor.name,
          `the call ${shownText(callId)} was approved, and the resumed run interrupted for it again without executing it: the SDK did not carry the approval into the resumed run (an agent tool with resumeState: { contextStrategy: "preferSerialized" } resumes its nested run from its state serialized before the approval, as does a resume from a state saved before it); it is not asked about again`,
        );
    }
  }

  /**
   * What `tool` gates, if it is a tool wrapped here or a copy of one (`toolNamespace()` copies the tools it
   * is given, with their properties, into a namespace): a copy is gated under its own namespace.
   */
  #wrappedOf(tool: unknown): Wrapped | undefined {
    if (typeof tool !== "object" || tool === null) return undefined;
    const known = this.#wrapped.get(tool);
    if (known !== undefined) return known;
    const base = this.#byInvoke.get((tool as { invoke?: object }).invoke ?? {});
    if (base === undefined || !isFunctionTool(tool)) return undefined;
    const copy = wrappedAs(base.original, namespaceOf(tool));
    this.#wrapped.set(tool, copy);
    return copy;
  }

  async #wrappedFor(item: RunToolApprovalItem, state: RunState<any, any>): Promise<Wrapped> {
    const context = state._context;
    // The item names a namespaced tool by its qualified name, as the wrapped tool's descriptor does.
    const name = item.name ?? "";
    // A hosted MCP, shell, computer or apply-patch call may bear a wrapped tool's name; it is not that tool's call.
    const { type } = item.rawItem as { type?: unknown };
    if (type !== "function_call")
      throw new AgentsApprovalError(
        name,
        `the run was interrupted for a call of type ${shownValue(type)}, which these approvals do not gate (they gate function tools wrapped by approvals.tools()); answer it on the RunState yourself (state.approve(item) or state.reject(item)) before settle, which then leaves it to that answer`,
      );
    // The tool the SDK called: of the agent's function tools of this name, the last one enabled (an agent's own
    // tools come after its MCP servers', the tools a client tool search loaded into this run after them, and the
    // last of a name wins). A disabled one of the name is another tool.
    const tools = [...((item.agent?.tools as readonly object[] | undefined) ?? []), ...loadedTools(state, item.agent)];
    let tool: object | undefined;
    for (const t of [...tools].reverse()) {
      if ((this.#wrappedOf(t)?.descriptor.name ?? (t as { name?: unknown }).name) !== name) continue;
      if ((t as { type?: unknown }).type === "function" && !(await isEnabled(t, context, item.agent))) continue;
      tool = t;
      break;
    }
    const wrapped = tool === undefined ? undefined : this.#wrappedOf(tool);
    if (wrapped === undefined)
      throw new AgentsApprovalError(
        name,
        "the run was interrupted for a tool these approvals did not wrap (pass it through approvals.tools())",
      );
    return wrapped;
  }

  /**
   * Passes an interruption through the gate. Resolves once the call is
   * refused, or approved: then the gate's call stays open, its `execute`
   * waiting for the SDK to run the tool on resume.
   */
  async #decide(
    wrapped: Wrapped,
    item: RunToolApprovalItem,
    context: RunContext<any>,
    signal: AbortSignal | undefined,
  ): Promise<
    | { type: "approved"; key: string; callId: string; tool: string; outcome: Promise<GateOutcome> }
    | { type: "refused"; message: string; stop: RunStoppedError | undefined; outcome: Promise<GateOutcome> }
  > {
    const callId = callIdOf(item);
    const runId = this.#runIdOf(context);
    const key = callKey(runId, callId);
    const tool = wrapped.descriptor.name;
    let approved!: () => void;
    const entered = new Promise<"approved">((resolve) => {
      approved = () => resolve("approved");
    });
    this.#inFlight.set(key, { wrapped, context: undefined, wantsApproval: true });
    const outcome = this.gate
      .call(
        {
          tool: wrapped.descriptor,
          callId,
          input: parseArguments(item.arguments),
          runId,
          ...(signal === undefined ? {} : { signal }),
          ...this.#session(),
        },
        (input, { signal: callSignal }) =>
          new Promise((resolve, reject) => {
            this.#approved.set(key, {
              wrapped,
              run: runOf(context),
              arguments: item.arguments,
              input,
              signal: callSignal,
              done: { resolve, reject },
              outcome: () => outcome,
            });
            approved();
          }),
      )
      .finally(() => this.#inFlight.delete(key));
    const first = await Promise.race([entered, outcome]);
    if (first === "approved") return { type: "approved", key, callId, tool, outcome };
    // Before its execute, a gate call can only end refused (or reject, on cancel).
    if (first.type !== "refused")
      throw new AgentsApprovalError(tool, `the gate ended the call as ${first.type} before it ran`);
    return { type: "refused", message: first.message, stop: first.stop, outcome };
  }

  /**
   * The SDK asks whether a call needs approval: arguments that fail the
   * tool's schema need none (the gate refuses them where the tool runs); when
   * the tool says yes, remembered grants may answer first.
   */
  async #needsApproval(
    wrapped: Wrapped,
    context: RunContext<any>,
    input: unknown,
    callId: string | undefined,
  ): Promise<boolean> {
    // Fail closed: the SDK then invokes the wrapped tool, whose gate call refuses them before its hooks and execute.
    if (failsSchema(wrapped, input)) return false;
    const wants = await wrapped.original.needsApproval(context, input, callId);
    if (!wants) return false;
    if (this.#policy !== undefined) {
      try {
        const decision = await this.#policy.decide(wrapped.descriptor, input);
        // Allow or deny: the gate decides the call, by the same grant, where it runs.
        if (decision.type !== "ask") return false;
      } catch {
        // The gate refuses the call where it runs (grant store unavailable): no one need be asked.
        return false;
      }
    }
    const unused = this.#approvalsOf(context);
    const key = unusedKey(wrapped, callId ?? "");
    // The SDK asks only when this agent's call has no answer, so an approval the run carries under the tool and
    // id is another agent's (after a handoff, or in an agent tool's nested run), and the gate reads approvals for
    // the whole run: one given for this call could not be told from it, nor could that agent's next call under
    // the id from this interruption. The gate's resolver is asked about whichever runs.
    if (context.isToolApproved({ toolName: wrapped.approvalKey, callId: callId ?? "" }) === true) {
      unused.delete(key);
      return true;
    }
    // The SDK interrupts the run for this call: an approval it is given may let it through once, as shown.
    let shown: string | undefined;
    try {
      shown = argsSha256(input);
    } catch {
      // Arguments without a JSON form: the gate refuses the call before anyone is asked.
    }
    unused.set(key, shown);
    return true;
  }

  async #invoke(wrapped: Wrapped, context: RunContext<any>, text: string, details: Details): Promise<unknown> {
    const { original, descriptor } = wrapped;
    const callId = details?.toolCall?.callId ?? "";
    const runId = this.#runIdOf(context);
    const key = callKey(runId, callId);
    const open = this.#approved.get(key);
    // The interruption's gate call, still open, if this is its call: of its tool, in the run whose state
    // approved it, with the arguments it was interrupted with, and which that state still says is approved.
    if (
      open !== undefined &&
      open.wrapped === wrapped &&
      open.run === runOf(context) &&
      open.arguments === text &&
      context.isToolApproved({ toolName: wrapped.approvalKey, callId }) === true
    ) {
      // Run exactly what was approved.
      this.#approved.delete(key);
      this.#approvalsOf(context).delete(unusedKey(wrapped, callId));
      // Cancelled (settle's signal) before the resumed run reached it: its gate call has ended, so nothing runs.
      if (open.signal.aborted) throw cancelledBy(open.signal, "the call was cancelled before the resumed run ran it");
      const signal = details?.signal === undefined ? open.signal : AbortSignal.any([details.signal, open.signal]);
      try {
        open.done.resolve(await original.invoke(context, JSON.stringify(open.input), withSignal(details, signal)));
      } catch (error) {
        open.done.reject(error);
      }
      // What the gate made of it (its middleware may withhold the output), as for a call run without an interruption.
      return this.#answer(wrapped, await open.outcome(), context, details);
    }
    // The approved call's id, in its run, with other arguments (a run state edited between its interruption and
    // its resume, or its approval and its execution): nobody approved these, and the approved ones do not run.
    if (open !== undefined && open.wrapped === wrapped && open.run === runOf(context) && open.arguments !== text)
      throw new AgentsApprovalError(
        descriptor.name,
        `the run executed the call ${shownText(callId)} with arguments other than the ones approved in its interruption; it does not run`,
      );
    // The gate's hook and resolver find a call by its run and its id: another call of the run under it, in flight
    // (an approved one waiting for its resume included), would be taken for this one.
    if (this.#inFlight.has(key))
      throw new AgentsApprovalError(
        descriptor.name,
        `the call id ${shownText(callId)} is also another call's of this run, in flight; calls under one id cannot be checked apart`,
      );
    this.#inFlight.set(key, { wrapped, context, wantsApproval: undefined });
    let outcome: GateOutcome;
    try {
      outcome = await this.gate.call(
        {
          tool: descriptor,
          callId,
          input: parseArguments(text),
          runId,
          ...(details?.signal === undefined ? {} : { signal: details.signal }),
          ...this.#session(),
        },
        (input, { signal }) => original.invoke(context, JSON.stringify(input), withSignal(details, signal)),
      );
    } catch (error) {
      // Cancelled by the SDK's own signal (its run's, a timeout's, a failed sibling's): the SDK ends a
      // cancelled run by that signal's reason, and would take a CancelledError for the tool failing the run.
      const signal = details?.signal;
      if (error instanceof CancelledError && signal?.aborted === true) throw signal.reason;
      throw error;
    } finally {
      this.#inFlight.delete(key);
    }
    return this.#answer(wrapped, outcome, context, details);
  }

  /**
   * What the SDK gets for a call the gate ended with `outcome`: the tool's output, its error, or the refusal.
   * `context` and `details` are the ones the SDK invoked the wrapped tool with.
   */
  async #answer(
    { original, descriptor }: Wrapped,
    outcome: GateOutcome,
    context: RunContext<any>,
    details: Details,
  ): Promise<unknown> {
    switch (outcome.type) {
      case "ran":
        return outcome.output;
      case "failed":
        throw outcome.error;
      case "refused": {
        // A loop-detection stop ends the run (the SDK fails it with this error), not just this call.
        if (outcome.stop !== undefined) throw outcome.stop;
        if (original.outputSchema === undefined) return outcome.message;
        // A tool with an output schema cannot answer with free text: its errorFunction answers for it, as the
        // tool's own invoke has it answer for its failures (the SDK's runner does not call it for a thrown
        // error), its fallback checked against the output schema; without one, the SDK fails the run.
        const refusal = new AgentsApprovalError(descriptor.name, outcome.message);
        const fallback: unknown = original.errorFunction;
        if (typeof fallback !== "function") throw refusal;
        return checkedOutput(original, await (fallback as ErrorFunction)(context, refusal, details), context, details);
      }
    }
  }

  /**
   * The hook that brings the SDK's `needsApproval` into the gate: a call it
   * wants approved asks. It runs after the application's hooks whenever they
   * allow or modify, on the arguments the call goes on with (a modified call
   * is asked about as modified).
   */
  #approvalHook(): Hook {
    return {
      name: "openai-agents:needsApproval",
      preToolUse: async (call, { runId }) => {
        const entry = this.#inFlight.get(callKey(runId, call.id));
        if (entry === undefined) return { type: "allow" };
        const wants =
          entry.wantsApproval ?? (await entry.wrapped.original.needsApproval(entry.context!, call.input, call.id));
        return wants
          ? { type: "ask", prompt: callPrompt(entry.wrapped.descriptor, call.input, this.#prompt) }
          : { type: "allow" };
      },
    };
  }

  /**
   * The gate's resolver: a call the SDK's run state approved after its
   * interruption here is approved, once, when it is asked about with the
   * arguments it was interrupted with; every other ask goes to the resolver.
   */
  #resolve(
    ask: Parameters<AskResolver["resolve"]>[0],
    options: Parameters<AskResolver["resolve"]>[1],
  ): Promise<AskResolution> {
    const { callId } = ask;
    const entry = this.#inFlight.get(callKey(ask.runId, callId));
    if (entry?.context?.isToolApproved({ toolName: entry.wrapped.approvalKey, callId }) === true) {
      const unused = this.#approvalsOf(entry.context);
      const key = unusedKey(entry.wrapped, callId);
      const shown = unused.get(key);
      if (unused.delete(key) && shown !== undefined && shown === ask.argsSha256)
        return Promise.resolve({ type: "approve" });
    }
    // Its answer is returned unchanged: an ApprovalChannel's is the park's as its approver is told `true`.
    handOverPark(options, this.#gateResolver, this.#resolver);
    return this.#resolver.resolve(ask, options);
  }

  /** The run id calls on `context` are gated under (the managers' id generator makes it, once per run). */
  #runIdOf(context: RunContext<any>): string {
    const run = runOf(context);
    let runId = this.#runIds.get(run);
    if (runId === undefined) {
      runId = checkedId(this.#idGen());
      this.#runIds.set(run, runId);
      this.#runsEnded.register(run, runId);
    }
    return runId;
  }

  /** The calls interrupted in `context`'s run whose approval no call has used yet ({@link unusedKey}), with the sha256 of their arguments. */
  #approvalsOf(context: RunContext<any>): Map<string, string | undefined> {
    return ofRun(this.#unusedApprovals, context);
  }

  #session(): { sessionId?: string } {
    return this.#sessionId === undefined ? {} : { sessionId: this.#sessionId };
  }
}
