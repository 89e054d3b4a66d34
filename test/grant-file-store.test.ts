import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { hostname, tmpdir } from "node:os";
import { open, type FileHandle } from "node:fs/promises";
import { constants as bufferConstants } from "node:buffer";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  FileGrantStore,
  Grant,
  GrantConfigError,
  GrantPolicy,
  GrantScope,
  LedgerCorruptError,
  LedgerFormatError,
  LedgerIoError,
  LedgerLockError,
  projectIdentity,
  type LedgerLockWait,
  type LedgerWarning,
} from "../src/grant/index.js";
import { isRoot, unmet } from "./support/precondition.js";
import { liveHolder } from "./support/live-holder.js";
import { expectAbortedSignalFirst, expectBadCallOptionsRefused } from "./support/grant-call-options.js";

const { MAX_STRING_LENGTH } = bufferConstants;
const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 30);

let root: string;
let project: string;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "loopctl-store-"));
  project = join(root, "project");
  mkdirSync(project);
});
afterEach(() => {
  vi.restoreAllMocks();
  rmSync(root, { recursive: true, force: true });
});

const grantA = new Grant("read", "allow", GrantScope.thisTool()).withCreatedAtMs(1);
const grantB = new Grant("write", "deny", GrantScope.thisCall({ path: "a.rs" })).withCreatedAtMs(2);

function store(options?: ConstructorParameters<typeof FileGrantStore>[2]): FileGrantStore {
  return new FileGrantStore(join(root, "grants"), project, options);
}

function writeLedger(s: FileGrantStore, bytes: string | Buffer): void {
  mkdirSync(join(s.ledgerPath, ".."), { recursive: true, mode: 0o700 });
  writeFileSync(s.ledgerPath, bytes);
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection");
}

describe("FileGrantStore layout", () => {
  it("keeps one ledger per project under <root>/projects/<projectIdentity>/grants.json", () => {
    const s = store();
    expect(s.ledgerPath).toBe(join(root, "grants", "projects", projectIdentity(project), "grants.json"));
    expect(s.lockPath).toBe(`${s.ledgerPath}.lock`);
  });

  it("roots at $XDG_STATE_HOME when absolute, else ~/.local/state", () => {
    expect(FileGrantStore.defaultRoot({ XDG_STATE_HOME: "/state", HOME: "/home/u" })).toBe(
      join("/state", "loopctl", "grants"),
    );
    expect(FileGrantStore.defaultRoot({ XDG_STATE_HOME: "rel", HOME: "/home/u" })).toBe(
      join("/home/u", ".local", "state", "loopctl", "grants"),
    );
    expect(FileGrantStore.defaultRoot({ HOME: "/home/u" })).toBe(
      join("/home/u", ".local", "state", "loopctl", "grants"),
    );
  });
});

describe("FileGrantStore arguments", () => {
  /** What the constructor throws for these arguments. */
  function refusal(...args: unknown[]): unknown {
    try {
      new FileGrantStore(...(args as ConstructorParameters<typeof FileGrantStore>));
    } catch (error) {
      return error;
    }
    throw new Error("expected the constructor to throw");
  }

  it("refuses a root or project folder that is not a non-empty string, or options that are not an object, naming the argument", () => {
    const env: Record<string, string | undefined> = {};
    for (const [args, argument] of [
      [[join(root, "grants"), env["PROJECT_DIR"]], "projectDir"],
      [[join(root, "grants"), ""], "projectDir"],
      [[join(root, "grants"), null], "projectDir"],
      [[join(root, "grants"), 7], "projectDir"],
      [[env["GRANTS_ROOT"], project], "rootDir"],
      [["", project], "rootDir"],
      [[{}, project], "rootDir"],
      [[join(root, "grants"), project, null], "options"],
    ] as const) {
      const error = refusal(...args);
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument });
      expect((error as Error).message).toContain(`FileGrantStore: ${argument} must be `);
    }
    expect(existsSync(join(root, "grants"))).toBe(false);
  });

  it("refuses a root or project folder holding a NUL character, which no path can hold, naming the argument", () => {
    for (const [args, argument] of [
      [[join(root, "gr\0ants"), project], "rootDir"],
      [[join(root, "grants"), `${project}\0`], "projectDir"],
    ] as const) {
      const error = refusal(...args);
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument });
      expect((error as Error).message).toContain(`FileGrantStore: ${argument} must not hold a NUL character`);
    }
    expect(existsSync(join(root, "grants"))).toBe(false);
  });

  it("rejects with an aborted signal's reason before anything else is checked, changing nothing", async () => {
    const s = store();
    await s.save(grantA);
    const before = readFileSync(s.ledgerPath, "utf8");
    await expectAbortedSignalFirst(s, (signal) => [
      ["resetCorrupt", () => s.resetCorrupt({ signal })],
      ["clear keeping a corrupt ledger aside", () => s.clear({ signal, corrupt: "keep-aside" })],
      ["revokeTool", () => s.revokeTool(7 as never, { signal })],
    ]);
    expect(readFileSync(s.ledgerPath, "utf8")).toBe(before);
  });

  it("rejects call options that are not an object, or a signal that is not an AbortSignal or cannot be listened to, naming them and changing nothing", async () => {
    const s = store();
    await s.save(grantA);
    const before = readFileSync(s.ledgerPath, "utf8");
    await expectBadCallOptionsRefused((options) => [
      ["FileGrantStore.load", () => s.load(options)],
      ["FileGrantStore.covering", () => s.covering("read", "{}", options)],
      ["FileGrantStore.save", () => s.save(grantB, options)],
      ["FileGrantStore.revoke", () => s.revoke(grantA.id, options)],
      ["FileGrantStore.clear", () => s.clear(options)],
      ["FileGrantStore.resetCorrupt", () => s.resetCorrupt(options)],
      ["FileGrantStore.revokeTool", () => s.revokeTool("read", options)],
    ]);
    expect(readFileSync(s.ledgerPath, "utf8")).toBe(before);
    // The store still works: nothing was left waiting in its queue.
    expect(await s.save(grantB)).toBe(grantB);
  });

  it("refuses an option it does not take, or a signal in place of the options, naming it, and makes no folder", () => {
    const unlistable = new Proxy(
      {},
      {
        ownKeys: () => {
          throw new Error("no keys here");
        },
      },
    );
    for (const [options, message] of [
      // Ignored, a misspelt timeout would leave a save waiting the default 10 s, or a stale lock unbroken for 30.
      [
        { lockTimeout: 200 },
        "FileGrantStore: options holds an unknown option 'lockTimeout' (did you mean lockTimeoutMs?)",
      ],
      [
        { staleLockMS: 1_000 },
        "FileGrantStore: options holds an unknown option 'staleLockMS' (did you mean staleLockMs?)",
      ],
      [
        { onWarnings: () => undefined },
        "FileGrantStore: options holds an unknown option 'onWarnings' (did you mean onWarning?)",
      ],
      [
        { lockTimeoutMs: 200, signal: new AbortController().signal },
        "FileGrantStore: options holds an unknown option 'signal' (a signal is given to each call: { signal })",
      ],
      [
        { mode: 0o600 },
        "FileGrantStore: options holds an unknown option 'mode' (the options are lockTimeoutMs, staleLockMs, now, onWarning and onLockWait)",
      ],
      [
        new AbortController().signal,
        "FileGrantStore: options must be an object, got an AbortSignal (a signal is given to each call: { signal })",
      ],
      ["fast", "FileGrantStore: options must be an object, got a string"],
      // An array has no option of its own; a proxy whose keys cannot be listed has none that can be checked.
      [[{ lockTimeoutMs: 200 }], "FileGrantStore: options must be an object, got an array"],
      [unlistable, "FileGrantStore: options cannot be read: no keys here"],
    ] as const) {
      const error = refusal(join(root, "grants"), project, options);
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument: "options", message });
    }
    expect(existsSync(join(root, "grants"))).toBe(false);
  });

  it("refuses a lockTimeoutMs or staleLockMs that is not a non-negative integer, instead of waiting forever", () => {
    for (const option of ["lockTimeoutMs", "staleLockMs"] as const) {
      for (const value of [Number.NaN, "200", -1, 1.5, Number.POSITIVE_INFINITY, null]) {
        const error = refusal(join(root, "grants"), project, { [option]: value });
        expect(error).toBeInstanceOf(GrantConfigError);
        expect(error).toMatchObject({ code: "GRANT_CONFIG", argument: `options.${option}` });
        expect((error as Error).message).toContain(`options.${option} must be a non-negative integer`);
      }
      expect(() => store({ [option]: 0 })).not.toThrow();
      expect(() => store({ [option]: undefined })).not.toThrow();
    }
  });

  it("refuses an onWarning or onLockWait that is not a function when constructed, naming it", () => {
    // Taken as they were, a warning went to the process instead and a lock wait's report threw, unheard.
    for (const option of ["onWarning", "onLockWait"] as const) {
      for (const [value, shown] of [
        ["log", '"log"'],
        [null, "null"],
        [{ handleEvent: () => undefined }, "an object"],
      ] as const) {
        const error = refusal(join(root, "grants"), project, { [option]: value });
        expect(error).toBeInstanceOf(GrantConfigError);
        expect(error).toMatchObject({
          code: "GRANT_CONFIG",
          argument: `options.${option}`,
          message: `FileGrantStore: options.${option} must be a function, got ${shown}`,
        });
      }
      expect(() => store({ [option]: undefined })).not.toThrow();
    }
    expect(existsSync(join(root, "grants"))).toBe(false);
  });

  it("refuses a now that is not a function when constructed, naming options.now", () => {
    for (const [value, shown] of [
      [1_700_000_000_000, "1700000000000"],
      ["now", '"now"'],
      [null, "null"],
      [{ now: () => 0 }, "an object"],
    ] as const) {
      const error = refusal(join(root, "grants"), project, { now: value as never });
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({
        code: "GRANT_CONFIG",
        argument: "options.now",
        message: `FileGrantStore: options.now must be a function, got ${shown}`,
      });
    }
    expect(() => store({ now: () => 0 })).not.toThrow();
    expect(() => store({ now: undefined } as never)).not.toThrow();
  });
});

