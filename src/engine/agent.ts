import { GrantPolicy } from "../grant/index.js";
import type { ToolDescriptor } from "../grant/index.js";
import { checkBudget } from "./budget.js";
import { CircuitBreaker } from "./breaker.js";
import {
  CancelledError,
  EngineConfigError,
  ModelError,
  RunStoppedError,
  ToolDefinitionError,
  attachTranscript,
  describeError,
} from "./errors.js";
import { attempt } from "./gate.js";
import type { AttemptOutcome, RunState } from "./gate.js";
import { LoopDetector } from "./loop-detector.js";
import { LoopManagers } from "./managers.js";
import type { Message, Model, ModelResponse, ToolCall, ToolResultMessage, Usage } from "./model.js";
import { ModelResponseSchema, modelResponse } from "./model.js";
import { notify } from "./observer.js";
import { snapshotMessages } from "./transcript.js";
import type { GateDecision } from "./records.js";
import { IdleSignal, RunSignal, cancelledBy, linkedSignal, raceAbort } from "./signals.js";
import type { Tool } from "./tool.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** What `new Agent(…)` takes. */
export interface AgentOptions {
  readonly model: Model;
  readonly tools: readonly Tool[];
  /** @default new LoopManagers() */
  readonly managers?: LoopManagers;
}

/** Options of {@link Agent.run}. */
export interface RunOptions {
  /** Cancels the run: it rejects with {@link CancelledError}. */
  readonly signal?: AbortSignal;
}

/** What a finished run resolves to. */
export interface RunResult {
  /** The transcript: the user's text, every assistant turn and every tool result. */
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

/**
 * An agent loop: asks the model for a turn, gates and dispatches the tool
 * calls it made, hands the results back, and repeats until the model stops
 * calling tools. Every tool call passes through the approvals gate configured
 * in its {@link LoopManagers}.
 *
 * One `Agent` is one session (`sessionId`); each `run` gets its own `runId`.
 * Circuit-breaker state is per `Agent` (tool health outlives a run);
 * loop-detection counts are per run.
 *
 * @throws {ToolDefinitionError} when two tools share a name.
 * @throws {EngineConfigError} on a missing model, tools that are not an array,
 *   managers that are not a `LoopManagers`, or an id generator that does not return UUIDs.
 *
 * @example
 * ```ts
 * const agent = new Agent({ model, tools: [readFile], managers });
 * const { text, records } = await agent.run("summarise README.md");
 * ```
 */
export class Agent {
  /** The session id all runs of this agent share. */
  readonly sessionId: string;
  readonly #model: Model;
  readonly #tools: ReadonlyMap<string, Tool>;
  readonly #descriptors: readonly ToolDescriptor[];
  readonly #managers: LoopManagers;
  readonly #breaker: CircuitBreaker | undefined;
  readonly #grantPolicy: GrantPolicy | undefined;
  readonly #idleSignal = new IdleSignal();

  constructor(options: AgentOptions) {
    if (typeof options !== "object" || options === null) throw new EngineConfigError("Agent", "options must be { model, tools, managers? }");
    const { model, tools, managers = new LoopManagers() } = options;
    if (typeof model !== "object" || model === null || typeof model.generate !== "function") {
      throw new EngineConfigError("Agent", "model must have a generate(request) method");
    }
    if (!Array.isArray(tools)) throw new EngineConfigError("Agent", "tools must be an array");
    if (!(managers instanceof LoopManagers)) throw new EngineConfigError("Agent", "managers must be a LoopManagers");
    const byName = new Map<string, Tool>();
    for (const tool of tools) {
      if (typeof tool !== "object" || tool === null || typeof tool.name !== "string" || typeof tool.check !== "function") {
        throw new ToolDefinitionError(String((tool as { name?: unknown } | null)?.name ?? ""), "not a tool made by defineTool");
      }
      if (byName.has(tool.name)) throw new ToolDefinitionError(tool.name, "the name is used by another tool of this agent");
      byName.set(tool.name, tool);
    }
    const settings = managers.settings;
    this.#model = model;
    this.#tools = byName;
    this.#descriptors = [...byName.values()].map((tool) => tool.descriptor);
    this.#managers = managers;
    this.#breaker = settings.circuitBreaker === undefined ? undefined : new CircuitBreaker(settings.circuitBreaker);
    this.#grantPolicy = settings.grantStore === undefined ? undefined : new GrantPolicy(settings.grantStore);
    this.sessionId = settings.idGen();
    if (typeof this.sessionId !== "string" || !UUID.test(this.sessionId)) {
      throw new EngineConfigError("withIdGen", `the id generator must return UUID strings, got ${String(this.sessionId)}`);
    }
  }

