import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { PendingAsk } from "loopctl/ask";
import { startDemo } from "./support/demo-process.js";
import { openStream, request } from "./support/http-client.js";

vi.setConfig({ testTimeout: 60_000 });

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-demo-console-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

// The browser drives the same run in test/browser/demo-console.browser.ts; here the
// approval API does, so `npm test` covers the flag without a browser.
describe("npm run demo -- --console", () => {
  it("prints the console URL, parks each ask until it is answered over HTTP, and ends with the audit trail", async () => {
    const work = join(dir, "work");
    const demo = startDemo(["--console", "--root", join(dir, "state"), "--workdir", work]);
    const url = await demo.consoleUrl;
    const base = url.slice(0, url.indexOf("?"));
    const auth = { authorization: `Bearer ${new URL(url).searchParams.get("token") ?? ""}` };
    const stream = await openStream(`${base}api/asks/stream`, auth);
    // Keyed by each prompt's first line; the changelog's goes on with the section's text.
    const answers: Record<string, unknown> = {
      "Add this 1.4.0 section at the top of CHANGELOG.md?": { type: "approve", remember: "this_tool" },
      "Deploy 1.4.0 to staging, after the pre-deploy checks?": { type: "approve" },
      "Deploy 1.4.0 to production, after the pre-deploy checks?": {
        type: "deny",
        reason: "not today",
        remember: "this_call",
      },
      "Deploy 1.4.0 to production WITHOUT the pre-deploy checks?": { type: "deny" },
    };
    for (let i = 0; i < 4; i++) {
      const { ask } = JSON.parse((await stream.next((e) => e.event === "ask")).data) as { ask: PendingAsk };
      if (ask.tool === "write_changelog") expect(ask.prompt).toContain("\n\n  ## 1.4.0\n\n  - Faster cold start");
      const reply = await request(`${base}api/asks/${ask.id}`, {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
        body: JSON.stringify(answers[ask.prompt.split("\n")[0] ?? ""]),
      });
      expect(reply.status, ask.prompt).toBe(200);
    }
    const result = await demo.exited;
    stream.close();
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("approver   you, in the browser\n             asks expire after 300000 ms");
    expect(result.stdout).toContain(`    ${url}\n`);
    expect(result.stdout).toContain("approved 2, denied 2, expired 0");
    expect(result.stdout.split("\n").filter((line) => [...line].length > 80)).toEqual([]);
    expect(readFileSync(join(work, "CHANGELOG.md"), "utf8")).toContain("## 1.4.0");
    expect(existsSync(join(work, "deploys", "staging.json"))).toBe(true);
    expect(existsSync(join(work, "deploys", "production.json"))).toBe(false);
  });

  it("refuses --console with --scripted, and --port without --console", async () => {
    const both = startDemo(["--console", "--scripted"]);
    const result = await both.exited;
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("--interactive, --scripted and --console exclude each other");
    const port = await startDemo(["--port", "8080"]).exited;
    expect(port.code).toBe(1);
    expect(port.stderr).toContain("--port takes a port from 0 to 65535 and goes with --console");
  });
});
