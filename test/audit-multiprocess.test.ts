import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { randomBytes } from "node:crypto";
import { existsSync, linkSync, readFileSync, readdirSync, renameSync, utimesSync, writeFileSync } from "node:fs";
import { appendFile, mkdtemp, readFile, rm, truncate, unlink, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditLockError, AuditSink, verifyAuditLog } from "../src/audit/index.js";
import { openSink } from "../src/audit/sink.js";
import type { AuditVerifyResult } from "../src/audit/index.js";
import { resultOf, startChild } from "./support/child-process.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";
import { liveHolder } from "./support/live-holder.js";

const WRITERS = 4;
const EACH = 40;

let dir: string;
// The writer children, bundled once: each starts with plain node instead of loading tsx.
let writer: Bundle | undefined;
let steadyWriter: Bundle | undefined;
let writerScript: string;
let steadyWriterScript: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-audit-processes-"));
  [writer, steadyWriter] = await Promise.all([
    bundleChild("audit-append-writer.ts"),
    bundleChild("audit-steady-writer.ts"),
  ]);
  writerScript = writer.path;
  steadyWriterScript = steadyWriter.path;
});

afterAll(async () => {
  writer?.dispose();
  steadyWriter?.dispose();
  await rm(dir, { recursive: true, force: true });
});

/**
 * Starts `WRITERS` processes on one log, lets them all open it, then tells
 * them to append `EACH` records each at the same moment; resolves to what
 * each one reported.
 */
async function appendConcurrently(path: string, keyFile?: string): Promise<string[][]> {
  const children = Array.from({ length: WRITERS }, (_, w) =>
    spawn(process.execPath, [writerScript, path, String(w), String(EACH), ...(keyFile ? [keyFile] : [])], {
      stdio: ["pipe", "pipe", "inherit"],
    }),
  );
  const outputs = children.map((child) => {
    let text = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => (text += chunk));
    return {
      ready: new Promise<void>((resolve) => {
        const check = (): void => {
          if (text.startsWith("ready\n")) resolve();
          else child.stdout.once("data", check);
        };
        check();
      }),
      done: new Promise<string>((resolve, reject) => {
        child.once("error", reject);
        child.once("exit", (code) =>
          code === 0 ? resolve(text) : reject(new Error(`writer exited ${code}: ${text}`)),
        );
      }),
    };
  });
  await Promise.all(outputs.map((o) => o.ready));
  for (const child of children) child.stdin.end("go\n");
  const texts = await Promise.all(outputs.map((o) => o.done));
  return texts.map((text) => (JSON.parse(text.slice("ready\n".length)) as { outcomes: string[] }).outcomes);
}

/** The log verifies, holds every record of every writer once, and each writer's in its own order. */
async function expectLinearAndComplete(path: string, key?: Buffer): Promise<void> {
  const result = await verifyAuditLog(path, key === undefined ? {} : { key });
  expect(result.ok, result.ok ? "" : result.message).toBe(true);
  if (!result.ok) return;
  expect(result.records).toHaveLength(WRITERS * EACH);
  expect(result.anchor.seq).toBe(WRITERS * EACH);
  for (let w = 0; w < WRITERS; w++) {
    const mine = result.records.map((r) => r.tool).filter((tool) => tool.startsWith(`w${w}_`));
    expect(mine).toEqual(Array.from({ length: EACH }, (_, i) => `w${w}_${i + 1}`));
  }
}

/**
 * Starts the writer script with `args` and resolves once it has opened the log and waits: `go()` lets it
 * append, and resolves with the outcomes it printed once it exited cleanly.
 */
async function readyWriter(args: readonly string[]): Promise<{ go(): Promise<unknown> }> {
  const child = spawn(process.execPath, [writerScript, ...args], { stdio: ["pipe", "pipe", "inherit"] });
  let text = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => (text += chunk));
  const exited = once(child, "exit");
  while (!text.startsWith("ready\n")) await once(child.stdout, "data");
  return {
    async go() {
      child.stdin.end("go\n");
      expect(await exited).toEqual([0, null]);
      return JSON.parse(text.slice("ready\n".length)) as unknown;
    },
  };
}

