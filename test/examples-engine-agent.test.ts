import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { expectDocShows } from "./support/readme.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/engine-agent.ts", () => {
  it("runs to exit 0: zod defaults reach the tool, invalid arguments are refused, a transcript goes on, providerData comes back, the turn cap stops a run", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/engine-agent.ts"], { cwd: root, timeout: 20_000 });
    const lines = stdout.trimEnd().split("\n");
    expect(lines.slice(0, 5)).toEqual([
      "Read the changelog; '1.4' is not a version deploy accepts.",
      "3 model requests; records: read_file allow (hook), deploy deny (schema)",
      "  read_file ran: contents of CHANGELOG.md (at most 4096 bytes)",
      `  deploy refused: Invalid arguments for tool 'deploy': $.version: must match pattern "^\\d+\\.\\d+\\.\\d+$"`,
      "turn 1 saw: You are a release assistant. Be brief.; user, assistant, tool_result; tools read_file, deploy",
    ]);
    expect(lines[5]).toBe(`1.4.0 is on staging. (the model saw 7 messages first; the tool said {"deployed":"1.4.0","env":"staging"})`);
    expect(lines[6]).toMatch(/^ran after rule \{"rule":"read"\}: contents of README\.md \(at most 4096 bytes\) \[12\+7 tokens, call id call_…\]$/);
    expect(lines.slice(7)).toEqual([
      "BudgetExceededError BUDGET_EXCEEDED: turn budget exhausted: 20 of 20 turns used",
      "kept 21 records (the last: deny budget.hard) and 41 messages",
    ]);
  });

  it("is what docs/engine.md shows, part by part, with the output it prints", async () => {
    for (const region of ["tools", "agent", "continue", "model", "errors"]) expectDocShows("engine-agent.ts", "docs/engine.md", region);
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/engine-agent.ts"], { cwd: root, timeout: 20_000 });
    const lines = stdout.trimEnd().split("\n");
    const page = readFileSync(new URL("../docs/engine.md", import.meta.url), "utf8");
    expect(page).toContain(`\`\`\`text\n${lines.slice(0, 5).join("\n")}\n\`\`\``);
    expect(page).toContain(`\`\`\`text\n${lines.slice(7).join("\n")}\n\`\`\``);
  });
});
