// Ask once, remember: the first run parks a deploy and the approver answers
// "always this tool"; a grant is saved in a FileGrantStore, pinned to the
// tool's descriptor. A second run (new agent, same ledger) is decided by the
// grant without asking. When the tool changes, the pin no longer matches and
// the call is asked about again.
// Run: npx tsx examples/remember-with-grants.ts [ROOT]
// With a ROOT folder the ledger outlives the run: run it twice, and the second
// time the remembered grant decides the first call too.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SyncAskResolver } from "loopctl/ask";
import type { Tool } from "loopctl/engine";

// Where ledgers live; a real program would use FileGrantStore.defaultRoot().
const given = process.argv[2];
const root = given ?? (await mkdtemp(join(tmpdir(), "loopctl-grants-")));

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
// The UI: answer every ask until the run ends (a remembered grant may leave none).
const answering = (async () => {
  for await (const ask of approver) {
    console.log(`approving: ${ask.prompt}`); // "this_tool" remembers the answer
    approver.resolve(ask.id, { type: "approve", remember: "this_tool" });
  }
})();
const result = await run.finally(() => approver.close()); // closing ends the loop
await answering;
console.log(result.records.map((r) => r.verdict)); // [ 'ask_allowed' ], then [ 'allow' ]
// #endregion

// From here on, anything asked is printed and denied (without remembering).
const denying = managers.withAskResolver(
  new SyncAskResolver((asked) => {
    console.log(`asked: ${asked.prompt}`);
    return { type: "deny", reason: "not today" };
  }),
);

/** One more run of `tool` with the same grant store (and so the same ledger). */
async function runAgain(tool: Tool): Promise<string> {
  const next = new ScriptedModel([
    { toolCalls: [{ id: "c1", name: "deploy", input: { env: "production", version: "1.4.0" } }] },
    { text: "deployed" },
  ]);
  const again = await new Agent({ model: next, tools: [tool], managers: denying }).run("ship 1.4.0 to production");
  return again.records
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
if (given === undefined) await rm(root, { recursive: true, force: true });
