import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SyncAskResolver } from "../src/ask/index.js";
import { AuditSink, auditObserver, verifyAuditLog } from "../src/audit/index.js";
import { Agent, LoopManagers, defineTool } from "../src/engine/index.js";
import type { Observer } from "../src/engine/index.js";
import { ManualClock, ScriptedModel } from "../src/testing/index.js";

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-audit-engine-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const read = defineTool({
  name: "read",
  description: "Read a file",
  input: z.object({ path: z.string() }),
  execute: ({ path }) => `contents of ${path}`,
});

describe("auditObserver on a real run", () => {
  it("logs exactly the run's gate records, in order, in a log that verifies", async () => {
    const path = join(dir, "run.jsonl");
    const sink = await AuditSink.open(path);
    const observer: Observer = auditObserver(sink);
    const agent = new Agent({
      model: new ScriptedModel([
        {
          toolCalls: [
            { id: "c1", name: "read", input: { path: "a.rs" } },
            { id: "c2", name: "read", input: { path: "secret" } },
          ],
        },
        { toolCalls: [{ id: "c3", name: "read", input: { path: "b.rs" } }] },
        { text: "done" },
      ]),
      tools: [read],
      managers: new LoopManagers()
        .withClock(new ManualClock(1_700_000_000_000))
        .withHook({ preToolUse: () => ({ type: "ask", prompt: "May I read?" }) })
        .withAskResolver(new SyncAskResolver((ask) => ask.callId !== "c2"))
        .withObserver(observer),
    });
    const result = await agent.run("go");
    await sink.flush();
    await sink.close();
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed", "ask_denied", "ask_allowed"]);
    const verified = await verifyAuditLog(path, { anchor: sink.anchor });
    expect(verified).toEqual({ ok: true, records: result.records, anchor: sink.anchor, keyed: false });
  });
});