describe("several processes appending to one audit log", () => {
  it("never fork the chain: every append lands, the log is linear and complete", async () => {
    const path = join(dir, "plain.jsonl");
    const outcomes = await appendConcurrently(path);
    for (const list of outcomes) {
      expect(list.filter((o) => !o.startsWith("ok:"))).toEqual([]);
    }
    // Each append reported its own place in the one chain.
    const seqs = outcomes.flat().map((o) => Number(o.slice(3)));
    expect(new Set(seqs).size).toBe(WRITERS * EACH);
    await expectLinearAndComplete(path);
  });

  it("keep a keyed chain linear and sealed at its end", async () => {
    const path = join(dir, "keyed.jsonl");
    const key = randomBytes(32);
    const keyFile = join(dir, "audit.key");
    await writeFile(keyFile, key, { mode: 0o600 });
    const outcomes = await appendConcurrently(path, keyFile);
    expect(outcomes.flat().filter((o) => !o.startsWith("ok:"))).toEqual([]);
    await expectLinearAndComplete(path, key);
  });

  it("waits for a lock another live process holds, fails that write with AuditLockError, and writes once it is free", async () => {
    const path = join(dir, "held.jsonl");
    const holder = spawn("sleep", ["60"], { stdio: "ignore" });
    try {
      const lock = `${path}.lock`;
      const hold = (): Promise<void> =>
        writeFile(
          lock,
          JSON.stringify({ pid: holder.pid, hostname: hostname(), createdAtMs: Date.now(), token: "held" }),
        );
      await hold();
      const refused = await AuditSink.open(path, { lockTimeoutMs: 50 }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(AuditLockError);
      expect((refused as AuditLockError).message).toContain(`held by pid ${holder.pid}`);
      await unlink(lock);

      const errors: string[] = [];
      const sink = await AuditSink.open(path, { lockTimeoutMs: 50, onError: (e) => errors.push(e.code) });
      await sink.append(gateRecord(1));
      const before = await readFile(path, "utf8");
      await hold();
      await expect(sink.append(gateRecord(2))).rejects.toBeInstanceOf(AuditLockError);
      expect(await readFile(path, "utf8")).toBe(before);
      await unlink(lock);
      // Nothing was written, so the sink goes on.
      await expect(sink.append(gateRecord(3))).resolves.toMatchObject({ seq: 2 });
      await expect(sink.flush()).rejects.toBeInstanceOf(AuditLockError);
      await sink.close();
      expect(errors).toEqual(["AUDIT_LOCK"]);
      expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1), gateRecord(3)] });
    } finally {
      holder.kill();
    }
  });
});

describe("a sink without a key on a log another process starts keyed", () => {
  it("refuses to append once the log has a seal, and the keyed writer's lines go on", async () => {
    // Both find the log empty; the keyed writer seals it when it opens, and from then on the log is keyed.
    const path = join(dir, "keyed-later.jsonl");
    const key = randomBytes(32);
    const keyFile = join(dir, "keyed-later.key");
    await writeFile(keyFile, key, { mode: 0o600 });
    const errors: unknown[] = [];
    const plain = await AuditSink.open(path, { onError: (error) => errors.push(error) });
    const writer = await readyWriter([path, "k", "2", keyFile]);
    const before = await readFile(path);
    await expect(plain.append(gateRecord(1, { tool: "plain_1" }))).rejects.toMatchObject({ code: "AUDIT_KEY" });
    expect(await readFile(path)).toEqual(before);
    await expect(plain.append(gateRecord(2))).rejects.toMatchObject({ code: "AUDIT_KEY" });
    expect(errors).toHaveLength(2);
    await plain.close();
    expect(await writer.go()).toEqual({ outcomes: ["ok:1", "ok:2"] });
    const result = await verifyAuditLog(path, { key });
    expect(result.ok, result.ok ? "" : result.message).toBe(true);
    expect(result.ok && result.records.map((r) => r.tool)).toEqual(["wk_1", "wk_2"]);
  });
});

