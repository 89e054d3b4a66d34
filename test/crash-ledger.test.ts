import { spawn, spawnSync } from "node:child_process";
import {
  existsSync,
  linkSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { hostname, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileGrantStore } from "../src/grant/index.js";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";
import { openToOthers, walk } from "./support/reliability-files.js";
import { denyGrant, ownGrant, sharedGrant } from "./support/reliability-grants.js";

/** Writers killed per run; raise with LOOPCTL_CRASH_ROUNDS. */
const ROUNDS = Number(process.env["LOOPCTL_CRASH_ROUNDS"] ?? 20);
/** Racing processes and grants each saves; raise with LOOPCTL_RACE_PROCS / LOOPCTL_RACE_OPS. */
const RACERS = Number(process.env["LOOPCTL_RACE_PROCS"] ?? 4);
const RACE_OPS = Number(process.env["LOOPCTL_RACE_OPS"] ?? 12);

let writer: Bundle | undefined;
const roots: string[] = [];
beforeAll(async () => {
  writer = await bundleChild("reliability-writer.ts");
});
afterAll(() => {
  writer?.dispose();
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

function freshRoot(): { root: string; project: string } {
  const root = mkdtempSync(join(tmpdir(), "loopctl-crash-"));
  roots.push(root);
  return { root: join(root, "state"), project: join(root, "project") };
}

/** Starts a churn writer and SIGKILLs it `delayMs` after it reported `saves` completed saves. */
function churnUntilKilled(
  root: string,
  project: string,
  tag: string,
  saves: number,
  delayMs: number,
): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [writer!.path, "churn", root, project, tag], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    let killing = false;
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
      if (!killing && out.split("\n").filter((l) => l.startsWith("saved ")).length >= saves) {
        killing = true;
        setTimeout(() => child.kill("SIGKILL"), delayMs);
      }
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (err += chunk));
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      if (signal !== "SIGKILL") reject(new Error(`writer ended with ${code}/${signal}: ${err}`));
      // Only whole lines count: a line cut by the kill was never a completed operation.
      else resolve(out.split("\n").slice(0, -1));
    });
  });
}

/** What one chain of kills on one ledger saw. */
interface ChainFigures {
  readonly kills: number;
  readonly completedOps: number;
  readonly held: number;
  readonly tempFiles: number;
  readonly lockLeft: number;
}

/**
 * Kills `rounds` writers one after another on one ledger, checking it after
 * every kill; each writer continues the ledger the killed one left.
 */
async function killChain(chain: number, rounds: number): Promise<ChainFigures> {
  const { root, project } = freshRoot();
  const rand = fc.sample(fc.tuple(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 0, max: 6 })), {
    numRuns: rounds,
    seed: 4242 + chain,
  });
  const present = new Set<string>();
  const absent = new Set<string>();
  const leftTemp = new Set<string>();
  let leftLock = 0;
  let completedOps = 0;
  for (let round = 0; round < rounds; round += 1) {
    const tag = `c${chain}r${round}`;
    const [saves, delayMs] = rand[round]!;
    const lines = await churnUntilKilled(root, project, tag, saves, delayMs);
    expect(lines[0]).toBe("ready");
    const ops = lines.slice(1);
    // After "saved n" the writer revokes n-2: that revoke may have been cut by the kill, so either state is right.
    const savedCount = ops.filter((l) => l.startsWith("saved ")).length;
    const inFlight =
      ops.at(-1)?.startsWith("saved ") === true && savedCount >= 3 ? ownGrant(tag, savedCount - 3).id : undefined;
    for (const line of ops) {
      const [op, id] = line.split(" ");
      completedOps += 1;
      if (op === "saved") {
        present.add(id!);
        absent.delete(id!);
      } else {
        // Each writer revokes only grants it saved and never saves them again.
        expect(op).toBe("revoked");
        present.delete(id!);
        absent.add(id!);
      }
    }
    if (inFlight !== undefined) present.delete(inFlight);
    const store = new FileGrantStore(root, project);
    const raw = JSON.parse(readFileSync(store.ledgerPath, "utf8")) as { id: string }[];
    const ids = (await store.load()).map((g) => g.id);
    expect(new Set(raw.map((r) => r.id)).size).toBe(raw.length);
    for (const id of present) expect(ids).toContain(id);
    for (const id of absent) expect(ids).not.toContain(id);
    expect(openToOthers(root)).toEqual([]);
    const beside = walk(join(store.ledgerPath, "..")).map((e) => e.path);
    for (const name of beside.filter((p) => /^grants\.json\.[0-9a-f]+$/.test(p))) leftTemp.add(name);
    leftLock += beside.includes("grants.json.lock") ? 1 : 0;
  }
  // A later writer still gets the lock and the ledger afterwards.
  const store = new FileGrantStore(root, project);
  const last = ownGrant("after", chain);
  await store.save(last);
  expect((await store.load()).map((g) => g.id)).toEqual(expect.arrayContaining([...present, last.id]));
  // Whatever temporary ledgers the kills left, the writer after them removed.
  expect(readdirSync(dirname(store.ledgerPath)).filter((name) => TEMP.test(name))).toEqual([]);
  return { kills: rounds, completedOps, held: present.size, tempFiles: leftTemp.size, lockLeft: leftLock };
}

