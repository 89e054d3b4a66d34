// The pieces in a loop of your own: a Gate in front of each tool call, an
// ApprovalChannel whose approver stands in for your UI, answers remembered in
// a FileGrantStore, every record appended to an audit log; then the grant
// policy on its own, for a loop that asks people in its own way.
// Run: npx tsx examples/your-own-loop.ts
import { rm } from "node:fs/promises";

// #region gate
import { randomUUID } from "node:crypto";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ApprovalChannel } from "loopctl/ask";
import { AuditSink, auditObserver, verifyAuditLog } from "loopctl/audit";
import { Gate, LoopManagers } from "loopctl/engine";
import type { ToolDescriptor } from "loopctl/engine";
import { FileGrantStore } from "loopctl/grant";

// Where the grants and the audit log go (a real program: FileGrantStore.defaultRoot() and a log of its own).
const dir = await mkdtemp(join(tmpdir(), "loopctl-own-loop-"));

// The tool as your loop (or the model's API) describes it.
const writeFile: ToolDescriptor = {
  name: "write_file",
  description: "Write a text file of the project",
  inputSchema: {
    type: "object",
    properties: { path: { type: "string" }, text: { type: "string" } },
    required: ["path", "text"],
    additionalProperties: false,
  },
};

const grants = new FileGrantStore(join(dir, "grants"), process.cwd());
const audit = await AuditSink.open(join(dir, "gates.jsonl"));
const [channel, approver] = ApprovalChannel.pair(8);
const gate = new Gate(
  new LoopManagers()
    .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Write ${(call.input as { path: string }).path}?` }) })
    .withAskResolver(channel)
    .withAskTimeout(5 * 60_000)
    .withGrantStore(grants)
    .withObserver(auditObserver(audit)),
);
// #endregion

// #region ui
// Your UI: takes every ask in park order and answers it by id; here a person
// who allows notes and refuses secrets, and wants both remembered.
const ui = (async () => {
  for await (const ask of approver) {
    const notes = ask.prompt.startsWith("Write notes/");
    approver.resolve(ask.id, notes ? { type: "approve", remember: "this_call" } : { type: "deny", reason: "no secrets", remember: "this_call" });
  }
})();
// #endregion

// #region loop
const runId = randomUUID(); // one per conversation: loop detection counts per run
const controller = new AbortController(); // your loop's cancel
const calls = [
  { path: "notes/todo.md", text: "ship 1.4" },
  { path: ".env", text: "TOKEN=…" },
  { path: "notes/todo.md", text: "ship 1.4" }, // the same calls again: remembered, nobody is asked
  { path: ".env", text: "TOKEN=…" },
];
for (const [turn, input] of calls.entries()) {
  const outcome = await gate.call(
    { tool: writeFile, callId: `call_${turn}`, input, runId, turn, signal: controller.signal },
    (approved) => `wrote ${(approved as { path: string }).path}`, // runs only if allowed
  );
  const { verdict, ruleId } = outcome.record;
  console.log(`${verdict} by ${ruleId}: ${outcome.type === "ran" ? String(outcome.output) : outcome.message}`);
}
approver.close(); // the UI loop ends; an ask arriving now would be denied
await ui;
gate.endRun(runId);
await audit.close();
const log = await verifyAuditLog(audit.path);
console.log(log.ok ? `audit log: ${log.records.length} records, chain intact` : `audit log: ${log.problem} at line ${log.line}`);
// #endregion

// #region policy
import { GrantPolicy, MemoryGrantStore } from "loopctl/grant";

// No gate at all: a loop that asks people its own way and only wants answers remembered.
const policy = new GrantPolicy(new MemoryGrantStore());
const args = { path: "notes/todo.md", text: "ship 1.4" };
const first = await policy.decide(writeFile, args); // { type: "ask", reason: "no_grant" }
if (first.type === "ask") {
  // … ask a person your way; they say "always, for these arguments":
  await policy.remember(writeFile, args, "allow", "this_call");
}
const second = await policy.decide(writeFile, args); // { type: "allow", grant }
const changed = { ...writeFile, description: "Write any file, as root" }; // the tool changed since
const third = await policy.decide(changed, args); // { type: "ask", reason: "tool_changed", grant }
console.log([first, second, third].map((d) => (d.type === "ask" ? `ask (${d.reason})` : d.type)).join(", "));
// #endregion

await rm(dir, { recursive: true, force: true });
