/**
 * One writer process for test/grant-multiprocess.test.ts:
 *   node --import tsx test/support/grant-writer.ts <root> <project> <n> <seed>
 * Prints "ready", waits for a line on stdin, then saves n grants of its own
 * (re-saving some), revoking every third one right after saving it, and
 * prints one JSON line: { saved: string[], revoked: string[] }.
 */
import { createInterface } from "node:readline";
import { FileGrantStore } from "../../src/grant/index.js";
import { writeGrants } from "./grant-writes.js";

const [root, project, countText, seedText] = process.argv.slice(2);
if (root === undefined || project === undefined || countText === undefined || seedText === undefined) {
  throw new Error("usage: grant-writer.ts <root> <project> <n> <seed>");
}
const count = Number(countText);
const seed = Number(seedText);
const store = new FileGrantStore(root, project, { lockTimeoutMs: 60_000 });

const lines = createInterface({ input: process.stdin });
process.stdout.write("ready\n");
await new Promise<void>((resolve) => lines.once("line", () => resolve()));
lines.close();

const { saved, revoked } = await writeGrants(store, count, seed);
process.stdout.write(`${JSON.stringify({ saved, revoked })}\n`);
