import type {
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3Usage,
} from "@ai-sdk/provider";
import type { ModelResponse, ToolCall, Usage } from "../engine/index.js";
import { shownValue } from "../errors.js";
import { shownBare, shownKey } from "../unknown-option.js";
import { CANONICAL_JSON_MAX_DEPTH } from "../grant/index.js";
import { AiSdkModelError } from "./errors.js";
import { AiSdkProviderDataSchema } from "./provider-data.js";
import type { AiSdkAssistantPart, AiSdkProviderData } from "./provider-data.js";
import { shownText } from "../shown.js";

type Json = Extract<AiSdkAssistantPart, { type: "tool-call" }>["input"];

/**
 * How deep a call's parsed arguments may nest: they are kept at
 * `providerData.parts[i].input`, three levels down a transcript that holds at
 * most {@link CANONICAL_JSON_MAX_DEPTH} levels.
 */
const ARGUMENTS_MAX_DEPTH = CANONICAL_JSON_MAX_DEPTH - 3;

/** Whether parsed JSON holds an array or object `limit` levels below its top (read without recursion). */
function nestsPast(value: unknown, limit: number): boolean {
  const open: (readonly [unknown, number])[] = [[value, 0]];
  for (let next = open.pop(); next !== undefined; next = open.pop()) {
    const [item, depth] = next;
    if (typeof item !== "object" || item === null) continue;
    if (depth >= limit) return true;
    for (const member of Object.values(item)) open.push([member, depth + 1]);
  }
  return false;
}

/**
 * The arguments of a tool call, parsed from the JSON text V3 carries. Empty
 * text is no arguments (`{}`), as the AI SDK reads it. Text that is not JSON,
 * or JSON nested deeper than a transcript keeps, yields no arguments at all:
 * the gate refuses such a call before anyone sees it, and the model reads why.
 */
function parseArguments(text: string): { readonly ok: true; readonly value: Json } | { readonly ok: false } {
  if (text.trim() === "") return { ok: true, value: {} };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false };
  }
  return nestsPast(value, ARGUMENTS_MAX_DEPTH) ? { ok: false } : { ok: true, value: value as Json };
}

const FINISH_REASONS: ReadonlySet<unknown> = new Set([
  "stop",
  "length",
  "content-filter",
  "tool-calls",
  "error",
  "other",
] satisfies LanguageModelV3FinishReason["unified"][]);

/**
 * What is wrong with a result's `finishReason`, if anything. V3's is an
 * object; a V2-style string (`"error"` included) has no `unified` and would let
 * a failed turn pass as an answer, so it is refused, not guessed at.
 */
function finishReasonFault(reason: unknown): string | undefined {
  if (typeof reason !== "object" || reason === null)
    return `finishReason is not V3's { unified, raw } object, got ${shownValue(reason)}`;
  const { unified, raw } = reason as { unified?: unknown; raw?: unknown };
  if (!FINISH_REASONS.has(unified))
    return `finishReason.unified is not one of ${[...FINISH_REASONS].join(", ")}, got ${shownValue(unified)}`;
  if (typeof raw !== "string" && raw !== undefined)
    return `finishReason.raw is neither a string nor undefined, got ${shownValue(raw)}`;
  return undefined;
}

/** The counts of each side of V3's usage, as `@ai-sdk/provider@3`'s `LanguageModelV3Usage` names them. */
const USAGE_COUNTS = {
  inputTokens: ["total", "noCache", "cacheRead", "cacheWrite"],
  outputTokens: ["total", "text", "reasoning"],
} as const satisfies { [K in keyof LanguageModelV3Usage]: readonly (keyof LanguageModelV3Usage[K])[] };

/**
 * What is wrong with a result's `usage`, if anything. V3's holds an object
 * of counts on each side; a V2-style count (`inputTokens: 900`) has no
 * `total` and would read as nothing reported, so a budget would count none
 * of it. Refused, not guessed at.
 */
function usageFault(usage: unknown): string | undefined {
  if (usage === undefined) return undefined;
  if (typeof usage !== "object" || usage === null)
    return `usage is not V3's { inputTokens, outputTokens }, got ${shownValue(usage)}`;
  for (const [side, counts] of Object.entries(USAGE_COUNTS)) {
    const given = (usage as Record<string, unknown>)[side];
    if (given === undefined) continue;
    if (typeof given !== "object" || given === null)
      return `usage.${side} is not V3's { ${counts.join(", ")} }, got ${shownValue(given)}`;
    for (const count of counts) {
      const value = (given as Record<string, unknown>)[count];
      if (value !== undefined && typeof value !== "number")
        return `usage.${side}.${count} is neither a number nor undefined, got ${shownValue(value)}`;
    }
  }
  return undefined;
}

