import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { FileGrantStore } from "../src/grant/index.js";

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

function startWriter(root: string, project: string, seed: number): Writer {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "test/support/grant-writer.ts", root, project, String(PER_WRITER), String(seed)],
    { cwd: repo, stdio: ["pipe", "pipe", "pipe"] },
  );
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
  it("loses no grant and no revocation when several processes write at once", async () => {
    const project = join(root, "project");
    const grantsRoot = join(root, "grants");
    const writers = Array.from({ length: WRITERS }, (_, seed) => startWriter(grantsRoot, project, seed));
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
