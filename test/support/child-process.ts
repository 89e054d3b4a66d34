/**
 * Test child processes that speak in lines: the child prints "ready" once it
 * is set up, waits for "go" on stdin, and prints one JSON line as its result
 * (or any number of lines the test reads as they come).
 */
import { execFile, spawn } from "node:child_process";
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface Child {
  readonly pid: number;
  /** Resolves once the child printed "ready". */
  readonly ready: Promise<void>;
  /** Every line printed so far (after "ready"). */
  readonly lines: string[];
  /** Resolves with the child's exit code (null when killed by a signal) and its stderr. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
  /** Sends one line to the child's stdin. */
  send(line: string): void;
  /** Resolves once a printed line satisfies `test`. */
  waitForLine(test: (line: string) => boolean): Promise<string>;
  kill(signal: NodeJS.Signals): void;
}

/**
 * Starts `node --import tsx <script> ...args` in the repository, or `node <script> ...args` for a
 * script bundled already (an `.mjs` file, see bundleChild).
 */
export function startChild(script: string, args: readonly string[], env: Record<string, string> = {}): Child {
  const loader = script.endsWith(".mjs") ? [] : ["--import", "tsx"];
  const child: ChildProcessWithoutNullStreams = spawn(process.execPath, [...loader, script, ...args], {
    cwd: repo,
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  const lines: string[] = [];
  const watchers: { test: (line: string) => boolean; resolve: (line: string) => void }[] = [];
  let stderr = "";
  let buffer = "";
  let markReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    buffer += chunk;
    for (let at = buffer.indexOf("\n"); at >= 0; at = buffer.indexOf("\n")) {
      const line = buffer.slice(0, at);
      buffer = buffer.slice(at + 1);
      if (line === "ready") {
        markReady();
        continue;
      }
      lines.push(line);
      for (const watcher of [...watchers]) {
        if (watcher.test(line)) {
          watchers.splice(watchers.indexOf(watcher), 1);
          watcher.resolve(line);
        }
      }
    }
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>(
    (resolve, reject) => {
      child.on("error", reject);
      child.on("close", (code, signal) => {
        markReady();
        resolve({ code, signal, stderr });
      });
    },
  );
  return {
    pid: child.pid ?? -1,
    ready,
    lines,
    exited,
    send: (line) => child.stdin.write(`${line}\n`),
    waitForLine: (test) => {
      const found = lines.find(test);
      if (found !== undefined) return Promise.resolve(found);
      return new Promise<string>((resolve, reject) => {
        watchers.push({ test, resolve });
        void exited.then(({ code, stderr: err }) =>
          reject(new Error(`${script} exited (${String(code)}) before the line came: ${err}`)),
        );
      });
    },
    kill: (signal) => child.kill(signal),
  };
}

/** Waits for the child to exit with code 0 and parses its last line as JSON. */
export async function resultOf<T>(child: Child, name: string): Promise<T> {
  const { code, signal, stderr } = await child.exited;
  if (code !== 0) throw new Error(`${name} exited with ${String(signal ?? code)}: ${stderr}`);
  const last = child.lines.at(-1);
  if (last === undefined) throw new Error(`${name} printed no result: ${stderr}`);
  return JSON.parse(last) as T;
}

/** Reads one line from stdin (the parent's "go"). */
export async function waitForGo(): Promise<void> {
  const { createInterface } = await import("node:readline");
  const lines = createInterface({ input: process.stdin });
  await new Promise<void>((resolve) => lines.once("line", () => resolve()));
  lines.close();
}

/**
 * Runs `node --expose-gc --import tsx <script> ...args` in the repository to its end (a child that
 * collects garbage and measures what stays reachable) and resolves with the JSON of its last line.
 */
export async function gcChildResult(
  script: string,
  args: readonly string[] = [],
  timeoutMs = 20_000,
): Promise<unknown> {
  const { stdout } = await promisify(execFile)(process.execPath, ["--expose-gc", "--import", "tsx", script, ...args], {
    cwd: repo,
    timeout: timeoutMs,
  });
  const lines = stdout.trim().split("\n");
  return JSON.parse(lines[lines.length - 1]!) as unknown;
}
