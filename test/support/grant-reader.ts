// Runs the store's read paths against one ledger, for test/hostile-fs.test.ts,
// which starts it as an unprivileged user (root reads any file):
//   node <bundle> <root> <project>
// Prints one JSON line: what load(), resetCorrupt(), clear({ corrupt:
// "keep-aside" }) and `loopctl grants list` / `grants reset` / `grants repair`
// each gave.
import { runCli } from "../../src/cli/index.js";
import { FileGrantStore } from "../../src/grant/index.js";

const [root, project] = process.argv.slice(2);
if (root === undefined || project === undefined) throw new Error("usage: grant-reader.ts <root> <project>");
const store = new FileGrantStore(root, project);

async function outcome(op: () => Promise<unknown>): Promise<unknown> {
  try {
    const value = await op();
    return { ok: Array.isArray(value) ? value.length : (value ?? null) };
  } catch (error) {
    return { error: (error as { code?: string }).code ?? String(error) };
  }
}

async function cli(argv: string[]): Promise<{ code: number; stderr: string }> {
  let stderr = "";
  const code = await runCli([...argv, "--root", root!, "--project", project!], {
    stdout: { write: () => true },
    stderr: { write: (chunk: string) => (stderr += chunk) },
    env: {},
    cwd: project!,
  });
  return { code, stderr };
}

process.stdout.write(
  `${JSON.stringify({
    load: await outcome(() => store.load()),
    resetCorrupt: await outcome(() => store.resetCorrupt()),
    clearKeepAside: await outcome(() => store.clear({ corrupt: "keep-aside" })),
    list: await cli(["grants", "list"]),
    reset: await cli(["grants", "reset"]),
    repair: await cli(["grants", "repair"]),
  })}\n`,
);
