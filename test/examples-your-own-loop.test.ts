import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { runExample } from "./support/examples.js";
import { expectDocShows } from "./support/readme.js";

describe("examples/your-own-loop.ts", () => {
  it("runs to exit 0: asks, remembered answers decide the repeats, the audit log verifies, the policy alone asks again for a changed tool", async () => {
    const lines = await runExample("your-own-loop.ts");
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
    for (const region of ["gate", "ui", "loop", "policy"])
      expectDocShows("your-own-loop.ts", "docs/your-own-loop.md", region);
  });
});
