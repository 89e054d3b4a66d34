import { runCli } from "../../src/cli/index.js";
import type { CliContext } from "../../src/cli/index.js";

/** Runs `loopctl console …` in-process until `stop` aborts; `printed` resolves with the URL it prints. */
export function startConsole(
  dir: string,
  args: string[],
  env: Record<string, string> = {},
): {
  printed: Promise<string>;
  stop: AbortController;
  done: Promise<number>;
  output: () => string;
  errors: () => string;
} {
  let stdout = "";
  let stderr = "";
  let found!: (url: string) => void;
  const printed = new Promise<string>((resolve) => (found = resolve));
  const stop = new AbortController();
  const context: CliContext = {
    stdout: {
      write: (chunk: string) => {
        stdout += chunk;
        const match = /^open (\S+)$/m.exec(stdout);
        if (match) found(match[1] as string);
      },
    },
    stderr: { write: (chunk: string) => (stderr += chunk) },
    env,
    cwd: dir,
    signal: stop.signal,
  };
  const done = runCli(["console", ...args], context);
  void done.then(() => found(""));
  return { printed, stop, done, output: () => stdout + stderr, errors: () => stderr };
}
