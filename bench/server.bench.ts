import { setMaxListeners } from "node:events";
import { createServer, request, Agent as HttpAgent } from "node:http";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { PendingAsk } from "../src/ask/index.js";
import type { BenchModule, Figure, Row, Target } from "./lib/harness.js";
import { failedRow, measuredRow, paired, ratioTarget, timeTogether, unavailableRows } from "./lib/harness.js";
import { BENCH_ASK } from "./lib/fixtures.js";
import { loadModules } from "./lib/load.js";

/** Answers in flight at once in the throughput row. */
const CONCURRENT = 16;
const TARGET: Target = ratioTarget(3);
const NAMES = [
  { name: "answer through the HTTP API, one at a time (POST /api/asks/:id → park resolves)", target: TARGET },
  { name: `answers through the HTTP API, ${CONCURRENT} in flight`, target: null },
] as const;
const ANSWER = JSON.stringify({ type: "approve" });

/** One POST over a kept-alive connection; resolves with the status once the reply is read. */
function post(agent: HttpAgent, port: number, path: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: "POST",
        agent,
        headers: { ...headers, "content-length": String(ANSWER.length) },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(ANSWER);
  });
}

/** The floor: a bare node:http server that reads the same JSON body and answers 200 with a small JSON. */
function echoServer(): Promise<Server> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      JSON.parse(Buffer.concat(chunks).toString("utf8"));
      const body = '{"delivered":true}';
      res.writeHead(200, { "content-type": "application/json", "content-length": String(body.length) }).end(body);
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

const perSecond = (nsPerAnswer: number, unit: string): Figure => ({ value: 1e9 / nsPerAnswer, unit });

const serverBench: BenchModule = {
  id: "server",
  title: "answers per second through the approval server's HTTP API vs a bare node:http echo",
  async run(ctx) {
    const loaded = await loadModules({ ask: ["ApprovalChannel"], server: ["createApprovalServer"] });
    if (!loaded.ok) return unavailableRows(this.id, NAMES, loaded.reason);
    const { ApprovalChannel } = loaded.mod.ask;
    const { createApprovalServer } = loaded.mod.server;
    const [channel, approver] = ApprovalChannel.pair(CONCURRENT);
    const approval = await createApprovalServer({ approver });
    const echo = await echoServer();
    const echoPort = (echo.address() as AddressInfo).port;
    const agent = new HttpAgent({ keepAlive: true, maxSockets: CONCURRENT });
    const headers = { authorization: `Bearer ${approval.token}`, "content-type": "application/json" };
    // One signal for every park, as the engine shares a run's: many asks at once are normal here.
    const signal = new AbortController().signal;
    setMaxListeners(0, signal);
    let serial = 0;
    let answered = 0;
    const nextAsk = (): PendingAsk => ({
      ...BENCH_ASK,
      id: `00000000-0000-4000-8000-${(serial++).toString(16).padStart(12, "0")}`,
    });

    /** Parks an ask, answers it over HTTP, and waits for the park to resolve. */
    const oneAnswer = async (): Promise<void> => {
      const ask = nextAsk();
      const parked = channel.resolve(ask, { signal });
      const status = await post(agent, approval.port, `/api/asks/${ask.id}`, headers);
      if (status !== 200 || (await parked).type !== "approve") throw new Error(`answer got ${status}`);
      answered++;
    };
    const oneEcho = async (): Promise<void> => {
      const status = await post(agent, echoPort, "/api/asks/x", headers);
      if (status !== 200) throw new Error(`echo got ${status}`);
    };
    const many = (fn: () => Promise<void>) => async (): Promise<void> => {
      await Promise.all(Array.from({ length: CONCURRENT }, fn));
    };

    const rows: Row[] = [];
    try {
      const t = await timeTogether(
        ctx,
        { ours: oneAnswer, floor: oneEcho, oursMany: many(oneAnswer), floorMany: many(oneEcho) },
        {
          heavy: true,
          clock: "wall",
          verify: () => {
            if (answered === 0 || approver.pending !== 0) throw new Error("answers were lost, or asks left parked");
          },
        },
      );
      const one = paired(t, "ours", "floor");
      const batch = paired(t, "oursMany", "floorMany");
      rows.push(
        measuredRow({
          bench: this.id,
          name: NAMES[0].name,
          ours: perSecond(one.ours.value, "answers/s"),
          floor: perSecond(one.floor.value, "req/s"),
          ratio: one.ratio,
          ratioRange: one.ratioRange,
          target: TARGET,
          note: `ratio = time per answer / time per echo (${(one.ours.value / 1e3).toFixed(1)} µs vs ${(one.floor.value / 1e3).toFixed(1)} µs); client and servers in one process over 127.0.0.1 with kept-alive connections; ours checks Host and the bearer token, parses and validates the answer, hands it to the ApprovalChannel and awaits the parked call; the floor reads and parses the same body and replies`,
        }),
        measuredRow({
          bench: this.id,
          name: NAMES[1].name,
          ours: perSecond(batch.ours.value / CONCURRENT, "answers/s"),
          floor: perSecond(batch.floor.value / CONCURRENT, "req/s"),
          ratio: batch.ratio,
          ratioRange: batch.ratioRange,
          note: `${CONCURRENT} asks parked and answered at once over up to ${CONCURRENT} connections, against ${CONCURRENT} echoes at once; per-round range ${batch.ratioRange[0].toFixed(2)}–${batch.ratioRange[1].toFixed(2)}×`,
        }),
      );
    } catch (error) {
      rows.push(...NAMES.map(({ name, target }) => failedRow(this.id, name, target, error)));
    } finally {
      agent.destroy();
      approver.close();
      await approval.close();
      echo.closeAllConnections();
      await new Promise<void>((resolve) => echo.close(() => resolve()));
    }
    return rows;
  },
};

export default serverBench;
