import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../..", import.meta.url));

/** A running `npm run demo -- --console …`. */
export interface DemoProcess {
  /** The console URL (with its token) the demo prints. */
  readonly consoleUrl: Promise<string>;
  /** How the process ended, with everything it printed. */
  readonly exited: Promise<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>;
  kill(): void;
}

/** Starts the demo as `npm run demo` would (stdin not a terminal), with `args`. */
export function startDemo(args: readonly string[]): DemoProcess {
  const child = spawn(process.execPath, ["--import", "tsx", "demo/release-assistant.ts", ...args], {
    cwd: repo,
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, NO_COLOR: "1" },
  });
  child.stdin.end();
  let stdout = "";
  let stderr = "";
  let found!: (url: string) => void;
  let missing!: (error: Error) => void;
  const consoleUrl = new Promise<string>((resolve, reject) => {
    found = resolve;
    missing = reject;
  });
  // A run that is expected to fail never prints one: not an unhandled rejection.
  consoleUrl.catch(() => undefined);
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString("utf8");
    const match = /^ {4}(http:\/\/\S+\?token=\S+)\n/m.exec(stdout);
    if (match) found(match[1] as string);
  });
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const exited = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    child.once("exit", (code) => {
      missing(new Error(`the demo exited (${String(code)}) without printing a console URL:\n${stdout}\n${stderr}`));
      resolve({ code, stdout, stderr });
    });
  });
  return { consoleUrl, exited, kill: () => child.kill() };
}
