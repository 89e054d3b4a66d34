// Asks posted as JSON over real HTTP to an approval service that answers by ask
// id. The service (examples/approval-service.ts: node:http on 127.0.0.1,
// port 0) holds each POST /asks open until someone answers it with
// POST /asks/<id>/answer; here a reviewer process-in-miniature does that over
// HTTP too. The engine side is an AskResolver whose resolve() posts the
// PendingAsk and awaits the answer, honours the AbortSignal, and fails closed
// on any error.
// Run: npx tsx examples/webhook-approver.ts
import { z } from "zod";
import { AskResolutionSchema } from "loopctl/ask";
import type { AskResolution, AskResolver, PendingAsk, ResolveOptions } from "loopctl/ask";
import { Agent, LoopManagers, defineTool } from "loopctl/engine";
import type { Hook } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";
import { startApprovalService } from "./approval-service.js";

// ---------------------------------------------------------------------------
// The engine side: an AskResolver that asks over HTTP.

/** Posts each ask to `url` and resolves with the service's answer; denies on any failure. */
class WebhookAskResolver implements AskResolver {
  readonly #url: string;

  constructor(url: string) {
    this.#url = url;
  }

  async resolve(ask: PendingAsk, { signal }: ResolveOptions): Promise<AskResolution> {
    try {
      const response = await fetch(this.#url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(ask),
        signal,
      });
      if (!response.ok) return deny(`approval service answered HTTP ${response.status}`);
      const parsed = AskResolutionSchema.safeParse(await response.json());
      if (!parsed.success) return deny("approval service answered something that is not an AskResolution");
      // zod's inferred type spells optional fields `?: T | undefined`; the value is an AskResolution.
      return parsed.data;
    } catch (error) {
      // The engine stopped waiting (deadline or cancel) and decides the ending itself.
      if (signal.aborted) throw signal.reason;
      const cause = error instanceof Error && error.cause instanceof Error ? ` (${error.cause.message})` : "";
      return deny(`approval service unreachable: ${error instanceof Error ? error.message : String(error)}${cause}`);
    }
  }
}

function deny(reason: string): AskResolution {
  console.log(`resolver: failing closed (${reason})`);
  return { type: "deny", reason };
}

// ---------------------------------------------------------------------------
// The reviewer, behind the approval service's dashboard or chat bot.

/**
 * The reviewer: answers each ask by id over HTTP. Refunds yes, account
 * closures no; anything else is left for a manager who never comes, so the
 * engine's deadline expires it.
 */
function reviewer(ask: PendingAsk, serviceUrl: string): void {
  const answers: Record<string, AskResolution> = {
    refund: { type: "approve" },
    close_account: { type: "deny", reason: "closing accounts needs a manager" },
  };
  const answer = answers[ask.tool];
  if (answer === undefined) {
    console.log(`reviewer: no answer for ${ask.tool}`);
    return;
  }
  console.log(`reviewer: ${answer.type} ${ask.tool}`);
  void fetch(`${serviceUrl}/asks/${ask.id}/answer`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(answer),
  }).then((res) => res.body?.cancel());
}

// ---------------------------------------------------------------------------
// An agent whose refunds and account closures need a person.

const refund = defineTool({
  name: "refund",
  description: "Refund an order",
  input: z.object({ order: z.string(), amount: z.number().positive() }),
  execute: ({ order, amount }) => `refunded ${amount} on order ${order}`,
});
const closeAccount = defineTool({
  name: "close_account",
  description: "Close a customer account",
  input: z.object({ customer: z.string() }),
  execute: ({ customer }) => `closed ${customer}`,
});
const exportCustomers = defineTool({
  name: "export_customers",
  description: "Export the customer list as CSV",
  input: z.object({}),
  execute: () => "id,name\n",
});
const needsApproval: Hook = {
  preToolUse: (call) => ({ type: "ask", prompt: `${call.name} ${JSON.stringify(call.input)}?` }),
};

function supportAgent(resolver: AskResolver): Agent {
  const model = new ScriptedModel([
    { toolCalls: [{ id: "c1", name: "refund", input: { order: "1042", amount: 40 } }] },
    { toolCalls: [{ id: "c2", name: "close_account", input: { customer: "cust-77" } }] },
    { toolCalls: [{ id: "c3", name: "export_customers", input: {} }] },
    { text: "done" },
  ]);
  const managers = new LoopManagers().withHook(needsApproval).withAskResolver(resolver).withAskTimeout(1_000);
  return new Agent({ model, tools: [refund, closeAccount, exportCustomers], managers });
}

const service = await startApprovalService(reviewer);
const online = await supportAgent(new WebhookAskResolver(`${service.url}/asks`)).run("handle ticket 9");
// The expired ask's POST was aborted by the engine; wait until the service has noticed.
await service.idle();
for (const r of online.records) console.log(`record: ${r.verdict} ${r.tool} (${r.reason ?? "no reason"})`);
await service.close();

// The service is gone: nothing can approve, so everything is denied.
const offline = await supportAgent(new WebhookAskResolver(`${service.url}/asks`)).run("handle ticket 10");
for (const r of offline.records) console.log(`offline record: ${r.verdict} ${r.tool} (${r.reason ?? "no reason"})`);
