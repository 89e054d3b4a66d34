// The approval service of examples/webhook-approver.ts: what would run
// elsewhere, behind a dashboard or chat bot. It holds each POST /asks open
// until someone answers that ask id with POST /asks/<id>/answer.
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

/**
 * POST /asks              a PendingAsk; the response is its AskResolution, once answered
 * POST /asks/<id>/answer  an AskResolution for that ask; 200 if it reached a waiting ask, else 404
 */
export async function startApprovalService(onAsk: (ask: PendingAsk, serviceUrl: string) => void): Promise<ApprovalService> {
  const waiting = new Map<string, (answer: AskResolution) => void>();
  const idleWaiters: Array<() => void> = [];
  const forget = (id: string): boolean => {
    const known = waiting.delete(id);
    if (waiting.size === 0) for (const wake of idleWaiters.splice(0)) wake();
    return known;
  };
  let url = "";
  const server: Server = createServer((req, res) => {
    void (async () => {
      try {
        const answerPath = /^\/asks\/([0-9a-f-]{36})\/answer$/.exec(req.url ?? "");
        if (req.method === "POST" && req.url === "/asks") {
          const ask = PendingAskSchema.parse(await readJson(req));
          waiting.set(ask.id, (answer) => send(res, 200, answer));
          // The engine gave up (deadline, cancel): forget the ask, so a late answer gets 404.
          res.on("close", () => {
            if (forget(ask.id)) console.log(`service: ask ${ask.id.slice(0, 8)} withdrawn, the engine stopped waiting`);
          });
          console.log(`service: ask ${ask.id.slice(0, 8)} for ${ask.tool}: "${ask.prompt}"`);
          onAsk(ask, url);
        } else if (req.method === "POST" && answerPath !== null) {
          const answer: AskResolution = AskResolutionSchema.parse(await readJson(req));
          const deliver = waiting.get(answerPath[1] ?? "");
          forget(answerPath[1] ?? "");
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
