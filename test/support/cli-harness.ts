import { runCli } from "../../src/cli/index.js";
import type { CliContext } from "../../src/cli/index.js";

/** What one CLI run printed and returned. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** A context for calling a command's parts directly: what they write is kept in `out` and `err`. */
export function capturedContext(signal?: AbortSignal): CliContext & { out: string; err: string } {
  const context = {
    out: "",
    err: "",
    stdout: { write: (chunk: string) => (context.out += chunk) },
    stderr: { write: (chunk: string) => (context.err += chunk) },
    env: {},
    cwd: "/",
    ...(signal === undefined ? {} : { signal }),
  };
  return context;
}

/** Runs `loopctl argv…` in-process with captured streams. */
export async function cli(
  argv: readonly string[],
  options: { cwd: string; env?: Record<string, string | undefined>; signal?: AbortSignal },
): Promise<CliRun> {
  let stdout = "";
  let stderr = "";
  const context: CliContext = {
    stdout: { write: (chunk: string) => (stdout += chunk) },
    stderr: { write: (chunk: string) => (stderr += chunk) },
    env: options.env ?? {},
    cwd: options.cwd,
    ...(options.signal ? { signal: options.signal } : {}),
  };
  const code = await runCli(argv, context);
  return { code, stdout, stderr };
}
