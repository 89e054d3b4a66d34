import { setMaxListeners } from "node:events";
import type { ToolDescriptor } from "../grant/index.js";
import { TEXTS } from "./attempt.js";
import { checkBudget } from "./budget.js";
import {
  CancelledError,
  EngineConfigError,
  ModelError,
  RunConfigError,
  RunStoppedError,
  ToolDefinitionError,
  attachTranscript,
  describeError,
  knownKeys,
  readingConfig,
} from "./errors.js";
import { Gate, agentTool, attemptThrough, beginRun } from "./gate.js";
import type { GateOutcome, GatedTool } from "./gate.js";
import { LoopManagers, settingsOf } from "./managers.js";
import type { ManagerSettings } from "./managers.js";
import { MessageSchema, ModelResponseSchema } from "./model.js";
import { shownKey } from "../unknown-option.js";
import type {
  AssistantMessage,
  Message,
  Model,
  ModelRequest,
  ModelResponse,
  ToolCall,
  ToolResultMessage,
  ToolResultStatus,
  Usage,
} from "./model.js";
import { notify } from "./observer.js";
import { readOnlyView } from "./read-only-view.js";
import { timestamp } from "./records-slot.js";
import type { GateDecision } from "./records.js";
import { CANCELLED, Cancel, callerSignal, cancelledBy, followShared } from "./signals.js";
import { isSnapshot, keptJson, snapshot } from "./snapshot.js";
import type { NotJson, Snapshot } from "./snapshot.js";
import { checkedId, randomIdGen } from "./ids.js";
import { zodIssuesLine } from "../zod-issues.js";
import { isTool } from "./tool.js";
import type { Tool } from "./tool.js";

/** A live set of tools, read at the start of every model turn (an MCP toolset is one). */
export interface ToolSource {
  /**
   * The tools now, synchronously. A throw, or anything but an array of
   * tools (two sharing a name, one whose `name` is not its
   * `descriptor.name`), stops the run with a `RunConfigError` naming
   * `ToolSource.current` (which keeps the run's records and transcript).
   */
  current(): readonly Tool[];
}

/** What `new Agent(…)` takes. */
export interface AgentOptions {
  readonly model: Model;
  /** The tools: an array, or a {@link ToolSource} read at the start of each turn. */
  readonly tools: readonly Tool[] | ToolSource;
  /** @default new LoopManagers() */
  readonly managers?: LoopManagers;
  /** The system prompt, handed to the model with every request; not blank (leave it out for none). */
  readonly instructions?: string;
}

/** Options of {@link Agent.run}. */
export interface RunOptions {
  /** Cancels the run: it rejects with {@link CancelledError}. */
  readonly signal?: AbortSignal;
}

/** What a finished run resolves to. */
export interface RunResult {
  /** The transcript: the messages the run started from, every assistant turn and every tool result. */
  readonly messages: readonly Message[];
  /** Every gate record of the run, in emission order. */
  readonly records: readonly GateDecision[];
  /** Tokens summed over the run's model turns. */
  readonly usage: Usage;
  /** Model requests made. */
  readonly turns: number;
  /** The final assistant text (`""` when the model gave none). */
  readonly text: string;
  readonly sessionId: string;
  readonly runId: string;
}

/** A tool of one turn: the tool, and the gate's view of it (its descriptor, read once). */
interface TurnTool {
  readonly tool: Tool;
  readonly gated: GatedTool;
}

/** The tools of one turn, by name, and what the model is shown of them. */
interface Toolset {
  readonly byName: ReadonlyMap<string, TurnTool>;
  readonly descriptors: readonly ToolDescriptor[];
}

/**
 * The tools of one turn, checked: each a tool whose name is its descriptor's
 * name (the name the model calls it by, the records and asks show, and the
 * grants are kept under), no two sharing one.
 */
function toolset(tools: readonly Tool[]): Toolset {
  if (!Array.isArray(tools))
    throw new EngineConfigError("Agent", "tools must be an array or a ToolSource ({ current(): Tool[] })");
  const byName = new Map<string, TurnTool>();
  for (const tool of tools as readonly unknown[]) {
    if (!isTool(tool)) {
      const name = (tool as { name?: unknown } | null)?.name;
      throw new ToolDefinitionError(typeof name === "string" ? name : "", "not a tool made by defineTool");
    }
    const gated = agentTool(tool);
    if (byName.has(gated.name))
      throw new ToolDefinitionError(gated.name, "the name is used by another tool of this agent");
    byName.set(gated.name, { tool, gated });
  }
  return { byName, descriptors: Object.freeze([...byName.values()].map(({ gated }) => gated.descriptor)) };
}