describe("a sink opening a log while another's write fails", () => {
  it("reads the log again under the lock when the failed write was cut back meanwhile", async () => {
    const path = join(dir, "cut-back.jsonl");
    const sink = await AuditSink.open(path);
    await sink.append(gateRecord(1));
    await sink.append(gateRecord(2));
    await sink.close();
    const before = await readFile(path);
    // What a writer of lines 3 and 4 has on disk when its write fails in line 4.
    const copy = join(dir, "cut-back-copy.jsonl");
    await writeFile(copy, before);
    const other = await AuditSink.open(copy);
    await other.append(gateRecord(3));
    await other.append(gateRecord(4));
    await other.close();
    const written = (await readFile(copy)).subarray(before.length);
    await appendFile(path, written.subarray(0, written.indexOf("\n") + 20));
    const holder = spawn("sleep", ["60"], { stdio: "ignore" });
    try {
      const lock = `${path}.lock`;
      await writeFile(
        lock,
        JSON.stringify({ pid: holder.pid, hostname: hostname(), createdAtMs: Date.now(), token: "held" }),
      );
      const opening = AuditSink.open(path, { lockTimeoutMs: 10_000 }).catch((e: unknown) => e);
      // The opener reads the log (line 3 whole) before it waits for the lock;
      // then the writer cuts its failed write off and lets the lock go.
      await new Promise((resolve) => setTimeout(resolve, 300));
      await truncate(path, before.length);
      await unlink(lock);
      const opened = await opening;
      expect(opened).toBeInstanceOf(AuditSink);
      const reopened = opened as AuditSink;
      expect(reopened.anchor.seq).toBe(2);
      await expect(reopened.append(gateRecord(5))).resolves.toMatchObject({ seq: 3 });
      await reopened.close();
      expect(await verifyAuditLog(path)).toMatchObject({
        ok: true,
        records: [gateRecord(1), gateRecord(2), gateRecord(5)],
      });
    } finally {
      holder.kill();
    }
  });

  it("reads the log again under the lock when the failed write was cut back and other lines written in its place", async () => {
    // Lines 1 and 2, then what another writer's write of line 3 put there before it failed (its
    // seal, say, could not be replaced), and the lines a third writer wrote once it was cut back.
    const base = join(dir, "replaced-base.jsonl");
    const seed = await AuditSink.open(base);
    await seed.append(gateRecord(1));
    await seed.append(gateRecord(2));
    await seed.close();
    const before = await readFile(base);
    const linesAfter = async (name: string, records: number[]): Promise<Buffer> => {
      const copy = join(dir, name);
      await writeFile(copy, before);
      const other = await AuditSink.open(copy);
      for (const i of records) await other.append(gateRecord(i));
      await other.close();
      return (await readFile(copy)).subarray(before.length);
    };
    const failed = await linesAfter("replaced-failed.jsonl", [3]);
    // One line as long as the failed one, then two lines.
    for (const [n, records] of [
      [1, [5]],
      [2, [5, 7]],
    ] as const) {
      const path = join(dir, `replaced-${n}.jsonl`);
      const written = await linesAfter(`replaced-${n}-other.jsonl`, [...records]);
      await writeFile(path, Buffer.concat([before, failed]));
      let ran = false;
      const opened = await openSink(
        path,
        {},
        {
          beforeLock: async () => {
            ran = true;
            await truncate(path, before.length);
            await appendFile(path, written);
          },
        },
      ).catch((e: unknown) => e);
      expect(ran).toBe(true);
      expect(opened).toBeInstanceOf(AuditSink);
      const sink = opened as AuditSink;
      expect(sink.anchor.seq).toBe(2 + n);
      await expect(sink.append(gateRecord(9))).resolves.toMatchObject({ seq: 3 + n });
      await sink.close();
      expect(await verifyAuditLog(path)).toMatchObject({
        ok: true,
        records: [1, 2, ...records, 9].map((i) => gateRecord(i)),
      });
    }
  });
});