describe("FileGrantStore reads and writes", () => {
  it("revoke refuses an id that is not a string (a Grant passed for its id) with GrantConfigError, changing nothing", async () => {
    const s = store();
    await s.save(grantA);
    const before = readFileSync(s.ledgerPath, "utf8");
    for (const id of [grantA, undefined, 7]) {
      const error: unknown = await s.revoke(id as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ argument: "id" });
      expect((error as Error).message).toMatch(/^FileGrantStore\.revoke: id must be a string, got /);
    }
    expect(readFileSync(s.ledgerPath, "utf8")).toBe(before);
  });

  it("loads a missing ledger as empty, and revoke/clear on it create nothing", async () => {
    const s = store();
    expect(await s.load()).toEqual([]);
    expect(await s.revoke(grantA.id)).toBeUndefined();
    expect(await s.clear()).toBe(0);
    expect(existsSync(join(root, "grants"))).toBe(false);
  });

  it("writes a compact array, owner-only file in owner-only folders", async () => {
    const s = store();
    expect(await s.save(grantA)).toBe(grantA);
    await s.save(grantB);
    expect(readFileSync(s.ledgerPath, "utf8")).toBe(`[${grantA.toLedgerText()},${grantB.toLedgerText()}]`);
    expect(statSync(s.ledgerPath).mode & 0o777).toBe(0o600);
    expect(statSync(join(s.ledgerPath, "..")).mode & 0o777).toBe(0o700);
    expect(statSync(join(root, "grants", "projects")).mode & 0o777).toBe(0o700);
    // Nothing but the ledger is left behind: no temp file, no lock.
    expect(readdirSync(join(s.ledgerPath, ".."))).toEqual(["grants.json"]);
    const fresh = store();
    expect((await fresh.load()).map((g) => g.toLedgerText())).toEqual([grantA.toLedgerText(), grantB.toLedgerText()]);
  });

  it("replaces the entry of a re-granted rule instead of duplicating it", async () => {
    const s = store();
    await s.save(grantA);
    await s.save(grantB);
    await s.save(grantA.withNote("again"));
    const loaded = await store().load();
    expect(loaded.map((g) => [g.id, g.note])).toEqual([
      [grantB.id, null],
      [grantA.id, "again"],
    ]);
  });

  it("revoke returns the removed grant, and writes nothing for an unknown id", async () => {
    const s = store();
    await s.save(grantA);
    await s.save(grantB);
    expect((await s.revoke(grantA.id))?.id).toBe(grantA.id);
    const before = lstatSync(s.ledgerPath, { bigint: true });
    expect(await s.revoke("0000000000000000")).toBeUndefined();
    const after = lstatSync(s.ledgerPath, { bigint: true });
    expect([after.ino, after.mtimeNs]).toEqual([before.ino, before.mtimeNs]);
    expect((await store().load()).map((g) => g.id)).toEqual([grantB.id]);
  });

  it("revokeTool removes every grant of one tool in one change, and writes nothing when it has none", async () => {
    const s = store();
    const reads = [grantA, new Grant("read", "deny", GrantScope.thisCall({ path: "/etc/shadow" }))];
    for (const grant of [reads[0], grantB, reads[1]] as Grant[]) await s.save(grant);
    expect((await s.revokeTool("read")).map((g) => g.id)).toEqual(reads.map((g) => g.id));
    expect((await store().load()).map((g) => g.id)).toEqual([grantB.id]);
    const before = lstatSync(s.ledgerPath, { bigint: true });
    expect(await s.revokeTool("read")).toEqual([]);
    expect(await s.revokeTool("Write")).toEqual([]);
    const after = lstatSync(s.ledgerPath, { bigint: true });
    expect([after.ino, after.mtimeNs]).toEqual([before.ino, before.mtimeNs]);
    for (const tool of ["", 7, undefined]) {
      await expect(s.revokeTool(tool as never)).rejects.toMatchObject({
        code: "GRANT_CONFIG",
        argument: "tool",
        message: expect.stringContaining("FileGrantStore.revokeTool: tool must be a non-empty string") as unknown,
      });
    }
    expect(await store().revokeTool("read")).toEqual([]);
    rmSync(join(root, "grants"), { recursive: true });
    expect(await store().revokeTool("write")).toEqual([]);
    expect(existsSync(join(root, "grants"))).toBe(false);
  });

  it("clear returns how many grants it removed and leaves an empty ledger", async () => {
    const s = store();
    await s.save(grantA);
    await s.save(grantB);
    expect(await s.clear()).toBe(2);
    expect(readFileSync(s.ledgerPath, "utf8")).toBe("[]");
    expect(await s.clear()).toBe(0);
  });

  it("sees a change made by another store, and does not reparse an unchanged file", async () => {
    const a = store();
    const b = store();
    await a.save(grantA);
    expect((await b.load()).map((g) => g.id)).toEqual([grantA.id]);
    const parse = vi.spyOn(Grant, "fromJSON");
    await b.load();
    await new GrantPolicy(b).decide({ name: "read", description: "", inputSchema: {} }, {});
    expect(parse).not.toHaveBeenCalled();
    await a.save(grantB);
    expect((await b.load()).map((g) => g.id)).toEqual([grantA.id, grantB.id]);
    expect(parse).toHaveBeenCalledTimes(2);
  });

  it("reads a ledger whose mtime is ahead of the clock (copied with its times kept) once, not at every decision", async (ctx) => {
    // The bytes this process has read, all threads together: what a decision costs in reads.
    const bytesRead = (): number => Number(/^rchar: (\d+)$/m.exec(readFileSync("/proc/self/io", "utf8"))?.[1]);
    if (!existsSync("/proc/self/io")) unmet(ctx, "no /proc/self/io to count the bytes read");
    const s = store();
    const grants = Array.from({ length: 4 }, (_, i) =>
      new Grant(`tool-${i}`, "allow", GrantScope.thisTool()).withNote("n".repeat(250_000)),
    );
    writeLedger(s, `[${grants.map((g) => g.toLedgerText()).join(",")}]`);
    // As `cp -p`, `rsync -t` or `tar x` leave a ledger made where the clock ran an hour ahead.
    const ahead = new Date(Date.now() + 3_600_000);
    utimesSync(s.ledgerPath, ahead, ahead);
    // Past the window in which a change can keep the file's stat.
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect((await s.covering("tool-0", "{}")).map((g) => g.id)).toEqual([grants[0]?.id]);
    const before = bytesRead();
    for (let i = 0; i < 20; i++) await s.covering("tool-0", "{}");
    expect(bytesRead() - before).toBeLessThan(statSync(s.ledgerPath).size);
    // A change is still seen.
    await store().revoke(grants[0]?.id ?? "");
    expect(await s.covering("tool-0", "{}")).toEqual([]);
  });

  it("loses nothing when many saves and revokes from two stores overlap", async () => {
    const a = store();
    const b = store();
    const grants = Array.from({ length: 40 }, (_, i) => new Grant(`tool-${i}`, "allow", GrantScope.thisTool()));
    await Promise.all(grants.map((g, i) => (i % 2 === 0 ? a : b).save(g)));
    await Promise.all(grants.filter((_, i) => i % 3 === 0).map((g, i) => (i % 2 === 0 ? b : a).revoke(g.id)));
    const ids = (await store().load()).map((g) => g.id).sort();
    expect(ids).toEqual(
      grants
        .filter((_, i) => i % 3 !== 0)
        .map((g) => g.id)
        .sort(),
    );
  });
});

