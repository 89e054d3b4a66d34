/**
 * CPU profile of one benchmarked path, summarised as self time per function.
 *
 *   npx tsx bench/profile.ts <scenario> [seconds]     e.g. args-digest-small
 *   npx tsx bench/profile.ts --list
 *
 * Loads the scenario from the bench build (see bench/lib/build.ts), warms it
 * up, then loops it for the given time under the inspector's CPU profiler
 * (what `node --cpu-prof` uses, minus start-up and build) and prints the
 * hottest functions by self and by total time. Used for the evidence in
 * docs/performance.md.
 */
import { Session } from "node:inspector";
import { mkdtempSync, rmSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { BENCH_ASKS, largeArgs, smallArgs, textOfBytes } from "./lib/fixtures.js";
import { benchSource, describeSource } from "./lib/build.js";
import { loadModule, loadModules } from "./lib/load.js";
import { loopctlRoundTrip, ROUND_TRIP_EXPORTS } from "./lib/loopctl-round-trip.js";
import { minimalModel } from "./lib/minimal-model.js";

type Scenario = () => Promise<() => unknown>;

const SCENARIOS: Record<string, Scenario> = {
  async "args-digest-small"() {
    const { argsDigest } = await need("grant", ["argsDigest"]);
    const args = smallArgs();
    return () => argsDigest(args);
  },
  async "args-digest-large"() {
    const { argsDigest } = await need("grant", ["argsDigest"]);
    const args = largeArgs();
    return () => argsDigest(args);
  },
  async digest16() {
    const { digest16 } = await need("grant", ["digest16"]);
    const text = textOfBytes(1_000_000);
    return () => digest16(text);
  },
  async park() {
    const { ApprovalChannel } = await need("ask", ["ApprovalChannel"]);
    const [channel, approver] = ApprovalChannel.pair(16);
    const signal = new AbortController().signal;
    let turn = 0;
    return async () => {
      // Ids taken in turn: the channel refuses one among the last 256 that ended on it.
      const parked = channel.resolve(BENCH_ASKS[turn++ % BENCH_ASKS.length]!, { signal });
      const taken = await approver.next();
      approver.resolve(taken!.id, { type: "approve" });
      await parked;
    };
  },
  async "grant-decide-100k"() {
    const { Grant, GrantScope, GrantPolicy, MemoryGrantStore } = await need("grant", [
      "GrantPolicy",
      "MemoryGrantStore",
    ]);
    const store = new MemoryGrantStore();
    for (let i = 0; i < 100_000; i++) {
      await store.save(
        new Grant(
          i % 2 === 0 ? "write_file" : `tool_${i}`,
          "allow",
          i % 2 === 0 ? GrantScope.thisCall({ path: `/f/${i}` }) : GrantScope.thisTool(),
        ),
      );
    }
    const policy = new GrantPolicy(store);
    const descriptor = { name: "write_file", description: "Write a file", inputSchema: { type: "object" } };
    return () => policy.decide(descriptor, { path: "/f/50000" });
  },
  async "save-10k"() {
    const { FileGrantStore, Grant, GrantScope } = await need("grant", ["FileGrantStore"]);
    const root = mkdtempSync(join(tmpdir(), "loopctl-profile-"));
    process.on("exit", () => rmSync(root, { recursive: true, force: true }));
    mkdirSync(join(root, "p"));
    const store = new FileGrantStore(join(root, "g"), join(root, "p"));
    const grants = Array.from({ length: 10_000 }, (_, i) => new Grant(`tool_${i}`, "allow", GrantScope.thisTool()));
    mkdirSync(join(store.ledgerPath, ".."), { recursive: true, mode: 0o700 });
    writeFileSync(store.ledgerPath, JSON.stringify(grants.map((g) => g.toJSON())), { mode: 0o600 });
    return () => store.save(grants[5000]!);
  },
  async gate() {
    const loaded = await loadModules({ engine: ["Agent", "LoopManagers", "defineTool"] });
    if (!loaded.ok) throw new Error(loaded.reason);
    const { Agent, LoopManagers, defineTool } = loaded.mod.engine;
    const echo = defineTool({
      name: "echo",
      description: "Echo",
      input: z.object({ text: z.string() }),
      execute: async ({ text }: { text: string }) => text,
    });
    const managers = new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) });
    const calls = Array.from({ length: 64 }, (_, i) => ({ id: `call_${i}`, name: "echo", input: { text: "hi" } }));
    const turns = [{ toolCalls: calls }, { text: "done", toolCalls: [] }];
    return () => new Agent({ model: minimalModel(turns), tools: [echo], managers }).run("go");
  },
  async "round-trip"() {
    const loaded = await loadModules(ROUND_TRIP_EXPORTS);
    if (!loaded.ok) throw new Error(loaded.reason);
    const rt = loopctlRoundTrip(loaded.mod, "session");
    return () => rt.once();
  },
  async "round-trip-scripted"() {
    const loaded = await loadModules(ROUND_TRIP_EXPORTS);
    if (!loaded.ok) throw new Error(loaded.reason);
    const rt = loopctlRoundTrip(loaded.mod, "scripted");
    return () => rt.once();
  },
  async "round-trip-minimal"() {
    const loaded = await loadModules(ROUND_TRIP_EXPORTS);
    if (!loaded.ok) throw new Error(loaded.reason);
    const rt = loopctlRoundTrip(loaded.mod, "minimal");
    return () => rt.once();
  },
};

