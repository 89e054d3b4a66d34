import { execFile, execFileSync, spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FileGrantStore, Grant, GrantScope, LedgerIoError, LedgerLockError } from "../src/grant/index.js";
import { LoopctlError } from "../src/errors.js";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";
import { walk } from "./support/reliability-files.js";
import { isRoot, unmet } from "./support/precondition.js";
import { useGrantShim } from "./support/native-shim.js";

const temp = mkdtempSync(join(tmpdir(), "loopctl-hostile-fs-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

let n = 0;
interface Layout {
  readonly root: string;
  readonly project: string;
  readonly store: FileGrantStore;
  /** `<root>/projects/<id>` */
  readonly dir: string;
  /** A folder outside the root that an attacker wants written (or read) instead. */
  readonly elsewhere: string;
}
function layout(): Layout {
  n += 1;
  const base = join(temp, `case-${n}`);
  mkdirSync(base, { mode: 0o700 });
  const root = join(base, "root");
  const project = join(base, "project");
  const store = new FileGrantStore(root, project);
  const elsewhere = join(base, "elsewhere");
  mkdirSync(elsewhere, { mode: 0o700 });
  return { root, project, store, dir: dirname(store.ledgerPath), elsewhere };
}

const grant = new Grant("shell", "allow", GrantScope.thisTool());
const planted = `[${new Grant("shell", "allow", GrantScope.thisTool()).withNote("planted by an attacker").toLedgerText()}]`;

/** Every file and folder under `dir` with its bytes, to prove nothing there changed. */
function snapshot(dir: string): string {
  return JSON.stringify(
    walk(dir).map((e) => [e.path, e.kind, e.mode, e.kind === "file" ? readFileSync(join(dir, e.path), "base64") : ""]),
  );
}

/** Runs `op` and requires a typed loopctl error (never success, never an untyped error). */
async function refused(op: Promise<unknown>): Promise<LoopctlError> {
  const outcome = await op.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(outcome).toBeInstanceOf(LoopctlError);
  return outcome as LoopctlError;
}

/**
 * Replaces `swapped` (a folder on the ledger's path) with a symlink to the
 * attacker's copy of the tree under `l.elsewhere`, which holds a ledger of its own.
 */
function swapForSymlink(l: Layout, swapped: string): void {
  const relative = swapped === l.dir ? "" : l.dir.slice(swapped.length + 1);
  mkdirSync(join(l.elsewhere, relative), { recursive: true, mode: 0o700 });
  writeFileSync(join(l.elsewhere, relative, "grants.json"), planted, { mode: 0o600 });
  rmSync(swapped, { recursive: true });
  symlinkSync(l.elsewhere, swapped);
}

describe("symlinks on the ledger's path are never written through", () => {
  it("the ledger file swapped for a symlink: save, revoke, clear and load refuse; the target stays byte-identical", async () => {
    const { store, dir, elsewhere } = layout();
    await store.save(grant);
    const target = join(elsewhere, "victim.json");
    writeFileSync(target, planted, { mode: 0o600 });
    rmSync(store.ledgerPath);
    symlinkSync(target, store.ledgerPath);
    const before = snapshot(elsewhere);
    for (const op of [() => store.save(grant), () => store.revoke(grant.id), () => store.clear(), () => store.load()]) {
      const error = await refused(op());
      expect(error).toBeInstanceOf(LedgerIoError);
      expect(error.code).toBe("LEDGER_NOT_REGULAR_FILE");
      expect((error as LedgerIoError).path).toBe(store.ledgerPath);
    }
    expect(snapshot(elsewhere)).toBe(before);
    expect(lstatSync(store.ledgerPath).isSymbolicLink()).toBe(true);
    expect(existsSync(join(dir, "grants.json.lock"))).toBe(false);
  });

  it("a dangling ledger symlink is never followed to create its target", async () => {
    const { store, dir, elsewhere } = layout();
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    symlinkSync(join(elsewhere, "created-by-us.json"), store.ledgerPath);
    await refused(store.save(grant));
    expect(existsSync(join(elsewhere, "created-by-us.json"))).toBe(false);
  });

  it.each([
    ["the project folder (projects/<id>)", (l: Layout) => l.dir],
    ["the projects folder", (l: Layout) => dirname(l.dir)],
  ])("%s swapped for a symlink: writes refuse and the target stays byte-identical", async (_label, pick) => {
    const l = layout();
    await l.store.save(grant);
    swapForSymlink(l, pick(l));
    const before = snapshot(l.elsewhere);
    await refused(l.store.save(new Grant("rm", "allow", GrantScope.thisTool())));
    await refused(l.store.revoke(grant.id));
    await refused(l.store.clear());
    expect(snapshot(l.elsewhere)).toBe(before);
  });

  it.each([
    ["the project folder (projects/<id>)", (l: Layout) => l.dir],
    ["the projects folder", (l: Layout) => dirname(l.dir)],
  ])("%s swapped for a symlink: a load refuses rather than trust a ledger planted elsewhere", async (_label, pick) => {
    const l = layout();
    await l.store.save(new Grant("shell", "deny", GrantScope.thisTool()));
    swapForSymlink(l, pick(l));
    await refused(l.store.load());
  });

  it("a lock file planted as a symlink is never followed: the save fails with LedgerLockError, the target stays", async () => {
    const { root, project, store, dir, elsewhere } = layout();
    await store.save(grant);
    const target = join(elsewhere, "victim");
    writeFileSync(target, "precious", { mode: 0o600 });
    symlinkSync(target, join(dir, "grants.json.lock"));
    const error = await refused(new FileGrantStore(root, project, { lockTimeoutMs: 200 }).save(grant));
    expect(error).toBeInstanceOf(LedgerLockError);
    expect(readFileSync(target, "utf8")).toBe("precious");
  });
});

describe("a ledger that is not a regular file", () => {
  it("a directory: load, save, revoke and clear give LEDGER_NOT_REGULAR_FILE naming it", async () => {
    const { store } = layout();
    mkdirSync(store.ledgerPath, { recursive: true, mode: 0o700 });
    for (const op of [() => store.load(), () => store.save(grant), () => store.revoke(grant.id), () => store.clear()]) {
      const error = await refused(op());
      expect(error.code).toBe("LEDGER_NOT_REGULAR_FILE");
      expect(error.message).toContain(store.ledgerPath);
    }
  });

  it("a FIFO: a typed error at once, never a read that blocks waiting for a writer", async () => {
    const { store, dir } = layout();
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    execFileSync("mkfifo", ["-m", "600", store.ledgerPath]);
    for (const op of [() => store.load(), () => store.save(grant)]) {
      const error = await refused(op());
      expect(error.code).toBe("LEDGER_NOT_REGULAR_FILE");
    }
    expect(lstatSync(store.ledgerPath).isFIFO()).toBe(true);
  });
});

describe("a ledger swapped for a FIFO between the check of its path and its open", () => {
  // A child loads through a libc shim (LD_PRELOAD) that swaps the ledger for a FIFO just before it
  // is opened: the lstat before saw a regular file, so only the open itself can keep the read from
  // waiting for a writer that never comes.
  const setup = useGrantShim("fifo-at-open");
  const CHILD = `
const [, esm, root, project] = process.argv;
const { FileGrantStore } = await import(esm);
try {
  await new FileGrantStore(root, project).load();
  console.log(JSON.stringify({ ok: true }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, code: error.code, message: error.message }));
}
`;

  it("a load fails at once with LEDGER_NOT_REGULAR_FILE naming the ledger, never waits", async (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const root = join(setup.dir, "root");
    const project = join(setup.dir, "project");
    const store = new FileGrantStore(root, project);
    await store.save(grant);
    const child = spawnSync(
      process.execPath,
      ["--input-type=module", "-e", CHILD, pathToFileURL(setup.builds.esm).href, root, project],
      { encoding: "utf8", env: { ...process.env, LD_PRELOAD: setup.shim }, timeout: 10_000 },
    );
    expect(child.signal, "the load waited on the FIFO").toBeNull();
    expect(child.status, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout)).toEqual({
      ok: false,
      code: "LEDGER_NOT_REGULAR_FILE",
      message: expect.stringContaining(store.ledgerPath),
    });
    expect(lstatSync(store.ledgerPath).isFIFO()).toBe(true);
  }, 30_000);
});

describe("a lock file that is not a regular file", () => {
  it.each([
    ["a FIFO", (path: string) => execFileSync("mkfifo", ["-m", "600", path])],
    ["a folder", (path: string) => mkdirSync(path, { mode: 0o700 })],
  ])("%s: a change fails at once with LedgerLockError naming it, never waits on it", async (_label, make) => {
    const { root, project, store } = layout();
    await store.save(grant);
    make(store.lockPath);
    const writer = new FileGrantStore(root, project, { lockTimeoutMs: 200 });
    for (const op of [() => writer.save(new Grant("rm", "deny", GrantScope.thisTool())), () => writer.clear()]) {
      // A read of a FIFO blocks until a writer opens it: bounded here so such a hang fails the test.
      const outcome = await Promise.race([
        op().then(
          () => "settled",
          (error: unknown) => error,
        ),
        new Promise((resolve) => setTimeout(() => resolve("still waiting after 5 s"), 5_000).unref()),
      ]);
      expect(outcome).toBeInstanceOf(LedgerLockError);
      expect(outcome).toMatchObject({ path: store.lockPath });
      expect((outcome as Error).message).toContain("not a regular file");
    }
    expect((await store.load()).map((g) => g.id)).toEqual([grant.id]);
  });
});

describe("permissions: a ledger tree open to others is refused or tightened with a warning", () => {
  let warnings: string[] = [];
  const onWarning = (warning: Error): void => {
    warnings.push(warning.message);
  };
  beforeEach(() => {
    warnings = [];
    process.on("warning", onWarning);
  });
  afterEach(() => {
    process.off("warning", onWarning);
  });

  /** After `op`: either it was refused with a typed error, or nothing on the path is open to others and a warning named it. */
  async function refusedOrTightened(l: Layout, op: () => Promise<unknown>, wide: string): Promise<void> {
    const outcome = await op().then(
      () => undefined,
      (error: unknown) => error,
    );
    if (outcome !== undefined) {
      expect(outcome).toBeInstanceOf(LoopctlError);
      return;
    }
    // Warnings are emitted on a later tick.
    await new Promise((resolve) => setImmediate(resolve));
    for (const path of [l.root, join(l.root, "projects"), l.dir, l.store.ledgerPath]) {
      if (existsSync(path))
        expect({ path, mode: (lstatSync(path).mode & 0o077).toString(8) }).toEqual({ path, mode: "0" });
    }
    expect(warnings.some((w) => w.includes(wide))).toBe(true);
  }

  it.each(["755", "750"])(
    "a root readable by others (mode %s): the save goes ahead closed beneath it, the root left as the caller made it",
    async (mode) => {
      const l = layout();
      mkdirSync(l.root, { mode: 0o700 });
      chmodSync(l.root, Number.parseInt(mode, 8));
      await l.store.save(grant);
      expect((lstatSync(l.root).mode & 0o777).toString(8)).toBe(mode);
      expect(walk(l.root).filter((e) => e.path !== "." && (e.mode & 0o077) !== 0)).toEqual([]);
    },
  );

  it.each(["777", "707", "770"])(
    "a root writable by others and not sticky (mode %s): refused, nothing made in it",
    async (mode) => {
      const l = layout();
      mkdirSync(l.root, { mode: 0o700 });
      chmodSync(l.root, Number.parseInt(mode, 8));
      const error = await refused(l.store.save(grant));
      expect(error.code).toBe("LEDGER_PERMISSIONS");
      expect(error.message).toContain(`grant ledger folder ${l.root}: is writable by group or others (mode ${mode})`);
      expect(error.message).toContain("chmod go-w");
      expect(walk(l.root).map((e) => e.path)).toEqual(["."]);
    },
  );

  it.each([
    ["the projects folder", (l: Layout) => dirname(l.dir)],
    ["the project folder", (l: Layout) => l.dir],
    ["the ledger file", (l: Layout) => l.store.ledgerPath],
  ])("%s opened to others after a save: the next save", async (_label, pick) => {
    const l = layout();
    await l.store.save(grant);
    const path = pick(l);
    chmodSync(path, lstatSync(path).isDirectory() ? 0o777 : 0o666);
    await refusedOrTightened(l, () => l.store.save(new Grant("rm", "deny", GrantScope.thisTool())), path);
  });

  it("a ledger file writable by others is not trusted silently on load", async () => {
    const l = layout();
    await l.store.save(grant);
    chmodSync(l.store.ledgerPath, 0o666);
    await refusedOrTightened(l, () => new FileGrantStore(l.root, l.project).load(), l.store.ledgerPath);
  });

  it("folders the store creates are 0700 and the ledger 0600, whatever the umask", async () => {
    const l = layout();
    const previous = process.umask(0o000);
    try {
      await l.store.save(grant);
    } finally {
      process.umask(previous);
    }
    expect(walk(l.root).map((e) => [e.path, e.kind, e.mode.toString(8)])).toEqual([
      [".", "dir", "700"],
      ["projects", "dir", "700"],
      [l.dir.slice(l.root.length + 1), "dir", "700"],
      [l.store.ledgerPath.slice(l.root.length + 1), "file", "600"],
    ]);
  });
});

describe("a ledger on a read-only file system", () => {
  it("a revoke of an unknown id or a tool with no grants, or a clear of no grants, writes nothing and answers so; a change is a typed error naming the lock", async (context) => {
    const disk = mkdtempSync(join(temp, "tmpfs-ro-"));
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", disk], { stdio: "pipe" });
    } catch (error) {
      unmet(context, `mounting a 64 KB tmpfs is not permitted here: ${(error as Error).message.split("\n")[0] ?? ""}`);
    }
    try {
      const store = new FileGrantStore(join(disk, "root"), join(disk, "project"));
      await store.save(grant);
      const before = readFileSync(store.ledgerPath);
      const emptied = new FileGrantStore(join(disk, "root"), join(disk, "emptied"));
      await emptied.save(grant);
      await emptied.revoke(grant.id);
      execFileSync("mount", ["-o", "remount,ro", disk], { stdio: "pipe" });
      expect(await new FileGrantStore(join(disk, "root"), join(disk, "emptied")).clear()).toBe(0);
      expect(readFileSync(emptied.ledgerPath, "utf8")).toBe("[]");
      const reader = new FileGrantStore(join(disk, "root"), join(disk, "project"));
      expect(await reader.revoke("0123456789abcdef")).toBeUndefined();
      expect(await reader.revokeTool("read")).toEqual([]);
      const error = await refused(reader.revoke(grant.id));
      expect(error).toBeInstanceOf(LedgerLockError);
      expect(error.message).toContain(`${reader.lockPath}: cannot create the lock file (EROFS)`);
      expect(readFileSync(store.ledgerPath)).toEqual(before);
    } finally {
      execFileSync("umount", [disk]);
    }
  });
});

