// What stands around the agent loop: a hook that asks, permission rules that
// hold whatever a person approved, a turn budget, loop detection, a circuit
// breaker, an observer that sees every record; then the clock and id seams
// that make a run with a deadline reproducible, with no wall-clock wait.
// The models are scripted (no network). Run: npx tsx examples/engine-guards.ts
import { z } from "zod";
import { ApprovalChannel, SyncAskResolver } from "loopctl/ask";
import { Agent, LoopManagers, RunStoppedError, defineTool, permissionMiddleware, seededIdGen } from "loopctl/engine";
import type { Hook } from "loopctl/engine";
import { ManualClock, ScriptedModel } from "loopctl/testing";

const writeFile = defineTool({
  name: "write_file",
  description: "Write a text file of the project",
  input: z.object({ path: z.string(), text: z.string() }),
  execute: ({ path, text }) => `wrote ${text.length} characters to ${path}`,
});
const readFile = defineTool({
  name: "read_file",
  description: "Read a text file of the project",
  input: z.object({ path: z.string() }),
  execute: ({ path }) => `contents of ${path}`,
});
const status = defineTool({
  name: "status",
  description: "Read an environment's health",
  input: z.object({ env: z.string() }),
  execute: ({ env }) => {
    throw new Error(`${env} status endpoint timed out`);
  },
});

// #region managers
const writesAsk: Hook = {
  name: "writes-ask",
  preToolUse: (call) => (call.name === "write_file" ? { type: "ask", prompt: `Write ${(call.input as { path: string }).path}?` } : { type: "allow" }),
};

const managers = new LoopManagers()
  .withHook(writesAsk)
  .withAskResolver(new SyncAskResolver(() => true)) // a person who approves every write
  .withMiddleware(
    permissionMiddleware({
      rules: [{ id: "no-env-files", tool: "write_file", args: { path: "*.env" }, action: "deny" }],
      defaultAction: "allow",
    }),
  )
  .withBudget({ maxTurns: 12, maxTokens: 100_000 })
  .withLoopDetection({ maxRepeats: 2 })
  .withCircuitBreaker({ failureThreshold: 2, cooldownMs: 60_000 })
  .withObserver({
    onGate: ({ turn, callId, decision }) => console.log(`  turn ${turn} ${callId}: ${decision.verdict} by ${decision.ruleId} (${decision.ruleSource})`),
  });
// #endregion

// #region run
const model = new ScriptedModel([
  { toolCalls: [{ id: "w1", name: "write_file", input: { path: "NOTES.md", text: "ship 1.4" } }] },
  { toolCalls: [{ id: "w2", name: "write_file", input: { path: "prod.env", text: "DEBUG=1" } }] },
  { toolCalls: [{ id: "s1", name: "status", input: { env: "staging" } }] },
  { toolCalls: [{ id: "s2", name: "status", input: { env: "production" } }] },
  { toolCalls: [{ id: "s3", name: "status", input: { env: "eu" } }] },
  { toolCalls: [{ id: "r1", name: "read_file", input: { path: "NOTES.md" } }] },
  { toolCalls: [{ id: "r2", name: "read_file", input: { path: "NOTES.md" } }] },
  { toolCalls: [{ id: "r3", name: "read_file", input: { path: "NOTES.md" } }] },
  { text: "never reached" },
]);
try {
  await new Agent({ model, tools: [writeFile, readFile, status], managers }).run("tidy up");
} catch (error) {
  if (!(error instanceof RunStoppedError)) throw error;
  console.log(`${error.code}: ${error.message}`);
  for (const message of error.messages) {
    if (message.type === "tool_result") console.log(`  ${message.callId} ${message.status}: ${message.content}`);
  }
}
// #endregion

// #region seams
const clock = new ManualClock(Date.UTC(2026, 11, 2, 9, 0));
const [channel, approver] = ApprovalChannel.pair(1);
const waiting = new Agent({
  model: new ScriptedModel([{ toolCalls: [{ id: "w9", name: "write_file", input: { path: "NOTES.md", text: "…" } }] }, { text: "nobody answered" }]),
  tools: [writeFile],
  managers: new LoopManagers().withHook(writesAsk).withAskResolver(channel).withAskTimeout(30_000).withClock(clock).withIdGen(seededIdGen("docs")),
});
const run = waiting.run("write the notes");
const ask = await approver.next(); // parked; nobody will answer
await clock.advance(30_000); // the deadline passes now, not in 30 s
const expired = await run;
const record = expired.records[0];
console.log(`session ${waiting.sessionId}, ask ${ask?.id}`);
console.log(`${record?.verdict} at ${new Date(record?.ts ?? 0).toISOString()}: ${expired.text}`);
approver.close();
// #endregion
