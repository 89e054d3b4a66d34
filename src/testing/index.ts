/**
 * `loopctl/testing`: deterministic stand-ins for a model and a clock.
 *
 * @packageDocumentation
 */
export { ScriptedModel, ScriptExhaustedError } from "./scripted-model.js";
export type { RecordedRequest, ScriptedTurn } from "./scripted-model.js";
export { ManualClock } from "./manual-clock.js";