describe("a full disk", () => {
  it("a save that does not fit rejects with LEDGER_IO and leaves the previous ledger whole", async (context) => {
    const disk = mkdtempSync(join(temp, "tmpfs-"));
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", disk], { stdio: "pipe" });
    } catch (error) {
      unmet(context, `mounting a 64 KB tmpfs is not permitted here: ${(error as Error).message.split("\n")[0] ?? ""}`);
    }
    try {
      const project = join(disk, "project");
      const store = new FileGrantStore(join(disk, "root"), project);
      const saved: string[] = [];
      let failure: unknown;
      for (let i = 0; i < 200 && failure === undefined; i += 1) {
        const next = new Grant("write", "allow", GrantScope.thisCall({ i, body: "x".repeat(1_000) }));
        await store.save(next).then(
          () => saved.push(next.id),
          (error: unknown) => (failure = error),
        );
      }
      expect(failure).toBeInstanceOf(LedgerIoError);
      expect((failure as LedgerIoError).code).toBe("LEDGER_IO");
      expect((failure as LedgerIoError).path).toBe(store.ledgerPath);
      expect(saved.length).toBeGreaterThan(5);
      // What every later process reads: the ledger of the saves that resolved, whole.
      expect((await new FileGrantStore(join(disk, "root"), project).load()).map((g) => g.id)).toEqual(saved);
      expect(readdirSync(dirname(store.ledgerPath))).toEqual(["grants.json"]);
    } finally {
      execFileSync("umount", [disk]);
    }
  });
});

