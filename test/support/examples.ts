import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * Runs `examples/<file>` as its header says (`npx tsx examples/<file>`) and
 * resolves with the lines it printed; rejects on a non-zero exit, or when it
 * does not finish on its own within 20 s (a handle left open).
 */
export async function runExample(file: string): Promise<string[]> {
  const { stdout } = await run(process.execPath, ["--import", "tsx", `examples/${file}`], {
    cwd: root,
    timeout: 20_000,
  });
  return stdout.trimEnd().split("\n");
}
