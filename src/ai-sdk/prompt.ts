import type {
  JSONSchema7,
  LanguageModelV3FunctionTool,
  LanguageModelV3Message,
  LanguageModelV3Prompt,
  LanguageModelV3ToolResultOutput,
  LanguageModelV3ToolResultPart,
} from "@ai-sdk/provider";
import type { AssistantMessage, Message, ToolDescriptor, ToolResultMessage } from "../engine/index.js";
import { AiSdkTranscriptError } from "./errors.js";
import { shownKey } from "../unknown-option.js";
import { AiSdkProviderDataSchema, isTagged } from "./provider-data.js";
import type { AiSdkAssistantPart, AiSdkProviderData } from "./provider-data.js";
import { isFrozenJson } from "../engine/snapshot.js";

type AssistantContent = Extract<LanguageModelV3Message, { role: "assistant" }>["content"];
type AssistantContentPart = AssistantContent[number];

/** How a refused call's result reaches the model. */
export type RefusalOutput = "execution-denied" | "error-text";

function withOptions<T extends object>(part: T, providerOptions: AiSdkAssistantPart["providerOptions"]): T {
  return providerOptions === undefined ? part : { ...part, providerOptions };
}

type JsonValue = Extract<LanguageModelV3ToolResultOutput, { type: "json" }>["value"];

/** A provider-executed result as the AI SDK itself replays one: an error as JSON, else a string as text and anything else as JSON. */
function providerResult(result: unknown, isError: boolean | undefined): LanguageModelV3ToolResultOutput {
  if (isError === true) return { type: "error-json", value: (result ?? null) as JsonValue };
  return typeof result === "string"
    ? { type: "text", value: result }
    : { type: "json", value: (result ?? null) as JsonValue };
}

/**
 * A call's arguments as they go back to the provider: arguments that were
 * not a JSON object (text that did not parse, which the gate refused) go as
 * `{}`, as the AI SDK replays an invalid call, since providers take only an
 * object there.
 */
function replayInput(input: unknown): unknown {
  return typeof input === "object" && input !== null ? input : {};
}

/**
 * The `providerData` objects that parsed and can never change (an `Agent`'s
 * transcript holds only such: deeply frozen copies): each is parsed once,
 * not again at every later turn, whose prompt holds every earlier turn.
 */
const parsedOnce = new WeakSet<object>();

/** An assistant message's AI SDK `providerData`, parsed (once, when it can never change). */
function providerDataOf(providerData: unknown, index: number): AiSdkProviderData {
  if (parsedOnce.has(providerData as object)) return providerData as AiSdkProviderData;
  const parsed = AiSdkProviderDataSchema.safeParse(providerData);
  if (!parsed.success)
    throw new AiSdkTranscriptError(
      index,
      `the assistant message's AI SDK providerData does not parse: ${parsed.error.issues[0]?.message ?? "invalid"}`,
    );
  if (!isFrozenJson(providerData)) return parsed.data;
  // Read as it is from now on: the parse only checked it (it transforms nothing, and the keys it would strip
  // are read by nothing here).
  parsedOnce.add(providerData as object);
  return providerData as AiSdkProviderData;
}

