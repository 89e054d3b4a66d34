import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { cli } from "./support/cli-harness.js";

const repo = fileURLToPath(new URL("..", import.meta.url));

const pages = [
  "README.md",
  ...readdirSync(join(repo, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`),
];

interface Use {
  readonly where: string;
  readonly command: string;
  readonly options: readonly string[];
}

/**
 * Each `loopctl <command>` the pages show, in a code block or a code span:
 * the command's words and the options written after them on that line (up to
 * the span's end or a shell comment).
 */
function usesIn(page: string): Use[] {
  const lines = readFileSync(join(repo, page), "utf8").split("\n");
  return lines.flatMap((line, i) =>
    [...line.matchAll(/(?:^\s*|`|\$ )loopctl ((?:grants|audit) [a-z]+|console)\b([^`#]*)/g)].map((m) => ({
      where: `${page}:${i + 1}`,
      command: m[1] as string,
      options: [...(m[2] as string).matchAll(/(?<![\w-])--?[a-z][a-z-]*/g)].map((o) => o[0]),
    })),
  );
}

const uses = pages.flatMap(usesIn);

describe("the pages' loopctl command lines are the CLI's", () => {
  it("finds the command lines", () => {
    expect(uses.length).toBeGreaterThan(30);
    expect(new Set(uses.map((u) => u.command))).toEqual(
      new Set([
        "grants list",
        "grants revoke",
        "grants reset",
        "grants explain",
        "grants repair",
        "audit verify",
        "console",
      ]),
    );
  });

  it("every command shown exists, and every option shown on it is one its --help lists", async () => {
    const helps = new Map<string, string>();
    const problems: string[] = [];
    for (const use of uses) {
      if (!helps.has(use.command)) {
        const run = await cli([...use.command.split(" "), "--help"], { cwd: repo });
        helps.set(use.command, run.code === 0 ? run.stdout : "");
      }
      const help = helps.get(use.command) as string;
      if (help === "") problems.push(`${use.where}: loopctl ${use.command} is no command`);
      for (const option of use.options) {
        const listed = new RegExp(`(?:^|[\\s\\[(])${option}(?![\\w-])`, "m").test(help);
        if (!listed) problems.push(`${use.where}: loopctl ${use.command} has no ${option}`);
      }
    }
    expect(problems).toEqual([]);
  });
});
