import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { expectReadmeShows } from "./support/readme.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/gate-in-your-loop.ts", () => {
  it("runs to exit 0: one call runs, one is refused by the approver, one never reaches it (invalid)", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/gate-in-your-loop.ts"], {
      cwd: root,
      timeout: 20_000,
    });
    expect(stdout.trim().split("\n")).toEqual([
      "call_1 ran deployed 1.4.0 to staging [ask_allowed]",
      "call_2 refused Permission denied by approver for tool 'deploy' [ask_denied]",
      `call_3 refused Invalid arguments for tool 'deploy': $.version: must match pattern "^\\d+\\.\\d+\\.\\d+$" [deny]`,
    ]);
  });

  it("is the example the README shows, verbatim", () => {
    expectReadmeShows("gate-in-your-loop.ts");
  });
});
