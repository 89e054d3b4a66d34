import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/openai-agents.ts", () => {
  it("runs to exit 0: interrupted, answered and remembered; the next run is decided by the grant without an interruption", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/openai-agents.ts"], {
      cwd: root,
      timeout: 30_000,
    });
    expect(stdout.split("\n").filter((line) => line !== "")).toEqual([
      "1.4.0: 1 interruption(s)",
      'asked: Allow the tool "deploy" to run?',
      "record: deploy ask_allowed (ask)",
      "1.4.0: deployed 1.4.0 to prod",
      "record: deploy allow (grant)",
      "1.4.1: 0 interruption(s)",
      "1.4.1: deployed 1.4.1 to prod",
    ]);
  });
});