/** What `value` is, for an error message. */
function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (value instanceof Promise) return "a Promise (current() must not be async)";
  const type = typeof value;
  return type === "object" ? "an object" : type === "undefined" ? "undefined" : `a ${type}`;
}

/** What the model receives for a tool result's output: a string as is, anything else as JSON. */
function toContent(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  const text = JSON.stringify(value);
  if (typeof text !== "string") throw new TypeError("the tool's result has no JSON form");
  return text;
}

/** One tool call's arguments: as the model sent them, and the gate's reading of them. */
interface ReadArguments {
  readonly sent: unknown;
  readonly read: Snapshot | NotJson;
}

/**
 * A tool call for the transcript, its arguments read into the gate's frozen
 * snapshot, and that reading. Arguments that are not JSON values (a cycle, a
 * BigInt) are left out (`input: undefined`): the gate refuses the call, and
 * the transcript stays JSON, for a provider to serialise and a caller to store.
 */
function readCall(id: string, name: string, input: unknown): { readonly call: ToolCall } & ReadArguments {
  const read = snapshot(input);
  return { call: Object.freeze({ id, name, input: isSnapshot(read) ? read.value : undefined }), sent: input, read };
}

function frozenAssistant(
  text: string | undefined,
  toolCalls: readonly ToolCall[],
  providerData: unknown,
): AssistantMessage {
  const message: { type: "assistant"; text?: string; toolCalls: readonly ToolCall[]; providerData?: unknown } = {
    type: "assistant",
    toolCalls: Object.freeze(toolCalls),
  };
  if (text !== undefined) message.text = text;
  if (providerData !== undefined) message.providerData = providerData;
  return Object.freeze(message);
}

/**
 * Checks that earlier messages pair each call with its result, as a
 * provider requires: every result answers one earlier call (of the same
 * tool), once; no two calls share an id; and every call of an assistant
 * message is answered by the `tool_result` messages right after it (in any
 * order), before any other message or the end. The calls of a transcript
 * are history (a run does not carry them out), so a call without a result
 * has no meaning a run could give it: a provider would refuse the request.
 * @throws {EngineConfigError} naming the message at fault (and the call).
 */
function checkPairing(messages: readonly Message[]): void {
  const fault = (text: string): EngineConfigError => new EngineConfigError("Agent.run", text);
  /** Every call so far, by id: its tool, and whether its result came. */
  const calls = new Map<string, { readonly tool: string; answered: boolean }>();
  /** The last assistant message's calls not answered yet, by id (their tool), and its index. */
  let open: { readonly index: number; readonly calls: Map<string, string> } | undefined;
  const close = (before: number | undefined): void => {
    const first = open?.calls.entries().next();
    if (open === undefined || first === undefined || first.done === true) return;
    const [id, tool] = first.value;
    const where = before === undefined ? "after it" : `before messages[${before}]`;
    throw fault(
      `messages[${open.index}]: call ${shownKey(id)} of tool ${shownKey(tool)} has no result ${where} (each call needs a tool_result right after its assistant message)`,
    );
  };
  messages.forEach((message, index) => {
    if (message.type !== "tool_result") {
      close(index);
      open = undefined;
    }
    if (message.type === "assistant") {
      const unanswered = new Map<string, string>();
      for (const call of message.toolCalls) {
        if (calls.has(call.id))
          throw fault(`messages[${index}] reuses the id of an earlier call (${shownKey(call.id)})`);
        calls.set(call.id, { tool: call.name, answered: false });
        unanswered.set(call.id, call.name);
      }
      open = { index, calls: unanswered };
    } else if (message.type === "tool_result") {
      const call = calls.get(message.callId);
      if (call === undefined)
        throw fault(`messages[${index}] is the result of no earlier call (${shownKey(message.callId)})`);
      if (call.answered) throw fault(`messages[${index}] is a second result of call ${shownKey(message.callId)}`);
      if (call.tool !== message.tool)
        throw fault(
          `messages[${index}] is the result of call ${shownKey(message.callId)} of tool ${shownKey(call.tool)}, not of ${shownKey(message.tool)}`,
        );
      call.answered = true;
      open?.calls.delete(message.callId);
    }
  });
  close(undefined);
}

