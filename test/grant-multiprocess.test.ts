import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileGrantStore, Grant, GrantPolicy, GrantScope } from "../src/grant/index.js";
import { bundleChild, bundleGrantBuilds } from "./support/reliability-bundle.js";
import type { Bundle, GrantBuilds } from "./support/reliability-bundle.js";

const repo = join(dirname(fileURLToPath(import.meta.url)), "..");
const WRITERS = 6;
const PER_WRITER = 12;

interface Outcome {
  readonly saved: string[];
  readonly revoked: string[];
}

interface Writer {
  readonly ready: Promise<void>;
  readonly done: Promise<Outcome>;
  go(): void;
}

/** Starts test/support/grant-writer.ts, bundled as `writer`. */
function startWriter(writer: Bundle, root: string, project: string, seed: number): Writer {
  const child = spawn(process.execPath, [writer.path, root, project, String(PER_WRITER), String(seed)], {
    cwd: repo,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  let markReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    if (stdout.startsWith("ready\n")) markReady();
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const done = new Promise<Outcome>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => {
      markReady();
      if (code !== 0) {
        reject(new Error(`writer ${seed} exited with ${String(code)}: ${stderr}`));
        return;
      }
      resolve(JSON.parse(stdout.slice("ready\n".length)) as Outcome);
    });
  });
  return { ready, done, go: () => child.stdin.end("go\n") };
}

const root = mkdtempSync(join(tmpdir(), "loopctl-multi-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("FileGrantStore across processes", () => {
  // Bundled once: each writer starts with plain node instead of loading tsx.
  let writer: Bundle | undefined;
  beforeAll(async () => {
    writer = await bundleChild("grant-writer.ts");
  });
  afterAll(() => writer?.dispose());

  it("loses no grant and no revocation when several processes write at once", async () => {
    const project = join(root, "project");
    const grantsRoot = join(root, "grants");
    const writers = Array.from({ length: WRITERS }, (_, seed) => startWriter(writer!, grantsRoot, project, seed));
    await Promise.all(writers.map((w) => w.ready));
    for (const writer of writers) writer.go();
    const outcomes = await Promise.all(writers.map((w) => w.done));

    const store = new FileGrantStore(grantsRoot, project);
    const text = readFileSync(store.ledgerPath, "utf8");
    const records = JSON.parse(text) as Array<{ id: string }>;
    const ids = records.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);

    const expected = outcomes.flatMap((o) => o.saved).sort();
    const revoked = outcomes.flatMap((o) => o.revoked);
    expect(expected.length).toBe(WRITERS * (PER_WRITER - Math.ceil(PER_WRITER / 3)));
    expect([...ids].sort()).toEqual(expected);
    for (const id of revoked) expect(ids).not.toContain(id);

    const loaded = await store.load();
    expect(loaded.map((g) => g.id).sort()).toEqual(expected);
    expect(loaded.filter((g) => g.note === "re-saved").length).toBeGreaterThan(0);
    expect(existsSync(store.lockPath)).toBe(false);
    expect(readdirSync(dirname(store.ledgerPath))).toEqual(["grants.json"]);
  });
});

describe("FileGrantStore with several copies of the module in one process", () => {
  let child: Bundle | undefined;
  let builds: GrantBuilds | undefined;
  beforeAll(async () => {
    [child, builds] = await Promise.all([bundleChild("grant-copies.ts"), bundleGrantBuilds()]);
  });
  afterAll(() => {
    child?.dispose();
    builds?.dispose();
  });

  function run(args: string[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      execFile(process.execPath, [child!.path, ...args], { timeout: 60_000 }, (error, stdout, stderr) => {
        if (error !== null) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(JSON.parse(stdout));
      });
    });
  }

  it("four worker threads saving 60 grants each leave 240 grants on disk", async () => {
    const project = join(root, "threads");
    const grantsRoot = join(root, "grants-threads");
    expect(await run(["threads", builds!.esm, grantsRoot, project, "4", "60"])).toEqual({ saved: 240 });
    const store = new FileGrantStore(grantsRoot, project);
    expect(await store.load()).toHaveLength(240);
    expect(readdirSync(dirname(store.ledgerPath))).toEqual(["grants.json"]);
  });

  it("a worker thread terminated while holding the lock does not lock this process out until it exits", async () => {
    const project = join(root, "terminated");
    const grantsRoot = join(root, "grants-terminated");
    const outcome = (await run(["terminated", builds!.esm, grantsRoot, project, "5000"])) as {
      attempts: number;
      saved?: string;
    };
    expect(outcome).toMatchObject({ saved: expect.any(String) });
    const store = new FileGrantStore(grantsRoot, project);
    expect((await store.load()).map((g) => g.id)).toContain(outcome.saved);
    expect(existsSync(store.lockPath)).toBe(false);
    expect(readdirSync(dirname(store.ledgerPath))).toEqual(["grants.json"]);
  });

  it("a lock left by a worker thread terminated in another process that lives on is broken", async () => {
    const project = join(root, "left-behind");
    const grantsRoot = join(root, "grants-left-behind");
    const before = new FileGrantStore(grantsRoot, project);
    const deny = await before.save(new Grant("deploy", "deny", GrantScope.thisTool()));
    const holder = spawn(process.execPath, [child!.path, "left-behind", builds!.esm, grantsRoot, project], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        holder.on("error", reject);
        holder.on("exit", (code) => reject(new Error(`the holder exited with ${String(code)}`)));
        holder.stdout.setEncoding("utf8").on("data", (chunk: string) => chunk.includes("held") && resolve());
      });
      const lock = JSON.parse(readFileSync(before.lockPath, "utf8")) as { pid: number };
      expect(lock.pid).toBe(holder.pid);
      // The process runs on, but no thread of it holds the lock any more: a revoke must not wait for it to exit.
      const store = new FileGrantStore(grantsRoot, project, { lockTimeoutMs: 8_000 });
      expect((await store.revoke(deny.id))?.id).toBe(deny.id);
      expect(holder.exitCode).toBeNull();
      expect((await store.load()).map((g) => g.id)).not.toContain(deny.id);
    } finally {
      holder.stdin.end();
      holder.kill();
    }
  }, 30_000);

  it("the ESM and CommonJS builds loaded together lose no save and never undo a revoke", async () => {
    const project = join(root, "copies");
    const grantsRoot = join(root, "grants-copies");
    const { saved, revoked } = (await run(["copies", builds!.esm, builds!.cjs, grantsRoot, project, "60", "50"])) as {
      saved: string[];
      revoked: string[];
    };
    expect(saved).toHaveLength(120 + 50 * 3);
    expect(revoked).toHaveLength(50);
    const store = new FileGrantStore(grantsRoot, project);
    const ids = (await store.load()).map((g) => g.id);
    expect(revoked.filter((id) => ids.includes(id))).toEqual([]);
    expect([...ids].sort()).toEqual([...saved].sort());
    const policy = new GrantPolicy(store);
    const deploy = { name: "deploy", description: "", inputSchema: {} };
    for (let round = 0; round < 50; round += 1) {
      expect(await policy.decide(deploy, { round })).toEqual({ type: "ask", reason: "no_grant" });
    }
  });
});
