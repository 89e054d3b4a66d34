// A child process whose sink's onError is async and rejects (an alert that
// could not be sent), run under node's default for unhandled rejections: it
// appends a record that is not a GateDecision, a valid one, and one after
// close, observing each through auditObserver, then prints what it saw.
import { AuditSink, auditObserver } from "../../src/audit/index.js";
import type { GateDecision } from "../../src/engine/index.js";
import { gateRecord } from "./cli-audit-fixtures.js";

const [path] = process.argv.slice(2);
const reported: string[] = [];
const sink = await AuditSink.open(path as string, {
  // A function that returns a rejected promise, not one that throws.
  // eslint-disable-next-line @typescript-eslint/no-misused-promises -- the rejected promise under test
  onError: async (error) => {
    reported.push(error.code);
    await new Promise((resolve) => setTimeout(resolve, 1));
    throw new Error("the alert could not be sent");
  },
});
const observer = auditObserver(sink);
observer.onGate({ decision: { tool: 42 } as unknown as GateDecision });
observer.onGate({ decision: gateRecord(1) });
const flushed = await sink.flush().then(
  () => "resolved",
  (error: { code: string }) => error.code,
);
await sink.close();
observer.onGate({ decision: gateRecord(2) });
// Time for a rejection left unheard to end the process.
await new Promise((resolve) => setTimeout(resolve, 50));
process.stdout.write(`${JSON.stringify({ reported, flushed })}\n`);
