export { LoopctlError } from "./errors.js";
export * from "./ask/index.js";
export * from "./grant/index.js";
export * from "./engine/index.js";
export * from "./audit/index.js";