function total(parts: readonly (number | undefined)[]): number | undefined {
  const known = parts.filter((n): n is number => typeof n === "number" && Number.isSafeInteger(n) && n >= 0);
  return known.length === 0 ? undefined : known.reduce((sum, n) => sum + n, 0);
}

/**
 * Token usage: a total a provider leaves undefined is the sum of the parts it
 * did report (input: the uncached tokens, those read from the cache and those
 * written to it, three disjoint counts); when it reports nothing on either
 * side the turn has no usage (a budget then counts nothing for it, rather
 * than a made-up figure).
 */
export function toUsage(usage: LanguageModelV3Usage | undefined): Usage | undefined {
  if (usage === undefined) return undefined;
  const { inputTokens: given } = usage;
  const input = total([given?.total]) ?? total([given?.noCache, given?.cacheRead, given?.cacheWrite]);
  const output = total([usage.outputTokens?.total]) ?? total([usage.outputTokens?.text, usage.outputTokens?.reasoning]);
  if (input === undefined && output === undefined) return undefined;
  return { inputTokens: input ?? 0, outputTokens: output ?? 0 };
}

function withOptions<T extends object>(part: T, metadata: unknown): T {
  return metadata === undefined
    ? part
    : { ...part, providerOptions: metadata as AiSdkAssistantPart["providerOptions"] };
}

function base64(data: string | Uint8Array): string | undefined {
  if (typeof data === "string") return data;
  return data instanceof Uint8Array
    ? Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64")
    : undefined;
}

/**
 * The engine's view of one V3 result: the text, the client tool calls the
 * gate decides, usage, and every part kept in `providerData` (reasoning,
 * metadata, provider-executed calls and their results, which the provider
 * ran and loopctl leaves alone). `providerIds` are the ids the earlier
 * turns' provider-executed parts hold: a client call under one of them gets
 * an id of the run's.
 */
