/**
 * `loopctl`: everything `loopctl/ask`, `loopctl/grant`, `loopctl/engine`,
 * `loopctl/audit`, `loopctl/testing` and `loopctl/server` export, plus
 * `LoopctlError`, the base class of every typed error. Adapters
 * whose SDK is an optional peer dependency live on their own subpaths only,
 * so importing the root never loads one.
 *
 * @packageDocumentation
 */
export { LoopctlError } from "./errors.js";
export * from "./ask/index.js";
export * from "./grant/index.js";
export * from "./engine/index.js";
export * from "./audit/index.js";
export * from "./testing/index.js";
export * from "./server/index.js";
