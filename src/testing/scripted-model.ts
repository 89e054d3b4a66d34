import { LoopctlError, shownValue } from "../errors.js";
import type { ToolDescriptor } from "../grant/index.js";
import type { Message, Model, ModelRequest, ModelResponse, ToolCall, Usage } from "../engine/index.js";

/**
 * The script ran out: the model was asked for more turns than it was given.
 * `code` is `"SCRIPT_EXHAUSTED"`.
 */
export class ScriptExhaustedError extends LoopctlError {
  /** How many turns the script had. */
  readonly turns: number;

  constructor(turns: number) {
    // No turn number: the engine's message around it counts turns from 0, the script's from 1.
    super("SCRIPT_EXHAUSTED", `ScriptedModel: the script has only ${turns} turn(s), all of them played`);
    this.turns = turns;
  }
}

/** A copy of `value`, or `value` itself when it cannot be copied (a function inside, nesting too deep). */
function copied(value: unknown): unknown {
  try {
    return structuredClone(value);
  } catch {
    return value;
  }
}

/** Objects found deeply frozen: they can never change again, so none is looked through twice. */
const settled = new WeakSet<object>();

/**
 * Whether `value` can never change: a primitive, or a frozen plain object or
 * array whose own properties are all data holding such values (the engine's
 * messages and descriptors are). A frozen `Map`, `Date` or other object of a
 * class can: freezing stops neither `set()` nor `setTime()`. Walked without
 * recursion, each object once: nesting may be deep, and objects may refer to
 * each other.
 */
function unchangeable(value: unknown): boolean {
  const seen = new Set<object>();
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const item = stack.pop();
    if ((typeof item !== "object" && typeof item !== "function") || item === null) continue;
    if (settled.has(item) || seen.has(item)) continue;
    if (!Object.isFrozen(item)) return false;
    if (typeof item === "object") {
      const proto: unknown = Object.getPrototypeOf(item);
      if (proto !== Object.prototype && proto !== null && !(proto === Array.prototype && Array.isArray(item))) {
        return false;
      }
    }
    for (const key of Reflect.ownKeys(item)) {
      const property = Object.getOwnPropertyDescriptor(item, key);
      if (property === undefined || !("value" in property)) return false;
      stack.push(property.value);
    }
    seen.add(item);
  }
  for (const item of seen) settled.add(item);
  return true;
}

/** `value` as it is now: itself when it can never change, else a copy (itself when it cannot be copied). */
function asItIs<T>(value: T): T {
  return unchangeable(value) ? value : (copied(value) as T);
}

/**
 * One scripted assistant turn: text and/or tool calls (and optional usage
 * and provider data), `{ error }` to make `generate` throw, or a function of
 * the request that returns the turn (to react to what the model was shown).
 */
export type ScriptedTurn =
  | {
      readonly text?: string | undefined;
      readonly toolCalls?: readonly ToolCall[] | undefined;
      readonly usage?: Usage | undefined;
      readonly providerData?: unknown;
    }
  | { readonly error: unknown }
  | ((request: RecordedRequest) => ModelResponse | Promise<ModelResponse>);

/**
 * A request as the scripted model received it, without the signal: the
 * messages and tool descriptors as they were that turn. Those that can never
 * change (the engine's, deeply frozen) are kept as they are; any other is
 * copied, so a loop that changes them afterwards cannot change the record.
 */
export interface RecordedRequest {
  readonly instructions?: string;
  readonly messages: readonly Message[];
  readonly tools: readonly ToolDescriptor[];
}

/**
 * A {@link Model} that plays scripted turns in order and keeps every request
 * in {@link ScriptedModel.requests}, so a test can read exactly what the
 * model was shown (tool results included). Asking for a turn past the end
 * throws {@link ScriptExhaustedError} (the run rejects with a `ModelError`
 * whose `cause` it is).
 *
 * @example
 * ```ts
 * const model = new ScriptedModel([
 *   { toolCalls: [{ id: "c1", name: "read", input: { path: "a.txt" } }] },
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
    const given: unknown = turns;
    if (!Array.isArray(given)) throw new TypeError("ScriptedModel needs an array of turns");
    this.#turns = [...turns];
    this.#turns.forEach((turn: unknown, index) => {
      if (typeof turn === "function" || (typeof turn === "object" && turn !== null)) return;
      throw new TypeError(`ScriptedModel: turn ${index + 1} must be an object or a function, got ${shownValue(turn)}`);
    });
  }

  /** Turns not played yet. */
  get remaining(): number {
    return this.#turns.length - this.#next;
  }

  async generate(request: ModelRequest): Promise<ModelResponse> {
    const messages = Object.freeze(Array.from(request.messages, asItIs));
    const tools = Object.freeze(Array.from(request.tools, asItIs));
    const recorded: RecordedRequest =
      request.instructions === undefined
        ? { messages, tools }
        : { instructions: request.instructions, messages, tools };
    this.requests.push(recorded);
    const turn = this.#turns[this.#next];
    if (turn === undefined) throw new ScriptExhaustedError(this.#turns.length);
    this.#next += 1;
    if (typeof turn === "function") return turn(recorded);
    if ("error" in turn) throw turn.error;
    // A copy, so a caller that changes the response cannot change the script. What is not a list of
    // calls is played as it is: a malformed answer, scripted for the engine to refuse, is not a crash here.
    const scripted: unknown = turn.toolCalls ?? [];
    const toolCalls = (
      Array.isArray(scripted)
        ? scripted.map((call: unknown) => {
            if (typeof call !== "object" || call === null) return call;
            const { id, name, input } = call as ToolCall;
            return { id, name, input: copied(input) };
          })
        : scripted
    ) as readonly ToolCall[];
    const response: { text?: string; toolCalls: readonly ToolCall[]; usage?: Usage; providerData?: unknown } = {
      toolCalls,
    };
    if (turn.text !== undefined) response.text = turn.text;
    if (turn.usage !== undefined) response.usage = copied(turn.usage) as Usage;
    if (turn.providerData !== undefined) response.providerData = copied(turn.providerData);
    return response;
  }
}
