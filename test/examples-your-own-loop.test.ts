import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { expectDocShows } from "./support/readme.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/your-own-loop.ts", () => {
  it("runs to exit 0: asks, remembered answers decide the repeats, the audit log verifies, the policy alone asks again for a changed tool", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/your-own-loop.ts"], { cwd: root, timeout: 20_000 });
    const lines = stdout.trimEnd().split("\n");
    expect(lines).toEqual([
      "ask_allowed by ask: wrote notes/todo.md",
      "ask_denied by ask: Permission denied by approver for tool 'write_file'",
      "allow by grant: wrote notes/todo.md",
      "deny by grant: Permission denied by remembered grant for tool 'write_file'",
      "audit log: 4 records, chain intact",
      "ask (no_grant), allow, ask (tool_changed)",
    ]);
    const page = readFileSync(new URL("../docs/your-own-loop.md", import.meta.url), "utf8");
    expect(page).toContain(`\`\`\`text\n${lines.slice(0, 5).join("\n")}\n\`\`\``);
    expect(page).toContain(`\`\`\`text\n${lines[5]}\n\`\`\``);
  });

  it("is what docs/your-own-loop.md shows, part by part", () => {
    for (const region of ["gate", "ui", "loop", "policy"]) expectDocShows("your-own-loop.ts", "docs/your-own-loop.md", region);
  });
});
