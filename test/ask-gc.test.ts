import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { APPROVER_DROPPED_REASON } from "../src/ask/index.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("an approver dropped without close()", () => {
  it("does not leave its asks parked: once collected, the park settles as a denial and ended() says abandoned", async () => {
    const { stdout } = await run(process.execPath, ["--expose-gc", "--import", "tsx", "test/support/ask-gc-child.ts"], {
      cwd: root,
      timeout: 20_000,
    });
    const lines = stdout.trim().split("\n");
    expect(JSON.parse(lines[lines.length - 1]!)).toEqual({
      state: "fulfilled",
      value: { type: "deny", reason: APPROVER_DROPPED_REASON },
      ending: { type: "withdrawn", reason: "abandoned" },
    });
  });
});