describe("SIGKILL of real writer processes mid-save", () => {
  it(
    `after each of ${ROUNDS} kills the ledger parses, holds every returned save, loses no returned revoke, and nothing is open to others`,
    async () => {
      // Four independent ledgers at once: a round mostly waits for a process to start.
      const chains = Math.min(4, ROUNDS);
      const figures = await Promise.all(
        Array.from({ length: chains }, (_, c) =>
          killChain(c, Math.floor(ROUNDS / chains) + (c < ROUNDS % chains ? 1 : 0)),
        ),
      );
      const sum = (key: keyof ChainFigures): number => figures.reduce((n, f) => n + f[key], 0);
      expect(sum("kills")).toBe(ROUNDS);
      console.log(
        `crash: ${sum("kills")} kills on ${chains} ledgers, ${sum("completedOps")} completed operations checked, ` +
          `${sum("held")} grants held; temp files left by kills: ${sum("tempFiles")}, kills that left the lock: ${sum("lockLeft")}`,
      );
    },
    Math.max(120_000, ROUNDS * 5_000),
  );
});

describe("several processes saving and revoking one project at once", () => {
  it(
    `${RACERS} processes × ${RACE_OPS} own grants (half revoked) + ${RACE_OPS / 2} shared ids saved, revoked and saved again by every one`,
    async () => {
      const { root, project } = freshRoot();
      const shared = RACE_OPS / 2;
      const racers = Array.from(
        { length: RACERS },
        (_, i) =>
          new Promise<{ tag: string; ops: { op: string; id: string; returned: boolean }[] }>((resolve, reject) => {
            const child = spawn(
              process.execPath,
              [writer!.path, "race", root, project, `p${i}`, String(RACE_OPS), String(shared)],
              {
                stdio: ["ignore", "pipe", "pipe"],
              },
            );
            let out = "";
            let err = "";
            child.stdout.setEncoding("utf8").on("data", (c: string) => (out += c));
            child.stderr.setEncoding("utf8").on("data", (c: string) => (err += c));
            child.on("exit", (code) =>
              code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`racer p${i} exited ${code}: ${err}`)),
            );
          }),
      );
      const reports = await Promise.all(racers);
      const store = new FileGrantStore(root, project);
      const raw = JSON.parse(readFileSync(store.ledgerPath, "utf8")) as { id: string }[];
      expect(new Set(raw.map((r) => r.id)).size).toBe(raw.length);
      const loaded = await store.load();
      const ids = new Set(loaded.map((g) => g.id));
      let ops = 0;
      for (const { tag, ops: done } of reports) {
        ops += done.length;
        for (let n = 0; n < RACE_OPS; n += 1) {
          const id = ownGrant(tag, n).id;
          // Nobody else touches a racer's own grants: its saves and revokes must all stick.
          expect(ids.has(id)).toBe(n % 2 === 0);
          if (n % 2 === 1) expect(done.find((o) => o.op === "revoke" && o.id === id)?.returned).toBe(true);
        }
      }
      for (let n = 0; n < shared; n += 1) {
        const id = sharedGrant(n).id;
        // Every racer's last word on a shared id is a save, so it is there, once, with one racer's note.
        expect(ids.has(id)).toBe(true);
        expect(reports.map((r) => r.tag)).toContain(loaded.find((g) => g.id === id)?.note);
        // The first revoke in the serial order follows a save, so at least one revoke found the grant.
        const found = reports.flatMap((r) => r.ops).filter((o) => o.op === "revoke" && o.id === id && o.returned);
        expect(found.length).toBeGreaterThanOrEqual(1);
      }
      expect(loaded).toHaveLength(RACERS * (RACE_OPS / 2) + shared);
      expect(openToOthers(root)).toEqual([]);
      expect(
        walk(join(store.ledgerPath, ".."))
          .map((e) => e.path)
          .sort(),
      ).toEqual([".", "grants.json"]);
      console.log(`race: ${RACERS} processes, ${ops} operations, ${loaded.length} grants held, none lost`);
    },
    Math.max(120_000, RACERS * RACE_OPS * 1_000),
  );
});

