import { LoopctlError } from "../errors.js";
import type { ToolDescriptor } from "../grant/index.js";
import type { Message, Model, ModelRequest, ModelResponse, ToolCall, Usage } from "../engine/index.js";
import { modelResponse } from "../engine/model.js";
import { cloneValue, copyToolCalls, snapshotMessages } from "../engine/transcript.js";

/**
 * The script ran out: the model was asked for more turns than it was given.
 * `code` is `"SCRIPT_EXHAUSTED"`.
 */
export class ScriptExhaustedError extends LoopctlError {
  /** How many turns the script had. */
  readonly turns: number;

  constructor(turns: number) {
    super("SCRIPT_EXHAUSTED", `ScriptedModel: asked for turn ${turns + 1} but the script has only ${turns} turn(s)`);
    this.turns = turns;
  }
}

/**
 * One scripted assistant turn: text and/or tool calls (and optional usage),
 * `{ error }` to make `generate` throw, or a function of the request that
 * returns the turn (to react to what the model was shown).
 */
export type ScriptedTurn =
  | { readonly text?: string; readonly toolCalls?: readonly ToolCall[]; readonly usage?: Usage }
  | { readonly error: unknown }
  | ((request: RecordedRequest) => ModelResponse | Promise<ModelResponse>);

/**
 * A request as the scripted model received it: a deep copy, without the
 * signal. Tool-call arguments that cannot be copied (functions, symbols,
 * nesting too deep to clone) are kept as they are instead of throwing.
 */
export interface RecordedRequest {
  readonly messages: readonly Message[];
  readonly tools: readonly ToolDescriptor[];
}

/**
 * A {@link Model} that plays scripted turns in order and keeps a deep copy of
 * every request in {@link ScriptedModel.requests}, so a test can read exactly
 * what the model was shown (tool results included). Asking for a turn past
 * the end throws {@link ScriptExhaustedError} (the run rejects with a
 * `ModelError` whose `cause` it is).
 *
 * @example
 * ```ts
 * const model = new ScriptedModel([
 *   { toolCalls: [{ id: "c1", name: "read", input: { path: "a.rs" } }] },
 *   { text: "done" },
 * ]);
 * ```
 */
export class ScriptedModel implements Model {
  /** Every request received, in order. */
  readonly requests: RecordedRequest[] = [];
  readonly #turns: readonly ScriptedTurn[];
  #next = 0;

  constructor(turns: readonly ScriptedTurn[]) {
    if (!Array.isArray(turns)) throw new TypeError("ScriptedModel needs an array of turns");
    this.#turns = [...turns];
  }

  /** Turns not played yet. */
  get remaining(): number {
    return this.#turns.length - this.#next;
  }

  async generate(request: ModelRequest): Promise<ModelResponse> {
    const recorded: RecordedRequest = { messages: snapshotMessages(request.messages), tools: cloneValue(request.tools) };
    this.requests.push(recorded);
    const turn = this.#turns[this.#next];
    if (turn === undefined) throw new ScriptExhaustedError(this.#turns.length);
    this.#next += 1;
    if (typeof turn === "function") return turn({ messages: snapshotMessages(recorded.messages), tools: cloneValue(recorded.tools) });
    if ("error" in turn) throw turn.error;
    return modelResponse(turn.text, copyToolCalls(turn.toolCalls ?? []), turn.usage);
  }
}
