import { readFileSync } from "node:fs";
import { expect } from "vitest";

/**
 * Checks that the `// #region <region>` … `// #endregion` part of `example`
 * (under examples/) appears in `doc` (a path from the repository root) as a
 * ts code block, verbatim.
 */
export function expectDocShows(example: string, doc: string, region: string): void {
  const text = readFileSync(new URL(`../../examples/${example}`, import.meta.url), "utf8");
  const shown = new RegExp(`// #region ${region}\\n([\\s\\S]*?)// #endregion`).exec(text)?.[1];
  expect(shown, `examples/${example} has no region '${region}'`).toBeDefined();
  const page = readFileSync(new URL(`../../${doc}`, import.meta.url), "utf8");
  expect(page, `${doc} shows region '${region}' of examples/${example} verbatim`).toContain(`\`\`\`ts\n${shown}\`\`\``);
}

/** Checks that the `// #region readme` … `// #endregion` part of `example` (under examples/) appears in README.md as a ts code block, verbatim. */
export function expectReadmeShows(example: string): void {
  expectDocShows(example, "README.md", "readme");
}
