import { runCli } from "./run.js";

// A reader that goes away early (`loopctl grants list | head -1`) is not an
// error worth a stack trace: stop quietly, as other command-line tools do.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code !== "EPIPE") throw error;
    process.exit(process.exitCode ?? 0);
  });
}

// The bin stays thin: everything testable lives in runCli.
process.exitCode = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  cwd: process.cwd(),
});
