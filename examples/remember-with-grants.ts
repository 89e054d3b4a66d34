// Ask once, remember: the first run parks a deploy and the approver answers
// "always this tool"; a grant is saved in a FileGrantStore, pinned to the
// tool's descriptor. A second run (new agent, same ledger) is decided by the
// grant without asking. When the tool changes, the pin no longer matches and
// the call is asked about again.
// Run: npx tsx examples/remember-with-grants.ts
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Tool } from "loopctl/engine";

// Where ledgers live; a real program would use FileGrantStore.defaultRoot().
const root = await mkdtemp(join(tmpdir(), "loopctl-grants-"));

// #region readme
import { z } from "zod";
import { ApprovalChannel } from "loopctl/ask";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import { FileGrantStore } from "loopctl/grant";
import { ScriptedModel } from "loopctl/testing";

const deploy = defineTool({
  name: "deploy",
  description: "Deploy a version to an environment",
  input: z.object({ env: z.string(), version: z.string() }),
  execute: ({ env, version }) => `deployed ${version} to ${env}`,
});
const [channel, approver] = ApprovalChannel.pair(8);
const managers = new LoopManagers()
  .withHook({ preToolUse: (call) => ({ type: "ask", prompt: `Run ${call.name}?` }) })
  .withAskResolver(channel)
  .withAskTimeout(60_000)
  .withGrantStore(new FileGrantStore(root, process.cwd()));

const model = new ScriptedModel([
  { toolCalls: [{ id: "c1", name: "deploy", input: { env: "staging", version: "1.4.0" } }] },
  { text: "deployed" },
]);
const run = new Agent({ model, tools: [deploy], managers }).run("ship 1.4.0");
const ask = await approver.next(); // a UI would show it; "this_tool" remembers the answer
if (ask) approver.resolve(ask.id, { type: "approve", remember: "this_tool" });
console.log((await run).records.map((r) => r.verdict)); // [ 'ask_allowed' ]
// #endregion

// From here on, anything asked is printed and denied (without remembering).
const answering = (async () => {
  for await (const asked of approver) {
    console.log(`asked: ${asked.prompt}`);
    approver.resolve(asked.id, { type: "deny", reason: "not today" });
  }
})();

/** One more run of `tool` with the same managers (and so the same ledger). */
async function runAgain(tool: Tool): Promise<string> {
  const next = new ScriptedModel([
    { toolCalls: [{ id: "c1", name: "deploy", input: { env: "production", version: "1.4.0" } }] },
    { text: "deployed" },
  ]);
  const result = await new Agent({ model: next, tools: [tool], managers }).run("ship 1.4.0 to production");
  return result.records
    .map((r) => `${r.verdict} by ${r.ruleId}${r.matchedPattern === null ? "" : ` ${r.matchedPattern}`}`)
    .join(", ");
}

// Second run, same tool, other arguments: the remembered grant decides; nothing is asked.
console.log(`second run: ${await runAgain(deploy)}`);

// The tool changed behind our back (a rug-pull): the pin no longer matches, so it asks again.
const changed = defineTool({
  name: "deploy",
  description: "Deploy a version to an environment, skipping all checks",
  input: z.object({ env: z.string(), version: z.string() }),
  execute: ({ env, version }) => `deployed ${version} to ${env} without checks`,
});
console.log(`changed tool: ${await runAgain(changed)}`);

for (const g of await new FileGrantStore(root, process.cwd()).load()) {
  console.log(`ledger: ${g.id} ${g.verdict} ${g.tool} ${g.scope.type}, pinned ${g.pinnedDescriptor?.slice(0, 15)}…`);
}
approver.close();
await answering;
await rm(root, { recursive: true, force: true });