/** Whether `text` holds nothing but white space: no prompt at all. */
const isBlank = (text: string): boolean => text.trim() === "";

/** Earlier messages a run starts from, parsed and frozen (tool-call arguments included). */
function startingMessages(input: readonly Message[]): Message[] {
  const entries = readingConfig("Agent.run", "messages", () => Array.from(input as readonly unknown[]));
  // Nothing for the model to answer: a provider refuses a request without messages, instructions or not.
  if (entries.length === 0)
    throw new EngineConfigError(
      "Agent.run",
      "messages is empty: a run starts from the user's text or from earlier messages (instructions are not a message)",
    );
  const messages = entries.map((raw, index): Message => {
    // A message whose reads throw (a proxy, a getter) is not a message either.
    const parsed = readingConfig("Agent.run", `messages[${index}]`, () => MessageSchema.safeParse(raw));
    if (!parsed.success)
      throw new EngineConfigError(
        "Agent.run",
        `messages[${index}] is not a message: ${parsed.error.issues[0]?.message ?? "invalid"}`,
      );
    const message = parsed.data;
    // A result that says two things: a model adapter may read either, and the model be told the other.
    if (message.type === "tool_result" && message.isError !== (message.status !== "ran"))
      throw new EngineConfigError(
        "Agent.run",
        `messages[${index}] has status '${message.status}' but isError ${message.isError} (isError must be status !== "ran")`,
      );
    // The user's text says what the run is for: a blank one says nothing, as a blank prompt does.
    if (message.type === "user" && isBlank(message.text))
      throw new EngineConfigError("Agent.run", `messages[${index}] is a user message with no text`);
    if (message.type !== "assistant") return message;
    // The caller's own object stays the caller's: the run keeps a frozen copy, taken once.
    let providerData: unknown;
    if (message.providerData !== undefined) {
      const kept = keptJson(message.providerData);
      if (!("value" in kept))
        throw new EngineConfigError("Agent.run", `messages[${index}].providerData is not JSON: ${kept.problem}`);
      providerData = kept.value;
    }
    return frozenAssistant(
      message.text,
      message.toolCalls.map((call) => readCall(call.id, call.name, call.input).call),
      providerData,
    );
  });
  // A transcript of ours always holds the user's text it began from; without one the model is asked to answer
  // nobody (and a provider may refuse a conversation that does not open with the user).
  if (!messages.some((message) => message.type === "user"))
    throw new EngineConfigError(
      "Agent.run",
      "messages holds no user message: a run answers the user, so earlier messages must include the user's text",
    );
  checkPairing(messages);
  return messages;
}

/** `new Agent`'s options, each read once and checked. */
function agentOptions(options: AgentOptions): {
  model: Model;
  tools: Toolset | ToolSource;
  managers: LoopManagers;
  instructions: string | undefined;
} {
  knownKeys("Agent", options, ["model", "tools", "managers", "instructions"], {
    shape: "{ model, tools, managers?, instructions? }",
    caps: true,
  });
  const { model, tools, managers = new LoopManagers(), instructions } = options;
  if (typeof model !== "object" || model === null || typeof model.generate !== "function") {
    throw new EngineConfigError("Agent", "model must have a generate(request) method");
  }
  if (!(managers instanceof LoopManagers)) throw new EngineConfigError("Agent", "managers must be a LoopManagers");
  if (instructions !== undefined && typeof instructions !== "string")
    throw new EngineConfigError("Agent", "instructions must be a string");
  // A system prompt that says nothing would be sent with every request: leave it out instead.
  if (instructions !== undefined && isBlank(instructions))
    throw new EngineConfigError(
      "Agent",
      "instructions is an empty system prompt: give text that says something, or leave instructions out",
    );
  const isSource =
    typeof tools === "object" &&
    tools !== null &&
    !Array.isArray(tools) &&
    typeof (tools as ToolSource).current === "function";
  return {
    model,
    tools: isSource ? (tools as ToolSource) : toolset(tools as readonly Tool[]),
    managers,
    instructions,
  };
}

