import { isProxy } from "node:util/types";
import type { Message, ToolCall } from "./model.js";

/** Thrown inside {@link copyPlain} when the value needs `structuredClone`'s full algorithm. */
const NOT_PLAIN = Symbol("not plain");

/**
 * The objects a copy has reached. A call's arguments are usually a handful of
 * objects: an array scan beats allocating a Set until there are many.
 */
class Seen {
  readonly #few: object[] = [];
  #many: Set<object> | undefined;

  has(value: object): boolean {
    if (this.#many !== undefined) return this.#many.has(value);
    return this.#few.includes(value);
  }

  add(value: object): void {
    if (this.#many !== undefined) {
      this.#many.add(value);
    } else if (this.#few.length < 16) {
      this.#few.push(value);
    } else {
      this.#many = new Set(this.#few);
      this.#many.add(value);
    }
  }
}

/**
 * Copies primitives, plain objects and dense plain arrays, each reached once
 * (the tree shape JSON gives). Throws {@link NOT_PLAIN} on anything else
 * (a class instance, a proxy, a null-prototype object, a `__proto__` key, a sparse
 * array or one with extra properties, a shared or cyclic reference, a
 * function or symbol), for the caller to fall back to `structuredClone`.
 */
function copyPlain(value: unknown, seen: Seen): unknown {
  if (typeof value !== "object" || value === null) {
    if (typeof value === "function" || typeof value === "symbol") throw NOT_PLAIN;
    return value;
  }
  // structuredClone refuses a proxy; so must the fast path.
  if (seen.has(value) || isProxy(value)) throw NOT_PLAIN;
  seen.add(value);
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === Array.prototype && Array.isArray(value)) {
    const length = value.length;
    if (Object.keys(value).length !== length) throw NOT_PLAIN;
    const out: unknown[] = [];
    for (let i = 0; i < length; i++) {
      if (!(i in value)) throw NOT_PLAIN;
      out.push(copyPlain(value[i], seen));
    }
    return out;
  }
  if (proto !== Object.prototype) throw NOT_PLAIN;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    if (key === "__proto__") throw NOT_PLAIN;
    out[key] = copyPlain((value as Record<string, unknown>)[key], seen);
  }
  return out;
}

/**
 * `structuredClone(value)`, with a fast path for the plain data tool calls
 * carry: the result (or the error thrown) is the same, without a round trip
 * through the serializer for a plain tree.
 */
export function cloneValue<T>(value: T): T {
  try {
    return copyPlain(value, new Seen()) as T;
  } catch (thrown) {
    if (thrown !== NOT_PLAIN) throw thrown;
    return structuredClone(value);
  }
}

/**
 * A copy of a tool call's arguments, or the arguments themselves when they
 * cannot be copied (a function or symbol inside, nesting too deep for
 * `structuredClone`, which then throws a `RangeError`). Sharing them is
 * harmless: the gate decides on its own reading of the call, and functions,
 * symbols and nesting past the canonical-JSON depth limit are refused there
 * as arguments that are not JSON values.
 */
function copyInput(input: unknown): unknown {
  if (typeof input !== "object" || input === null) return input;
  try {
    return cloneValue(input);
  } catch {
    return input;
  }
}

/** A copy of tool calls that never throws, whatever arguments the model sent. */
export function copyToolCalls(calls: readonly ToolCall[]): ToolCall[] {
  return calls.map((call) => ({ id: call.id, name: call.name, input: copyInput(call.input) }));
}

/**
 * A deep copy of a transcript, for handing to a model (which may keep or
 * change it) without exposing the engine's own. Unlike one `structuredClone`
 * of the whole transcript, one hostile tool call (a function, a symbol,
 * 100 000 levels of nesting) cannot make it throw and so break the run.
 */
export function snapshotMessages(messages: readonly Message[]): Message[] {
  return messages.map((message): Message => {
    switch (message.type) {
      case "user":
      case "tool_result":
        return { ...message };
      case "assistant":
        return { ...message, toolCalls: copyToolCalls(message.toolCalls) };
    }
  });
}
