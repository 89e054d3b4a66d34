/**
 * One writer process for the PostgresGrantStore multi-process test:
 *   node --import tsx test/support/pg-grant-writer.ts <url> <schema> <project> <n> <seed>
 * Prints "ready", waits for a line, then saves n grants of its own (re-saving
 * some), revoking every third right after saving it and reading through its
 * cache now and then, and prints { saved, revoked } as one JSON line. On the
 * next line it prints the ids its cache holds then, as one JSON line, and exits.
 */
import pg from "pg";
import { Grant, GrantScope } from "../../src/grant/index.js";
import { PostgresGrantStore } from "../../src/postgres/index.js";
import { waitForGo } from "./child-process.js";

const [url, schema, project, countText, seedText] = process.argv.slice(2);
if (url === undefined || schema === undefined || project === undefined || countText === undefined || seedText === undefined) {
  throw new Error("usage: pg-grant-writer.ts <url> <schema> <project> <n> <seed>");
}
const count = Number(countText);
const seed = Number(seedText);
const pool = new pg.Pool({ connectionString: url, max: 2 });
const store = new PostgresGrantStore(pool, { project, schema });
await store.load();
process.stdout.write("ready\n");
await waitForGo();

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
  if (i % 5 === 4) await store.index();
}
process.stdout.write(`${JSON.stringify({ saved, revoked })}\n`);
await waitForGo();
const view = (await store.index()).grants.map((g) => g.id);
await pool.end();
process.stdout.write(`${JSON.stringify(view)}\n`);
