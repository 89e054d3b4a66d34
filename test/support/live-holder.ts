import { spawn } from "node:child_process";

/** A live process of this host that opens the files it is given and keeps them open until killed. */
export interface LiveHolder {
  readonly pid: number;
  /** Resolves once the process has `path` open. */
  hold(path: string): Promise<void>;
  kill(): void;
}

/**
 * Starts a {@link LiveHolder}: a writer keeps its lock (or its claim to break
 * one) open from creating it until after removing it, so a record naming a
 * live process stands for a holder only while that process has the file open.
 */
export function liveHolder(): LiveHolder {
  const child = spawn(
    process.execPath,
    [
      "-e",
      'const fs = require("fs"); process.stdin.setEncoding("utf8").on("data", (p) => { fs.openSync(p, "r"); process.stdout.write("open"); });',
    ],
    { stdio: ["pipe", "pipe", "ignore"] },
  );
  return {
    pid: child.pid as number,
    hold: (path) =>
      new Promise((resolve) => {
        child.stdout.once("data", () => resolve());
        child.stdin.write(path);
      }),
    kill: () => child.kill("SIGKILL"),
  };
}
