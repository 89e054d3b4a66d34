/**
 * One writer process for the PostgresGrantStore multi-process test:
 *   node --import tsx test/support/pg-grant-writer.ts <url> <schema> <project> <n> <seed>
 * Prints "ready", waits for a line, then saves n grants of its own (re-saving
 * some), revoking every third right after saving it and reading through its
 * cache now and then, and prints { saved, revoked } as one JSON line. On the
 * next line it prints the ids its cache holds then, as one JSON line, and exits.
 */
import pg from "pg";
import { PostgresGrantStore } from "../../src/postgres/index.js";
import { waitForGo } from "./child-process.js";
import { writeGrants } from "./grant-writes.js";

const [url, schema, project, countText, seedText] = process.argv.slice(2);
if (
  url === undefined ||
  schema === undefined ||
  project === undefined ||
  countText === undefined ||
  seedText === undefined
) {
  throw new Error("usage: pg-grant-writer.ts <url> <schema> <project> <n> <seed>");
}
const count = Number(countText);
const seed = Number(seedText);
const pool = new pg.Pool({ connectionString: url, max: 2 });
const store = new PostgresGrantStore(pool, { project, schema });
await store.load();
process.stdout.write("ready\n");
await waitForGo();

// Reading through the cache now and then, while the other processes write.
const { saved, revoked } = await writeGrants(store, count, seed, (i) =>
  i % 5 === 4 ? store.covering("tool", "{}") : Promise.resolve(),
);
process.stdout.write(`${JSON.stringify({ saved, revoked })}\n`);
await waitForGo();
const view = (await store.load()).map((g) => g.id);
await pool.end();
process.stdout.write(`${JSON.stringify(view)}\n`);