/** A churn writer stopped with SIGSTOP while it holds the lock and its next ledger is written only under a temporary name. */
interface PausedWriter {
  readonly pid: number;
  /** The temporary ledger it was writing when stopped. */
  readonly temp: string;
  /** Every line it has printed so far. */
  readonly lines: string[];
  /** Settles when it exits, with its code, signal and stderr. */
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
}

const TEMP = /^grants\.json\.tmp-[0-9a-f]{8}$/;

function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
}

/** Whether the file at `path` ends in "]": the ledgers written here hold no other "]". */
function complete(path: string): boolean {
  const bytes = readFileSync(path);
  return bytes.length > 0 && bytes[bytes.length - 1] === 0x5d;
}

/**
 * Seeds (root, project) with `size` grants, so that each write of the ledger
 * takes long enough to be caught in, starts a churn writer and stops it,
 * again and again, until it is caught holding the lock with its next ledger
 * in a temporary file (one still being written, with `incomplete`).
 */
async function pausedMidWrite(root: string, project: string, tag: string, incomplete: boolean): Promise<PausedWriter> {
  const store = new FileGrantStore(root, project);
  await store.save(ownGrant("seed", 0));
  const seeded = Array.from({ length: 10_000 }, (_, n) => JSON.stringify(ownGrant("seed", n)));
  writeFileSync(store.ledgerPath, `[${seeded.join(",")}]`, { mode: 0o600 });
  const child = spawn(process.execPath, [writer!.path, "churn", root, project, tag], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  let stderr = "";
  child.stdout
    .setEncoding("utf8")
    .on("data", (chunk: string) => lines.push(...chunk.split("\n").filter((l) => l !== "")));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal, stderr })),
  );
  const pid = child.pid!;
  await expect.poll(() => lines.some((l) => l.startsWith("saved ")), { timeout: 30_000 }).toBe(true);
  const dir = dirname(store.ledgerPath);
  for (let attempt = 0; attempt < 2_000; attempt += 1) {
    process.kill(pid, "SIGSTOP");
    await expect.poll(() => processState(pid), { interval: 1 }).toBe("T");
    const temp = readdirSync(dir).find((name) => TEMP.test(name));
    let holder: number | undefined;
    try {
      holder = (JSON.parse(readFileSync(store.lockPath, "utf8")) as { pid: number }).pid;
    } catch {
      holder = undefined;
    }
    if (temp !== undefined && holder === pid && (!incomplete || !complete(join(dir, temp)))) {
      return { pid, temp: join(dir, temp), lines, exit };
    }
    process.kill(pid, "SIGCONT");
    await new Promise((resolve) => setTimeout(resolve, attempt % 4));
  }
  child.kill("SIGKILL");
  throw new Error("the writer was never caught mid-write");
}

