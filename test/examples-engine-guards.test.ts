import { readFileSync } from "node:fs";
import { beforeAll, describe, expect, it } from "vitest";
import { runExample } from "./support/examples.js";
import { expectDocShows } from "./support/readme.js";

describe("examples/engine-guards.ts", () => {
  let runs: string[][] = [];
  beforeAll(async () => {
    runs = await Promise.all([runExample("engine-guards.ts"), runExample("engine-guards.ts")]);
  });

  it("runs to exit 0: a rule refuses an approved write, the breaker opens, loop detection stops the run, a deadline passes on a manual clock", () => {
    const lines = runs[0] ?? [];
    expect(lines.filter((l) => l.startsWith("  turn "))).toEqual([
      "  turn 0 w1: ask_allowed by ask (ask_resolver)",
      "  turn 1 w2: deny by no-env-files (middleware)",
      "  turn 2 s1: allow by default (middleware)",
      "  turn 3 s2: allow by default (middleware)",
      "  turn 4 s3: deny by circuit_breaker (engine)",
      "  turn 5 r1: allow by default (middleware)",
      "  turn 6 r2: allow by default (middleware)",
      "  turn 7 r3: deny by loop_detector (engine)",
    ]);
    expect(lines).toContain(
      "LOOP_DETECTED: loop detected: tool 'read_file' called 3 times with the same arguments (21c6f8c81146c846)",
    );
    expect(lines).toContain("  s3 refused: tool temporarily unavailable: circuit breaker open");
    expect(lines).toContain("  w2 refused: Permission denied by rule 'no-env-files' for tool 'write_file'");
    expect(lines.slice(-1)).toEqual(["ask_expired at 2026-12-02T09:00:30.000Z: nobody answered"]);
  });

  it("prints the same ids every run (seeded), and is what docs/engine.md shows, with its output", () => {
    const [first = [], second] = runs;
    expect(second).toEqual(first);
    for (const region of ["managers", "run", "seams"]) expectDocShows("engine-guards.ts", "docs/engine.md", region);
    const page = readFileSync(new URL("../docs/engine.md", import.meta.url), "utf8");
    expect(page).toContain(`\`\`\`text\n${first.slice(0, -2).join("\n")}\n\`\`\``);
    expect(page).toContain(`\`\`\`text\n${first.slice(-2).join("\n")}\n\`\`\``);
  });
});
