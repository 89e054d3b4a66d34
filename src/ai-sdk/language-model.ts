import type { LanguageModelV3, LanguageModelV3CallOptions, LanguageModelV3Prompt } from "@ai-sdk/provider";
import { everyKey, optionsProblem } from "../unknown-option.js";
import type { Model, ModelRequest, ModelResponse } from "../engine/index.js";
import { shownValue } from "../errors.js";
import { AiSdkModelError, readOrRefuse } from "./errors.js";
import { toFunctionTools, toPrompt } from "./prompt.js";
import type { RefusalOutput } from "./prompt.js";
import { toModelResponse } from "./response.js";

/** Call settings sent with every request: everything V3 takes but the prompt, the tools and the abort signal. */
export type LanguageModelSettings = Omit<LanguageModelV3CallOptions, "prompt" | "tools" | "abortSignal">;

/** Options of {@link fromLanguageModel}. */
export interface FromLanguageModelOptions {
  /**
   * Sent with every request (`temperature`, `maxOutputTokens`, `providerOptions`, `headers`, `toolChoice`, …),
   * except a `toolChoice` other than `none` on a turn that offers no tools, as `generateText` sends it.
   * Read once, when {@link fromLanguageModel} checks them: a later change to the object reaches no request.
   */
  readonly settings?: LanguageModelSettings;
  /**
   * How the result of a refused call reaches the model: as V3's
   * `execution-denied` output, whose reason is the refusal text (the SDK's
   * own denial; providers send the reason to the model), or as an
   * `error-text` result holding the same text.
   * @default "execution-denied"
   */
  readonly refusals?: RefusalOutput;
}

/** The options {@link fromLanguageModel} takes; any other is refused, never ignored. */
const OPTIONS = everyKey<FromLanguageModelOptions>()(["settings", "refusals"]);

/**
 * Every call setting V3 takes (`@ai-sdk/provider@3`'s `LanguageModelV3CallOptions` but the three set
 * per request). Does not compile once V3 takes a setting the list lacks: it would be refused until listed.
 */
const SETTING_NAMES = everyKey<LanguageModelSettings>()([
  "maxOutputTokens",
  "temperature",
  "stopSequences",
  "topP",
  "topK",
  "presencePenalty",
  "frequencyPenalty",
  "responseFormat",
  "seed",
  "toolChoice",
  "includeRawChunks",
  "headers",
  "providerOptions",
]);
const SETTINGS: ReadonlySet<string> = new Set(SETTING_NAMES);

/** Set by the adapter for each request, from the run: a setting of the same name would be overwritten or, for `tools`, leak into a turn without tools. */
const PER_REQUEST: ReadonlySet<string> = new Set(["prompt", "tools", "abortSignal"] satisfies Exclude<
  keyof LanguageModelV3CallOptions,
  keyof LanguageModelSettings
>[]);

/**
 * What is wrong with the value of a setting, if anything: for the numeric
 * ones, the checks `generateText` makes of them (`prepareCallSettings`),
 * which a `doGenerate` called directly never meets; `toolChoice` is read at
 * each request, so it must be one V3 knows.
 */
function settingFault(key: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  switch (key) {
    case "temperature":
    case "topP":
    case "topK":
    case "presencePenalty":
    case "frequencyPenalty":
      return typeof value === "number" ? undefined : "must be a number";
    case "maxOutputTokens":
      return Number.isInteger(value) && (value as number) >= 1 ? undefined : "must be an integer >= 1";
    case "seed":
      return Number.isInteger(value) ? undefined : "must be an integer";
    case "toolChoice": {
      const { type, toolName } = (typeof value === "object" && value !== null ? value : {}) as {
        type?: unknown;
        toolName?: unknown;
      };
      if (type === "auto" || type === "none" || type === "required") return undefined;
      return type === "tool" && typeof toolName === "string"
        ? undefined
        : 'must be { type: "auto" | "none" | "required" } or { type: "tool", toolName }';
    }
    default:
      return undefined;
  }
}

/** The ids the provider-executed calls and results of a prompt's assistant turns hold. */
function providerExecutedIds(prompt: LanguageModelV3Prompt): Set<string> {
  const ids = new Set<string>();
  for (const message of prompt) {
    if (message.role !== "assistant") continue;
    for (const part of message.content)
      if (part.type === "tool-result" || (part.type === "tool-call" && part.providerExecuted === true))
        ids.add(part.toolCallId);
  }
  return ids;
}

function nameOf(model: unknown): string {
  let provider: unknown;
  let modelId: unknown;
  try {
    ({ provider, modelId } = (typeof model === "object" && model !== null ? model : {}) as {
      provider?: unknown;
      modelId?: unknown;
    });
  } catch {
    // A name that cannot be read is not known: the error about the model says what failed.
  }
  return `${typeof provider === "string" ? provider : "?"}/${typeof modelId === "string" ? modelId : "?"}`;
}

/** `read()` of the model, the options or a setting; a getter that throws is an {@link AiSdkModelError} naming `model`. */
function reading<T>(model: string, what: string, read: () => T): T {
  return readOrRefuse(what, read, (message, options) => new AiSdkModelError(model, message, options));
}

