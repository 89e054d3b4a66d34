// An agent whose approver is somewhere else. Each ask goes out as a signed
// webhook (here to a stand-in chat bot on 127.0.0.1); the bot checks the
// signature and "posts" the ask's approve/deny links; a person follows one,
// and the answer comes back through the approval server that serves the
// resolver's inbox. Nothing answers inside the agent's own code.
// Run: npx tsx examples/webhook-resolver.ts
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import type { Hook } from "loopctl/engine";
import { WebhookDeliverySchema, WebhookResolver, createApprovalHandler } from "loopctl/server";
import { ScriptedModel } from "loopctl/testing";

const HOOK_SECRET = "whsec-example-0123456789abcdef"; // in real life: from your secret store
const LINK_SECRET = "links-example-0123456789abcdef";

// ---------------------------------------------------------------------------
// The receiver: what a chat bot does with a delivery. Verification uses
// node:crypto alone, so any service can do it (docs/server.md shows it).

/** True when `header` signs `rawBody` with `secret` and is at most five minutes old. */
function verifyLoopctlSignature(secret: string, header: string, rawBody: Buffer, nowMs = Date.now()): boolean {
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!match) return false;
  const timestamp = Number(match[1]);
  if (Math.abs(nowMs - timestamp) > 5 * 60_000) return false; // an old delivery replayed
  const expected = createHmac("sha256", secret).update(`${timestamp}.`).update(rawBody).digest();
  return timingSafeEqual(Buffer.from(match[2] as string, "hex"), expected);
}

/** A person reading the chat: deploys to staging yes, anything else no. */
async function personClicks(links: { approve: string; deny: string }, prompt: string): Promise<void> {
  const link = prompt.includes("staging") ? links.approve : links.deny;
  console.log(`person: ${prompt} -> ${link === links.approve ? "approve" : "deny"}`);
  // Opening the link shows a confirmation page; its button POSTs. A previewer's GET answers nothing.
  await fetch(link).then((r) => r.body?.cancel());
  await fetch(link, { method: "POST" }).then((r) => r.body?.cancel());
}

const chatBot = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const raw = Buffer.concat(chunks);
    if (!verifyLoopctlSignature(HOOK_SECRET, String(req.headers["loopctl-signature"] ?? ""), raw)) {
      res.writeHead(401).end();
      return;
    }
    const delivery = WebhookDeliverySchema.parse(JSON.parse(raw.toString("utf8")));
    console.log(`bot: ask for ${delivery.ask.tool}, signature ok`);
    res.writeHead(202).end(); // accepted: the answer comes later, through the approval server
    if (delivery.links !== null) void personClicks(delivery.links, delivery.ask.prompt);
  });
});

// ---------------------------------------------------------------------------
// The agent's side: a WebhookResolver, and an approval server for its inbox.

await new Promise<void>((resolve) => chatBot.listen(0, "127.0.0.1", resolve));
const botUrl = `http://127.0.0.1:${(chatBot.address() as AddressInfo).port}/loopctl`;

// The links must name the approval server, so it listens before the resolver exists.
const approvals = createServer();
await new Promise<void>((resolve) => approvals.listen(0, "127.0.0.1", resolve));
const approvalsHost = `127.0.0.1:${(approvals.address() as AddressInfo).port}`;

const resolver = new WebhookResolver({
  url: botUrl,
  secret: HOOK_SECRET,
  links: { baseUrl: `http://${approvalsHost}/`, secret: LINK_SECRET, ttlMs: 15 * 60_000 },
});
const handler = createApprovalHandler({ approver: resolver.inbox, linkSecret: LINK_SECRET, allowedHosts: [approvalsHost] });
approvals.on("request", handler.handle);

const deploy = defineTool({
  name: "deploy",
  description: "Deploy the site to an environment",
  input: z.object({ env: z.enum(["staging", "production"]) }),
  execute: ({ env }) => `deployed to ${env}`,
});
const askFirst: Hook = { preToolUse: (call) => ({ type: "ask", prompt: `Deploy to ${(call.input as { env: string }).env}?` }) };
const agent = new Agent({
  model: new ScriptedModel([
    { toolCalls: [{ id: "c1", name: "deploy", input: { env: "staging" } }] },
    { toolCalls: [{ id: "c2", name: "deploy", input: { env: "production" } }] },
    { text: "done" },
  ]),
  tools: [deploy],
  managers: new LoopManagers().withHook(askFirst).withAskResolver(resolver).withAskTimeout(60_000),
});

const result = await agent.run("ship it");
for (const r of result.records) console.log(`record: ${r.verdict} ${r.tool}`);

resolver.close();
await handler.close();
approvals.closeAllConnections();
approvals.close();
chatBot.closeAllConnections();
chatBot.close();
