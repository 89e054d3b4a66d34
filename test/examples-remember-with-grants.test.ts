import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { expectReadmeShows } from "./support/readme.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/remember-with-grants.ts", () => {
  it("runs to exit 0: asks once, the grant decides the next run, a changed tool is asked again", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/remember-with-grants.ts"], {
      cwd: root,
      timeout: 20_000,
    });
    const lines = stdout.split("\n");
    expect(lines[0]).toBe("[ 'ask_allowed' ]");
    expect(lines).toContainEqual(expect.stringMatching(/^second run: allow by grant [0-9a-f]{16}$/));
    expect(lines).toContainEqual(expect.stringMatching(/^asked: .*deploy/));
    expect(lines).toContainEqual(expect.stringMatching(/^changed tool: ask_denied by ask$/));
    expect(lines).toContainEqual(expect.stringMatching(/^ledger: [0-9a-f]{16} allow deploy this_tool, pinned sha256:/));
    expect(lines.filter((l) => l.startsWith("ledger: "))).toHaveLength(1);
  });

  it("is the example the README shows, verbatim", () => {
    expectReadmeShows("remember-with-grants.ts");
  });
});
