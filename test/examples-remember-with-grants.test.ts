import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { expectReadmeShows } from "./support/readme.js";

const root = fileURLToPath(new URL("..", import.meta.url));

interface Exit {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the example as its header says, with `args`; resolves with how it ended, whatever that was. */
function example(args: readonly string[] = []): Promise<Exit> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", "examples/remember-with-grants.ts", ...args],
      { cwd: root, timeout: 20_000 },
      (error, stdout, stderr) => {
        resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr });
      },
    );
  });
}

describe("examples/remember-with-grants.ts", () => {
  it("runs to exit 0: asks once, the grant decides the next run, a changed tool is asked again", async () => {
    const { code, stdout, stderr } = await example();
    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    const lines = stdout.split("\n");
    expect(lines.slice(0, 2)).toEqual(["approving: Run deploy?", "[ 'ask_allowed' ]"]);
    expect(lines).toContainEqual(expect.stringMatching(/^second run: allow by grant [0-9a-f]{16}$/));
    expect(lines).toContainEqual(expect.stringMatching(/^asked: .*deploy/));
    expect(lines).toContainEqual(expect.stringMatching(/^changed tool: ask_denied by ask$/));
    expect(lines).toContainEqual(expect.stringMatching(/^ledger: [0-9a-f]{16} allow deploy this_tool, pinned sha256:/));
    expect(lines.filter((l) => l.startsWith("ledger: "))).toHaveLength(1);
  });

  it("runs to exit 0 every time against the same ledger: the second time the grant decides and nothing waits", async () => {
    const dir = await mkdtemp(join(tmpdir(), "loopctl-example-"));
    try {
      const first = await example([dir]);
      expect({ code: first.code, stderr: first.stderr }).toEqual({ code: 0, stderr: "" });
      expect(first.stdout).toMatch(/^approving: Run deploy\?\n\[ 'ask_allowed' \]\n/);
      const second = await example([dir]);
      expect({ code: second.code, stderr: second.stderr }).toEqual({ code: 0, stderr: "" });
      expect(second.stdout).toMatch(/^\[ 'allow' \]\nsecond run: allow by grant [0-9a-f]{16}\n/);
      // The same one grant, not a second one.
      expect(second.stdout.match(/^ledger: .*$/gm)).toEqual(first.stdout.match(/^ledger: .*$/gm));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("is the example the README shows, verbatim", () => {
    expectReadmeShows("remember-with-grants.ts");
  });
});
