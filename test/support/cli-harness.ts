import { runCli } from "../../src/cli/index.js";
import type { CliContext } from "../../src/cli/index.js";

/** What one CLI run printed and returned. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
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
