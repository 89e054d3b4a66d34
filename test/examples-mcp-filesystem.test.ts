import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/mcp-filesystem.ts", () => {
  it("runs to exit 0 against server-filesystem: the read goes through, the write is asked, approved and done", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/mcp-filesystem.ts"], {
      cwd: root,
      timeout: 30_000,
    });
    const lines = stdout.split("\n");
    expect(lines[0]).toMatch(/^tools: \d+ from secure-filesystem-server$/);
    expect(lines).toContain('Allow the tool "fs_write_file" ("Write File") to run?');
    expect(lines).toContain("The server says (unverified): modifies its environment, destructive, idempotent.");
    expect(lines.filter((line) => line.startsWith("record: "))).toEqual([
      "record: fs_read_text_file allow",
      "record: fs_write_file ask_allowed",
    ]);
    expect(lines).toContain('file: "# Notes\\n- shipped 1.4\\n"');
  });
});
