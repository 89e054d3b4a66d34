// Run as: node --expose-gc --import tsx test/support/ask-gc-child.ts
// Parks an ask on a channel whose approver is dropped unclosed, forces
// collection, and prints how the park settled as one JSON line.
import { setImmediate as nextTurn } from "node:timers/promises";
import { ApprovalChannel } from "../../src/ask/index.js";
import type { AskResolution } from "../../src/ask/index.js";
import { makeAsk } from "./ask-fixtures.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

function parkWithDroppedApprover(): Promise<AskResolution> {
  // Only the channel survives this scope; the approver becomes unreachable.
  const [channel] = ApprovalChannel.pair(1);
  return channel.resolve(makeAsk(0), { signal: new AbortController().signal });
}

let outcome: { state: string; value?: AskResolution; reason?: string } = { state: "pending" };
parkWithDroppedApprover().then(
  (value) => {
    outcome = { state: "fulfilled", value };
  },
  (reason: unknown) => {
    outcome = { state: "rejected", reason: String(reason) };
  },
);

// Finalizers run on a later turn after a collection; a bounded number of tries
// keeps a regression from hanging the test.
for (let attempt = 0; attempt < 200 && outcome.state === "pending"; attempt++) {
  gc();
  await nextTurn();
}
process.stdout.write(`${JSON.stringify(outcome)}\n`);
