/**
 * `npm run bench`: runs every benchmark module under bench/, prints the table
 * and writes bench/results.json.
 *
 *   npm run bench -- --filter park      only the modules whose id or title matches
 *   LOOPCTL_BENCH_QUICK=1 npm run bench  few samples and small sizes, src through tsx (seconds)
 *   npm run bench -- --out /tmp/r.json   write the results elsewhere
 *   npm run bench -- --markdown          print the table as Markdown
 *
 * A filtered or quick run writes to the OS temp dir unless --out is given, so
 * the committed bench/results.json always comes from a full run.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, platform, release, totalmem, tmpdir, arch } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { BenchContext, BenchModule, Row } from "./lib/harness.js";
import { failedRow } from "./lib/harness.js";
import { renderNotes, renderTable } from "./lib/format.js";
import { benchSource, describeSource } from "./lib/build.js";
import park from "./park.bench.js";
import heap from "./heap.bench.js";
import digest from "./digest.bench.js";
import grantDecision from "./grant-decision.bench.js";
import save from "./save.bench.js";
import gate from "./gate.bench.js";
import peers from "./peers.bench.js";
import server from "./server.bench.js";
import gcBench from "./gc.bench.js";
import turns from "./turns.bench.js";
import aiSdk from "./ai-sdk.bench.js";
import postgres from "./postgres.bench.js";

const MODULES: readonly BenchModule[] = [
  park,
  heap,
  digest,
  grantDecision,
  save,
  gate,
  turns,
  peers,
  gcBench,
  server,
  aiSdk,
  postgres,
];

interface Args {
  readonly filter: RegExp | null;
  readonly out: string | null;
  readonly markdown: boolean;
  readonly quick: boolean;
  /** Internal: run only the module with this id and write its rows as JSON to `out`. */
  readonly child: string | null;
}

function parseArgs(argv: readonly string[]): Args {
  let filter: RegExp | null = null;
  let out: string | null = null;
  let markdown = false;
  let quick = process.env["LOOPCTL_BENCH_QUICK"] === "1";
  let child: string | null = null;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [flag, inline] = arg.includes("=")
      ? [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)]
      : [arg, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    if (flag === "--filter") filter = new RegExp(value(), "i");
    else if (flag === "--out") out = value();
    else if (flag === "--markdown") markdown = true;
    else if (flag === "--quick") quick = true;
    else if (flag === "--child") child = value();
    else throw new Error(`unknown argument ${arg} (expected --filter <regex>, --out <file>, --markdown, --quick)`);
  }
  return { filter, out, markdown, quick, child };
}

function packageVersion(name: string): string {
  try {
    const url = new URL(`../node_modules/${name}/package.json`, import.meta.url);
    return (JSON.parse(readFileSync(url, "utf8")) as { version: string }).version;
  } catch {
    return "unknown";
  }
}

/**
 * Runs one module in a process of its own (same Node flags, same build
 * through LOOPCTL_BENCH_BUILD_DIR), so no module is charged for the heap an
 * earlier one left: a store of 100k grants or a 10k-grant ledger makes every
 * later garbage collection dearer.
 */
function inOwnProcess(mod: BenchModule, quick: boolean): Promise<Row[]> {
  const out = join(mkdtempSync(join(tmpdir(), "loopctl-bench-child-")), "rows.json");
  const script = fileURLToPath(import.meta.url);
  // --expose-gc lets the gc module force full collections; it changes nothing else.
  const argv = [
    ...process.execArgv,
    "--expose-gc",
    script,
    "--child",
    mod.id,
    "--out",
    out,
    ...(quick ? ["--quick"] : []),
  ];
  return new Promise<Row[]>((resolve, reject) => {
    const child = spawn(process.execPath, argv, { stdio: ["ignore", "inherit", "inherit"], env: process.env });
    // Whichever settles it first, the results folder goes in every case.
    child.once("error", reject);
    child.once("close", (code, signal) => {
      try {
        if (code !== 0) throw new Error(`the benchmark process for ${mod.id} exited with ${signal ?? code}`);
        resolve(JSON.parse(readFileSync(out, "utf8")) as Row[]);
      } catch (error) {
        reject(error);
      }
    });
  }).finally(() => rmSync(dirname(out), { recursive: true, force: true }));
}

async function runChild(id: string, ctx: BenchContext, out: string | null): Promise<void> {
  const mod = MODULES.find((m) => m.id === id);
  if (mod === undefined || out === null) throw new Error(`--child needs a known module id and --out (got ${id})`);
  let rows: Row[];
  try {
    rows = await mod.run(ctx);
  } catch (error) {
    rows = [failedRow(mod.id, mod.title, null, error)];
  }
  writeFileSync(out, JSON.stringify(rows));
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const ctx: BenchContext = { quick: args.quick, log: (line) => process.stderr.write(`${line}\n`) };
  const started = new Date();
  // A quick run is a smoke test: skip the build and load src through tsx (LOOPCTL_BENCH_SOURCE=build overrides).
  if (args.quick) process.env["LOOPCTL_BENCH_SOURCE"] ??= "src";
  const source = await benchSource();
  if (args.child === null) ctx.log(`measuring: ${describeSource(source)}`);
  if (args.child !== null) {
    await runChild(args.child, ctx, args.out);
    return;
  }
  const rows: Row[] = [];
  for (const mod of MODULES) {
    if (args.filter !== null && !args.filter.test(mod.id) && !args.filter.test(mod.title)) continue;
    ctx.log(`▸ ${mod.title}`);
    const t0 = performance.now();
    try {
      rows.push(...(await inOwnProcess(mod, args.quick)));
    } catch (error) {
      rows.push(failedRow(mod.id, mod.title, null, error));
    }
    ctx.log(`  done in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }

  const table = renderTable(rows, args.markdown);
  const notes = renderNotes(rows);
  process.stdout.write(
    `${table}\n${notes === "" ? "" : `\nNotes:\n${notes}\n`}\nMeasured: ${describeSource(source)}\n${args.quick ? "Quick mode: a handful of cold samples; the figures prove the suite runs, they are not results.\n" : ""}`,
  );

  const cpuList = cpus();
  const results = {
    schema: "loopctl-bench/1",
    date: started.toISOString(),
    durationS: Number(((Date.now() - started.getTime()) / 1000).toFixed(1)),
    quick: args.quick,
    filter: args.filter === null ? null : args.filter.source,
    machine: {
      cpu: cpuList[0]?.model ?? "unknown",
      cores: cpuList.length,
      memoryBytes: totalmem(),
      platform: platform(),
      release: release(),
      arch: arch(),
      node: process.version,
      v8: process.versions.v8,
    },
    tools: {
      mitata: packageVersion("mitata"),
      "@openai/agents": packageVersion("@openai/agents"),
      ai: packageVersion("ai"),
    },
    source: describeSource(source),
    method:
      "mitata measure(); each benchmark and its floor timed in the same process, interleaved over rounds (7; 1 in quick mode); figure = median over rounds of mitata's per-sample median (p50); ratios taken per round, then their median. Clock: process CPU time (user+system) for in-memory work, wall time for FileGrantStore.save and its floor. Memory in a child process per figure with --expose-gc.",
    rows,
  };
  const defaultOut = fileURLToPath(new URL("./results.json", import.meta.url));
  const out =
    args.out ?? (args.quick || args.filter !== null ? join(tmpdir(), "loopctl-bench-results.json") : defaultOut);
  writeFileSync(out, `${JSON.stringify(results, null, 2)}\n`);
  ctx.log(`results written to ${out}`);
  if (rows.some((r) => r.status === "error")) process.exitCode = 1;
}

await main();