describe("a writer stopped (SIGSTOP) while it holds the lock", () => {
  it("on this host: a second writer waits for it however long, and neither write is lost", async () => {
    const { root, project } = freshRoot();
    const second = spawn(process.execPath, [writer!.path, "deny", root, project, "second"], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    const said: string[] = [];
    second.stdout
      .setEncoding("utf8")
      .on("data", (chunk: string) => said.push(...chunk.split("\n").filter((l) => l !== "")));
    const secondExit = new Promise<number | null>((resolve) => second.on("exit", resolve));
    await expect.poll(() => said, { timeout: 30_000 }).toContain("ready");
    const first = await pausedMidWrite(root, project, "first", false);
    let firstWord: string | undefined;
    try {
      second.stdin.end("go\n");
      // Its stale bound is 1 ms and the lock is older: only the holder being alive keeps it waiting.
      await expect.poll(() => said.length, { timeout: 30_000 }).toBeGreaterThan(1);
      firstWord = said[1];
      process.kill(first.pid, "SIGCONT");
      expect(await secondExit).toBe(0);
      // The first writer goes on saving and revoking its own grants meanwhile.
      await expect.poll(() => first.lines.length, { timeout: 30_000 }).toBeGreaterThan(first.lines.length + 2);
    } finally {
      process.kill(first.pid, "SIGCONT");
      process.kill(first.pid, "SIGKILL");
      second.kill("SIGKILL");
    }
    await first.exit;
    const ids = (await new FileGrantStore(root, project).load()).map((g) => g.id);
    expect(ids).toContain(denyGrant("second").id);
    const firstSaved = first.lines.filter((l) => l.startsWith("saved ")).map((l) => l.slice("saved ".length));
    expect(ids).toEqual(expect.arrayContaining(firstSaved.slice(-1)));
    expect(firstWord).toBe(`waiting ${first.pid}`);
  });

  it("from another host, broken for its age: its ledger never replaces the new holder's", async () => {
    const { root, project } = freshRoot();
    const first = await pausedMidWrite(root, project, "first", true);
    const store = new FileGrantStore(root, project);
    // What a writer on another host does once the lock is past the stale bound: take the lock, write.
    renameSync(store.lockPath, `${store.lockPath}.broken`);
    const theirs = JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: Date.now(), token: "theirs" });
    writeFileSync(store.lockPath, theirs, { mode: 0o600 });
    const ledger = `[${JSON.stringify(denyGrant("another-host"))}]`;
    writeFileSync(store.ledgerPath, ledger, { mode: 0o600 });
    process.kill(first.pid, "SIGCONT");
    // It fails on its own; one that put its ledger in place would wait on the other host's lock instead.
    const ended = await Promise.race([
      first.exit,
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10_000)),
    ]);
    if (ended === undefined) process.kill(first.pid, "SIGKILL");
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(ledger);
    expect(readFileSync(store.lockPath, "utf8")).toBe(theirs);
    expect(ended?.code).toBe(1);
    expect(ended?.stderr).toContain("LEDGER_LOCK");
    expect(existsSync(first.temp)).toBe(false);
  });

  it("killed there: the next writer removes the temporary ledger it left", async () => {
    const { root, project } = freshRoot();
    const first = await pausedMidWrite(root, project, "first", false);
    process.kill(first.pid, "SIGKILL");
    await first.exit;
    expect(existsSync(first.temp)).toBe(true);
    const store = new FileGrantStore(root, project);
    await store.save(denyGrant("next"));
    expect(readdirSync(dirname(store.ledgerPath))).toEqual(["grants.json"]);
  });
});