describe("FileGrantStore fails closed", () => {
  const corrupt: Array<[string, string | Buffer]> = [
    ["an empty file", ""],
    ["whitespace", "  \n"],
    ["not JSON", "[{"],
    ["not an array", '{"id":"x"}'],
    ["an array of non-records", "[1]"],
    ["a bad record", '[{"id":"x","tool":"t","verdict":"Maybe","scope":"this_tool"}]'],
    ["invalid UTF-8", Buffer.from([0x5b, 0xff, 0x5d])],
    [
      "a record with a member twice",
      '[{"id":"x","tool":"t","verdict":"Deny","scope":"this_tool","pinned_descriptor":null,"created_at_ms":0,"note":null,"verdict":"Allow"}]',
    ],
    [
      "a record with a member twice, once spelled with an escape",
      '[{"id":"x","tool":"t","verdict":"Deny","scope":"this_tool","pinned_descriptor":null,"created_at_ms":0,"note":null,"verd\\u0069ct":"Allow"}]',
    ],
    [
      "a scope naming two scopes, the whole tool and one call",
      '[{"id":"x","tool":"t","verdict":"Deny","scope":{"this_tool":null,"this_call":{"args":{"path":"a.rs"}}},"pinned_descriptor":null,"created_at_ms":0,"note":null}]',
    ],
    [
      "a scope holding a member beside this_call",
      '[{"id":"x","tool":"t","verdict":"Deny","scope":{"this_call":{"args":{}},"ThisTool":null},"pinned_descriptor":null,"created_at_ms":0,"note":null}]',
    ],
    [
      "arguments with a member twice",
      '[{"id":"x","tool":"t","verdict":"Allow","scope":{"this_call":{"args":{"path":"a.rs","path":"b.rs"}}},"pinned_descriptor":null,"created_at_ms":0,"note":null}]',
    ],
  ];

  it.each(corrupt)("refuses %s with LedgerCorruptError naming the file, and never overwrites it", async (_, bytes) => {
    const s = store();
    writeLedger(s, bytes);
    // Started together, each with its handler attached at once, so none is ever an unhandled rejection.
    for (const error of await Promise.all(
      [s.load(), s.save(grantA), s.revoke(grantA.id), s.revokeTool("t"), s.clear()].map(rejection),
    )) {
      expect(error).toBeInstanceOf(LedgerCorruptError);
      expect((error as LedgerCorruptError).code).toBe("LEDGER_CORRUPT");
      expect((error as LedgerCorruptError).path).toBe(s.ledgerPath);
      expect((error as Error).message).toContain(s.ledgerPath);
    }
    expect(readFileSync(s.ledgerPath)).toEqual(Buffer.from(bytes));
    expect(existsSync(s.lockPath)).toBe(false);
  });

  it("names the record, the member and where it sits when a member occurs twice, which JSON.parse would hide", async () => {
    const s = store();
    writeLedger(
      s,
      `[${grantA.toLedgerText()},{"id":"x","tool":"t","verdict":"Allow","scope":{"this_call":{"args":{"p":{"q":1,"q":2}}}}}]`,
    );
    const error = await rejection(s.load());
    expect(error).toBeInstanceOf(LedgerCorruptError);
    expect((error as Error).message).toContain('record 1 has member "q" twice, at [1].scope.this_call.args.p.q');
  });

  it("names the record and the members of a scope that names more than one, rather than read it as its this_call", async () => {
    const s = store();
    writeLedger(
      s,
      `[${grantA.toLedgerText()},{"id":"x","tool":"t","verdict":"Deny","scope":{"this_tool":null,"this_call":{"args":{"p":1}}}}]`,
    );
    const error = await rejection(s.load());
    expect(error).toBeInstanceOf(LedgerCorruptError);
    expect((error as Error).message).toMatch(/record 1: .*scope: .*"this_tool"/);
  });

  it("names the line and column of a JSON syntax error in a ledger written over several lines", async () => {
    const s = store();
    writeLedger(
      s,
      `[\n  ${grantA.toLedgerText()},\n  {"id": "x", "tool": "t\u00e9", "verdict": "Deny", "scope": "this_tool",}\n]\n`,
    );
    const error = await rejection(s.load());
    expect(error).toBeInstanceOf(LedgerCorruptError);
    expect((error as Error).message).toContain("not JSON at line 3, column 69 (");
    writeLedger(s, `[${grantA.toLedgerText()},{"id":"x"`);
    expect(((await rejection(s.load())) as Error).message).toContain(
      `not JSON at line 1, column ${grantA.toLedgerText().length + 12} (`,
    );
  });

  it("keeps a corrupt ledger aside on request, owner-only with its bytes, then starts afresh", async () => {
    const s = store({ now: () => 1234 });
    writeLedger(s, "garbage");
    expect(await s.clear({ corrupt: "keep-aside" })).toBe(0);
    expect(existsSync(s.ledgerPath)).toBe(false);
    const aside = readdirSync(join(s.ledgerPath, "..")).filter((n) => n.startsWith("grants.json.corrupt-1234-"));
    expect(aside).toHaveLength(1);
    const asidePath = join(s.ledgerPath, "..", aside[0] as string);
    expect(readFileSync(asidePath, "utf8")).toBe("garbage");
    expect(statSync(asidePath).mode & 0o777).toBe(0o600);
    await s.save(grantA);
    expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
  });

  it("resetCorrupt moves only a corrupt ledger", async () => {
    const s = store();
    expect(await s.resetCorrupt()).toBeUndefined();
    await s.save(grantA);
    expect(await s.resetCorrupt()).toBeUndefined();
    expect((await s.load()).length).toBe(1);
    writeFileSync(s.ledgerPath, "[");
    const aside = await s.resetCorrupt();
    expect(aside).toMatch(/grants\.json\.corrupt-\d+-[0-9a-f]+$/);
    expect(readFileSync(aside as string, "utf8")).toBe("[");
    expect(await s.load()).toEqual([]);
  });

  it("refuses a ledger in a later format (an object with a version) as LedgerFormatError naming the file and the version, and never moves it aside", async () => {
    const s = store({ now: () => 1234 });
    const later = `{"version":2,"grants":[${grantA.toLedgerText()}]}`;
    writeLedger(s, later);
    for (const error of await Promise.all(
      [
        s.load(),
        s.covering("read", "{}"),
        s.save(grantA),
        s.revoke(grantA.id),
        s.revokeTool("read"),
        s.clear(),
        s.clear({ corrupt: "keep-aside" }),
        s.resetCorrupt(),
      ].map(rejection),
    )) {
      expect(error).toBeInstanceOf(LedgerFormatError);
      expect(error).not.toBeInstanceOf(LedgerCorruptError);
      expect((error as LedgerFormatError).code).toBe("LEDGER_UNKNOWN_FORMAT");
      expect((error as LedgerFormatError).path).toBe(s.ledgerPath);
      expect((error as LedgerFormatError).version).toBe(2);
      expect((error as Error).message).toBe(
        `grant ledger ${s.ledgerPath} is in ledger format version 2, which this version of loopctl cannot read ` +
          "(it reads the JSON array of grant records); it was likely written by a newer loopctl: upgrade to use its grants",
      );
    }
    expect(readFileSync(s.ledgerPath, "utf8")).toBe(later);
    expect(readdirSync(join(s.ledgerPath, "..")).sort()).toEqual(["grants.json"]);
  });

  it("refuses a ledger too large to read as LEDGER_IO naming the file and its size, never as corrupt, and keeps it", async () => {
    const s = store();
    writeLedger(s, "");
    // Sparse: one byte more than the longest string this JavaScript engine can make of it.
    truncateSync(s.ledgerPath, MAX_STRING_LENGTH + 1);
    for (const error of await Promise.all(
      [s.load(), s.save(grantA), s.revoke(grantA.id), s.clear({ corrupt: "keep-aside" }), s.resetCorrupt()].map(
        rejection,
      ),
    )) {
      expect(error).toBeInstanceOf(LedgerIoError);
      expect((error as LedgerIoError).code).toBe("LEDGER_IO");
      expect((error as LedgerIoError).path).toBe(s.ledgerPath);
      expect((error as Error).message).toContain(`${MAX_STRING_LENGTH + 1} bytes`);
    }
    expect(statSync(s.ledgerPath).size).toBe(MAX_STRING_LENGTH + 1);
    expect(readdirSync(join(s.ledgerPath, "..")).sort()).toEqual(["grants.json"]);
  });

  it("never reads or writes through a symlinked ledger", async () => {
    const s = store();
    const target = join(root, "elsewhere.json");
    writeFileSync(target, "[]");
    mkdirSync(join(s.ledgerPath, ".."), { recursive: true, mode: 0o700 });
    symlinkSync(target, s.ledgerPath);
    // Started together, each with its handler attached at once, so none is ever an unhandled rejection.
    for (const error of await Promise.all([s.load(), s.save(grantA), s.clear()].map(rejection))) {
      expect(error).toBeInstanceOf(LedgerIoError);
      expect((error as LedgerIoError).code).toBe("LEDGER_NOT_REGULAR_FILE");
      expect((error as LedgerIoError).path).toBe(s.ledgerPath);
    }
    expect(readFileSync(target, "utf8")).toBe("[]");
    expect(lstatSync(s.ledgerPath).isSymbolicLink()).toBe(true);
  });

  it("leaves on disk, after any run of saves, revokes and clears, exactly the ledger of what it holds", async () => {
    const grantArb = fc
      .record({
        tool: fc.constantFrom("read", "write_file", "deploy", "é€😀"),
        verdict: fc.constantFrom("allow" as const, "deny" as const),
        args: fc.option(
          fc.dictionary(fc.string({ maxLength: 4 }), fc.oneof(fc.string(), fc.integer(), fc.boolean()), { maxKeys: 3 }),
          {
            nil: undefined,
          },
        ),
      })
      .map(
        ({ tool, verdict, args }) =>
          new Grant(tool, verdict, args === undefined ? GrantScope.thisTool() : GrantScope.thisCall(args)),
      );
    const stepArb = fc.oneof(
      { weight: 6, arbitrary: grantArb.map((grant) => ({ type: "save" as const, grant })) },
      { weight: 3, arbitrary: fc.nat().map((at) => ({ type: "revoke" as const, at })) },
      { weight: 1, arbitrary: fc.constant({ type: "clear" as const }) },
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 20 }), async (steps) => {
        const s = new FileGrantStore(join(root, `grants-${(run += 1)}`), project);
        // The model: a save replaces a grant with its id and moves it to the end.
        const held = new Map<string, Grant>();
        for (const step of steps) {
          if (step.type === "save") {
            await s.save(step.grant);
            held.delete(step.grant.id);
            held.set(step.grant.id, step.grant);
          } else if (step.type === "revoke") {
            const id = [...held.keys()][step.at % Math.max(held.size, 1)] ?? "0000000000000000";
            await s.revoke(id);
            held.delete(id);
          } else {
            await s.clear();
            held.clear();
          }
          if (!existsSync(s.ledgerPath)) {
            expect(held.size).toBe(0);
            continue;
          }
          expect(readFileSync(s.ledgerPath, "utf8")).toBe(
            `[${[...held.values()].map((g) => g.toLedgerText()).join(",")}]`,
          );
        }
        expect((await s.load()).map((g) => g.id)).toEqual([...held.keys()]);
      }),
      { numRuns: RUNS },
    );
  });

  it("syncs the file, renames it over the ledger, then syncs the folder, all before save resolves", async () => {
    const s = store();
    await s.save(grantA);
    const before = readFileSync(s.ledgerPath, "utf8");
    const events: string[] = [];
    const probe = await open(s.ledgerPath, "r");
    const handles = Object.getPrototypeOf(probe) as { sync: (this: FileHandle) => Promise<void> };
    await probe.close();
    const sync = handles.sync;
    // What the ledger holds at each sync tells whether the rename has happened yet.
    const ledgerIs = (): string => (readFileSync(s.ledgerPath, "utf8") === before ? "old" : "new");
    const spy = vi.spyOn(handles, "sync").mockImplementation(async function (this: FileHandle) {
      events.push(`fsync ${fs.fstatSync(this.fd).isDirectory() ? "folder" : "file"}, ledger ${ledgerIs()}`);
      return sync.call(this);
    });
    try {
      await s.save(grantB);
      events.push(`save resolved, ledger ${ledgerIs()}`);
    } finally {
      spy.mockRestore();
    }
    expect(events).toEqual(["fsync file, ledger old", "fsync folder, ledger new", "save resolved, ledger new"]);
    expect((await store().load()).map((g) => g.id)).toEqual([grantA.id, grantB.id]);
  });

  it("removes only its own temporary ledgers left beside the ledger: this user's regular files named grants.json.tmp-<hex>", async (context) => {
    if (!isRoot()) unmet(context, "giving a file to another user (nobody) needs root");
    const s = store();
    await s.save(grantA);
    const dir = join(s.ledgerPath, "..");
    const outside = join(root, "outside");
    writeFileSync(outside, "keep", { mode: 0o600 });
    writeFileSync(join(dir, "grants.json.tmp-0badf00d"), "[half a ledg", { mode: 0o600 });
    writeFileSync(join(dir, "grants.json.tmp-00000007"), "", { mode: 0o600 });
    // Copies a person keeps beside the ledger, dated or numbered, are not leftovers.
    const kept = [
      "grants.json.backup",
      "grants.json.20261204",
      "grants.json.1",
      "grants.json.tmp-1234",
      "grants.json.tmp-0BADF00D",
      "grants.json.tmp-0badf00d.bak",
      "notes.json.tmp-0badf00d",
      "grants.json.corrupt-1-abc",
    ];
    for (const name of kept) writeFileSync(join(dir, name), "keep", { mode: 0o600 });
    mkdirSync(join(dir, "grants.json.tmp-00000099"));
    symlinkSync(outside, join(dir, "grants.json.tmp-00000098"));
    writeFileSync(join(dir, "grants.json.tmp-00000097"), "someone else's", { mode: 0o600 });
    fs.chownSync(join(dir, "grants.json.tmp-00000097"), 65534, 65534);
    await s.save(grantB);
    expect(readdirSync(dir).sort()).toEqual(
      [
        "grants.json",
        ...kept,
        "grants.json.tmp-00000097",
        "grants.json.tmp-00000098",
        "grants.json.tmp-00000099",
      ].sort(),
    );
    for (const name of kept) expect(readFileSync(join(dir, name), "utf8"), name).toBe("keep");
    expect(readFileSync(outside, "utf8")).toBe("keep");
  });

  it("refuses a ledger path that is a folder", async () => {
    const s = store();
    mkdirSync(s.ledgerPath, { recursive: true, mode: 0o700 });
    const error = await rejection(s.save(grantA));
    expect((error as LedgerIoError).code).toBe("LEDGER_NOT_REGULAR_FILE");
  });
});