describe("a ledger this user cannot read or move aside", () => {
  // Root reads and chmods any file, so the store runs as `nobody` in a child
  // process, against a ledger owned by root (an owner the store accepts).
  const NOBODY = 65534;
  let reader: Bundle | undefined;
  beforeEach((context) => {
    if (!isRoot()) unmet(context, "running the store as another user (nobody) needs root");
  });
  beforeAll(async () => {
    if (!isRoot()) return;
    reader = await bundleChild("grant-reader.ts");
    chmodSync(dirname(reader.path), 0o755);
    chmodSync(reader.path, 0o644);
  });
  afterAll(() => reader?.dispose());

  /** A tree owned by `nobody` whose ledger, owned by root with `mode`, holds `bytes`. */
  function rootOwnedLedger(bytes: string, mode: number): { root: string; project: string; ledger: string } {
    const base = join(temp, `as-nobody-${(n += 1)}`);
    mkdirSync(base, { mode: 0o755 });
    // The way down to it must be open to `nobody`.
    chmodSync(temp, 0o755);
    const root = join(base, "root");
    const project = join(base, "project");
    mkdirSync(project, { mode: 0o755 });
    const ledger = new FileGrantStore(root, project).ledgerPath;
    mkdirSync(dirname(ledger), { recursive: true, mode: 0o700 });
    for (const path of [root, join(root, "projects"), dirname(ledger)]) chownSync(path, NOBODY, NOBODY);
    writeFileSync(ledger, bytes, { mode });
    chmodSync(ledger, mode);
    return { root, project, ledger };
  }

  function runAsNobody(root: string, project: string): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      execFile(
        process.execPath,
        [reader!.path, root, project],
        { uid: NOBODY, gid: NOBODY, cwd: "/" },
        (error, stdout, stderr) => {
          if (error !== null) reject(new Error(`${error.message}\n${stderr}`));
          else resolve(JSON.parse(stdout) as Record<string, unknown>);
        },
      );
    });
  }

  it("an unreadable ledger (EACCES) is an I/O error, never corruption: it is never moved aside, and the CLI exits 4", async () => {
    const remembered = `[${new Grant("deploy", "deny", GrantScope.thisTool()).toLedgerText()}]`;
    const { root, project, ledger } = rootOwnedLedger(remembered, 0o600);
    const seen = await runAsNobody(root, project);
    expect(seen["load"]).toEqual({ error: "LEDGER_IO" });
    expect(seen["resetCorrupt"]).toEqual({ error: "LEDGER_IO" });
    expect(seen["clearKeepAside"]).toEqual({ error: "LEDGER_IO" });
    for (const command of ["list", "reset", "repair"]) {
      const run = seen[command] as { code: number; stderr: string };
      expect(run.code, command).toBe(4);
      expect(run.stderr, command).toContain("[LEDGER_IO]");
      expect(run.stderr, command).toContain(ledger);
    }
    expect(readFileSync(ledger, "utf8")).toBe(remembered);
    expect(readdirSync(dirname(ledger))).toEqual(["grants.json"]);
  });

  it("a corrupt ledger that cannot be made owner-only is left where it is, and the move aside fails with LEDGER_IO", async () => {
    const { root, project, ledger } = rootOwnedLedger("[{", 0o644);
    const seen = await runAsNobody(root, project);
    expect(seen["load"]).toEqual({ error: "LEDGER_CORRUPT" });
    expect(seen["resetCorrupt"]).toEqual({ error: "LEDGER_IO" });
    expect(seen["clearKeepAside"]).toEqual({ error: "LEDGER_IO" });
    const repair = seen["repair"] as { code: number; stderr: string };
    expect(repair.code).toBe(4);
    expect(repair.stderr).toContain("[LEDGER_IO]");
    expect(repair.stderr).toContain(ledger);
    expect(readFileSync(ledger, "utf8")).toBe("[{");
    expect(readdirSync(dirname(ledger))).toEqual(["grants.json"]);
  });
});
