/**
 * The `loopctl` command line, as a function: `runCli(argv, context)` runs one
 * command against the streams, environment and folder it is given.
 *
 * @packageDocumentation
 */
export { runCli } from "./run.js";
export { EXIT } from "./context.js";
export type { CliContext, CliOutput, ExitCode } from "./context.js";
