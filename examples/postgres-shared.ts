// Workers and consoles sharing asks and grants through one PostgreSQL
// database: a worker's agent parks a deploy as a row; a console (here in the
// same program, on a pool of its own, as it would be on another machine)
// sees it, approves it "always this tool", and the worker runs it and saves
// the grant in the database, where every worker finds it.
// Run: DATABASE_URL=postgres://… npx tsx examples/postgres-shared.ts
import pg from "pg";

const url = process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/test";
// Its own schema, dropped at the end; a deployment keeps the default, "loopctl".
const schema = `loopctl_example_${process.pid}`;

// #region docs
import { z } from "zod";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import { PostgresAskQueue, PostgresGrantStore, migrate } from "loopctl/postgres";
import { ScriptedModel } from "loopctl/testing";

// A worker. migrate() is idempotent and safe from every process at start-up.
const workerPool = new pg.Pool({ connectionString: url });
await migrate(workerPool, { schema });
const queue = new PostgresAskQueue(workerPool, { schema });
const grants = new PostgresGrantStore(workerPool, { project: "acme/shop", schema });
const deploy = defineTool({
  name: "deploy",
  description: "Deploy a version to an environment",
  input: z.object({ env: z.string(), version: z.string() }),
  execute: ({ env, version }) => `deployed ${version} to ${env}`,
});
const managers = new LoopManagers()
  .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name}?` }) })
  .withAskResolver(queue.resolver)
  .withAskTimeout(10 * 60_000)
  .withGrantStore(grants);
const model = new ScriptedModel([
  { toolCalls: [{ id: "c1", name: "deploy", input: { env: "staging", version: "1.4.0" } }] },
  { text: "deployed" },
]);
const run = new Agent({ model, tools: [deploy], managers }).run("ship 1.4.0");

// A console, on any machine that reaches the database.
const consolePool = new pg.Pool({ connectionString: url });
const consoleQueue = new PostgresAskQueue(consolePool, { schema });
const inbox = consoleQueue.approver();
const ask = await inbox.next();
if (ask !== undefined) {
  console.log(`asked: ${ask.prompt} (${ask.tool}, args ${ask.argsDigest})`);
  const landed = await inbox.resolve(ask.id, { type: "approve", remember: "this_tool" });
  console.log(`answer landed: ${landed}; again: ${await inbox.resolve(ask.id, { type: "deny" })}`);
  console.log("ended:", await inbox.ended(ask.id));
}
console.log("records:", (await run).records.map((r) => r.verdict));
console.log("grants:", (await grants.load()).map((g) => `${g.verdict} ${g.tool} ${g.scope.type}`));
// #endregion

await Promise.all([queue.close(), consoleQueue.close()]);
await workerPool.query(`DROP SCHEMA "${schema}" CASCADE`);
await Promise.all([workerPool.end(), consolePool.end()]);
