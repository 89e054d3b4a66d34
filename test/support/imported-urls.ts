import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * The URLs of every module a fresh Node process loads through `import` while
 * it runs `code` (an ES module, under tsx, in the repository `repo`), in load
 * order. `code` exits non-zero to fail the call.
 */
export async function importedUrls(repo: string, code: string): Promise<string[]> {
  const dir = await mkdtemp(join(tmpdir(), "loopctl-imports-"));
  const log = join(dir, "imports.txt");
  try {
    await run(
      process.execPath,
      ["--import", "tsx", "--import", "./test/support/record-imports.mjs", "--input-type=module", "-e", code],
      { cwd: repo, env: { ...process.env, LOOPCTL_IMPORT_LOG: log }, timeout: 30_000 },
    );
    return (await readFile(log, "utf8")).split("\n").filter((url) => url !== "");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
