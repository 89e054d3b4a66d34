/**
 * A process that serves one ask whose approver never settles an answer:
 *   node --import tsx test/support/server-hung-answer.ts
 * Sends one answer and hangs up before the reply, closes the server and the
 * approver, and prints "closed". Nothing it made is left running then, so the
 * process should exit at once.
 */
import { request } from "node:http";
import { ApprovalChannel } from "../../src/ask/index.js";
import { createApprovalServer } from "../../src/server/index.js";
import { makeAsk } from "./ask-fixtures.js";

const [channel, approver] = ApprovalChannel.pair(4);
let resolveCalled: () => void = () => undefined;
const called = new Promise<void>((resolve) => (resolveCalled = resolve));
const server = await createApprovalServer({
  approver: {
    next: (options) => approver.next(options),
    ended: (id, options) => approver.ended(id, options),
    resolve: () => {
      resolveCalled();
      return new Promise<boolean>(() => undefined);
    },
    close: () => approver.close(),
  },
  answerTimeoutMs: 600_000,
});
const ask = makeAsk(1);
channel.resolve(ask, { signal: new AbortController().signal }).catch(() => undefined);
const auth = { authorization: `Bearer ${server.token}` };
for (;;) {
  const listed = await fetch(`${server.url}api/asks`, { headers: auth }).then(
    (reply) => reply.json() as Promise<{ asks: unknown[] }>,
  );
  if (listed.asks.length === 1) break;
  await new Promise((resolve) => setTimeout(resolve, 10));
}
const answer = request(`${server.url}api/asks/${ask.id}`, {
  method: "POST",
  headers: { ...auth, "content-type": "application/json" },
  agent: false,
});
answer.on("error", () => undefined);
answer.end(JSON.stringify({ type: "approve" }));
await called;
answer.destroy();
await server.close();
approver.close();
process.stdout.write("closed\n");