/**
 * An agent loop around a {@link Gate}: asks the model for a turn, passes
 * every tool call it made through the gate, hands the results back, and
 * repeats until the model stops calling tools or the turn cap is reached
 * (`DEFAULT_MAX_TURNS`, 20 model requests, unless `withBudget` says
 * otherwise). No approval logic lives here: the gate decides every call.
 *
 * One `Agent` is one session (`sessionId`) and has one gate: circuit-breaker
 * state outlives a run; loop-detection counts are per run. Messages are
 * frozen and shared from turn to turn, never copied, and the model and
 * observers are handed one read-only view of the transcript, so a turn
 * costs the same however long the transcript is.
 *
 * @throws {ToolDefinitionError} when two tools share a name, or a tool made
 *   by hand is named otherwise than its descriptor (or has no descriptor
 *   with a non-empty name): the message names the tool and both names.
 * @throws {EngineConfigError} on a missing model, an option it does not
 *   have (named, never ignored), tools that are neither an array nor a `ToolSource`, managers that are not a `LoopManagers`,
 *   `instructions` that are not a string or are blank (`""`, white space only), an id
 *   generator that does not return UUIDs, or options that cannot be read (a
 *   getter that throws, a revoked proxy; `cause`: what was thrown).
 *
 * @example
 * ```ts
 * const agent = new Agent({ model, tools: [readFile], managers, instructions: "Be brief." });
 * const { text, records } = await agent.run("summarise README.md");
 * ```
 */
export class Agent {
  /** The session id all runs of this agent share. */
  readonly sessionId: string;
  /** The gate every tool call of this agent passes through. */
  readonly gate: Gate;
  readonly #model: Model;
  readonly #tools: Toolset | ToolSource;
  readonly #settings: ManagerSettings;
  readonly #instructions: string | undefined;
  /** The ids of this agent's runs still running: loop counts are kept per run id, so no two may share one. */
  readonly #liveRuns = new Set<string>();

  constructor(options: AgentOptions) {
    // Options whose reads throw (a getter, a revoked proxy) are not options either.
    const { model, tools, managers, instructions } = readingConfig("Agent", "the options", () => agentOptions(options));
    this.#tools = tools;
    this.#model = model;
    this.#settings = settingsOf(managers);
    this.#instructions = instructions;
    this.gate = new Gate(managers);
    this.sessionId = this.#newId();
  }

