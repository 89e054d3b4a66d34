/**
 * One console process of the Postgres end-to-end test:
 *   node --import tsx test/support/pg-approver.ts <url> <schema> <seed> <ignore>
 * Opens an inbox, prints "ready", and answers every ask it is given with a
 * random verdict and a random remember choice, except asks whose tool starts
 * with <ignore> (a person who never gets to them), until a line arrives on stdin;
 * then prints every answer it gave and whether it landed, as one JSON line.
 */
import pg from "pg";
import type { AskResolution } from "../../src/ask/index.js";
import { PostgresAskQueue } from "../../src/postgres/index.js";
import { waitForGo } from "./child-process.js";

const [url, schema, seedText, ignore] = process.argv.slice(2);
if (url === undefined || schema === undefined || seedText === undefined || ignore === undefined) {
  throw new Error("usage: pg-approver.ts <url> <schema> <seed> <ignore>");
}
let seed = Number(seedText) + 1;
function random(): number {
  // xorshift: each console's choices are reproducible from its seed.
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 2 ** 32;
}

const pool = new pg.Pool({ connectionString: url, max: 8 });
pool.on("error", () => undefined);
const queue = new PostgresAskQueue(pool, { schema, onError: () => undefined });
const inbox = queue.approver();
const answers: { id: string; resolution: AskResolution; landed: boolean }[] = [];
process.stdout.write("ready\n");

const stopped = waitForGo().then(() => queue.close());
const inFlight = new Set<Promise<void>>();
for (let ask = await inbox.next(); ask !== undefined; ask = await inbox.next()) {
  if (ask.tool.startsWith(ignore)) continue;
  const remember = [undefined, "this_call", "this_tool"][Math.floor(random() * 3)] as AskResolution["remember"];
  const resolution: AskResolution =
    random() < 0.7
      ? { type: "approve", ...(remember === undefined ? {} : { remember }) }
      : { type: "deny", reason: "random", ...(remember === undefined ? {} : { remember }) };
  const id = ask.id;
  // Several answers in flight, as several people at one console would give them.
  const answering = inbox.resolve(id, resolution).then((landed) => {
    answers.push({ id, resolution, landed });
  });
  inFlight.add(answering);
  void answering.finally(() => inFlight.delete(answering));
  if (inFlight.size >= 8) await Promise.race(inFlight);
}
await Promise.all(inFlight);
await stopped;
await pool.end();
process.stdout.write(`${JSON.stringify(answers)}\n`);
