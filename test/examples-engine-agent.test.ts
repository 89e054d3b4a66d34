import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { runExample } from "./support/examples.js";
import { expectDocShows } from "./support/readme.js";

describe("examples/engine-agent.ts", () => {
  let lines: string[] = [];
  beforeAll(async () => {
    lines = await runExample("engine-agent.ts");
  });

  it("runs to exit 0: zod defaults reach the tool, invalid arguments are refused, a transcript goes on, providerData comes back, the turn cap stops a run", () => {
    expect(lines.slice(0, 5)).toEqual([
      "Read the changelog; '1.4' is not a version deploy accepts.",
      "3 model requests; records: read_file allow (hook), deploy deny (schema)",
      "  read_file ran: contents of CHANGELOG.md (at most 4096 bytes)",
      `  deploy refused: Invalid arguments for tool 'deploy': $.version: must match pattern "^\\d+\\.\\d+\\.\\d+$"`,
      "turn 1 saw: You are a release assistant. Be brief.; user, assistant, tool_result; tools read_file, deploy",
    ]);
    expect(lines[5]).toBe(
      `1.4.0 is on staging. (the model saw 7 messages first; the tool said {"deployed":"1.4.0","env":"staging"})`,
    );
    expect(lines[6]).toMatch(
      /^ran after rule \{"rule":"read"\}: contents of README\.md \(at most 4096 bytes\) \[12\+7 tokens, call id call_…\]$/,
    );
    expect(lines.slice(7)).toEqual([
      "BudgetExceededError BUDGET_EXCEEDED: turn budget exhausted: 20 of 20 turns used",
      "kept 21 records (the last: deny budget.hard) and 41 messages",
    ]);
  });

  it("is what docs/engine.md shows, part by part, with the output it prints", () => {
    for (const region of ["tools", "agent", "continue", "model", "errors"])
      expectDocShows("engine-agent.ts", "docs/engine.md", region);
    const page = readFileSync(new URL("../docs/engine.md", import.meta.url), "utf8");
    expect(page).toContain(`\`\`\`text\n${lines.slice(0, 5).join("\n")}\n\`\`\``);
    expect(page).toContain(`\`\`\`text\n${lines.slice(7).join("\n")}\n\`\`\``);
  });
});