export function toModelResponse(
  model: string,
  result: LanguageModelV3GenerateResult,
  providerIds: ReadonlySet<string> = new Set(),
): ModelResponse {
  if (typeof result !== "object" || result === null || !Array.isArray(result.content)) {
    throw new AiSdkModelError(model, "doGenerate resolved to something that is not a V3 result (no content array)");
  }
  const fault = finishReasonFault(result.finishReason) ?? usageFault(result.usage);
  if (fault !== undefined) throw new AiSdkModelError(model, fault);
  if (result.finishReason.unified === "error") {
    // The provider says the turn failed: not an answer, and none of its calls are the model's to make.
    const raw = result.finishReason.raw;
    throw new AiSdkModelError(
      model,
      `the provider ended the turn with finish reason error${typeof raw === "string" && raw !== "" ? ` (${shownText(raw)})` : ""}`,
    );
  }
  let text: string | undefined;
  const toolCalls: ToolCall[] = [];
  const parts: AiSdkAssistantPart[] = [];
  /** The index in `result.content` of each of `parts`: a part that does not parse is named by it. */
  const from: number[] = [];
  (result.content as readonly unknown[]).forEach((raw, index) => {
    const part = raw as LanguageModelV3Content;
    switch (part?.type) {
      case "text":
        text = (text ?? "") + part.text;
        parts.push(withOptions({ type: "text", text: part.text }, part.providerMetadata));
        break;
      case "reasoning":
        parts.push(withOptions({ type: "reasoning", text: part.text }, part.providerMetadata));
        break;
      case "file": {
        const data = base64(part.data);
        if (data === undefined)
          throw new AiSdkModelError(model, `content[${index}] is a file whose data is neither base64 text nor bytes`);
        parts.push(withOptions({ type: "file", mediaType: part.mediaType, data }, part.providerMetadata));
        break;
      }
      case "tool-call": {
        if (
          typeof part.toolCallId !== "string" ||
          typeof part.toolName !== "string" ||
          typeof part.input !== "string"
        ) {
          throw new AiSdkModelError(
            model,
            `content[${index}] is a tool call without a string toolCallId, toolName and input`,
          );
        }
        // Read as a flag, a "true" would make a call the provider ran the gate's to run again.
        if (part.providerExecuted !== undefined && typeof part.providerExecuted !== "boolean") {
          throw new AiSdkModelError(
            model,
            `content[${index}] is a tool call whose providerExecuted is not a boolean, got ${shownValue(part.providerExecuted)}`,
          );
        }
        const args = parseArguments(part.input);
        const call = { type: "tool-call" as const, toolCallId: part.toolCallId, toolName: part.toolName };
        const kept = args.ok
          ? { ...call, input: args.value }
          : { ...call, input: part.input, invalidInput: true as const };
        parts.push(
          withOptions(
            part.providerExecuted === true ? { ...kept, providerExecuted: true } : kept,
            part.providerMetadata,
          ),
        );
        if (part.providerExecuted !== true) {
          // An id an earlier turn's provider-executed part holds is handed over as none: the run gives the
          // call one of its own, as it does a call whose id an earlier call had.
          const id = providerIds.has(part.toolCallId) ? "" : part.toolCallId;
          toolCalls.push({ id, name: part.toolName, input: args.ok ? args.value : undefined });
        }
        break;
      }
      case "tool-result": {
        const kept = {
          type: "tool-result" as const,
          toolCallId: part.toolCallId,
          toolName: part.toolName,
          result: part.result as Json,
        };
        parts.push(
          withOptions(part.isError === undefined ? kept : { ...kept, isError: part.isError }, part.providerMetadata),
        );
        break;
      }
      case "source":
      case "tool-approval-request":
        // Neither has a place in a V3 prompt: a source is the provider's citation, and an
        // approval request belongs to a provider-executed tool, which stays unapproved.
        break;
      default:
        throw new AiSdkModelError(
          model,
          `content[${index}] has an unknown type ${shownValue((raw as { type?: unknown } | null)?.type)}`,
        );
    }
    while (from.length < parts.length) from.push(index);
  });
  // One id for a client call and a provider-executed call or result: the provider would be sent two calls
  // (or two results) under it, and which result answers which call is anyone's guess. Refused, as the
  // engine refuses two client calls sharing an id.
  const providers = new Map<string, string>();
  parts.forEach((part, at) => {
    const provider = part.type === "tool-result" || (part.type === "tool-call" && part.providerExecuted === true);
    if (provider && !providers.has(part.toolCallId))
      providers.set(part.toolCallId, `the provider-executed ${part.type} at content[${from[at] ?? at}]`);
  });
  parts.forEach((part, at) => {
    if (part.type !== "tool-call" || part.providerExecuted === true) return;
    const other = providers.get(part.toolCallId);
    if (other !== undefined)
      throw new AiSdkModelError(
        model,
        `content[${from[at] ?? at}] is a tool call whose id ${shownKey(part.toolCallId)} is also that of ${other}`,
      );
  });
  const { unified, raw } = result.finishReason;
  if (toolCalls.length > 0 && unified !== "stop" && unified !== "tool-calls") {
    // Cut short (output limit, content filter, a reason the provider could not map): the AI SDK runs none
    // of such a turn's calls, and neither does loopctl.
    // Named by the ids the model sent: one an earlier provider-executed part holds is blank in `toolCalls`.
    const calls = parts
      .flatMap((p) =>
        p.type === "tool-call" && p.providerExecuted !== true
          ? [`${shownKey(p.toolCallId)} (${shownBare(p.toolName)})`]
          : [],
      )
      .join(", ");
    throw new AiSdkModelError(
      model,
      `the provider ended the turn with finish reason ${unified}${typeof raw === "string" && raw !== "" ? ` (${shownText(raw)})` : ""}, so its tool call${toolCalls.length === 1 ? "" : "s"} ${calls} ${toolCalls.length === 1 ? "is" : "are"} not run (the AI SDK runs a turn's calls only when it ends in stop or tool-calls)`,
    );
  }
  const kept: AiSdkProviderData = { type: "ai-sdk", parts };
  if (result.providerMetadata !== undefined)
    kept.providerMetadata = result.providerMetadata as AiSdkProviderData["providerMetadata"];
  kept.finishReason = unified;
  let providerData: AiSdkProviderData;
  try {
    // Through JSON once, so what a stored transcript gives back is what the next turn sends.
    providerData = JSON.parse(JSON.stringify(kept)) as AiSdkProviderData;
  } catch (error) {
    throw new AiSdkModelError(model, "the result's metadata or provider-executed results are not JSON", {
      cause: error,
    });
  }
  // Checked here, before any of the turn's calls runs, as the next turn would read it: a part V3 does
  // not allow is the model's fault, not a transcript's.
  const parsed = AiSdkProviderDataSchema.safeParse(providerData);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const [field, at, ...rest] = issue?.path ?? [];
    const where =
      field === "parts" && typeof at === "number"
        ? `content[${from[at] ?? at}] (a ${parts[at]?.type ?? "part"}) is not a V3 part`
        : "the result's providerMetadata is not V3 provider metadata";
    const path = (field === "parts" ? rest : [at, ...rest]).filter((key) => key !== undefined).map(String);
    throw new AiSdkModelError(
      model,
      `${where}: ${issue?.message ?? "invalid"}${path.length === 0 ? "" : ` at ${path.join(".")}`}`,
      { cause: parsed.error },
    );
  }
  const response: { text?: string; toolCalls: ToolCall[]; usage?: Usage; providerData: AiSdkProviderData } = {
    toolCalls,
    providerData,
  };
  if (text !== undefined) response.text = text;
  const usage = toUsage(result.usage);
  if (usage !== undefined) response.usage = usage;
  return response;
}
