// Run as: node --expose-gc --import tsx test/support/ask-gc-child.ts
// Parks an ask on a channel whose approver is dropped unclosed, forces
// collection, and prints how the park settled and what the approver's
// ended() said, as one JSON line.
import { setImmediate as nextTurn } from "node:timers/promises";
import { ApprovalChannel } from "../../src/ask/index.js";
import type { AskEnding, AskResolution } from "../../src/ask/index.js";
import { makeAsk } from "./ask-fixtures.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

function parkWithDroppedApprover(): [Promise<AskResolution>, Promise<AskEnding>] {
  // Only the channel and the two promises survive this scope; the approver becomes unreachable.
  const [channel, approver] = ApprovalChannel.pair(1);
  const ask = makeAsk(0);
  const parked = channel.resolve(ask, { signal: new AbortController().signal });
  return [parked, approver.ended(ask.id)];
}

let outcome: { state: string; value?: AskResolution; reason?: string } = { state: "pending" };
let ending: AskEnding | undefined;
const [parked, ended] = parkWithDroppedApprover();
void ended.then((value) => {
  ending = value;
});
parked.then(
  (value) => {
    outcome = { state: "fulfilled", value };
  },
  (reason: unknown) => {
    outcome = { state: "rejected", reason: String(reason) };
  },
);

// Finalizers run on a later turn after a collection; a bounded number of tries
// keeps a regression from hanging the test.
for (let attempt = 0; attempt < 200 && (outcome.state === "pending" || ending === undefined); attempt++) {
  gc();
  await nextTurn();
}
process.stdout.write(`${JSON.stringify({ ...outcome, ...(ending === undefined ? {} : { ending }) })}\n`);