describe("a sink opening a long log", () => {
  it("holds the lock only for what it had not read yet: another process's appends go on meanwhile", async () => {
    const key = randomBytes(32);
    const keyFile = join(dir, "long.key");
    await writeFile(keyFile, key, { mode: 0o600 });
    for (const keyed of [false, true]) {
      const path = join(dir, keyed ? "long-keyed.jsonl" : "long-plain.jsonl");
      const options = keyed ? { key } : {};
      const seed = await AuditSink.open(path, options);
      // Long enough that reading and verifying it takes far longer than the other writer waits.
      await Promise.all(Array.from({ length: 20_000 }, (_, i) => seed.append(gateRecord(i))));
      await seed.close();
      const sink = await AuditSink.open(path, { ...options, lockTimeoutMs: 250 });
      const opener = spawn(process.execPath, [writerScript, path, "opener", "1", ...(keyed ? [keyFile] : [])], {
        stdio: ["pipe", "pipe", "inherit"],
      });
      const exited = once(opener, "exit");
      let output = "";
      opener.stdout.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
      const outcomes: string[] = [];
      while (output === "" && opener.exitCode === null) {
        outcomes.push(
          await sink.append(gateRecord(1, { tool: "steady" })).then(
            () => "ok",
            (error: Error) => error.message,
          ),
        );
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      opener.stdin.end("go\n");
      expect(await exited).toEqual([0, null]);
      await sink.close();
      // Before, the opener verified the whole log holding the lock, and these appends timed out.
      expect(outcomes.filter((outcome) => outcome !== "ok")).toEqual([]);
      // The opener took up the chain after the lines appended while it read.
      const seq = 20_000 + outcomes.length + 1;
      expect(JSON.parse(output.slice("ready\n".length))).toEqual({ outcomes: [`ok:${seq}`] });
      expect(await verifyAuditLog(path, options)).toMatchObject({ ok: true, anchor: { seq } });
    }
  }, 90_000);
});

/** The pid in the lock record at `lock`, or undefined while there is none (or it is not written yet). */
function lockHolder(lock: string): number | undefined {
  try {
    return (JSON.parse(readFileSync(lock, "utf8")) as { pid: number }).pid;
  } catch {
    return undefined;
  }
}

/**
 * As soon as this process has taken the lock at `lock` (its record written),
 * breaks it as another host would once it is past the stale bound: moves it
 * aside and puts `theirs` in its place. Looked at once per turn of the event
 * loop, so it happens before the holder's next file operation completes.
 */
function breakOnceTaken(lock: string, theirs: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let turns = 0;
    const look = (): void => {
      if (lockHolder(lock) === process.pid) {
        renameSync(lock, `${lock}.broken`);
        writeFileSync(lock, theirs, { mode: 0o600 });
        resolve();
      } else if (++turns > 1_000_000) reject(new Error("the lock was never taken"));
      else setImmediate(look);
    };
    setImmediate(look);
  });
}

describe("a writer whose lock is broken while it holds it", () => {
  it("from another host, for its age: the append fails with AuditLockError, writes nothing and leaves their lock", async () => {
    const path = join(dir, "broken.jsonl");
    const lock = `${path}.lock`;
    const errors: string[] = [];
    const sink = await AuditSink.open(path, { lockTimeoutMs: 50, onError: (e) => errors.push(e.code) });
    await sink.append(gateRecord(1));
    const before = await readFile(path, "utf8");
    const theirs = JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: Date.now(), token: "theirs" });
    const broken = breakOnceTaken(lock, theirs);
    const error = await sink.append(gateRecord(2)).catch((e: unknown) => e);
    await broken;
    expect(error).toBeInstanceOf(AuditLockError);
    expect((error as Error).message).toContain("was broken while this writer held it; line 2 not written");
    expect(await readFile(path, "utf8")).toBe(before);
    expect(await readFile(lock, "utf8")).toBe(theirs);
    // Nothing was written, so once their lock is gone the sink goes on where the chain is.
    await unlink(lock);
    await expect(sink.append(gateRecord(3))).resolves.toMatchObject({ seq: 2 });
    await sink.close();
    expect(errors).toEqual(["AUDIT_LOCK"]);
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1), gateRecord(3)] });
  });
});

