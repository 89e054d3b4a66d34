/**
 * One worker process of the Postgres end-to-end test:
 *   node --import tsx test/support/pg-agent-worker.ts <url> <schema> <worker> <runs> <calls> <leaseMs>
 * Runs <runs> agents at once, each making <calls> parallel calls in one turn,
 * every call of its own tool, behind a hook that asks; asks park on a
 * PostgresAskQueue and answers are remembered in a PostgresGrantStore. Each
 * tool records its execution in <schema>.executions. Prints "ready", waits for
 * a line, then one line per gate record ("gate <callId> <verdict>") and, when
 * every run finished, a JSON summary.
 */
import pg from "pg";
import { Agent, LoopManagers, defineTool } from "../../src/engine/index.js";
import type { Tool } from "../../src/engine/index.js";
import { PostgresAskQueue, PostgresGrantStore } from "../../src/postgres/index.js";
import { ScriptedModel } from "../../src/testing/index.js";
import { waitForGo } from "./child-process.js";

const [url, schema, workerText, runsText, callsText, leaseText] = process.argv.slice(2);
if ([url, schema, workerText, runsText, callsText, leaseText].some((a) => a === undefined)) {
  throw new Error("usage: pg-agent-worker.ts <url> <schema> <worker> <runs> <calls> <leaseMs>");
}
const worker = Number(workerText);
const runs = Number(runsText);
const calls = Number(callsText);
const pool = new pg.Pool({ connectionString: url, max: 6 });
pool.on("error", () => undefined);
const queueErrors: string[] = [];
const queue = new PostgresAskQueue(pool, {
  schema: schema!,
  leaseMs: Number(leaseText),
  onError: (error) => queueErrors.push(String(error)),
});
const grants = new PostgresGrantStore(pool, { project: "stress", schema: schema! });
const grantErrors: string[] = [];

function toolFor(run: number, call: number): Tool {
  return defineTool({
    name: `w${worker}_r${run}_c${call}`,
    description: `tool ${call} of run ${run} of worker ${worker}`,
    input: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] },
    execute: async (_input, context) => {
      await pool.query(`INSERT INTO "${schema!}".executions (call_id, worker) VALUES ($1, $2)`, [
        context.callId,
        worker,
      ]);
      return "done";
    },
  });
}

const managers = new LoopManagers()
  .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `run ${call.name}?` }) })
  .withAskResolver(queue.resolver)
  .withAskTimeout(120_000)
  .withGrantStore(grants)
  .withMaxConcurrency(calls)
  .withObserver({
    onGate: ({ callId, decision }) => process.stdout.write(`gate ${callId} ${decision.verdict}\n`),
    onGrantError: ({ callId, error }) => grantErrors.push(`${callId}: ${String(error)}`),
  });

const agents = Array.from({ length: runs }, (_, run) => {
  const tools = Array.from({ length: calls }, (_, call) => toolFor(run, call));
  const model = new ScriptedModel([
    {
      toolCalls: tools.map((tool, call) => ({
        id: `w${worker}-r${run}-c${call}`,
        name: tool.name,
        input: { n: call },
      })),
    },
    { text: "done" },
  ]);
  return new Agent({ model, tools, managers });
});
await grants.load();
process.stdout.write("ready\n");
await waitForGo();

const results = await Promise.all(agents.map((agent) => agent.run("go")));
const records = results.flatMap((r) => r.records.map((d) => d.verdict));
await queue.close();
await pool.end();
process.stdout.write(`${JSON.stringify({ records: records.length, grantErrors, queueErrors })}\n`);