function assistantContent(message: AssistantMessage, index: number): AssistantContent {
  const inputs = new Map(message.toolCalls.map((call) => [call.id, call.input]));
  if (!isTagged(message.providerData)) {
    const content: AssistantContent = [];
    if (message.text !== undefined && message.text !== "") content.push({ type: "text", text: message.text });
    for (const call of message.toolCalls)
      content.push({ type: "tool-call", toolCallId: call.id, toolName: call.name, input: replayInput(call.input) });
    return content;
  }
  const data = providerDataOf(message.providerData, index);
  // A client call under the id of a provider-executed call or result: the provider would be sent two calls (or
  // two results) under it, and the provider-executed call the client call's arguments.
  for (const part of data.parts) {
    const provider = part.type === "tool-result" || (part.type === "tool-call" && part.providerExecuted === true);
    if (provider && inputs.has(part.toolCallId))
      throw new AiSdkTranscriptError(
        index,
        `the tool call ${shownKey(part.toolCallId)} has the id of a provider-executed ${part.type} of the same message`,
      );
  }
  const content: AssistantContent = [];
  const shown = new Set<string>();
  // The model's own calls, in the order the transcript holds them (the order the model sent them).
  let position = 0;
  for (const part of data.parts) {
    let mapped: AssistantContentPart;
    switch (part.type) {
      case "text":
        // An empty text part is not sent back, as the AI SDK leaves it out of its own messages.
        if (part.text === "") continue;
        mapped = { type: "text", text: part.text };
        break;
      case "reasoning":
        mapped = { type: "reasoning", text: part.text };
        break;
      case "file":
        mapped = { type: "file", mediaType: part.mediaType, data: part.data };
        break;
      case "tool-call": {
        let id = part.toolCallId;
        if (part.providerExecuted !== true) {
          const own = message.toolCalls[position];
          position += 1;
          // A call the model sent without an id, or with one an earlier call had, was given one by the run:
          // its result carries that id.
          if (!inputs.has(id) && own !== undefined && own.name === part.toolName) id = own.id;
        }
        shown.add(id);
        // The transcript's own call is what ran (or was refused); the part keeps what the model sent when it was not JSON.
        const input = inputs.has(id) ? inputs.get(id) : part.invalidInput === true ? undefined : part.input;
        const call = {
          type: "tool-call" as const,
          toolCallId: id,
          toolName: part.toolName,
          input: replayInput(input),
        };
        mapped = part.providerExecuted === undefined ? call : { ...call, providerExecuted: part.providerExecuted };
        break;
      }
      case "tool-result":
        mapped = {
          type: "tool-result",
          toolCallId: part.toolCallId,
          toolName: part.toolName,
          output: providerResult(part.result, part.isError),
        };
        break;
    }
    content.push(withOptions(mapped, part.providerOptions));
  }
  // Calls added to the transcript by hand, after the model's turn, still reach the model.
  for (const call of message.toolCalls) {
    if (!shown.has(call.id))
      content.push({ type: "tool-call", toolCallId: call.id, toolName: call.name, input: replayInput(call.input) });
  }
  return content;
}

function resultOutput(message: ToolResultMessage, refusals: RefusalOutput): LanguageModelV3ToolResultOutput {
  switch (message.status) {
    case "ran":
      return { type: "text", value: message.content };
    case "failed":
      return { type: "error-text", value: message.content };
    case "refused":
      return refusals === "execution-denied"
        ? { type: "execution-denied", reason: message.content }
        : { type: "error-text", value: message.content };
  }
}

/**
 * The V3 prompt for one turn: `instructions` as the system message, user
 * text, assistant turns with their parts (from `providerData`; a turn with
 * none is left out), and each run of tool results as one tool message.
 */
export function toPrompt(
  instructions: string | undefined,
  messages: readonly Message[],
  refusals: RefusalOutput,
): LanguageModelV3Prompt {
  const prompt: LanguageModelV3Prompt = [];
  if (instructions !== undefined) prompt.push({ role: "system", content: instructions });
  let tools: LanguageModelV3ToolResultPart[] | undefined;
  messages.forEach((message, index) => {
    if (message.type !== "tool_result") tools = undefined;
    switch (message.type) {
      case "user":
        prompt.push({ role: "user", content: [{ type: "text", text: message.text }] });
        break;
      case "assistant": {
        const content = assistantContent(message, index);
        // A turn with nothing to send back (an empty answer) is left out, as the AI SDK leaves it out of
        // its own messages: providers reject a message without content.
        if (content.length > 0) prompt.push({ role: "assistant", content });
        break;
      }
      case "tool_result":
        if (tools === undefined) {
          tools = [];
          prompt.push({ role: "tool", content: tools });
        }
        tools.push({
          type: "tool-result",
          toolCallId: message.callId,
          toolName: message.tool,
          output: resultOutput(message, refusals),
        });
        break;
    }
  });
  return prompt;
}

/** The V3 function tools for the descriptors the model may call this turn. */
export function toFunctionTools(descriptors: readonly ToolDescriptor[]): LanguageModelV3FunctionTool[] {
  return descriptors.map((descriptor) => ({
    type: "function",
    name: descriptor.name,
    description: descriptor.description,
    inputSchema: descriptor.inputSchema as JSONSchema7,
  }));
}
