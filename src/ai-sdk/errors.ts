import { describeError } from "../engine/errors.js";
import { LoopctlError } from "../errors.js";
import { shownKey } from "../unknown-option.js";

/**
 * `fromLanguageModel` was given something that is not an AI SDK
 * `LanguageModelV3`, or the model answered a turn with something that is not
 * a V3 result. `code` is `"AI_SDK_MODEL"`; `model` names it
 * (`provider/modelId`, as far as it could be read).
 */
export class AiSdkModelError extends LoopctlError {
  /** The model at fault. */
  readonly model: string;

  constructor(model: string, message: string, options?: ErrorOptions) {
    super("AI_SDK_MODEL", `model ${model}: ${message}`, options);
    this.model = model;
  }
}

/**
 * An assistant message handed back to `fromLanguageModel` carries
 * `providerData` tagged as this adapter's that does not parse (edited or
 * corrupted transcript). `code` is `"AI_SDK_TRANSCRIPT"`; `index` is the
 * message's position in the transcript.
 */
export class AiSdkTranscriptError extends LoopctlError {
  /** The position of the message in the transcript. */
  readonly index: number;

  constructor(index: number, message: string, options?: ErrorOptions) {
    super("AI_SDK_TRANSCRIPT", `messages[${index}]: ${message}`, options);
    this.index = index;
  }
}

/**
 * `gateTools` cannot gate a tool: its input schema has no JSON Schema form,
 * or the SDK called it without a `toolCallId`. `code` is `"AI_SDK_TOOL"`;
 * `tool` names it.
 */
export class AiSdkToolError extends LoopctlError {
  /** The tool at fault. */
  readonly tool: string;

  constructor(tool: string, message: string, options?: ErrorOptions) {
    super("AI_SDK_TOOL", `tool ${shownKey(tool)}: ${message}`, options);
    this.tool = tool;
  }
}

/**
 * `read()`, or, when it throws (a getter of something the adapter was handed), the error `fault`
 * makes of a message naming `what`, with the getter's error as its cause: never that untyped error
 * itself. loopctl's own errors pass as they are.
 */
export function readOrRefuse<T>(
  what: string,
  read: () => T,
  fault: (message: string, options: ErrorOptions) => LoopctlError,
): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof LoopctlError) throw error;
    throw fault(`${what} cannot be read: ${describeError(error)}`, { cause: error });
  }
}