describe("a log verified while another process appends to it", () => {
  it("verifies every time, keyed or not, and names no line", async () => {
    const key = randomBytes(32);
    const keyFile = join(dir, "live.key");
    await writeFile(keyFile, key, { mode: 0o600 });
    for (const keyed of [true, false]) {
      const path = join(dir, keyed ? "live-keyed.jsonl" : "live-plain.jsonl");
      const writer = startChild(steadyWriterScript, [path, "2000", ...(keyed ? [keyFile] : [])]);
      await writer.ready;
      const failures: string[] = [];
      for (let i = 0; i < 20; i++) {
        const result: AuditVerifyResult = await verifyAuditLog(path, keyed ? { key } : {});
        if (!result.ok) failures.push(`line ${result.line} (${result.problem}): ${result.message}`);
      }
      writer.send("stop");
      const { appended } = await resultOf<{ appended: number }>(writer, "audit-steady-writer");
      // Before, a keyed log was read, then its seal, which the writer had moved past the lines read meanwhile.
      expect(failures, keyed ? "keyed" : "plain").toEqual([]);
      const result = await verifyAuditLog(path, keyed ? { key } : {});
      expect(result).toMatchObject({ ok: true, anchor: { seq: appended } });
    }
  });
});

describe("claims to break the log's lock left beside it", () => {
  const claim = (path: string, n: number): string => `${path}.lock.break-${n.toString(16).padStart(16, "0")}`;
  const record = (pid: number | undefined): string =>
    JSON.stringify({ pid, hostname: hostname(), createdAtMs: Date.now(), token: "c" });
  const age = (path: string): void => {
    const past = new Date(Date.now() - 60_000);
    utimesSync(path, past, past);
  };

  it("are removed at the next open, and by appends at most every 30 s, once abandoned; a live breaker's stays", async () => {
    // A writer killed while breaking an abandoned lock leaves its claim (see crash-ledger.test.ts):
    // these are written as such a writer leaves them, one of them by a writer that still runs.
    const dead = spawnSync(process.execPath, ["-e", ""]).pid;
    const breaker = liveHolder();
    try {
      const path = join(dir, "claims.jsonl");
      const seed = await AuditSink.open(path);
      await seed.append(gateRecord(1));
      await seed.close();
      const [abandoned, live, young] = [claim(path, 1), claim(path, 2), claim(path, 3)];
      writeFileSync(abandoned, record(dead), { mode: 0o600 });
      const liveRecord = record(breaker.pid);
      writeFileSync(live, liveRecord, { mode: 0o600 });
      writeFileSync(young, record(dead), { mode: 0o600 });
      age(abandoned);
      age(live);
      await breaker.hold(live);

      let now = 0;
      const sink = await openSink(path, undefined, { now: () => now });
      // Older than the stale bound (30 s) and its writer gone: removed. Younger, or its writer running: kept.
      expect(existsSync(abandoned)).toBe(false);
      expect(readFileSync(live, "utf8")).toBe(liveRecord);
      expect(existsSync(young)).toBe(true);

      age(young);
      await sink.append(gateRecord(2));
      // The folder is read again only once a claim made since the last look could have come of age.
      expect(existsSync(young)).toBe(true);
      now += 30_000;
      await sink.append(gateRecord(3));
      expect(existsSync(young)).toBe(false);
      expect(existsSync(live)).toBe(true);
      await sink.close();
      expect(
        readdirSync(dir)
          .filter((name) => name.startsWith(basename(path)))
          .sort(),
      ).toEqual([basename(path), basename(live)]);
      expect(await verifyAuditLog(path)).toMatchObject({
        ok: true,
        records: [gateRecord(1), gateRecord(2), gateRecord(3)],
      });
    } finally {
      breaker.kill();
    }
  });
});