/**
 * Lets loopctl's `Agent` run on any AI SDK provider model (a
 * `LanguageModelV3`, such as `openai("gpt-4.1")` or `MockLanguageModelV3`).
 *
 * Each turn is one `doGenerate`: the agent's `instructions` become the system
 * message; tool results go back with their status (a refused call as V3's
 * `execution-denied` output whose reason the model reads, a failed one as
 * `error-text`); the run's signal is the request's `abortSignal`. The model's
 * client tool calls are handed to the gate with their JSON arguments parsed:
 * arguments that are not JSON (or nest deeper than a transcript keeps) are
 * refused by the gate, the model reads why, and the call goes back to the
 * provider with arguments `{}` (as the AI SDK replays an invalid call).
 * Provider-executed calls and their results, reasoning, files and provider
 * metadata are kept in the assistant message's `providerData`
 * (JSON) and sent back as they came; loopctl neither runs nor approves a
 * provider-executed call (an error result goes back as `error-json`, and
 * empty text parts are left out, as the AI SDK does). Usage totals a provider leaves undefined are the
 * sum of the parts it reported.
 *
 * @throws {AiSdkModelError} when `model` is not a `LanguageModelV3`,
 *   `options` (or its `settings`) is not an object, or holds a key it does
 *   not take (`{ temperature }` belongs under `settings`; a setting V3 does
 *   not have is refused, never ignored), or a numeric setting of the wrong
 *   kind (as `generateText` checks them), and
 *   (from `generate`) when it answers with something that is not a V3
 *   result (or holds a part that is not a V3 part, a `finishReason` that is
 *   not V3's `{ unified, raw }`, a `usage` that is not V3's, or a client call sharing its id with a
 *   provider-executed call or result), or with finish reason `error` (the provider's failed turn, never
 *   an empty answer), or with tool calls on a turn that ended in `length`,
 *   `content-filter` or `other` (the AI SDK runs none of them; neither does
 *   loopctl). A `doGenerate` that throws rejects with its own error; `Agent`
 *   reports either as a `ModelError`.
 *
 * @example
 * ```ts
 * import { openai } from "@ai-sdk/openai";
 * const agent = new Agent({ model: fromLanguageModel(openai("gpt-4.1")), tools, managers });
 * ```
 */
export function fromLanguageModel(model: LanguageModelV3, options: FromLanguageModelOptions = {}): Model {
  const name = nameOf(model);
  if (
    typeof model !== "object" ||
    model === null ||
    reading(name, "the model", () => model.specificationVersion !== "v3" || typeof model.doGenerate !== "function")
  ) {
    throw new AiSdkModelError(
      name,
      'not an AI SDK LanguageModelV3 (specificationVersion "v3" with doGenerate); pass the provider\'s model object, not its id',
    );
  }
  const wrong = optionsProblem(options, OPTIONS, {
    hint: (key) => (SETTINGS.has(key) ? `call settings go under settings: { ${key} }` : undefined),
  });
  if (wrong !== undefined) {
    const problem = wrong.key === undefined ? `options ${wrong.problem}` : wrong.problem;
    throw new AiSdkModelError(name, problem, "cause" in wrong ? { cause: wrong.cause } : undefined);
  }
  const { settings = {}, refusals = "execution-denied" } = reading(name, "options", () => {
    const { settings, refusals } = options;
    return { settings, refusals };
  });
  if (typeof settings !== "object" || settings === null || Array.isArray(settings))
    throw new AiSdkModelError(name, "settings must be an object of call settings (temperature, maxOutputTokens, …)");
  // What was checked is what every request sends: a later change to the object (a `tools` added, a
  // setting of the wrong kind) would reach the provider unchecked.
  const sent: Record<string, unknown> = {};
  for (const [key, value] of reading(name, "settings", () => Object.entries(settings))) {
    if (PER_REQUEST.has(key))
      throw new AiSdkModelError(
        name,
        `setting '${key}' is not a call setting: it is set from the run for each request`,
      );
    if (!SETTINGS.has(key))
      throw new AiSdkModelError(
        name,
        `unknown setting '${key}' (V3 takes ${[...SETTINGS].join(", ")}; provider-specific ones go under providerOptions)`,
      );
    // toolChoice is read at each request: checked on a copy, which is what is sent.
    const read = reading(name, `setting '${key}'`, () =>
      key === "toolChoice" && typeof value === "object" && value !== null ? { ...value } : value,
    );
    const fault = settingFault(key, read);
    if (fault !== undefined) throw new AiSdkModelError(name, `setting '${key}' ${fault}, got ${shownValue(read)}`);
    sent[key] = read;
  }
  if (refusals !== "execution-denied" && refusals !== "error-text") {
    throw new AiSdkModelError(name, `refusals must be "execution-denied" or "error-text", got ${shownValue(refusals)}`);
  }
  return {
    async generate(request: ModelRequest): Promise<ModelResponse> {
      const call: LanguageModelV3CallOptions = {
        ...(sent as LanguageModelSettings),
        prompt: toPrompt(request.instructions, request.messages, refusals),
        abortSignal: request.signal,
      };
      if (request.tools.length > 0) call.tools = toFunctionTools(request.tools);
      // As generateText sends it: without tools there is nothing to choose among (a provider that passes
      // the choice on may reject it), and only "none" still says something.
      else if (call.toolChoice !== undefined && call.toolChoice.type !== "none") delete call.toolChoice;
      const result = await model.doGenerate(call);
      return toModelResponse(name, result, providerExecutedIds(call.prompt));
    },
  };
}
