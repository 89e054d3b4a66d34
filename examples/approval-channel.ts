// A UI loop answering parked tool calls by id. The "engine" side here parks
// three asks as a run would; the UI side takes them in park order with
// `for await` and answers each. Run: npx tsx examples/approval-channel.ts
import { ApprovalChannel, NIL_UUID } from "loopctl/ask";
import type { AskResolution, PendingAsk } from "loopctl/ask";

const [channel, approver] = ApprovalChannel.pair(8);

const session = "0f8fad5b-d9cb-469f-a165-70867728950e";
const calls: Array<[tool: string, prompt: string]> = [
  ["read_file", "Read ./src/index.ts?"],
  ["write_file", "Overwrite ./package.json?"],
  ["deploy", "Deploy to production?"],
];

const asks: PendingAsk[] = calls.map(([tool, prompt], turn) => ({
  id: `7d444840-9dc0-41cc-b3a2-b3f2a0d0a00${turn}`,
  sessionId: session,
  runId: NIL_UUID,
  turn,
  callId: `call_${turn}`,
  tool,
  argsDigest: "2c26b46b68ffc68f",
  prompt,
}));

// What the engine does for each tool call a hook asked about: park it and
// wait, giving up when the run's signal aborts (deadline or cancel).
const run = new AbortController();
const parked = asks.map((ask) => channel.resolve(ask, { signal: run.signal }));
console.log(`parked: ${approver.pending}`);

// The UI: show each ask, answer by id. A real UI would wait for a click.
let answered = 0;
for await (const ask of approver) {
  const answer: AskResolution =
    ask.tool === "read_file" ? { type: "approve" } : { type: "deny", reason: `${ask.tool} is not allowed today` };
  const accepted = approver.resolve(ask.id, answer);
  console.log(`ui: ${ask.prompt} -> ${answer.type} (accepted: ${accepted})`);
  // A second click on the same ask is ignored.
  if (approver.resolve(ask.id, { type: "approve" })) throw new Error("an ask took two answers");
  if (++answered === calls.length) approver.close();
}

const resolutions = await Promise.all(parked);
resolutions.forEach((resolution, i) => console.log(`engine: ${asks[i]?.tool} ${resolution.type}`));
// Once closed, new asks are denied at once instead of parking the run.
const late = await channel.resolve({ ...asks[0]!, id: "7d444840-9dc0-41cc-b3a2-b3f2a0d0a0ff" }, { signal: run.signal });
console.log(`after close: ${late.type} (${late.type === "deny" ? late.reason : ""})`);