describe("a log rotated by copytruncate while a sink has it open", () => {
  it("refuses the open sink's next append once another process wrote a fresh log of the same length in its place", async () => {
    const path = join(dir, "copytruncate.jsonl");
    const errors: unknown[] = [];
    const sink = await AuditSink.open(path, { onError: (error) => errors.push(error) });
    await sink.append(gateRecord(1, { tool: "wp_1" }));
    // logrotate's copytruncate: the log copied aside, then cut to nothing in place (the same file).
    writeFileSync(`${path}.1`, readFileSync(path));
    await truncate(path, 0);
    // Another process starts the log afresh: its line 1 is as long as the one cut away.
    const writer = await readyWriter([path, "r", "1"]);
    expect(await writer.go()).toEqual({ outcomes: ["ok:1"] });
    const fresh = await readFile(path);
    expect(fresh.length).toBe(readFileSync(`${path}.1`).length);

    // Before, the sizes matching, the sink took the log for the one it left and wrote its
    // line 2 after the other process's line 1, linked to the line cut away: the log no longer verified.
    await expect(sink.append(gateRecord(2, { tool: "wp_2" }))).rejects.toMatchObject({
      code: "AUDIT_CORRUPT",
      line: 1,
      problem: "edited",
      message: expect.stringContaining("cut back or rewritten"),
    });
    await expect(sink.append(gateRecord(3))).rejects.toMatchObject({ code: "AUDIT_CORRUPT" });
    expect(errors).toHaveLength(2);
    await sink.close();
    expect(await readFile(path)).toEqual(fresh);
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1, { tool: "wr_1" })] });
  });
});

describe("a keyed log cut short behind a sink that has not read its end", () => {
  /** Has another process append `count` records to the keyed log at `path` (its key in `keyFile`), sealing it. */
  async function appendElsewhere(path: string, keyFile: string, count: number): Promise<void> {
    await (await readyWriter([path, "o", String(count), keyFile])).go();
  }

  it.each([
    { name: "its seal left in place", seal: "kept" },
    { name: "its seal removed", seal: "removed" },
  ] as const)(
    "refuses the sink's next append instead of sealing the shorter log over the lines cut off ($name)",
    async ({ seal }) => {
      const path = join(dir, `cut-under-seal-${seal}.jsonl`);
      const key = randomBytes(32);
      const keyFile = join(dir, `cut-under-seal-${seal}.key`);
      await writeFile(keyFile, key, { mode: 0o600 });
      const errors: unknown[] = [];
      const sink = await AuditSink.open(path, { key, onError: (error) => errors.push(error) });
      await sink.append(gateRecord(1, { tool: "ws_1" }));
      // Another process appends lines 2-4 and seals the log at line 4; the sink has read up to line 1.
      await appendElsewhere(path, keyFile, 3);
      // Someone without the key cuts lines 3 and 4 off, in place.
      const lines = readFileSync(path, "utf8").split("\n").slice(0, -1);
      expect(lines).toHaveLength(4);
      await truncate(path, Buffer.byteLength(`${lines[0]}\n${lines[1]}\n`));
      if (seal === "removed") await unlink(`${path}.seal`);
      const problem = seal === "kept" ? "removed" : "unsealed";
      expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, line: 3, problem });
      const cut = await readFile(path);

      // Before, the sink read line 2, wrote its line 3 after it and sealed the log there: the two
      // lines cut off were no longer told, and the log verified with the key.
      await expect(sink.append(gateRecord(5, { tool: "ws_2" }))).rejects.toMatchObject({
        code: "AUDIT_CORRUPT",
        line: 3,
        problem,
      });
      await expect(sink.append(gateRecord(6))).rejects.toMatchObject({ code: "AUDIT_CORRUPT" });
      expect(errors).toHaveLength(2);
      await sink.close();
      expect(await readFile(path)).toEqual(cut);
      expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, line: 3, problem });
    },
  );

  it("appends after lines another writer left unsealed (it stopped between its lines and its seal)", async () => {
    const path = join(dir, "unsealed-lines.jsonl");
    const key = randomBytes(32);
    const keyFile = join(dir, "unsealed-lines.key");
    await writeFile(keyFile, key, { mode: 0o600 });
    const sink = await AuditSink.open(path, { key });
    await sink.append(gateRecord(1, { tool: "ws_1" }));
    const sealed = await readFile(`${path}.seal`);
    await appendElsewhere(path, keyFile, 2);
    // As a writer killed between its lines and its seal leaves it: the seal still at line 1.
    await writeFile(`${path}.seal`, sealed);
    expect(await sink.append(gateRecord(4, { tool: "ws_2" }))).toMatchObject({ seq: 4 });
    await sink.close();
    const result = await verifyAuditLog(path, { key });
    expect(result.ok && result.records.map((r) => r.tool)).toEqual(["ws_1", "wo_1", "wo_2", "ws_2"]);
  });
});

