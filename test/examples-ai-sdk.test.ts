import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/ai-sdk.ts", () => {
  it("runs to exit 0: parks, is approved always-this-tool, the next generateText is decided by the grant; Agent runs on an AI SDK model", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/ai-sdk.ts"], {
      cwd: root,
      timeout: 30_000,
    });
    expect(stdout.split("\n").filter((line) => line !== "")).toEqual([
      'asked: Run deploy with {"env":"prod","version":"1.4.0"}?',
      "record: deploy ask_allowed (ask)",
      "first: 1.4.0 is live",
      "record: deploy allow (grant)",
      "second: 1.4.1 is live",
      "agent: prod is green (2 turns, 24 input tokens)",
    ]);
  });
});