  /**
   * Runs the loop from `input` (the user's text, or earlier messages to go
   * on from) until the model answers without tool calls.
   *
   * Rejects with a {@link RunStoppedError} subclass (carrying the records
   * and transcript so far): `CancelledError` when `signal` aborts,
   * `LoopDetectedError`, `BudgetExceededError` (the turn cap included),
   * `ModelError` when the model throws or answers garbage, or
   * `RunConfigError` when a `ToolSource` or the id generator fails.
   *
   * @throws {EngineConfigError} when `input` is neither a string nor an array
   *   of messages or cannot be read, is a blank string (`""`, white space
   *   only), is an empty array, holds no user message or one whose text is
   *   blank, or its calls and results do not pair up
   *   (a call without a result right after its message, a result of no
   *   earlier call, two calls sharing an id: the message names the index and call), or `options.signal` is not an `AbortSignal` or cannot be
   *   listened to (its `addEventListener` throws; `cause`: what was thrown),
   *   or `options` cannot be read (a getter that throws; `cause`: what it threw)
   *   or hold a key other than `signal` (named, never ignored).
   */
  async run(input: string | readonly Message[], options: RunOptions = {}): Promise<RunResult> {
    let messages: Message[];
    // A revoked proxy: not even its kind can be read.
    const listed = readingConfig("Agent.run", "messages", () => Array.isArray(input));
    if (typeof input === "string") {
      if (isBlank(input))
        throw new EngineConfigError("Agent.run", "input is an empty prompt: the user's text must say something");
      messages = [Object.freeze({ type: "user", text: input })];
    } else if (listed) messages = startingMessages(input);
    else throw new EngineConfigError("Agent.run", "input must be the user's text or an array of messages");
    // The signal handed in place of its options has no keys of its own: it would cancel nothing, unsaid.
    readingConfig("Agent.run", "the options", () =>
      knownKeys("Agent.run", options, ["signal"], { shape: "{ signal? }", caps: true }),
    );
    const signal: unknown = readingConfig("Agent.run", "the options", () => options.signal);
    const caller = callerSignal("Agent.run", signal);
    // What the model and observers see: the run's transcript as it grows, which they cannot change.
    const shown = readOnlyView(messages);
    const settings = this.#settings;
    let runId: string;
    try {
      runId = this.#runId();
      if (this.#liveRuns.has(runId))
        throw new RunConfigError(
          "withIdGen",
          `the id generator gave the id of a run still running ('${runId}'): it must give a fresh UUID each call`,
        );
    } catch (thrown) {
      // Stopped before its first turn: its transcript so far is the input it was given.
      if (thrown instanceof RunStoppedError) attachTranscript(thrown, [], messages);
      throw thrown;
    }
    const records: GateDecision[] = [];
    const onRecord = (record: GateDecision): void => {
      records.push(record);
    };
    // One controller per run, aborted by the caller's cancel or by a call
    // that ends the run while others of its wave still run. When neither can
    // happen (no caller signal, one call at a time), its waits need no race.
    // The runs in flight on one caller signal (a server's shutdown signal) give it one listener between them.
    const followed = caller === undefined ? undefined : followShared(caller, "Agent.run");
    const cancel = followed?.cancel ?? Cancel.owned(settings.maxConcurrency > 1);
    // Every call of the run, and its tool, may listen to the run's one signal, over every turn, one at a
    // time or a wide wave at once: a long run is normal, not a leak. The listeners go with the run.
    setMaxListeners(0, cancel.signal);
    let usage: Usage = { inputTokens: 0, outputTokens: 0 };
    let turns = 0;
    // The ids of every call in the transcript: a call of this run never takes one of them.
    const callIds = new Set(messages.flatMap((m) => (m.type === "assistant" ? m.toolCalls.map((c) => c.id) : [])));
    const liveRuns = this.#liveRuns;
    liveRuns.add(runId);
    // Its loop counts are kept until the run ends, however many other runs of this agent are live meanwhile.
    beginRun(this.gate, runId);
    try {
      for (;;) {
        if (cancel.aborted) throw cancelledBy(cancel.signal);
        const overBudget = checkBudget(settings.budget, turns, usage);
        if (overBudget !== undefined) {
          const record: GateDecision = Object.freeze({
            tool: "",
            argsDigest: "",
            argsSha256: "",
            verdict: "deny",
            ruleId: "budget.hard",
            ruleSource: "engine",
            matchedPattern: null,
            reason: overBudget.message,
            ts: timestamp(settings.clock),
          });
          onRecord(record);
          notify(settings.observers, settings.observerErrorHandler, "onGate", {
            turn: turns,
            callId: "",
            decision: record,
          });
          throw overBudget;
        }
        const turn = turns;
        const tools = this.#toolsNow();
        const { response, reads } = await this.#generate(turn, shown, tools, cancel, callIds);
        turns += 1;
        if (response.usage !== undefined) {
          usage = {
            inputTokens: usage.inputTokens + response.usage.inputTokens,
            outputTokens: usage.outputTokens + response.usage.outputTokens,
          };
        }
        const calls = response.toolCalls;
        messages.push(frozenAssistant(response.text, calls, response.providerData));
        if (calls.length === 0)
          return { messages, records, usage, turns, text: response.text ?? "", sessionId: this.sessionId, runId };
        const { results, stop } = await this.#wave(calls, reads, tools, turn, runId, cancel, onRecord);
        for (const result of results) messages.push(result);
        if (stop !== undefined) throw stop;
      }
    } catch (thrown) {
      if (thrown instanceof RunStoppedError) attachTranscript(thrown, records, messages);
      throw thrown;
    } finally {
      if (followed === undefined) cancel.dispose();
      else followed.release();
      this.gate.endRun(runId);
      liveRuns.delete(runId);
    }
  }

  #newId(): string {
    const { idGen } = this.#settings;
    let id: string;
    try {
      id = idGen();
    } catch (thrown) {
      throw new EngineConfigError("withIdGen", `the id generator failed: ${describeError(thrown)}`, { cause: thrown });
    }
    // The default generator's ids are UUIDs by construction.
    return idGen === randomIdGen ? id : checkedId(id);
  }