describe("a log with two names (a hard link)", () => {
  it("is refused by writers through either name, so that their two locks never fork its chain", async () => {
    const path = join(dir, "linked.jsonl");
    const other = join(dir, "linked-too.jsonl");
    const sink = await AuditSink.open(path);
    await sink.append(gateRecord(1, { tool: "wl_1" }));
    await sink.close();
    linkSync(path, other);
    const before = await readFile(path);
    // One writer through each name, appending at once: each would take the lock beside its own name.
    const children = [path, other].map((name, w) =>
      spawn(process.execPath, [writerScript, name, String(w), String(EACH)], { stdio: ["pipe", "pipe", "pipe"] }),
    );
    const outputs = await Promise.all(
      children.map(async (child) => {
        let text = "";
        child.stdout.setEncoding("utf8");
        child.stderr.setEncoding("utf8");
        child.stdout.on("data", (chunk: string) => {
          text += chunk;
          if (chunk.includes("ready\n")) child.stdin.end("go\n");
        });
        child.stderr.on("data", (chunk: string) => (text += chunk));
        const [code] = (await once(child, "exit")) as [number | null];
        return { code, text };
      }),
    );
    // Before, both opened, and their appends forked the chain: two lines carried the same seq.
    for (const [i, { code, text }] of outputs.entries()) {
      expect(code, text).not.toBe(0);
      expect(text).not.toContain("ready");
      expect(text).toContain(`audit log ${[path, other][i]} has 2 names (hard links) and is not opened`);
    }
    expect(await readFile(path)).toEqual(before);
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, anchor: { seq: 1 } });

    // A name added while a sink has the log open: its appends are refused, nothing written, until it is gone.
    await unlink(other);
    const errors: unknown[] = [];
    const open = await AuditSink.open(path, { onError: (error) => errors.push(error) });
    linkSync(path, other);
    await expect(open.append(gateRecord(2, { tool: "wl_2" }))).rejects.toMatchObject({
      code: "AUDIT_PATH",
      message: expect.stringContaining("has 2 names (hard links) and is not written to"),
    });
    expect(await readFile(path)).toEqual(before);
    await unlink(other);
    await expect(open.append(gateRecord(3, { tool: "wl_3" }))).resolves.toMatchObject({ seq: 2 });
    await open.close();
    expect(errors).toHaveLength(1);
    expect(await verifyAuditLog(path)).toMatchObject({
      ok: true,
      records: [gateRecord(1, { tool: "wl_1" }), gateRecord(3, { tool: "wl_3" })],
    });
  });
});
