import { randomBytes } from "node:crypto";
import pg from "pg";
import type { PendingAsk } from "../src/ask/index.js";
import type { BenchContext, BenchModule, Figure, Row, Target } from "./lib/harness.js";
import {
  failedRow,
  measuredRow,
  median,
  ns,
  paired,
  ratioTarget,
  timeTogether,
  unavailableRows,
} from "./lib/harness.js";
import { WRITE_FILE } from "./lib/fixtures.js";
import { loadModules } from "./lib/load.js";
import type { Modules } from "./lib/load.js";

const DATABASE_URL = process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/test";
const LATENCY: Target = ratioTarget(3);
const RATE: Target = { label: "answers/s", op: ">=", limit: 1_000, unit: "asks/s" };
const FLAT: Target = { label: "largest/smallest table", op: "<=", limit: 2, unit: "x" };

const NAMES = {
  p50: { name: "approval latency p50, answer → tool start (1,000 asks in flight)", target: LATENCY },
  durable: { name: "approval latency p50 vs a committed UPDATE heard through NOTIFY", target: null },
  committed: { name: "answer committed and heard through NOTIFY p50 (part of the latency)", target: null },
  p99: { name: "approval latency p99, answer → tool start (1,000 asks in flight)", target: null },
  rate: { name: "answers per second, answer → tool start (1,000 asks parked)", target: RATE },
  decision: (n: number) => ({
    name: `grant decision, ${n / 1000}k grants in PostgreSQL (covered → allow)`,
    target: null,
  }),
  flat: (big: number, small: number) => ({
    name: `grant decision flatness: ${big / 1000}k/${small / 1000}k grants`,
    target: FLAT,
  }),
  afterChange: (n: number) => ({ name: `first grant decision after a change, ${n / 1000}k grants`, target: null }),
} as const;

type Loaded = Pick<Modules, "postgres" | "engine" | "testing" | "grant">;

async function serverUnavailable(): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: DATABASE_URL, connectionTimeoutMillis: 3_000 });
  client.on("error", () => undefined);
  try {
    await client.connect();
    return undefined;
  } catch (error) {
    return `no PostgreSQL server at DATABASE_URL (${error instanceof Error ? error.message : String(error)})`;
  } finally {
    await client.end().catch(() => undefined);
  }
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

function msToNs(ms: number): Figure {
  return ns(ms * 1e6);
}

function newPool(max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max });
  pool.on("error", () => undefined);
  return pool;
}

/**
 * A worker (an Agent whose hook asks about every call, parked on a
 * PostgresAskQueue) and a console (another queue's approver), each on a pool
 * of its own, in this process. Parks `runs × calls` asks and hands them out.
 */
async function parkWave(
  mod: Loaded,
  worker: InstanceType<Modules["postgres"]["PostgresAskQueue"]>,
  inbox: ReturnType<InstanceType<Modules["postgres"]["PostgresAskQueue"]>["approver"]>,
  started: Map<string, () => void>,
  total: number,
): Promise<{ asks: PendingAsk[]; done: Promise<unknown> }> {
  const { Agent, LoopManagers, defineTool } = mod.engine;
  const { ScriptedModel } = mod.testing;
  const calls = 50;
  const tool = defineTool({
    name: "work",
    description: "Records when it starts",
    input: { type: "object", properties: { n: { type: "integer" } }, required: ["n"] },
    execute: (_input, context) => {
      started.get(context.callId)?.();
      return "ok";
    },
  });
  const managers = new LoopManagers()
    .withHook({ preToolUse: () => ({ type: "ask", prompt: "work?" }) })
    .withAskResolver(worker.resolver)
    .withMaxConcurrency(calls);
  const wave = randomBytes(3).toString("hex");
  const runs = Array.from({ length: Math.ceil(total / calls) }, (_, r) =>
    new Agent({
      model: new ScriptedModel([
        {
          toolCalls: Array.from({ length: calls }, (_, c) => ({
            id: `${wave}-${r}-${c}`,
            name: "work",
            input: { n: c },
          })),
        },
        { text: "done" },
      ]),
      tools: [tool],
      managers,
    }).run("go"),
  );
  const asks: PendingAsk[] = [];
  while (asks.length < runs.length * calls) {
    const ask = await inbox.next();
    if (ask === undefined) throw new Error("the inbox closed before every ask arrived");
    asks.push(ask);
  }
  return { asks, done: Promise.all(runs) };
}

