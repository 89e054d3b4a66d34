import { LoopctlError } from "../errors.js";
import { EXIT } from "./context.js";
import { printable } from "./format.js";
import { runCli } from "./run.js";

// Output that cannot be written is exit 4, never a stack trace, and never 0:
// a script must not take output that was not delivered for a command done.
// A command that had already failed keeps its own code (a usage error, a
// failed check): the failure, not the lost output, is what a script acts on.
// A reader that goes away early (`loopctl grants list | head -1`) is said by
// the exit code alone, quietly, as other command-line tools killed by SIGPIPE
// are; any other failure (a full disk, EBADF) in one line on stderr when
// stderr still works.
// Once the user stops a command that runs until stopped (`console | tee log`, then Ctrl-C, which
// ends tee too), the line saying it stopped may meet a pipe nobody reads: its work is done and the
// stop was asked for, so the command ends as it would have, its exit code its own.
let stopAsked = false;
const outputLost = (): never => {
  const failed = process.exitCode;
  process.exit(typeof failed === "number" && failed !== EXIT.ok ? failed : EXIT.io);
};
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (stopAsked) return;
  if (error.code === "EPIPE") outputLost();
  try {
    process.stderr.write(`loopctl: cannot write the output: ${printable(error.message)}\n`);
  } catch {
    // stderr failed too: the exit code is all that is left
  }
  outputLost();
});
// Warnings and errors that cannot be said are lost, but the command goes on:
// stopped there, it would end before its work and before the result on stdout
// (with --json, the one document a script reads), as if nothing had happened.
process.stderr.on("error", () => undefined);

// A library's process warning (node-postgres's about an sslmode in the --database URL) is said as
// loopctl says its own: one `loopctl: warning:` line on stderr, its control characters escaped, not
// Node's block of lines with the process id and a hint to run node with --trace-warnings. Warnings
// turned off (--no-warnings, NODE_NO_WARNINGS=1) leave Node no listener here, and stay off.
if (process.listenerCount("warning") > 0) {
  process.removeAllListeners("warning");
  process.on("warning", (warning) => {
    const kind = warning.name === "Warning" ? "" : `${warning.name}: `;
    const text = warning.message
      .split("\n")
      .map((line) => line.trim())
      .filter((line) => line !== "")
      .join(" ");
    process.stderr.write(`loopctl: warning: ${printable(kind + text)}\n`);
  });
}

/**
 * The current folder, read when a command needs it: one deleted under the
 * shell is an I/O error (exit 4) of that command, in JSON too with --json,
 * not a stack trace before any command ran.
 */
function currentFolder(): string {
  try {
    return process.cwd();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? "unknown";
    throw new LoopctlError(
      "CWD_UNAVAILABLE",
      `the current folder cannot be read (${code}): was it deleted? run loopctl in a folder that exists`,
      { cause: error },
    );
  }
}

// The bin stays thin: everything testable lives in runCli.
process.exitCode = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  get cwd() {
    return currentFolder();
  },
  stopAsked: () => {
    stopAsked = true;
  },
});
