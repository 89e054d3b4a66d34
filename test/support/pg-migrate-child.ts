/**
 * One process of the concurrent-migration test:
 *   node --import tsx test/support/pg-migrate-child.ts <url> <schema>
 * Opens a pool of its own, prints "ready", waits for "go", runs migrate()
 * and prints its result as one JSON line.
 */
import pg from "pg";
import { migrate } from "../../src/postgres/index.js";
import { waitForGo } from "./child-process.js";

const [url, schema] = process.argv.slice(2);
if (url === undefined || schema === undefined) throw new Error("usage: pg-migrate-child.ts <url> <schema>");
const pool = new pg.Pool({ connectionString: url, max: 1 });
await pool.query("SELECT 1");
process.stdout.write("ready\n");
await waitForGo();
const result = await migrate(pool, { schema });
await pool.end();
process.stdout.write(`${JSON.stringify(result)}\n`);