/** Waits for the tool of `callId` to start; resolves to when it did (performance.now()). */
function startOf(started: Map<string, () => void>, callId: string): Promise<number> {
  return new Promise<number>((resolve) => started.set(callId, () => resolve(performance.now())));
}

async function approvals(ctx: BenchContext, mod: Loaded, schema: string): Promise<Row[]> {
  const { PostgresAskQueue } = mod.postgres;
  const total = ctx.quick ? 200 : 1_000;
  const samples = ctx.quick ? 40 : 300;
  const pools = [newPool(10), newPool(10), newPool(4)];
  const [workerPool, consolePool, floorPool] = pools as [pg.Pool, pg.Pool, pg.Pool];
  const worker = new PostgresAskQueue(workerPool, { schema });
  const consoleQueue = new PostgresAskQueue(consolePool, { schema });
  const inbox = consoleQueue.approver();
  const started = new Map<string, () => void>();
  const floorListener = await floorPool.connect();
  const rows: Row[] = [];
  try {
    // The floor: a bare NOTIFY from one connection heard on another, on the same server.
    let heard: (() => void) | undefined;
    // The answers' own notifications too, heard by a bystander: how long the answer's commit takes.
    let answerHeard: ((payload: string) => void) | undefined;
    floorListener.on("notification", (message) => {
      if (message.channel === "loopctl_bench_floor") heard?.();
      else answerHeard?.(message.payload ?? "");
    });
    await floorListener.query("LISTEN loopctl_bench_floor");
    await floorListener.query(`LISTEN "${schema}.asks"`);
    const roundTrip = async (statement: string): Promise<number> => {
      const arrived = new Promise<number>((resolve) => (heard = () => resolve(performance.now())));
      const t0 = performance.now();
      await floorPool.query(statement);
      return (await arrived) - t0;
    };
    // The least a durable answer can cost: one committed row change, heard through NOTIFY.
    await floorPool.query(`CREATE TABLE "${schema}".floor (id integer PRIMARY KEY, n bigint NOT NULL)`);
    await floorPool.query(`INSERT INTO "${schema}".floor VALUES (1, 0)`);
    const durable = `WITH u AS (UPDATE "${schema}".floor SET n = n + 1 WHERE id = 1 RETURNING n) SELECT pg_notify('loopctl_bench_floor', n::text) FROM u`;

    // Latency: answers one at a time, each timed to its tool's start, with the rest still parked.
    const wave = await parkWave(mod, worker, inbox, started, total);
    ctx.log(`  ${wave.asks.length} asks parked`);
    const ours: number[] = [];
    const floor: number[] = [];
    const durableFloor: number[] = [];
    const committed: number[] = [];
    for (const ask of wave.asks.slice(0, samples)) {
      floor.push(await roundTrip("NOTIFY loopctl_bench_floor"));
      durableFloor.push(await roundTrip(durable));
      const start = startOf(started, ask.callId);
      const ended = new Promise<number>((resolve) => {
        answerHeard = (payload) => {
          if (payload === `end ${ask.id}`) resolve(performance.now());
        };
      });
      const t0 = performance.now();
      if (!(await inbox.resolve(ask.id, { type: "approve" }))) throw new Error(`the answer to ${ask.id} did not land`);
      ours.push((await start) - t0);
      committed.push((await ended) - t0);
    }
    answerHeard = undefined;
    // The rest of the wave, and the throughput: every remaining answer as fast as a console can give them.
    const rates: number[] = [];
    const rounds = ctx.quick ? 1 : 3;
    for (let round = 0; round <= rounds; round++) {
      const asks = round === 0 ? wave.asks.slice(samples) : (await parkWave(mod, worker, inbox, started, total)).asks;
      const starts = asks.map((ask) => startOf(started, ask.callId));
      const t0 = performance.now();
      const window = 64;
      for (let i = 0; i < asks.length; i += window) {
        await Promise.all(asks.slice(i, i + window).map((ask) => inbox.resolve(ask.id, { type: "approve" })));
      }
      const last = Math.max(...(await Promise.all(starts)));
      // The first round only drains what the latency phase left: not a full wave.
      if (round > 0) rates.push(asks.length / ((last - t0) / 1000));
    }
    await wave.done;
    const rate = median(rates);
    rows.push(
      measuredRow({
        bench: "postgres",
        name: NAMES.p50.name,
        ours: msToNs(percentile(ours, 0.5)),
        floor: msToNs(percentile(floor, 0.5)),
        target: LATENCY,
        note: `${samples} answers, each with up to ${total} asks parked; floor: NOTIFY on one connection heard by LISTEN on another, sampled between them`,
      }),
      measuredRow({
        bench: "postgres",
        name: NAMES.durable.name,
        ours: msToNs(percentile(ours, 0.5)),
        floor: msToNs(percentile(durableFloor, 0.5)),
        note: "floor: a committed single-row UPDATE whose transaction notifies, heard by LISTEN: the durable commit an answer needs, without the row read",
      }),
      measuredRow({
        bench: "postgres",
        name: NAMES.committed.name,
        ours: msToNs(percentile(committed, 0.5)),
        floor: msToNs(percentile(durableFloor, 0.5)),
        note: "ours = the answer's UPDATE committed and its notification heard by a bystander LISTEN; floor = the committed single-row UPDATE above; the rest of the latency is the worker reading the row and the engine starting the tool",
      }),
      measuredRow({
        bench: "postgres",
        name: NAMES.p99.name,
        ours: msToNs(percentile(ours, 0.99)),
        floor: msToNs(percentile(floor, 0.99)),
      }),
      measuredRow({
        bench: "postgres",
        name: NAMES.rate.name,
        ours: { value: rate, unit: "asks/s" },
        floor: null,
        target: RATE,
        checked: { value: rate, unit: "asks/s" },
        ratioRange: [Math.min(...rates), Math.max(...rates)],
        note: `${total} asks parked by Agents, answered by one console 64 at a time; median of ${rates.length} waves; worker, console and server share the machine`,
      }),
    );
  } finally {
    floorListener.release(true);
    await Promise.all([worker.close(), consoleQueue.close()]);
    await Promise.all(pools.map((p) => p.end()));
  }
  return rows;
}

