/**
 * One writer process for test/grant-multiprocess.test.ts:
 *   node --import tsx test/support/grant-writer.ts <root> <project> <n> <seed>
 * Prints "ready", waits for a line on stdin, then saves n grants of its own
 * (re-saving some), revoking every third one right after saving it, and
 * prints one JSON line: { saved: string[], revoked: string[] }.
 */
import { createInterface } from "node:readline";
import { FileGrantStore, Grant, GrantScope } from "../../src/grant/index.js";

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

const saved: string[] = [];
const revoked: string[] = [];
for (let i = 0; i < count; i++) {
  const scope = i % 2 === 0 ? GrantScope.thisTool() : GrantScope.thisCall({ seed, i, path: `/w/${seed}/${i}` });
  const grant = new Grant(`w${seed}-tool-${i}`, i % 5 === 0 ? "deny" : "allow", scope).withCreatedAtMs(i);
  await store.save(grant);
  if (i % 4 === 1) await store.save(grant.withNote("re-saved"));
  if (i % 3 === 0) {
    const removed = await store.revoke(grant.id);
    if (removed?.id !== grant.id) throw new Error(`revoke of ${grant.id} found nothing`);
    revoked.push(grant.id);
  } else {
    saved.push(grant.id);
  }
}
process.stdout.write(`${JSON.stringify({ saved, revoked })}\n`);
