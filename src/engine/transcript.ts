import type { Message, ToolCall } from "./model.js";

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
    return structuredClone(input);
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