describe("a writer killed (SIGKILL) between its claim to break an abandoned lock and its rename", () => {
  const killPoint = fileURLToPath(new URL("./support/claim-kill-point.mjs", import.meta.url));
  const CLAIM = /^grants\.json\.lock\.break-[0-9a-f]{16}$/;

  it("leaves a claim that a later writer removes once it is older than the stale bound, never before", async () => {
    const { root, project } = freshRoot();
    const store = new FileGrantStore(root, project);
    await store.save(ownGrant("seed", 0));
    const dir = dirname(store.ledgerPath);
    // A lock whose process died: every writer that finds it breaks it.
    const dead = spawnSync(process.execPath, ["-e", ""]).pid;
    writeFileSync(store.lockPath, JSON.stringify({ pid: dead, hostname: hostname(), createdAtMs: 1, token: "t" }), {
      mode: 0o600,
    });
    const child = spawn(process.execPath, ["--import", killPoint, writer!.path, "churn", root, project, "killed"], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    const said: string[] = [];
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => said.push(...chunk.split("\n").filter(Boolean)));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const exit = new Promise<NodeJS.Signals | null>((resolve) => child.on("exit", (_, signal) => resolve(signal)));
    try {
      // It has judged the lock abandoned and is about to claim it; another writer breaks it first.
      await expect.poll(() => said, { timeout: 30_000 }).toContain("claiming");
      await store.save(ownGrant("first", 0));
      child.stdin.end("go\n");
      // Its claim made, it finds the lock changed, and dies before removing the claim.
      expect(await exit).toBe("SIGKILL");
    } finally {
      child.kill("SIGKILL");
    }
    expect(said, stderr).toEqual(["ready", "claiming", "killed"]);
    const claims = readdirSync(dir).filter((name) => CLAIM.test(name));
    expect(claims).toHaveLength(1);
    const claim = join(dir, claims[0]!);
    expect((JSON.parse(readFileSync(claim, "utf8")) as { pid: number }).pid).toBe(child.pid);

    // Younger than the stale bound (30 s): left alone, and in nobody's way.
    await store.save(ownGrant("second", 0));
    expect(existsSync(claim)).toBe(true);
    // Once older, the next writer removes it.
    const past = new Date(Date.now() - 60_000);
    utimesSync(claim, past, past);
    await store.save(ownGrant("third", 0));
    expect(readdirSync(dir)).toEqual(["grants.json"]);
    expect((await store.load()).map((g) => g.note)).toEqual(["seed#0", "first#0", "second#0", "third#0"]);
  }, 60_000);
});

describe("a ledger with two names (a hard link)", () => {
  /** Runs the writer in `mode` for `project`; resolves once it printed "ready". */
  function started(mode: string, root: string, project: string, tag: string) {
    const child = spawn(process.execPath, [writer!.path, mode, root, project, tag], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    let text = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (text += chunk));
    const exit = new Promise<number | null>((resolve) => child.on("exit", resolve));
    return {
      ready: expect.poll(() => text, { timeout: 30_000 }).toContain("ready"),
      go: () => child.stdin.end("go\n"),
      done: exit.then((code) => ({ code, text })),
    };
  }

  it("is refused by a save and a revoke through either name, so that neither change is lost", async () => {
    const { root } = freshRoot();
    const projectA = join(dirname(root), "project-a");
    const projectB = join(dirname(root), "project-b");
    const a = new FileGrantStore(root, projectA);
    const b = new FileGrantStore(root, projectB);
    const granted = ownGrant("shared", 0);
    await a.save(granted);
    await b.save(ownGrant("b", 1));
    // project-b's ledger becomes a second name for project-a's: `ln project-a/grants.json project-b/grants.json`.
    rmSync(b.ledgerPath);
    linkSync(a.ledgerPath, b.ledgerPath);
    const before = readFileSync(a.ledgerPath);

    // One process saves through the first name while another revokes through the second.
    const saver = started("deny", root, projectA, "saver");
    const revoker = started("revoke", root, projectB, "shared");
    await Promise.all([saver.ready, revoker.ready]);
    saver.go();
    revoker.go();
    const outcomes = await Promise.all([saver.done, revoker.done]);

    // Before, each took the lock beside its own name and renamed its ledger over that name alone:
    // the names parted, one without the save and the other still holding the revoked grant.
    expect(readFileSync(b.ledgerPath, "utf8")).toBe(readFileSync(a.ledgerPath, "utf8"));
    for (const [i, { code, text }] of outcomes.entries()) {
      const ledger = [a, b][i]!.ledgerPath;
      expect(code, text).not.toBe(0);
      expect(text).toContain(`grant ledger ${ledger}: has 2 names (hard links)`);
      expect(text).not.toContain("saved");
      expect(text).not.toContain("revoked");
    }
    expect(readFileSync(a.ledgerPath)).toEqual(before);
    expect(readFileSync(b.ledgerPath)).toEqual(before);
    for (const store of [a, b]) {
      await expect(store.load()).rejects.toMatchObject({
        code: "LEDGER_UNSAFE_PATH",
        path: store.ledgerPath,
        message: expect.stringContaining(`${store.ledgerPath}: has 2 names (hard links); refusing to read or write it`),
      });
    }

    // Once the other name is gone, the ledger is read and written again.
    rmSync(b.ledgerPath);
    await expect(a.revoke(granted.id)).resolves.toEqual(granted);
    expect(await a.load()).toEqual([]);
  });
});