/** Writes `n` grants of one project straight into the table, half exact-call grants of WRITE_FILE. */
async function seedGrants(mod: Loaded, pool: pg.Pool, schema: string, project: string, n: number): Promise<void> {
  const { Grant, GrantScope, descriptorFingerprint } = mod.grant;
  const pin = descriptorFingerprint(WRITE_FILE);
  for (let from = 0; from < n; from += 10_000) {
    const grants = Array.from({ length: Math.min(10_000, n - from) }, (_, k) => {
      const i = from + k;
      return i % 2 === 0
        ? new Grant(
            WRITE_FILE.name,
            "allow",
            GrantScope.thisCall({ path: `/repo/src/module-${i}/index.ts`, mode: "overwrite" }),
          ).withPinnedDescriptor(pin)
        : new Grant(`tool_${i}`, i % 3 === 0 ? "deny" : "allow", GrantScope.thisTool());
    });
    await pool.query(
      `INSERT INTO "${schema}".grants (project, id, tool, verdict, args, pinned_descriptor, created_at_ms, note, version)
       SELECT $1, id, tool, verdict, args, pin, 0, NULL, $2::bigint + ord
       FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS g(id, tool, verdict, args, pin, ord)`,
      [
        project,
        from,
        grants.map((g) => g.id),
        grants.map((g) => g.tool),
        grants.map((g) => g.verdict),
        grants.map((g) => g.canonicalArgs),
        grants.map((g) => g.pinnedDescriptor),
      ],
    );
  }
  await pool.query(`INSERT INTO "${schema}".grant_projects (project, version) VALUES ($1, $2)`, [project, n]);
}