describe("FileGrantStore lock", () => {
  function writeLock(s: FileGrantStore, content: string, ageMs = 0): void {
    mkdirSync(join(s.ledgerPath, ".."), { recursive: true, mode: 0o700 });
    writeFileSync(s.lockPath, content);
    if (ageMs > 0) {
      const past = new Date(Date.now() - ageMs);
      utimesSync(s.lockPath, past, past);
    }
  }

  it.skipIf(!existsSync("/proc/self/fd"))(
    "stores of one ledger in a process with thousands of open files wait for each other without a look at every file",
    async () => {
      // A server's sockets, say. A store that found another store of this thread holding the lock
      // used to stat each of the process's open files on every retry, which kept the holder's own
      // file operations waiting behind them: saves took seconds each, then failed with LedgerLockError.
      const opened: number[] = [];
      try {
        for (let i = 0; i < 6000; i++) opened.push(fs.openSync("/dev/null", "r"));
      } catch {
        // The test needs no more than the process may open; fewer still shows the cost.
      }
      try {
        const stores = [0, 1, 2, 3].map(() => store({ lockTimeoutMs: 5_000 }));
        const grants = stores.flatMap((_, k) =>
          Array.from({ length: 10 }, (_, i) => new Grant("t", "allow", GrantScope.thisCall({ k, i }))),
        );
        await Promise.all(grants.map((grant, i) => (stores[i % stores.length] as FileGrantStore).save(grant)));
        expect((await store().load()).length).toBe(grants.length);
      } finally {
        for (const fd of opened) fs.closeSync(fd);
      }
    },
    30_000,
  );

  it("refuses a lock file that is a symbolic link, saying so, and leaves it and its target as they are", async () => {
    const s = store();
    mkdirSync(join(s.ledgerPath, ".."), { recursive: true, mode: 0o700 });
    const target = join(root, "elsewhere.lock");
    writeFileSync(target, "kept");
    symlinkSync(target, s.lockPath);
    const error = await rejection(s.save(grantA));
    expect(error).toBeInstanceOf(LedgerLockError);
    expect((error as LedgerLockError).path).toBe(s.lockPath);
    expect((error as Error).message).toBe(
      `grant ledger lock ${s.lockPath}: is a symbolic link, so no writer made it; refusing to follow it; remove it`,
    );
    expect(lstatSync(s.lockPath).isSymbolicLink()).toBe(true);
    expect(readFileSync(target, "utf8")).toBe("kept");
    expect(existsSync(s.ledgerPath)).toBe(false);
  });

  it("writers that all find one abandoned lock fail none of them, whichever breaks it", async () => {
    // Each store judges the lock abandoned at about the same moment. A store that moved the lock
    // aside to break it used to move the lock another store had just taken in its place, and put
    // it back only afterwards: the new holder, checking its lock before its rename, failed.
    const dead = spawnSync(process.execPath, ["-e", ""]).pid;
    for (let round = 0; round < 20; round++) {
      const stores = Array.from({ length: 8 }, () => store({ lockTimeoutMs: 10_000 }));
      writeLock(
        stores[0] as FileGrantStore,
        JSON.stringify({ pid: dead, hostname: hostname(), createdAtMs: Date.now(), token: `t${round}` }),
      );
      const grants = stores.map((_, i) => new Grant("t", "allow", GrantScope.thisCall({ round, i })));
      const results = await Promise.allSettled(grants.map((grant, i) => (stores[i] as FileGrantStore).save(grant)));
      expect(results.filter((r) => r.status === "rejected")).toEqual([]);
      expect(existsSync(store().lockPath)).toBe(false);
    }
    expect((await store().load()).length).toBe(20 * 8);
    expect(readdirSync(join(store().ledgerPath, "..")).sort()).toEqual(["grants.json"]);
  }, 60_000);

  describe("a writer breaking an abandoned lock", () => {
    const dead = (): number | undefined => spawnSync(process.execPath, ["-e", ""]).pid;

    /** The claim a writer breaking the lock at `lockPath` makes first: named for that very file. */
    function claimOf(lockPath: string): string {
      const { dev, ino, mtimeMs } = statSync(lockPath);
      const text = readFileSync(lockPath, "utf8");
      const id = createHash("sha256").update(`${dev}:${ino}:${mtimeMs}:${text}`).digest("hex").slice(0, 16);
      return `${lockPath}.break-${id}`;
    }

    it("takes over the claim of one that died while breaking it, leaving no file behind", async () => {
      const s = store();
      writeLock(s, JSON.stringify({ pid: dead(), hostname: hostname(), createdAtMs: Date.now(), token: "t" }));
      const claim = claimOf(s.lockPath);
      writeFileSync(claim, JSON.stringify({ pid: dead(), hostname: hostname(), createdAtMs: Date.now(), token: "c" }));
      await s.save(grantA);
      expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
      expect(readdirSync(join(s.ledgerPath, ".."))).toEqual(["grants.json"]);
    });

    it("waits while a live writer is breaking it, and leaves both files alone", async () => {
      const breaker = spawn(process.execPath, ["-e", "setInterval(() => {}, 60_000)"], { stdio: "ignore" });
      try {
        const s = store({ lockTimeoutMs: 100 });
        const record = JSON.stringify({ pid: dead(), hostname: hostname(), createdAtMs: Date.now(), token: "t" });
        writeLock(s, record);
        const claim = claimOf(s.lockPath);
        const claimed = JSON.stringify({ pid: breaker.pid, hostname: hostname(), createdAtMs: Date.now(), token: "c" });
        writeFileSync(claim, claimed);
        const error = await rejection(s.save(grantA));
        expect(error).toBeInstanceOf(LedgerLockError);
        expect((error as Error).message).toContain(`pid ${String(breaker.pid)}`);
        expect(readFileSync(s.lockPath, "utf8")).toBe(record);
        expect(readFileSync(claim, "utf8")).toBe(claimed);
      } finally {
        breaker.kill("SIGKILL");
      }
    });
  });

  describe("a claim left beside the lock", () => {
    const dead = (): number | undefined => spawnSync(process.execPath, ["-e", ""]).pid;
    const claimName = (n: number): string => `grants.json.lock.break-${n.toString(16).padStart(16, "0")}`;
    const age = (path: string, ms: number): void => {
      const past = new Date(Date.now() - ms);
      utimesSync(path, past, past);
    };

    it("is removed by the next change once older than the stale bound and its writer is gone", async () => {
      const s = store({ staleLockMs: 5_000 });
      await s.save(grantA);
      const dir = join(s.ledgerPath, "..");
      const record = (pid: number | undefined, host = hostname()): string =>
        JSON.stringify({ pid, hostname: host, createdAtMs: Date.now(), token: "c" });
      const claims = {
        dead: [claimName(1), record(dead())],
        unwritten: [claimName(2), ""],
        otherHost: [claimName(3), record(1, "another-host")],
        // A claim on a claim, made by a writer taking over one whose writer died.
        nested: [`${claimName(4)}.break-${"0".repeat(15)}5`, record(dead())],
      };
      for (const [name, text] of Object.values(claims)) writeFileSync(join(dir, name as string), text as string);
      await s.save(grantB);
      // Younger than the bound: all kept.
      expect(readdirSync(dir).length).toBe(5);
      for (const [name] of Object.values(claims)) age(join(dir, name as string), 6_000);
      await s.revoke(grantB.id);
      expect(readdirSync(dir)).toEqual(["grants.json"]);
      expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
    });

    it("is never removed while its writer runs on this host, however old, nor is a file of any other name", async () => {
      const breaker = liveHolder();
      try {
        const s = store({ staleLockMs: 1_000 });
        await s.save(grantA);
        const dir = join(s.ledgerPath, "..");
        const live = JSON.stringify({ pid: breaker.pid, hostname: hostname(), createdAtMs: 1, token: "c" });
        const deadRecord = JSON.stringify({ pid: dead(), hostname: hostname(), createdAtMs: 1, token: "c" });
        const kept = {
          [claimName(1)]: live,
          "grants.json.lock.break-notahexid": deadRecord,
          "grants.json.lock.break-00000000000000001.bak": deadRecord,
          "grants.json.lock.breakage": deadRecord,
          "other.lock.break-0000000000000001": deadRecord,
        };
        for (const [name, text] of Object.entries(kept)) {
          writeFileSync(join(dir, name), text);
          age(join(dir, name), 3_600_000);
        }
        await breaker.hold(join(dir, claimName(1)));
        await s.save(grantB);
        expect(readdirSync(dir).sort()).toEqual(["grants.json", ...Object.keys(kept)].sort());
        for (const [name, text] of Object.entries(kept)) expect(readFileSync(join(dir, name), "utf8")).toBe(text);
      } finally {
        breaker.kill();
      }
    });
  });

  it("breaks a lock whose process died on this host", async () => {
    const s = store();
    const dead = spawnSync(process.execPath, ["-e", ""]).pid;
    writeLock(s, JSON.stringify({ pid: dead, hostname: hostname(), createdAtMs: Date.now(), token: "t" }));
    await s.save(grantA);
    expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
    expect(existsSync(s.lockPath)).toBe(false);
  });

  it.skipIf(!existsSync("/proc/self/ns/pid"))(
    "breaks a lock whose process died but was never reaped (a zombie holds no file and never runs again)",
    async () => {
      // The background child exits once stdin closes; its parent, replaced by `sleep` by then, never waits for it.
      const parent = spawn("sh", ["-c", "exec 3<&0; { read x <&3; } & echo $!; exec sleep 1000"], {
        stdio: ["pipe", "pipe", "ignore"],
      });
      try {
        let out = "";
        for await (const chunk of parent.stdout.setEncoding("utf8")) {
          out += chunk as string;
          if (out.includes("\n")) break;
        }
        const pid = Number(out.trim());
        while (readFileSync(`/proc/${parent.pid}/comm`, "utf8") !== "sleep\n") {
          await new Promise((resolve) => setImmediate(resolve));
        }
        parent.stdin.end();
        let fields: string[] = [];
        do {
          await new Promise((resolve) => setImmediate(resolve));
          const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
          fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        } while (fields[0] !== "Z");
        const s = store({ lockTimeoutMs: 300 });
        const record = {
          pid,
          hostname: hostname(),
          createdAtMs: Date.now(),
          token: "t",
          start: fields[19],
          boot: readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim(),
          pidNamespace: readlinkSync("/proc/self/ns/pid"),
        };
        writeLock(s, JSON.stringify(record));
        await s.save(grantA);
        expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
        expect(existsSync(s.lockPath)).toBe(false);
      } finally {
        parent.kill("SIGKILL");
      }
    },
  );

  it.skipIf(!existsSync("/proc/self/ns/pid"))(
    "takes a lock with this host name from another PID namespace or boot (a container given the same name) for another host's: age decides, not its pid",
    async () => {
      const dead = spawnSync(process.execPath, ["-e", ""]).pid;
      const here = {
        boot: readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim(),
        pidNamespace: readlinkSync("/proc/self/ns/pid"),
      };
      for (const elsewhere of [
        { ...here, pidNamespace: "pid:[1]" },
        { ...here, boot: "00000000-0000-0000-0000-000000000000" },
      ]) {
        const s = store({ lockTimeoutMs: 300, staleLockMs: 60_000 });
        const record = { pid: dead, hostname: hostname(), createdAtMs: Date.now(), token: "t", ...elsewhere };
        writeLock(s, JSON.stringify(record));
        expect(await rejection(s.save(grantA))).toBeInstanceOf(LedgerLockError);
        expect(existsSync(s.lockPath)).toBe(true);
        // Older than the stale bound, it is abandoned like any other host's.
        writeLock(s, JSON.stringify(record), 120_000);
        await s.save(grantA);
        expect(existsSync(s.lockPath)).toBe(false);
      }
      // In this boot and namespace, the pid decides at once.
      const s = store({ lockTimeoutMs: 300, staleLockMs: 60_000 });
      writeLock(s, JSON.stringify({ pid: dead, hostname: hostname(), createdAtMs: Date.now(), token: "t", ...here }));
      await s.save(grantA);
      expect(existsSync(s.lockPath)).toBe(false);
    },
  );

  it.each([
    ["that started at another time", { start: "1", createdAtMs: Date.now() }],
    [
      "before this process started (a lock that does not say when its process started)",
      { createdAtMs: Date.now() - process.uptime() * 1_000 - 60_000 },
    ],
  ])("breaks a lock left with this process's pid by an earlier process %s", async (_, record) => {
    const s = store();
    writeLock(s, JSON.stringify({ pid: process.pid, hostname: hostname(), token: "old", ...record }));
    await s.save(grantA);
    expect(existsSync(s.lockPath)).toBe(false);
  });

  it("waits for a lock with this process's pid made since it started: another copy of the module holds it", async () => {
    const s = store({ lockTimeoutMs: 50, staleLockMs: 1 });
    writeLock(
      s,
      JSON.stringify({ pid: process.pid, hostname: hostname(), createdAtMs: Date.now(), token: "copy" }),
      10_000,
    );
    // A holder keeps its lock open while it holds it.
    const held = await open(s.lockPath, "r");
    try {
      expect(await rejection(s.save(grantA))).toBeInstanceOf(LedgerLockError);
      expect(existsSync(s.lockPath)).toBe(true);
    } finally {
      await held.close();
    }
    // Once no thread of this process has it open, its holder is gone: the lock is broken.
    await s.save(grantA);
    expect(existsSync(s.lockPath)).toBe(false);
  });

  it("waits a bounded time for a live lock, then fails naming the lock file", async () => {
    const s = store({ lockTimeoutMs: 30 });
    writeLock(s, JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: Date.now(), token: "t" }));
    const error = await rejection(s.save(grantA));
    expect(error).toBeInstanceOf(LedgerLockError);
    expect((error as LedgerLockError).code).toBe("LEDGER_LOCK");
    expect((error as LedgerLockError).path).toBe(s.lockPath);
    expect((error as Error).message).toContain("another-host");
    expect(existsSync(s.ledgerPath)).toBe(false);
    expect(existsSync(s.lockPath)).toBe(true);
  });

  it("never breaks the lock of a live process on this host, however old", async () => {
    const holder = liveHolder();
    try {
      const s = store({ lockTimeoutMs: 100, staleLockMs: 1_000 });
      const record = JSON.stringify({
        pid: holder.pid,
        hostname: hostname(),
        createdAtMs: Date.now() - 3_600_000,
        token: "live",
      });
      writeLock(s, record, 3_600_000);
      // A holder keeps its lock open while it holds it.
      await holder.hold(s.lockPath);
      expect(await rejection(s.save(grantA))).toBeInstanceOf(LedgerLockError);
      expect(readFileSync(s.lockPath, "utf8")).toBe(record);
      expect(existsSync(s.ledgerPath)).toBe(false);
    } finally {
      holder.kill();
    }
  });

  it("reports once that it waits for a lock another writer holds, naming the holder's pid", async () => {
    const holder = spawn(process.execPath, ["-e", "setInterval(() => {}, 60_000)"], { stdio: "ignore" });
    try {
      const waits: LedgerLockWait[] = [];
      const s = store({ lockTimeoutMs: 100, onLockWait: (w) => waits.push(w) });
      writeLock(s, JSON.stringify({ pid: holder.pid, hostname: hostname(), createdAtMs: Date.now(), token: "live" }));
      expect(await rejection(s.save(grantA))).toBeInstanceOf(LedgerLockError);
      expect(waits).toEqual([
        {
          path: s.lockPath,
          holder: { pid: holder.pid, hostname: hostname() },
          message: `waiting for the grant ledger lock ${s.lockPath}, held by pid ${String(holder.pid)} on ${hostname()}`,
        },
      ]);
      // A lock whose record is not written yet has no holder to name.
      writeFileSync(s.lockPath, "");
      expect(await rejection(s.save(grantA))).toBeInstanceOf(LedgerLockError);
      expect(waits[1]?.holder).toBeNull();
    } finally {
      holder.kill("SIGKILL");
    }
  });

  it("breaks a lock from another host older than the stale bound", async () => {
    const s = store({ staleLockMs: 1_000 });
    writeLock(s, JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: 0, token: "t" }), 60_000);
    await s.save(grantA);
    expect((await s.load()).length).toBe(1);
  });

  it("breaks an abandoned lock stamped ahead of this host's clock once it has stood unchanged past the bound, not when the clock gets there", async () => {
    // A clock set back since (a VM's clock corrected at boot), or another host's clock running ahead:
    // judged by its mtime alone, such a lock would stand until that time comes, in years here.
    const future = new Date(Date.UTC(2099, 0, 1));
    const other = store({ lockTimeoutMs: 5_000, staleLockMs: 500 });
    writeLock(other, JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: future.getTime(), token: "t" }));
    utimesSync(other.lockPath, future, future);
    await other.save(grantA);
    expect((await other.load()).map((g) => g.id)).toEqual([grantA.id]);
    expect(existsSync(other.lockPath)).toBe(false);

    const unwritten = store({ lockTimeoutMs: 5_000 });
    await unwritten.clear();
    writeLock(unwritten, "");
    utimesSync(unwritten.lockPath, future, future);
    await unwritten.save(grantB);
    expect((await unwritten.load()).map((g) => g.id)).toEqual([grantB.id]);
  });

  it("waits for a lock stamped ahead of this host's clock until it has stood unchanged past the bound", async () => {
    const future = new Date(Date.UTC(2099, 0, 1));
    const s = store({ lockTimeoutMs: 300, staleLockMs: 60_000 });
    writeLock(s, JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: 0, token: "t" }));
    utimesSync(s.lockPath, future, future);
    expect(await rejection(s.save(grantA))).toBeInstanceOf(LedgerLockError);
    expect(existsSync(s.lockPath)).toBe(true);
    expect(existsSync(s.ledgerPath)).toBe(false);
  });

  it("does not break a lock whose record is still being written for a stale bound shorter than that takes", async () => {
    // A writer between creating its lock and writing its record: it runs, so a small staleLockMs,
    // which is for other hosts' locks, must not rob it (its save would fail, and maybe the robber's too).
    const s = store({ lockTimeoutMs: 100, staleLockMs: 1 });
    writeLock(s, "", 1_000);
    const error = await rejection(s.save(grantA));
    expect(error).toBeInstanceOf(LedgerLockError);
    expect((error as LedgerLockError).path).toBe(s.lockPath);
    expect(readFileSync(s.lockPath, "utf8")).toBe("");
    expect(existsSync(s.ledgerPath)).toBe(false);
  });

  it("breaks an abandoned unwritten lock", async () => {
    const s = store();
    writeLock(s, "", 60_000);
    await s.save(grantA);
    expect(existsSync(s.lockPath)).toBe(false);
  });

  it("stops waiting for the lock when the signal aborts, writing nothing", async () => {
    const s = store({ lockTimeoutMs: 60_000 });
    writeLock(s, JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: Date.now(), token: "t" }));
    const early = new AbortController();
    const first = s.save(grantA, { signal: early.signal });
    early.abort(new Error("stopped early"));
    await expect(first).rejects.toThrow("stopped early");
    const late = new AbortController();
    const second = s.save(grantA, { signal: late.signal });
    // Wherever the wait has got to (lock attempts or backoff), the abort ends it.
    setTimeout(() => late.abort(new Error("stopped while waiting")), 20);
    await expect(second).rejects.toThrow("stopped while waiting");
    expect(existsSync(s.ledgerPath)).toBe(false);
    await expect(s.revoke(grantA.id, { signal: AbortSignal.abort(new Error("no")) })).rejects.toThrow("no");
  });

  it("a call aborted while it waits behind this store's earlier call rejects at once, and writes nothing", async () => {
    const holder = spawn(process.execPath, ["-e", "setInterval(() => {}, 60_000)"], { stdio: "ignore" });
    const waits: LedgerLockWait[] = [];
    const s = store({ lockTimeoutMs: 60_000, onLockWait: (w) => waits.push(w) });
    writeLock(s, JSON.stringify({ pid: holder.pid, hostname: hostname(), createdAtMs: Date.now(), token: "live" }));
    const first = s.save(grantA);
    await expect.poll(() => waits.length).toBe(1);
    const controller = new AbortController();
    const policy = new GrantPolicy(s);
    const second = policy.remember({ name: "write", description: "", inputSchema: {} }, {}, "deny", "this_tool", {
      signal: controller.signal,
    });
    controller.abort(new Error("not any more"));
    await expect(second).rejects.toThrow("not any more");
    holder.kill("SIGKILL");
    expect(await first).toBe(grantA);
    expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
  });

  it("a change whose signal's removeEventListener throws once the call has begun still settles, and later changes run", async () => {
    const s = store();
    const signal = new AbortController().signal;
    let removals = 0;
    Object.defineProperty(signal, "removeEventListener", {
      value(this: AbortSignal, ...args: Parameters<AbortSignal["removeEventListener"]>) {
        removals += 1;
        if (removals > 1) throw new Error("no more removals");
        EventTarget.prototype.removeEventListener.apply(this, args);
      },
    });
    expect(await s.save(grantA, { signal })).toBe(grantA);
    expect(removals).toBeGreaterThan(1);
    expect(await s.save(grantB)).toBe(grantB);
    expect((await s.load()).map((g) => g.id)).toEqual([grantA.id, grantB.id]);
  });

  it.each([
    ["moved aside", (path: string) => renameSync(path, `${path}.aside`)],
    ["removed", (path: string) => unlinkSync(path)],
  ])(
    "a save whose lock is %s while it writes (broken for its age) fails with LEDGER_LOCK, replacing nothing",
    async (_, breakIt) => {
      const s = store();
      await s.save(grantA);
      const before = readFileSync(s.ledgerPath, "utf8");
      const theirs = JSON.stringify({ pid: 1, hostname: "another-host", createdAtMs: Date.now(), token: "theirs" });
      const probe = await open(s.ledgerPath, "r");
      const handles = Object.getPrototypeOf(probe) as { sync: (this: FileHandle) => Promise<void> };
      await probe.close();
      const sync = handles.sync;
      // While the new ledger is synced under its temporary name, a writer elsewhere takes the lock over.
      const spy = vi.spyOn(handles, "sync").mockImplementation(async function (this: FileHandle) {
        if (!fs.fstatSync(this.fd).isDirectory() && existsSync(s.lockPath)) {
          breakIt(s.lockPath);
          writeFileSync(s.lockPath, theirs, { mode: 0o600 });
        }
        return sync.call(this);
      });
      let error: unknown;
      try {
        error = await rejection(s.save(grantB));
      } finally {
        spy.mockRestore();
      }
      expect(error).toBeInstanceOf(LedgerLockError);
      expect(readFileSync(s.ledgerPath, "utf8")).toBe(before);
      expect(readFileSync(s.lockPath, "utf8")).toBe(theirs);
      expect(readdirSync(join(s.ledgerPath, "..")).filter((name) => /^grants\.json\.\d+$/.test(name))).toEqual([]);
    },
  );

  it("releases the lock when the change fails", async () => {
    const s = store();
    writeLedger(s, "not json");
    await expect(s.save(grantA)).rejects.toBeInstanceOf(LedgerCorruptError);
    expect(existsSync(s.lockPath)).toBe(false);
  });
});

