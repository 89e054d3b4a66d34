import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AskResolution } from "loopctl/ask";
import { Grant, GrantScope } from "loopctl/grant";
import { resultOf, startChild } from "./support/child-process.js";
import { DATABASE_URL, usePostgres } from "./support/postgres.js";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";

const db = usePostgres();
const WORKERS = 4;
const RUNS = 10;
const CALLS = 25;
const LEASE_MS = 1_500;
/** The consoles never answer the last run of worker 0, so it surely dies with asks parked. */
const VICTIM_UNANSWERED = `w0_r${RUNS - 1}_`;

interface Answer {
  readonly id: string;
  readonly resolution: AskResolution;
  readonly landed: boolean;
}

interface AskRow {
  readonly id: string;
  readonly worker: number;
  readonly callId: string;
  readonly tool: string;
  readonly state: string;
  readonly reason: string | null;
  readonly resolution: AskResolution | null;
}

async function count(sql: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(sql);
  return rows[0]?.n ?? 0;
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition never held");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The grant a worker's engine saves for an answer that asked to be remembered. */
function expectedGrant(tool: string, n: number, resolution: AskResolution): Grant | undefined {
  if (resolution.remember === undefined) return undefined;
  const scope = resolution.remember === "this_tool" ? GrantScope.thisTool() : GrantScope.thisCall({ n });
  return new Grant(tool, resolution.type === "approve" ? "allow" : "deny", scope);
}

describe("workers and consoles in separate processes over one database", () => {
  // The children, bundled once: each starts with plain node instead of loading tsx.
  let approver: Bundle | undefined;
  let agentWorker: Bundle | undefined;
  beforeAll(async () => {
    [approver, agentWorker] = await Promise.all([bundleChild("pg-approver.ts"), bundleChild("pg-agent-worker.ts")]);
  });
  afterAll(() => {
    approver?.dispose();
    agentWorker?.dispose();
  });

  it(
    `${WORKERS} workers × ${RUNS * CALLS} asks, 2 consoles answering at random, one worker SIGKILLed: ` +
      "every ask ends once, nothing unapproved runs, no grant is lost",
    async () => {
      const s = `"${db.schema}"`;
      await db.pool.query(`CREATE TABLE ${s}.executions (call_id text NOT NULL, worker integer NOT NULL)`);
      const consoles = [0, 1].map((seed) =>
        startChild(approver!.path, [DATABASE_URL, db.schema, String(seed), VICTIM_UNANSWERED]),
      );
      const workers = Array.from({ length: WORKERS }, (_, w) =>
        startChild(agentWorker!.path, [
          DATABASE_URL,
          db.schema,
          String(w),
          String(RUNS),
          String(CALLS),
          String(LEASE_MS),
        ]),
      );
      await Promise.all([...consoles, ...workers].map((c) => c.ready));
      for (const worker of workers) worker.send("go");

      // Worker 0 dies mid-way, with asks of its own parked and others already answered.
      const victim = workers[0]!;
      await waitFor(
        async () => (await count(`SELECT count(*)::int AS n FROM ${s}.executions WHERE worker = 0`)) >= 40,
        60_000,
      );
      victim.kill("SIGKILL");
      expect((await victim.exited).signal).toBe("SIGKILL");
      const victimGates = [...victim.lines];

      const summaries = await Promise.all(
        workers
          .slice(1)
          .map((w, i) =>
            resultOf<{ records: number; grantErrors: string[]; queueErrors: string[] }>(w, `worker ${i + 1}`),
          ),
      );
      // The killed worker's asks end once its lease lapses, closed by a live queue.
      await waitFor(
        async () => (await count(`SELECT count(*)::int AS n FROM ${s}.asks WHERE state = 'pending'`)) === 0,
        20_000,
      );
      for (const c of consoles) c.send("stop");
      const perConsole = await Promise.all(consoles.map((c, i) => resultOf<Answer[]>(c, `console ${i}`)));
      // Each inbox delivered each ask at most once: no console answered one ask twice.
      for (const given of perConsole) expect(new Set(given.map((a) => a.id)).size).toBe(given.length);
      const answers = perConsole.flat();

      for (const summary of summaries)
        expect(summary).toEqual({ records: RUNS * CALLS, grantErrors: [], queueErrors: [] });

      const { rows: asks } = await db.pool.query<AskRow>(
        `SELECT id::text AS id, state, reason, resolution, ask->>'callId' AS "callId", ask->>'tool' AS tool,
                substring(ask->>'callId' from 2 for 1)::int AS worker
         FROM ${s}.asks`,
      );
      // Every call of the survivors asked; none was decided by a grant (each tool and argument set is its own).
      expect(asks.filter((a) => a.worker !== 0)).toHaveLength((WORKERS - 1) * RUNS * CALLS);
      expect(asks.filter((a) => a.worker === 0).length).toBeGreaterThan(40);

      // Every ask ended exactly once: one landed answer per answered row, and it is the row's answer.
      const landed = new Map<string, Answer[]>();
      for (const answer of answers.filter((a) => a.landed))
        landed.set(answer.id, [...(landed.get(answer.id) ?? []), answer]);
      for (const ask of asks) {
        expect(ask.state).not.toBe("pending");
        const won = landed.get(ask.id) ?? [];
        if (ask.state === "answered") {
          expect(won).toHaveLength(1);
          expect(ask.resolution).toEqual(won[0]!.resolution);
        } else {
          expect(won).toEqual([]);
          expect({ worker: ask.worker, reason: ask.reason }).toEqual({ worker: 0, reason: "abandoned" });
        }
      }
      expect(asks.filter((a) => a.tool.startsWith(VICTIM_UNANSWERED)).map((a) => a.reason)).toEqual(
        Array.from({ length: CALLS }, () => "abandoned"),
      );

      // No call ran unapproved, none ran twice, and every approved call of a survivor ran.
      const { rows: executions } = await db.pool.query<{ call_id: string }>(`SELECT call_id FROM ${s}.executions`);
      const ran = executions.map((e) => e.call_id);
      expect(new Set(ran).size).toBe(ran.length);
      const approved = new Set(asks.filter((a) => a.resolution?.type === "approve").map((a) => a.callId));
      for (const callId of ran) expect(approved.has(callId)).toBe(true);
      for (const ask of asks) {
        if (ask.worker !== 0 && ask.resolution?.type === "approve") expect(ran).toContain(ask.callId);
      }

      // No grant is lost: every remembered answer a worker took in (all of a survivor's; the victim's
      // up to its last record) is in the store, with the answer's verdict and scope.
      const { rows: stored } = await db.pool.query<{ id: string }>(
        `SELECT id FROM ${s}.grants WHERE project = 'stress' AND NOT revoked`,
      );
      const grantIds = new Set(stored.map((g) => g.id));
      const victimRecorded = new Set(victimGates.map((line) => line.split(" ")[1]));
      let expected = 0;
      for (const ask of asks) {
        if (ask.resolution === null) continue;
        if (ask.worker === 0 && !victimRecorded.has(ask.callId)) continue;
        const grant = expectedGrant(ask.tool, Number(ask.callId.split("-c")[1]), ask.resolution);
        if (grant === undefined) continue;
        expected++;
        expect(grantIds.has(grant.id)).toBe(true);
      }
      expect(expected).toBeGreaterThan(100);
    },
    90_000,
  );
});
