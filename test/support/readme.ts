import { readFileSync } from "node:fs";
import { expect } from "vitest";

/** Checks that the `// #region readme` … `// #endregion` part of `example` (under examples/) appears in README.md as a ts code block, verbatim. */
export function expectReadmeShows(example: string): void {
  const text = readFileSync(new URL(`../../examples/${example}`, import.meta.url), "utf8");
  const region = /\/\/ #region readme\n([\s\S]*?)\/\/ #endregion/.exec(text)?.[1];
  expect(region).toBeDefined();
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  expect(readme).toContain(`\`\`\`ts\n${region}\`\`\``);
}