async function decisions(ctx: BenchContext, mod: Loaded, schema: string): Promise<Row[]> {
  const { PostgresGrantStore } = mod.postgres;
  const { GrantPolicy, Grant, GrantScope } = mod.grant;
  const sizes = ctx.quick ? [1_000, 10_000] : [1_000, 100_000];
  const pool = newPool(4);
  const other = newPool(2);
  const rows: Row[] = [];
  try {
    const policies = [];
    for (const n of sizes) {
      const t0 = performance.now();
      await seedGrants(mod, pool, schema, `bench-${n}`, n);
      const store = new PostgresGrantStore(pool, { project: `bench-${n}`, schema });
      const policy = new GrantPolicy(store);
      const covered = { path: `/repo/src/module-${n >> 1}/index.ts`, mode: "overwrite" };
      const decided = await policy.decide(WRITE_FILE, covered);
      if (decided.type !== "allow") throw new Error(`expected allow with ${n} grants, got ${decided.type}`);
      ctx.log(`  ${n} grants written and loaded in ${(performance.now() - t0).toFixed(0)} ms`);
      policies.push({ n, policy, covered });
    }
    const fns: Record<string, () => unknown> = { floor: () => pool.query("SELECT 1") };
    for (const { n, policy, covered } of policies) fns[`n${n}`] = () => policy.decide(WRITE_FILE, covered);
    // One call per sample: batched, the calls of a sample would overlap on the pool.
    const t = await timeTogether(ctx, fns, { heavy: true, clock: "wall", batch: false });
    for (const { n } of policies) {
      rows.push(
        measuredRow({
          bench: "postgres",
          name: NAMES.decision(n).name,
          ...paired(t, `n${n}`, "floor"),
          note: "floor: SELECT 1 on the same pool; a decision is one indexed statement (the rows changed since) and two map lookups",
        }),
      );
    }
    const small = sizes[0]!;
    const big = sizes.at(-1)!;
    // Per round, like every pairing here: the load on a shared machine moves between rounds.
    const flat = paired(t, `n${big}`, `n${small}`);
    rows.push(
      measuredRow({
        bench: "postgres",
        name: NAMES.flat(big, small).name,
        ...flat,
        target: FLAT,
        checked: { value: flat.ratio, unit: "x" },
        note: "ours = decision with the largest table, floor column = with the smallest; ratio per round, then the median",
      }),
    );
    // After a change the next decision reads the changed row and rebuilds the lookup index once.
    for (const { n, policy, covered } of policies) {
      const elsewhere = new PostgresGrantStore(other, { project: `bench-${n}`, schema });
      const regrant = new Grant("tool_1", "allow", GrantScope.thisTool());
      const times: number[] = [];
      for (let i = 0; i < (ctx.quick ? 3 : 15); i++) {
        await elsewhere.save(regrant.withNote(`change ${i}`));
        const t0 = performance.now();
        await policy.decide(WRITE_FILE, covered);
        times.push(performance.now() - t0);
      }
      rows.push(
        measuredRow({
          bench: "postgres",
          name: NAMES.afterChange(n).name,
          ours: msToNs(median(times)),
          floor: null,
          note: "a grant re-saved by another process just before: the decision reads the changed row and updates the index in place",
        }),
      );
    }
  } finally {
    await Promise.all([pool.end(), other.end()]);
  }
  return rows;
}

const postgres: BenchModule = {
  id: "postgres",
  title:
    "loopctl/postgres: approval latency and answers/s through one database vs a bare NOTIFY; grant decisions with 1k/100k grants",
  async run(ctx) {
    const names = [
      NAMES.p50,
      NAMES.durable,
      NAMES.committed,
      NAMES.p99,
      NAMES.rate,
      NAMES.decision(1_000),
      NAMES.decision(100_000),
      NAMES.flat(100_000, 1_000),
    ];
    const down = await serverUnavailable();
    if (down !== undefined) return unavailableRows(this.id, names, down);
    const loaded = await loadModules({
      postgres: ["PostgresAskQueue", "PostgresGrantStore", "migrate"],
      engine: ["Agent", "LoopManagers", "defineTool"],
      testing: ["ScriptedModel"],
      grant: ["Grant", "GrantScope", "GrantPolicy", "descriptorFingerprint"],
    });
    if (!loaded.ok) return unavailableRows(this.id, names, loaded.reason);
    const mod = loaded.mod;
    const schema = `loopctl_bench_${randomBytes(4).toString("hex")}`;
    const admin = newPool(2);
    const rows: Row[] = [];
    try {
      await mod.postgres.migrate(admin, { schema });
      try {
        rows.push(...(await approvals(ctx, mod, schema)));
      } catch (error) {
        for (const n of [NAMES.p50, NAMES.durable, NAMES.committed, NAMES.p99, NAMES.rate])
          rows.push(failedRow(this.id, n.name, n.target, error));
      }
      try {
        rows.push(...(await decisions(ctx, mod, schema)));
      } catch (error) {
        rows.push(failedRow(this.id, NAMES.flat(100_000, 1_000).name, FLAT, error));
      }
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
      await admin.end();
    }
    return rows;
  },
};

export default postgres;