describe("FileGrantStore path and permission checks", () => {
  /** A saved ledger and the four paths from the root down to it. */
  async function savedTree(): Promise<{ s: FileGrantStore; paths: string[] }> {
    const s = store();
    await s.save(grantA);
    const dir = join(s.ledgerPath, "..");
    return { s, paths: [join(root, "grants"), join(root, "grants", "projects"), dir, s.ledgerPath] };
  }
  const modeOf = (path: string): number => lstatSync(path).mode & 0o777;

  it("a load changes no mode and warns of nothing, whatever others may read", async () => {
    const { paths } = await savedTree();
    const wide = [0o755, 0o711, 0o750, 0o644];
    paths.forEach((path, i) => chmodSync(path, wide[i] as number));
    const warnings: LedgerWarning[] = [];
    const s = store({ onWarning: (w) => warnings.push(w) });
    expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
    expect(warnings).toEqual([]);
    expect(paths.map(modeOf)).toEqual(wide);
  });

  it("a change makes the store's own folders owner-only, reporting each, and leaves the root as it is", async () => {
    const { paths } = await savedTree();
    const wide = [0o755, 0o711, 0o750, 0o644];
    paths.forEach((path, i) => chmodSync(path, wide[i] as number));
    const warnings: LedgerWarning[] = [];
    const s = store({ onWarning: (w) => warnings.push(w) });
    await s.save(grantB);
    expect(warnings.map((w) => [w.code, w.path, w.previousMode, w.mode])).toEqual([
      ["LOOPCTL_LEDGER_TIGHTENED", paths[1], 0o711, 0o700],
      ["LOOPCTL_LEDGER_TIGHTENED", paths[2], 0o750, 0o700],
    ]);
    for (const w of warnings) expect(w.message).toContain(w.path);
    // The ledger is a new owner-only file.
    expect(paths.map(modeOf)).toEqual([0o755, 0o700, 0o700, 0o600]);
    await s.save(grantB);
    expect(warnings.length).toBe(2);
  });

  it.for([
    ["the root", 0],
    ["the projects folder", 1],
    ["the project folder", 2],
    ["the ledger", 3],
  ] as const)(
    "refuses %s when another user owns it with LEDGER_PERMISSIONS, changing nothing",
    async ([, index], context) => {
      if (!isRoot()) unmet(context, "giving a file to another user (nobody) needs root");
      const { paths } = await savedTree();
      const path = paths[index] as string;
      fs.chownSync(path, 65534, 65534);
      const bytes = readFileSync(paths[3] as string);
      const s = store();
      for (const error of await Promise.all(
        [s.load(), s.save(grantB), s.revoke(grantA.id), s.clear()].map(rejection),
      )) {
        expect((error as LedgerIoError).code).toBe("LEDGER_PERMISSIONS");
        expect((error as LedgerIoError).path).toBe(path);
        expect((error as Error).message).toBe(
          `${index === 3 ? "grant ledger" : "grant ledger folder"} ${path}: is owned by uid 65534, not by this user (uid 0)`,
        );
      }
      expect(readFileSync(paths[3] as string)).toEqual(bytes);
      expect(existsSync(s.lockPath)).toBe(false);
      fs.chownSync(path, 0, 0);
      expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
    },
  );

  it("accepts a root writable by all when it is sticky, like /tmp, and changes nothing of it", async () => {
    const warnings: LedgerWarning[] = [];
    const s = store({ onWarning: (w) => warnings.push(w) });
    const sticky = join(root, "grants");
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    await s.save(grantA);
    expect((await store().load()).map((g) => g.id)).toEqual([grantA.id]);
    expect(lstatSync(sticky).mode & 0o7777).toBe(0o1777);
    expect(warnings).toEqual([]);
  });

  it.each([
    ["the root", 0, 0o770],
    ["the projects folder", 1, 0o707],
    ["the project folder", 2, 0o777],
    ["the ledger", 3, 0o620],
  ])("refuses %s when writable by others with LEDGER_PERMISSIONS, changing nothing", async (_, index, mode) => {
    const { paths } = await savedTree();
    const path = paths[index] as string;
    chmodSync(path, mode);
    const bytes = readFileSync(paths[3] as string);
    const warnings: LedgerWarning[] = [];
    const s = store({ onWarning: (w) => warnings.push(w) });
    // Started together, each with its handler attached at once, so none is ever an unhandled rejection.
    for (const error of await Promise.all([s.load(), s.save(grantB), s.revoke(grantA.id), s.clear()].map(rejection))) {
      expect(error).toBeInstanceOf(LedgerIoError);
      expect((error as LedgerIoError).code).toBe("LEDGER_PERMISSIONS");
      expect((error as LedgerIoError).path).toBe(path);
      // The folder at fault is named as a folder, the ledger as the ledger.
      const expected = `${index === 3 ? "grant ledger" : "grant ledger folder"} ${path}: is writable by group or others (mode ${mode.toString(8)})`;
      expect((error as Error).message.slice(0, expected.length)).toBe(expected);
    }
    expect(modeOf(path)).toBe(mode);
    expect(readFileSync(paths[3] as string)).toEqual(bytes);
    expect(existsSync(s.lockPath)).toBe(false);
    chmodSync(path, mode & 0o700);
    expect((await s.load()).map((g) => g.id)).toEqual([grantA.id]);
  });

  it("refuses a symlinked folder beneath the root with LEDGER_UNSAFE_PATH naming it, and creates nothing through it", async () => {
    const s = store();
    const elsewhere = join(root, "elsewhere");
    mkdirSync(elsewhere, { mode: 0o700 });
    mkdirSync(join(root, "grants"), { mode: 0o700 });
    symlinkSync(elsewhere, join(root, "grants", "projects"));
    // Started together, each with its handler attached at once, so none is ever an unhandled rejection.
    for (const error of await Promise.all(
      [s.load(), s.save(grantA), s.revoke(grantA.id), s.clear(), s.resetCorrupt()].map(rejection),
    )) {
      expect((error as LedgerIoError).code).toBe("LEDGER_UNSAFE_PATH");
      expect((error as LedgerIoError).path).toBe(join(root, "grants", "projects"));
      expect((error as Error).message).toContain("is a symlink; refusing to follow it");
    }
    expect(readdirSync(elsewhere)).toEqual([]);
  });

  it("refuses a root under a regular file with LEDGER_UNSAFE_PATH naming the file, as a root that is one", async () => {
    const file = join(root, "afile");
    writeFileSync(file, "x");
    for (const at of [file, join(file, "x"), join(file, "x", "y")]) {
      const s = new FileGrantStore(at, project);
      for (const error of await Promise.all(
        [s.load(), s.save(grantA), s.revoke(grantA.id), s.revokeTool("t"), s.clear(), s.resetCorrupt()].map(rejection),
      )) {
        expect((error as LedgerIoError).code, at).toBe("LEDGER_UNSAFE_PATH");
        expect((error as LedgerIoError).path, at).toBe(at);
        expect((error as Error).message, at).toContain(
          at === file ? "is not a folder" : `is under ${file}, which is a file, not a folder`,
        );
      }
    }
    expect(readFileSync(file, "utf8")).toBe("x");
  });

  it("follows a root that is itself a symlink (the caller's choice)", async () => {
    const real = join(root, "real-root");
    mkdirSync(real, { mode: 0o700 });
    symlinkSync(real, join(root, "grants"));
    await store().save(grantA);
    expect((await store().load()).map((g) => g.id)).toEqual([grantA.id]);
    expect(readdirSync(join(real, "projects"))).toEqual([projectIdentity(project)]);
  });

  it("sends the warning to the process when onWarning throws, and the call still succeeds", async () => {
    const { paths } = await savedTree();
    chmodSync(paths[2] as string, 0o750);
    const seen: Array<[string, string | undefined]> = [];
    const listener = (w: Error): void => {
      seen.push([w.name, (w as NodeJS.ErrnoException).code]);
    };
    // Node prints process warnings through a listener of its own; this test only watches.
    const printers = process.listeners("warning");
    process.removeAllListeners("warning");
    process.on("warning", listener);
    try {
      const s = store({
        onWarning: () => {
          throw new Error("logger down");
        },
      });
      await s.save(grantB);
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("warning", listener);
      for (const printer of printers) process.on("warning", printer);
    }
    expect(seen).toEqual([["LoopctlWarning", "LOOPCTL_LEDGER_TIGHTENED"]]);
    expect(modeOf(paths[2] as string)).toBe(0o700);
  });
});
