// The approval service of examples/webhook-approver.ts: what would run
// elsewhere, behind a dashboard or chat bot. It holds each POST /asks open
// until someone answers that ask id with POST /asks/<id>/answer.
// A module, not a program: run it through npx tsx examples/webhook-approver.ts.
import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { AskResolutionSchema, PendingAskSchema } from "loopctl/ask";
import type { AskResolution, PendingAsk } from "loopctl/ask";

export interface ApprovalService {
  readonly url: string;
  /** Resolves once no ask is waiting for an answer (answered, or withdrawn by the engine). */
  idle(): Promise<void>;
  close(): Promise<void>;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > 64 * 1024) throw new Error("body too large");
    chunks.push(chunk);
  }
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

type Deliver = (answer: AskResolution) => void;

/**
 * POST /asks              a PendingAsk; the response is its AskResolution, once answered
 * POST /asks/<id>/answer  an AskResolution for that ask; 200 if it reached a waiting ask, else 404
 */
export async function startApprovalService(onAsk: (ask: PendingAsk, serviceUrl: string) => void): Promise<ApprovalService> {
  const waiting = new Map<string, Deliver>();
  const idleWaiters: Array<() => void> = [];
  /** Forgets the ask `id` if `deliver` is still what answers it; false if it is not. */
  const forget = (id: string, deliver: Deliver | undefined): boolean => {
    if (deliver === undefined || waiting.get(id) !== deliver) return false;
    waiting.delete(id);
    if (waiting.size === 0) for (const wake of idleWaiters.splice(0)) wake();
    return true;
  };
  let url = "";
  const server: Server = createServer((req, res) => {
    void (async () => {
      try {
        const answerPath = /^\/asks\/([0-9a-f-]{36})\/answer$/.exec(req.url ?? "");
        if (req.method === "POST" && req.url === "/asks") {
          const ask = PendingAskSchema.parse(await readJson(req));
          const deliver: Deliver = (answer) => send(res, 200, answer);
          // A resolver retrying after a dropped connection sends the same ask again: the newest request is answered.
          waiting.set(ask.id, deliver);
          // The engine gave up (deadline, cancel): forget the ask, so a late answer gets 404; but only while this
          // request is the one waiting, so an older request closing leaves the ask sent again after it.
          res.on("close", () => {
            if (forget(ask.id, deliver)) console.log(`service: ask ${ask.id.slice(0, 8)} withdrawn, the engine stopped waiting`);
          });
          console.log(`service: ask ${ask.id.slice(0, 8)} for ${ask.tool}: "${ask.prompt}"`);
          onAsk(ask, url);
        } else if (req.method === "POST" && answerPath !== null) {
          const answer: AskResolution = AskResolutionSchema.parse(await readJson(req));
          const id = answerPath[1] ?? "";
          const deliver = waiting.get(id);
          forget(id, deliver);
          deliver?.(answer);
          send(res, deliver === undefined ? 404 : 200, { delivered: deliver !== undefined });
        } else {
          send(res, 404, { error: "not found" });
        }
      } catch (error) {
        send(res, 400, { error: error instanceof Error ? error.message : String(error) });
      }
    })();
  });
  server.listen(0, "127.0.0.1");
  await new Promise<void>((resolve, reject) => server.once("listening", resolve).once("error", reject));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    idle: () => (waiting.size === 0 ? Promise.resolve() : new Promise((resolve) => idleWaiters.push(resolve))),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
