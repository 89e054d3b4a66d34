/**
 * `loopctl/ai-sdk`: loopctl on the Vercel AI SDK 6. `fromLanguageModel`
 * runs loopctl's `Agent` on any provider model (`LanguageModelV3`);
 * `gateTools` puts loopctl's `Gate` in front of the tools of a
 * `generateText`/`streamText` loop. Needs `ai@6` (and `@ai-sdk/provider@3`
 * for the types); importing this module loads neither.
 *
 * @packageDocumentation
 */
export { fromLanguageModel } from "./language-model.js";
export type { FromLanguageModelOptions, LanguageModelSettings } from "./language-model.js";
export type { RefusalOutput } from "./prompt.js";
export { AiSdkProviderDataSchema } from "./provider-data.js";
export type { AiSdkAssistantPart, AiSdkProviderData } from "./provider-data.js";
export { ToolRefusalSchema, gateTools, isToolRefusal } from "./gate-tools.js";
export type { GateToolsOptions, GatedTools, ToolRefusal } from "./gate-tools.js";
export { AiSdkModelError, AiSdkToolError, AiSdkTranscriptError } from "./errors.js";
