import { runCli } from "./run.js";

// The bin stays thin: everything testable lives in runCli.
process.exitCode = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  cwd: process.cwd(),
});
