/**
 * Prints the table of a results file (default bench/results.json) again,
 * as Markdown with --markdown: how docs/performance.md gets a real run's table.
 *
 *   npx tsx bench/table.ts [--markdown] [results.json]
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Row } from "./lib/harness.js";
import { renderNotes, renderTable } from "./lib/format.js";

const args = process.argv.slice(2);
const markdown = args.includes("--markdown");
const file = args.find((a) => !a.startsWith("--")) ?? fileURLToPath(new URL("./results.json", import.meta.url));
const results = JSON.parse(readFileSync(file, "utf8")) as {
  date: string;
  machine: { cpu: string; cores: number; node: string; memoryBytes: number; platform: string; release: string };
  source: string;
  rows: Row[];
};
const m = results.machine;
process.stdout.write(
  `${renderTable(results.rows, markdown)}\n\n${renderNotes(results.rows)}\n\n` +
    `Run ${results.date} on ${m.cpu} × ${m.cores} cores, ${(m.memoryBytes / 2 ** 30).toFixed(0)} GiB, ${m.platform} ${m.release}, Node ${m.node}; ${results.source}.\n`,
);
