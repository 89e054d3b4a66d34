import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

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
});