  /**
   * An id made during a run: a generator that fails there stops the run
   * with a `RunConfigError`, which keeps what the run made.
   */
  #runId(): string {
    try {
      return this.#newId();
    } catch (thrown) {
      // #newId fails only with an EngineConfigError naming its option: the same words, now as a run stop.
      const failure = thrown as EngineConfigError;
      throw new RunConfigError(
        failure.option,
        failure.message.slice(`${failure.option}: `.length),
        failure.cause === undefined ? undefined : { cause: failure.cause },
      );
    }
  }

  /**
   * A generated call id no call of the transcript holds (`taken`, which it
   * joins): a model may have given the id a seeded generator gives next. A
   * generator that gives an id it gave before stops the run with a
   * `RunConfigError`, as one that fails does.
   */
  #callId(taken: Set<string>): string {
    const drawn = new Set<string>();
    for (;;) {
      const id = `call_${this.#runId()}`;
      if (!taken.has(id)) {
        taken.add(id);
        return id;
      }
      if (drawn.has(id))
        throw new RunConfigError(
          "withIdGen",
          `the id generator gave an id it had given before ('${id.slice("call_".length)}'): it must give a fresh UUID each call`,
        );
      drawn.add(id);
    }
  }

  /**
   * The tools of this turn: the array given, or what the source holds now.
   * A source that fails stops the run with a `RunConfigError`, which keeps
   * the records and transcript of the turns before.
   */
  #toolsNow(): Toolset {
    const source = this.#tools;
    if (!("current" in source)) return source;
    let tools: unknown;
    try {
      tools = source.current();
    } catch (thrown) {
      throw new RunConfigError("ToolSource.current", `the tool source failed: ${describeError(thrown)}`, {
        cause: thrown,
      });
    }
    if (!Array.isArray(tools))
      throw new RunConfigError("ToolSource.current", `current() must return an array of tools, got ${kindOf(tools)}`);
    try {
      return toolset(tools as readonly Tool[]);
    } catch (thrown) {
      // An array whose reads throw (a proxy, a getter) is not a list of tools either.
      const what =
        thrown instanceof ToolDefinitionError
          ? "the tools it returned are not valid"
          : "the tools it returned cannot be read";
      throw new RunConfigError("ToolSource.current", `${what}: ${describeError(thrown)}`, { cause: thrown });
    }
  }

  /** One model turn, parsed, with each tool call's arguments read once (the gate goes on from that reading). */
  async #generate(
    turn: number,
    messages: readonly Message[],
    tools: Toolset,
    cancel: Cancel,
    callIds: Set<string>,
  ): Promise<{ response: ModelResponse; reads: readonly ReadArguments[] }> {
    const settings = this.#settings;
    notify(settings.observers, settings.observerErrorHandler, "onModelRequest", {
      turn,
      messages,
      tools: tools.descriptors,
    });
    const signal = cancel.signal;
    const request: ModelRequest =
      this.#instructions === undefined
        ? { messages, tools: tools.descriptors, signal }
        : { instructions: this.#instructions, messages, tools: tools.descriptors, signal };
    // A cancel that came while the turn was prepared (the tool source, an observer) sends no request.
    if (cancel.aborted) throw cancelledBy(signal);
    let raw: unknown;
    try {
      raw = await cancel.race(Promise.resolve(this.#model.generate(request)));
    } catch (thrown) {
      // Only the run's signal says the run was cancelled: a CancelledError the model throws of its own
      // (a nested run's, say) is a model failure like any other.
      if (cancel.aborted) throw cancelledBy(signal);
      throw new ModelError(`the model failed on turn ${turn}: ${describeError(thrown)}`, { cause: thrown });
    }
    if (raw === CANCELLED) throw cancelledBy(signal);
    let parsed: ReturnType<typeof ModelResponseSchema.safeParse> | undefined;
    try {
      parsed = ModelResponseSchema.safeParse(raw);
    } catch (thrown) {
      // An answer whose reads throw (a proxy, a getter) is not a model response either.
      throw new ModelError(`the model answered turn ${turn} with something that is not a model response`, {
        cause: thrown,
      });
    }
    if (!parsed.success) {
      throw new ModelError(
        `the model answered turn ${turn} with something that is not a model response: ${zodIssuesLine(parsed.error)}`,
        { cause: parsed.error },
      );
    }
    // Copied and frozen once, this turn's only: later turns show the model what it sent, whoever holds its object.
    let providerData: unknown;
    if (parsed.data.providerData !== undefined) {
      const kept = keptJson(parsed.data.providerData);
      if (!("value" in kept))
        throw new ModelError(`the model answered turn ${turn} with providerData that is not JSON: ${kept.problem}`);
      providerData = kept.value;
    }
    // A model that gives no id (some providers do not) gets one; results are matched to calls by it.
    const sent = parsed.data.toolCalls;
    const given = new Set<string>();
    for (const { id } of sent) {
      if (id === "") continue;
      if (given.has(id))
        throw new ModelError(`the model answered turn ${turn} with two tool calls sharing an id (${shownKey(id)})`);
      given.add(id);
    }
    // An id the transcript already holds (a model that numbers its calls anew each turn) gets a fresh one too:
    // a result must answer exactly one call. The ids kept are taken first, so a generated id takes none of them.
    const keeps = sent.map((call) => call.id !== "" && !callIds.has(call.id));
    sent.forEach((call, index) => {
      if (keeps[index]) callIds.add(call.id);
    });
    const read = sent.map((call, index) =>
      readCall(keeps[index] ? call.id : this.#callId(callIds), call.name, call.input),
    );
    const toolCalls = Object.freeze(read.map((r) => r.call));
    const { text, usage } = parsed.data;
    // Frozen before any observer sees it: the run acts on this answer, and no observer may change it.
    const response: ModelResponse = Object.freeze({ text, toolCalls, usage, providerData });
    notify(settings.observers, settings.observerErrorHandler, "onModelResponse", { turn, response });
    return { response, reads: read };
  }

  /**
   * Runs one turn's calls through the gate, at most `maxConcurrency` at a
   * time. The first call that ends the run (a loop stop) aborts the run's
   * cancel, which cancels the calls still running; results come back in call
   * order, one for every call: a call the stop ended without an outcome gets
   * one saying it did not run, or may have.
   */
  async #wave(
    calls: readonly ToolCall[],
    reads: readonly ReadArguments[],
    tools: Toolset,
    turn: number,
    runId: string,
    cancel: Cancel,
    onRecord: (record: GateDecision) => void,
  ): Promise<{ results: ToolResultMessage[]; stop: RunStoppedError | undefined }> {
    const { sessionId } = this;
    const signal = cancel.signal;
    const outcomes: (GateOutcome | undefined)[] = calls.map(() => undefined);
    // Whether each call's tool was started: a call the stop interrupts may have done its work only then.
    const started = calls.map(() => false);
    let stop: RunStoppedError | undefined;
    let next = 0;
    const worker = async (): Promise<void> => {
      while (stop === undefined && !signal.aborted && next < calls.length) {
        const index = next;
        next += 1;
        const call = calls[index]!;
        const found = tools.byName.get(call.name);
        const tool = found?.tool;
        try {
          const outcome = await attemptThrough(this.gate, {
            tool: found?.gated,
            name: call.name,
            callId: call.id,
            // Observers see the call as the model sent it; the gate goes on from the reading.
            input: reads[index]!.sent,
            read: reads[index]!.read,
            cancel,
            sessionId,
            runId,
            turn,
            onRecord,
            // The tool's own result, so the gate sees the moment it settles; made content after that.
            execute: (input, options) => {
              started[index] = true;
              return tool!.execute(input, { signal: options.signal, callId: call.id, turn, sessionId, runId });
            },
            output: toContent,
          });
          outcomes[index] = outcome;
          if (outcome.type === "refused" && outcome.stop !== undefined) {
            stop ??= outcome.stop;
            cancel.abort(outcome.stop);
          }
        } catch (thrown) {
          if (!(thrown instanceof CancelledError)) {
            stop ??= new ModelError(`tool call failed: ${describeError(thrown)}`, { cause: thrown });
            cancel.abort(thrown);
          }
        }
      }
    };
    const workers = Math.min(this.#settings.maxConcurrency, calls.length);
    if (workers === 1) await worker();
    else await Promise.all(Array.from({ length: workers }, worker));
    if (stop === undefined && signal.aborted) stop = cancelledBy(signal);
    // Every call gets its result, so a transcript the stop keeps pairs each call as providers require: a call
    // the stop came before did not run (refused); one whose tool had started and not returned may have (failed).
    const results: ToolResultMessage[] = [];
    outcomes.forEach((outcome, index) => {
      const call = calls[index]!;
      let content: string;
      let status: ToolResultStatus;
      if (outcome !== undefined) {
        content = outcome.type === "ran" ? (outcome.output as string) : outcome.message;
        status = outcome.type;
      } else if (started[index]) {
        content = TEXTS.stoppedWhileRunning(call.name);
        status = "failed";
      } else {
        content = TEXTS.stoppedBeforeRun(call.name);
        status = "refused";
      }
      results.push(
        Object.freeze({
          type: "tool_result",
          callId: call.id,
          tool: call.name,
          content,
          status,
          isError: status !== "ran",
        }),
      );
    });
    return { results, stop };
  }
}