  /**
   * Runs the loop from `userText` until the model answers without tool calls.
   *
   * Rejects with a {@link RunStoppedError} subclass (carrying the records
   * and transcript so far): `CancelledError` when `signal` aborts,
   * `LoopDetectedError`, `BudgetExceededError`, or `ModelError` when the model
   * throws or answers garbage.
   */
  async run(userText: string, options: RunOptions = {}): Promise<RunResult> {
    if (typeof userText !== "string") throw new EngineConfigError("Agent.run", "userText must be a string");
    const settings = this.#managers.settings;
    const runId = settings.idGen();
    const records: GateDecision[] = [];
    const messages: Message[] = [{ type: "user", text: userText }];
    // Without a caller signal nothing can cancel the run, so it needs no
    // controller and shares the agent's idle signal (see RunSignal); with
    // one, the run links a child to it.
    const link = options.signal === undefined ? undefined : linkedSignal(options.signal);
    const signal = new RunSignal(link?.controller.signal, this.#idleSignal);
    const run: RunState = {
      settings,
      tools: this.#tools,
      sessionId: this.sessionId,
      runId,
      loopDetector: settings.loopDetection === undefined ? undefined : new LoopDetector(settings.loopDetection),
      breaker: this.#breaker,
      grantPolicy: this.#grantPolicy,
      emit: (turn, callId, decision) => {
        records.push(decision);
        notify(settings.observers, settings.observerErrorHandler, "onGate", { turn, callId, decision });
      },
    };
    let usage: Usage = { inputTokens: 0, outputTokens: 0 };
    let turns = 0;
    try {
      for (;;) {
        if (signal.aborted) throw cancelledBy(signal);
        const overBudget = checkBudget(settings.budget, turns, usage);
        if (overBudget !== undefined) {
          run.emit(turns, "", {
            tool: "",
            argsDigest: "",
            verdict: "deny",
            ruleId: "budget.hard",
            ruleSource: "engine",
            matchedPattern: null,
            reason: overBudget.message,
            ts: settings.clock.now(),
          });
          throw overBudget;
        }
        const turn = turns;
        const response = await this.#generate(turn, messages, signal);
        turns += 1;
        if (response.usage !== undefined) {
          usage = {
            inputTokens: usage.inputTokens + response.usage.inputTokens,
            outputTokens: usage.outputTokens + response.usage.outputTokens,
          };
        }
        messages.push(
          response.text === undefined
            ? { type: "assistant", toolCalls: response.toolCalls }
            : { type: "assistant", text: response.text, toolCalls: response.toolCalls },
        );
        if (response.toolCalls.length === 0) {
          return { messages, records, usage, turns, text: response.text ?? "", sessionId: this.sessionId, runId };
        }
        const results = await wave(run, response.toolCalls, turn, signal);
        messages.push(...results.messages);
        if (results.stop !== undefined) throw results.stop;
      }
    } catch (thrown) {
      if (thrown instanceof RunStoppedError) attachTranscript(thrown, records, messages);
      throw thrown;
    } finally {
      link?.dispose();
      signal.end();
    }
  }

  async #generate(turn: number, messages: readonly Message[], signal: RunSignal): Promise<ModelResponse> {
    const settings = this.#managers.settings;
    const snapshot = snapshotMessages(messages);
    notify(settings.observers, settings.observerErrorHandler, "onModelRequest", { turn, messages: snapshot, tools: this.#descriptors });
    let raw: unknown;
    try {
      raw = await raceAbort(
        Promise.resolve().then(() => this.#model.generate({ messages: snapshot, tools: this.#descriptors, signal: signal.signal })),
        signal,
      );
    } catch (thrown) {
      if (thrown instanceof CancelledError || signal.aborted) throw cancelledBy(signal);
      throw new ModelError(`the model failed on turn ${turn}: ${describeError(thrown)}`, { cause: thrown });
    }
    let parsed: ReturnType<typeof ModelResponseSchema.safeParse>;
    try {
      parsed = ModelResponseSchema.safeParse(raw);
    } catch (thrown) {
      // An answer whose reads throw (a proxy, a getter) is not a model response either.
      throw new ModelError(`the model answered turn ${turn} with something that is not a model response`, { cause: thrown });
    }
    if (!parsed.success) {
      throw new ModelError(`the model answered turn ${turn} with something that is not a model response`, { cause: parsed.error });
    }
    const ids = new Set(parsed.data.toolCalls.map((call) => call.id));
    if (ids.size !== parsed.data.toolCalls.length) {
      // Results are matched to calls by id; a repeated id would make them ambiguous.
      throw new ModelError(`the model answered turn ${turn} with two tool calls sharing an id`);
    }
    const response = modelResponse(
      parsed.data.text,
      parsed.data.toolCalls.map((call): ToolCall => ({ id: call.id, name: call.name, input: call.input })),
      parsed.data.usage,
    );
    notify(settings.observers, settings.observerErrorHandler, "onModelResponse", { turn, response });
    return response;
  }
}

/**
 * Runs one turn's calls, at most `maxConcurrency` at a time. The first
 * run-ending error (a cancel or a loop stop) aborts the rest of the wave and
 * is returned; results come back in call order.
 */
async function wave(
  run: RunState,
  calls: readonly ToolCall[],
  turn: number,
  runSignal: RunSignal,
): Promise<{ messages: ToolResultMessage[]; stop: RunStoppedError | undefined }> {
  // A wave's own signal exists to stop the siblings of a call that ends the
  // run; one call has none, so it runs on the run's signal (an
  // AbortController costs microseconds, a measurable share of a round trip).
  const link = calls.length > 1 ? linkedSignal(runSignal.source) : undefined;
  const signal = link === undefined ? runSignal : new RunSignal(link.controller.signal);
  const outcomes: (AttemptOutcome | undefined)[] = calls.map(() => undefined);
  let stop: RunStoppedError | undefined;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (stop === undefined && !signal.aborted && next < calls.length) {
      const index = next;
      next += 1;
      const call = calls[index]!;
      try {
        const outcome = await attempt(run, call, turn, signal);
        outcomes[index] = outcome;
        if (outcome.type === "stop") {
          stop ??= outcome.error;
          link?.controller.abort(outcome.error);
        }
      } catch (thrown) {
        stop ??= thrown instanceof RunStoppedError ? thrown : new ModelError(`tool call failed: ${describeError(thrown)}`, { cause: thrown });
        link?.controller.abort(thrown);
      }
    }
  };
  try {
    const workers = Math.min(run.settings.maxConcurrency, calls.length);
    if (workers === 1) await worker();
    else await Promise.all(Array.from({ length: workers }, worker));
  } finally {
    link?.dispose();
  }
  if (stop === undefined && runSignal.aborted) stop = cancelledBy(runSignal);
  const messages: ToolResultMessage[] = [];
  outcomes.forEach((outcome, index) => {
    const call = calls[index]!;
    if (outcome !== undefined) {
      messages.push({ type: "tool_result", callId: call.id, tool: call.name, content: outcome.result.content, isError: outcome.result.isError });
    }
  });
  return { messages, stop };
}