async function need<K extends "ask" | "grant">(name: K, exports: string[]) {
  const loaded = await loadModule(name, exports);
  if (!loaded.ok) throw new Error(loaded.reason);
  return loaded.mod;
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly hitCount?: number;
}

interface Profile {
  readonly nodes: (ProfileNode & { readonly children?: readonly number[] })[];
  readonly samples: readonly number[];
}

/**
 * Self time (samples whose leaf is the function) and total time (samples
 * with the function anywhere on the stack, counted once per sample), per
 * function, as percentages of all samples.
 */
function summarise(profile: Profile, top: number): string {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const keyOf = new Map<number, string>();
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) {
    const { functionName, url, lineNumber } = node.callFrame;
    // Files transpiled by tsx report line 1 for everything; their line is no evidence.
    const line = lineNumber > 0 ? `:${lineNumber + 1}` : "";
    const where = url === "" ? "" : ` ${url.startsWith("file://") ? relative(root, fileURLToPath(url)) : url}${line}`;
    keyOf.set(node.id, `${functionName === "" ? "(anonymous)" : functionName}${where}`);
    for (const child of node.children ?? []) parentOf.set(child, node.id);
  }
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  for (const leaf of profile.samples) {
    const leafKey = keyOf.get(leaf)!;
    self.set(leafKey, (self.get(leafKey) ?? 0) + 1);
    const seen = new Set<string>();
    for (let id: number | undefined = leaf; id !== undefined; id = parentOf.get(id)) {
      const key = keyOf.get(id)!;
      if (seen.has(key)) continue;
      seen.add(key);
      total.set(key, (total.get(key) ?? 0) + 1);
    }
  }
  const n = profile.samples.length;
  const list = (m: Map<string, number>, skip: (key: string) => boolean): string =>
    [...m.entries()]
      .filter(([key]) => !skip(key))
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([key, hits]) => `${((100 * hits) / n).toFixed(1).padStart(5)}%  ${key}`)
      .join("\n");
  // Total time is only telling for our own code and the libraries it calls.
  const boring = (key: string): boolean =>
    key.startsWith("(root)") ||
    key.includes("node:") ||
    key.includes("bench/profile.ts") ||
    key.startsWith("(program)");
  return `self:\n${list(self, () => false)}\ntotal (on stack):\n${list(total, boring)}`;
}

/** Runs the scenario for `seconds` after a short warm-up, under the inspector's CPU profiler. */
async function profileScenario(name: string, seconds: number): Promise<Profile> {
  const make = SCENARIOS[name];
  if (make === undefined) throw new Error(`unknown scenario ${name}; try --list`);
  const fn = await make();
  const loop = async (ms: number): Promise<number> => {
    const end = performance.now() + ms;
    let n = 0;
    while (performance.now() < end) {
      for (let i = 0; i < 16; i++) await fn();
      n += 16;
    }
    return n;
  };
  await loop(500);
  const session = new Session();
  session.connect();
  const post = (method: string, params?: object): Promise<unknown> =>
    new Promise((resolve, reject) =>
      session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
    );
  try {
    await post("Profiler.enable");
    await post("Profiler.setSamplingInterval", { interval: 100 });
    await post("Profiler.start");
    const n = await loop(seconds * 1000);
    const { profile } = (await post("Profiler.stop")) as { profile: Profile };
    process.stderr.write(`${name}: ${n} iterations in ${seconds} s under the profiler\n`);
    return profile;
  } finally {
    session.disconnect();
  }
}

const args = process.argv.slice(2);
if (args[0] === undefined || args[0] === "--list") {
  process.stdout.write(`${Object.keys(SCENARIOS).join("\n")}\n`);
} else {
  const name = args[0];
  const profile = await profileScenario(name, Number(args[1] ?? "3"));
  process.stdout.write(
    `CPU profile of ${name} (measured: ${describeSource(await benchSource())}), % of samples\n${summarise(profile, 15)}\n`,
  );
}
