import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

// Each example must finish on its own: a hanging handle would hit the timeout
// and reject, and a non-zero exit rejects too.
async function runExample(file: string): Promise<string> {
  const { stdout } = await run(process.execPath, ["--import", "tsx", file], { cwd: root, timeout: 20_000 });
  return stdout;
}

describe("ask examples", () => {
  it("examples/sync-resolver.ts runs to exit 0 and applies its policy", async () => {
    const out = await runExample("examples/sync-resolver.ts");
    expect(out).toContain("read_file: approve");
    expect(out).toContain("write_file: approve");
    expect(out).toContain("shell: deny (shell needs a human)");
  });

  it("examples/approval-channel.ts runs to exit 0, answering each ask by id in park order", async () => {
    const out = await runExample("examples/approval-channel.ts");
    const ui = out.split("\n").filter((line) => line.startsWith("ui: "));
    expect(ui).toEqual([
      "ui: Read ./src/index.ts? -> approve (accepted: true)",
      "ui: Overwrite ./package.json? -> deny (accepted: true)",
      "ui: Deploy to production? -> deny (accepted: true)",
    ]);
    expect(out).toContain("engine: read_file approve");
    expect(out).toContain("engine: deploy deny");
    expect(out).toContain("after close: deny (approval channel closed)");
  });
});
