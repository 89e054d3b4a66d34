import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import type { PendingAsk } from "loopctl/ask";
import { startApprovalService } from "../examples/approval-service.js";
import { makeAsk } from "./support/ask-fixtures.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/webhook-approver.ts", () => {
  it("runs to exit 0: asks go over HTTP, are answered by id, expire, and fail closed when the service is gone", async () => {
    // A hanging handle (server, socket, timer) would hit the timeout and reject.
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/webhook-approver.ts"], {
      cwd: root,
      timeout: 20_000,
    });
    const lines = stdout.split("\n");
    expect(lines).toContain("reviewer: approve refund");
    expect(lines).toContain("reviewer: deny close_account");
    expect(lines).toContain("reviewer: no answer for export_customers");
    // The engine's deadline aborted the resolver's signal, which aborted the POST; the service saw it.
    const withdrawn = lines.findIndex((l) =>
      /^service: ask [0-9a-f]{8} withdrawn, the engine stopped waiting$/.test(l),
    );
    expect(withdrawn).toBeGreaterThan(lines.indexOf("reviewer: no answer for export_customers"));
    expect(withdrawn).toBeLessThan(lines.findIndex((l) => l.startsWith("record: ")));
    expect(lines.filter((l) => l.startsWith("record: "))).toEqual([
      expect.stringMatching(/^record: ask_allowed refund /),
      expect.stringMatching(/^record: ask_denied close_account \(.*denied by approver.*\)$/),
      "record: ask_expired export_customers (ask expired unanswered)",
    ]);
    // The first call may meet a kept-alive socket the service closed, the others a refused connect.
    expect(stdout).toMatch(
      /resolver: failing closed \(approval service unreachable: fetch failed \(connect ECONNREFUSED 127\.0\.0\.1:\d+\)\)/,
    );
    const offline = lines.filter((l) => l.startsWith("offline record: "));
    expect(offline.map((l) => l.split(" (")[0])).toEqual([
      "offline record: ask_denied refund",
      "offline record: ask_denied close_account",
      "offline record: ask_denied export_customers",
    ]);
    for (const line of offline) expect(line).toContain("(denied by approver: approval service unreachable");
  });

  it("answers the newest request for an ask id: a re-sent ask outlives the first connection closing", async () => {
    const seen: PendingAsk[] = [];
    const service = await startApprovalService((ask) => seen.push(ask));
    try {
      const ask = makeAsk(1);
      const post = (signal?: AbortSignal): Promise<Response> =>
        fetch(`${service.url}/asks`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(ask),
          ...(signal === undefined ? {} : { signal }),
        });
      const until = async (count: number): Promise<void> => {
        for (let i = 0; seen.length < count; i++) {
          if (i > 400) throw new Error(`the service never saw ask #${count}`);
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      };
      // A resolver whose connection dropped sends the same ask again; the first connection then closes.
      const dropped = new AbortController();
      const first = post(dropped.signal).catch(() => "dropped");
      await until(1);
      const resent = post();
      await until(2);
      dropped.abort();
      expect(await first).toBe("dropped");
      // Time for the service to see the first connection close before the answer comes.
      await new Promise((resolve) => setTimeout(resolve, 100));
      const answered = await fetch(`${service.url}/asks/${ask.id}/answer`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ type: "approve" }),
      });
      expect(await answered.json()).toEqual({ delivered: true });
      expect(await (await resent).json()).toEqual({ type: "approve" });
      await service.idle();
    } finally {
      await service.close();
    }
  });
});
