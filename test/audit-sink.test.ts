import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  appendFile,
  chmod,
  lstat,
  mkdir,
  mkdtemp,
  readFile,
  rename,
  rm,
  stat,
  symlink,
  unlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  AUDIT_LINE_MAX_BYTES,
  AuditBusyError,
  AuditClosedError,
  AuditConfigError,
  AuditCorruptError,
  AuditPathError,
  AuditRecordError,
  AuditSink,
  auditObserver,
  verifyAuditLog,
} from "../src/audit/index.js";
import { GATE_VERDICTS, RULE_SOURCES } from "../src/engine/index.js";
import type { AuditSinkOptions } from "../src/audit/index.js";
import type { GateDecision } from "../src/engine/index.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { bundleBuilds, bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";

const FUZZ_RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 25);

let root: string;
let counter = 0;
const fresh = (): string => join(root, `case-${++counter}`, "audit", "gates.jsonl");

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "loopctl-audit-sink-"));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("AuditSink files", () => {
  it("a lock file far larger than any lock record, planted beside the log, is not read: the append fails naming it, memory flat", async () => {
    const path = fresh();
    const size = 256 * 1024 * 1024;
    const script = fileURLToPath(new URL("./support/audit-huge-lock.ts", import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", script, path, String(size)]);
    const report = JSON.parse(stdout) as { appended: { code?: string; message?: string }; maxRssBytes: number };
    expect(report.appended).toEqual({
      code: "AUDIT_LOCK",
      message:
        `cannot lock audit log ${path} (${path}.lock): is ${size} bytes, larger than any lock record, ` +
        "so no writer made it; remove it",
    });
    // Nothing was written, and the planted file is left for a person to look at.
    expect((await readFile(path, "utf8")).split("\n")).toHaveLength(2);
    expect((await stat(`${path}.lock`)).size).toBe(size);
    // Before, each look at the lock read it whole (and again as text) while it waited out its grace.
    expect(report.maxRssBytes).toBeLessThan(size / 2);
  }, 60_000);

  it("creates the log 0600 in a folder created 0700", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path);
    await sink.append(gateRecord(1));
    await sink.close();
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect((await stat(join(path, ".."))).mode & 0o777).toBe(0o700);
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1)] });
  });

  it("tightens an existing log readable by others", async () => {
    const path = fresh();
    await mkdir(join(path, ".."), { recursive: true });
    await writeFile(path, "");
    await chmod(path, 0o644);
    const sink = await AuditSink.open(path);
    await sink.close();
    expect((await stat(path)).mode & 0o777).toBe(0o600);
  });

  it("refuses a symbolic link and leaves its target alone", async () => {
    const path = fresh();
    await mkdir(join(path, ".."), { recursive: true });
    const target = join(path, "..", "elsewhere.txt");
    await writeFile(target, "keep me\n");
    await symlink(target, path);
    const error = await AuditSink.open(path).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditPathError);
    expect((error as AuditPathError).code).toBe("AUDIT_PATH");
    expect((error as AuditPathError).message).toMatch(/symbolic link/);
    expect(await readFile(target, "utf8")).toBe("keep me\n");
    expect((await lstat(path)).isSymbolicLink()).toBe(true);
  });

  it("refuses a path that is not a regular file", async () => {
    const path = fresh();
    await mkdir(path, { recursive: true });
    await expect(AuditSink.open(path)).rejects.toThrow(/not a regular file/);
  });

  it("resumes the chain after reopening", async () => {
    const path = fresh();
    const first = await AuditSink.open(path);
    for (let i = 1; i <= 3; i++) await first.append(gateRecord(i));
    const anchor = first.anchor;
    await first.close();
    const second = await AuditSink.open(path, { anchor });
    expect(second.anchor).toEqual(anchor);
    expect(await second.append(gateRecord(4))).toMatchObject({ seq: 4 });
    await second.append(gateRecord(5));
    await second.close();
    const result = await verifyAuditLog(path, { anchor });
    expect(result).toMatchObject({ ok: true, records: [1, 2, 3, 4, 5].map((i) => gateRecord(i)) });
    if (result.ok) expect(result.anchor).toEqual(second.anchor);
  });

  it("refuses to append to a corrupt log and leaves it byte-identical", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path);
    for (let i = 1; i <= 3; i++) await sink.append(gateRecord(i));
    await sink.close();
    const text = await readFile(path, "utf8");
    const tampered = text.replace('"tool_2"', '"tool_z"');
    await writeFile(path, tampered);
    const error = await AuditSink.open(path).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditCorruptError);
    expect(error).toMatchObject({ code: "AUDIT_CORRUPT", line: 2, problem: "edited", path });
    expect(await readFile(path, "utf8")).toBe(tampered);
    await writeFile(path, text.slice(0, -5));
    await expect(AuditSink.open(path)).rejects.toMatchObject({ problem: "truncated", line: 3 });
  });

  it("names what another writer did to an open log as verify does: a copy of an earlier line is duplicated", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path);
    for (let i = 1; i <= 3; i++) await sink.append(gateRecord(i));
    const text = await readFile(path, "utf8");
    await appendFile(path, `${text.split("\n")[0]}\n`);
    const error = await sink.append(gateRecord(4)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditCorruptError);
    expect(error).toMatchObject({ line: 4, problem: "duplicated" });
    expect((error as Error).message).toMatch(/line 4 duplicates line 1$/);
    expect(await verifyAuditLog(path)).toMatchObject({ ok: false, line: 4, problem: "duplicated" });
    await sink.close();
  });

  it("refuses to write once its file was moved aside, replaced or removed, and reports it", async () => {
    for (const change of ["moved", "replaced", "removed"] as const) {
      const path = fresh();
      const errors: unknown[] = [];
      const sink = await AuditSink.open(path, { onError: (e) => errors.push(e) });
      await sink.append(gateRecord(1));
      const before = await readFile(path, "utf8");
      const aside = `${path}.1`;
      if (change !== "removed") await rename(path, aside);
      else await unlink(path);
      if (change === "replaced") await writeFile(path, "");
      // Before, the record went into the file moved aside (or into no file at all) and the append resolved.
      const error = await sink.append(gateRecord(2)).catch((e: unknown) => e);
      expect(error, change).toBeInstanceOf(AuditPathError);
      expect((error as Error).message, change).toContain(`audit log ${path} was moved, replaced or removed`);
      expect(errors, change).toEqual([error]);
      await expect(sink.append(gateRecord(3)), change).rejects.toBe(error);
      await expect(sink.flush(), change).rejects.toBe(error);
      await sink.close();
      if (change !== "removed") expect(await readFile(aside, "utf8"), change).toBe(before);
      if (change === "replaced") expect(await readFile(path, "utf8"), change).toBe("");
    }
  });

  it("refuses a log that ends before the anchor it is given", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path);
    await sink.append(gateRecord(1));
    await sink.append(gateRecord(2));
    const anchor = sink.anchor;
    await sink.close();
    const text = await readFile(path, "utf8");
    await writeFile(path, `${text.split("\n")[0]}\n`);
    await expect(AuditSink.open(path, { anchor })).rejects.toMatchObject({ problem: "removed", line: 2 });
  });

  it("refuses a second sink on a file already open in this process", async () => {
    const path = fresh();
    const first = await AuditSink.open(path);
    await first.append(gateRecord(1));
    const error = await AuditSink.open(join(path, "..", ".", "gates.jsonl")).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditBusyError);
    expect(error).toMatchObject({ code: "AUDIT_BUSY", path });
    await first.append(gateRecord(2));
    await first.close();
    const second = await AuditSink.open(path);
    expect(second.anchor.seq).toBe(2);
    await second.close();
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1), gateRecord(2)] });
  });

  it("refuses a second sink on the file from another copy of the package (the ESM and the CommonJS build in one process)", async () => {
    const builds = await bundleBuilds("audit");
    try {
      const esm = (await import(pathToFileURL(builds.esm).href)) as typeof import("../src/audit/index.js");
      const cjs = createRequire(import.meta.url)(builds.cjs) as typeof import("../src/audit/index.js");
      expect(cjs.AuditSink).not.toBe(esm.AuditSink);
      const path = fresh();
      const first = await esm.AuditSink.open(path);
      await first.append(gateRecord(1));
      const error = await cjs.AuditSink.open(path).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(cjs.AuditBusyError);
      expect(error).toMatchObject({ code: "AUDIT_BUSY", path });
      // Nor the other way round, nor with this file's own copy.
      await expect(AuditSink.open(path)).rejects.toMatchObject({ code: "AUDIT_BUSY" });
      await first.close();
      const second = await cjs.AuditSink.open(path);
      await expect(esm.AuditSink.open(path)).rejects.toMatchObject({ code: "AUDIT_BUSY" });
      await second.append(gateRecord(2));
      await second.close();
      expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1), gateRecord(2)] });
    } finally {
      builds.dispose();
    }
  }, 60_000);

  it("refuses a lockTimeoutMs that is not a non-negative integer before it touches the file", async () => {
    for (const lockTimeoutMs of [Number.NaN, "200", -1, 1.5, Number.POSITIVE_INFINITY]) {
      const path = fresh();
      const error = await AuditSink.open(path, { lockTimeoutMs: lockTimeoutMs as number }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AuditConfigError);
      expect(error).toMatchObject({ code: "AUDIT_CONFIG", option: "lockTimeoutMs" });
      expect((error as Error).message).toContain("lockTimeoutMs must be a non-negative integer");
      await expect(lstat(path)).rejects.toMatchObject({ code: "ENOENT" });
    }
    const sink = await AuditSink.open(fresh(), { lockTimeoutMs: 0 });
    await sink.close();
  });

  it("refuses a path, options or a key of the wrong type with a typed error naming it, before it touches the file", async () => {
    const path = fresh();
    const refusals: [unknown, unknown, string, string][] = [
      [undefined, {}, "AUDIT_CONFIG", "path"],
      ["", {}, "AUDIT_CONFIG", "path"],
      [42, {}, "AUDIT_CONFIG", "path"],
      [path, null, "AUDIT_CONFIG", "options"],
      [path, "fsync", "AUDIT_CONFIG", "options"],
      [path, { fsync: "no" }, "AUDIT_CONFIG", "fsync"],
      [path, { onError: "console.error" }, "AUDIT_CONFIG", "onError"],
      [path, { key: 42 }, "AUDIT_KEY", "key"],
      [path, { key: {} }, "AUDIT_KEY", "key"],
      // An array of numbers is not bytes: Buffer.from would cut 300 to 44.
      [path, { key: Array.from({ length: 32 }, () => 300) }, "AUDIT_KEY", "key"],
    ];
    for (const [where, options, code, at] of refusals) {
      const error = await AuditSink.open(where as string, options as AuditSinkOptions).catch((e: unknown) => e);
      const what = `${JSON.stringify(where)} ${JSON.stringify(options)}`;
      expect(error, what).toMatchObject({ code });
      if (code === "AUDIT_CONFIG") {
        expect(error, what).toBeInstanceOf(AuditConfigError);
        expect(error, what).toMatchObject({ option: at });
        expect((error as Error).message, what).toMatch(new RegExp(`${at} must be`));
      } else {
        expect((error as Error).message, what).toMatch(/an audit key must be a string or a Uint8Array, got /);
      }
    }
    await expect(lstat(path)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("refuses an option it does not take, naming it and the one meant, before it touches the file", async () => {
    const path = fresh();
    const key = "k".repeat(32);
    // Ignored, a misspelt key started an unkeyed log, and a misspelt fsync left lines unsynced.
    const refusals: [unknown, string, string][] = [
      [{ Key: key }, "Key", "did you mean key?"],
      [{ keys: key }, "keys", "did you mean key?"],
      [{ fsynk: true }, "fsynk", "did you mean fsync?"],
      [{ lockTimeout: 50 }, "lockTimeout", "did you mean lockTimeoutMs?"],
      [
        { keyFile: "/etc/audit.key" },
        "keyFile",
        "key takes the key itself, a string or bytes: read a key file with readAuditKeyFile",
      ],
      [{ records: false }, "records", "the options are fsync, onError, anchor, key and lockTimeoutMs"],
    ];
    for (const [options, option, meant] of refusals) {
      const error = await AuditSink.open(path, options as AuditSinkOptions).catch((e: unknown) => e);
      const what = JSON.stringify(options);
      expect(error, what).toBeInstanceOf(AuditConfigError);
      expect(error, what).toMatchObject({ code: "AUDIT_CONFIG", option });
      expect((error as Error).message, what).toContain(
        `cannot open audit log ${path}: unknown option '${option}' (${meant})`,
      );
    }
    // An AbortSignal has no key of its own: read as options, it would be none at all.
    const signal = await AuditSink.open(path, new AbortController().signal as AuditSinkOptions).catch(
      (e: unknown) => e,
    );
    expect(signal).toMatchObject({ code: "AUDIT_CONFIG", option: "options" });
    expect((signal as Error).message).toContain("options must be an object, got an AbortSignal");
    await expect(lstat(path)).rejects.toMatchObject({ code: "ENOENT" });
    const sink = await AuditSink.open(path, { fsync: false, key, lockTimeoutMs: 100 });
    await sink.close();
  });

  it("syncs every line with fsync on", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path, { fsync: true });
    await Promise.all([sink.append(gateRecord(1)), sink.append(gateRecord(2))]);
    await sink.close();
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1), gateRecord(2)] });
  });
});

describe("AuditSink appends", () => {
  it("never interleaves concurrent appends and keeps call order", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path);
    const big = "x".repeat(70_000);
    const records = Array.from({ length: 200 }, (_, i) => gateRecord(i, { reason: i % 10 === 0 ? big : `r${i}` }));
    const results = await Promise.all(records.map((r) => sink.append(r)));
    expect(results.map((r) => r.seq)).toEqual(records.map((_, i) => i + 1));
    await sink.close();
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records });
  });

  it("property: any mix of concurrent batches lands whole and in call order", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.integer({ min: 1, max: 12 }), { minLength: 1, maxLength: 6 }), async (batches) => {
        const path = fresh();
        const sink = await AuditSink.open(path);
        const expected: GateDecision[] = [];
        let n = 0;
        for (const size of batches) {
          const batch = Array.from({ length: size }, () => gateRecord(++n, { reason: "y".repeat(n * 97) }));
          expected.push(...batch);
          const pending = batch.map((r) => sink.append(r));
          if (n % 2 === 0) await Promise.all(pending);
        }
        await sink.flush();
        await sink.close();
        expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: expected });
      }),
      { numRuns: FUZZ_RUNS },
    );
  });

  it("property: any records, any UTF-16 text in them, read back exactly", async () => {
    const anyCodeUnit = fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c));
    const text = fc.string({ unit: anyCodeUnit, maxLength: 40 });
    const record = fc.record({
      tool: text,
      argsDigest: text,
      verdict: fc.constantFrom(...GATE_VERDICTS),
      ruleId: text,
      ruleSource: fc.constantFrom(...RULE_SOURCES),
      matchedPattern: fc.option(text, { nil: null }),
      reason: fc.option(text, { nil: null }),
      ts: fc.double({ noNaN: true, noDefaultInfinity: true }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(record, { maxLength: 12 }), async (records) => {
        const path = fresh();
        const sink = await AuditSink.open(path);
        await Promise.all(records.map((r) => sink.append(r)));
        await sink.close();
        const result = await verifyAuditLog(path, { anchor: sink.anchor });
        expect(result).toMatchObject({ ok: true });
        // -0 is written as 0 by JSON: compare as JSON would carry it.
        if (result.ok) expect(result.records).toEqual(records.map((r) => ({ ...r, ts: r.ts === 0 ? 0 : r.ts })));
      }),
      { numRuns: FUZZ_RUNS },
    );
  });

  it("rejects an invalid record, reports it, and keeps logging valid ones", async () => {
    const path = fresh();
    const onError = vi.fn();
    const sink = await AuditSink.open(path, { onError });
    const bad = { ...gateRecord(1), verdict: "maybe" } as unknown as GateDecision;
    const error = await sink.append(bad).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditRecordError);
    expect((error as AuditRecordError).message).toMatch(/verdict/);
    expect(onError).toHaveBeenCalledWith(error);
    await sink.append(gateRecord(2));
    await expect(sink.flush()).rejects.toBe(error);
    await sink.close();
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(2)] });
  });

  it("rejects a record whose line could pass AUDIT_LINE_MAX_BYTES, which verification would refuse, and lands the longest that fits", async () => {
    const path = fresh();
    const key = randomBytes(32);
    const onError = vi.fn();
    const sink = await AuditSink.open(path, { key, onError });
    // The widest line around a record: the largest seq, its hashes and a mac.
    const frame = '{"seq":9007199254740991,"prev":"","record":,"hash":"","mac":""}'.length + 3 * 64;
    const sized = (bytes: number): GateDecision => {
      const record = gateRecord(1, { reason: "é" });
      const pad = bytes - Buffer.byteLength(JSON.stringify(record));
      return { ...record, reason: `é${"x".repeat(pad)}` };
    };
    const longest = sized(AUDIT_LINE_MAX_BYTES - frame);
    expect(Buffer.byteLength(JSON.stringify(longest))).toBe(AUDIT_LINE_MAX_BYTES - frame);
    const error = await sink.append(sized(AUDIT_LINE_MAX_BYTES - frame + 1)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditRecordError);
    expect((error as AuditRecordError).message).toBe(
      `a record of ${AUDIT_LINE_MAX_BYTES - frame + 1} bytes of JSON, not written to ${path}: a line of the log ` +
        `holds at most ${AUDIT_LINE_MAX_BYTES - frame} bytes of record (AUDIT_LINE_MAX_BYTES, ${AUDIT_LINE_MAX_BYTES}, ` +
        "with its seq and hashes)",
    );
    expect(onError).toHaveBeenCalledWith(error);
    expect((await stat(path)).size).toBe(0);
    await expect(sink.append(longest)).resolves.toMatchObject({ seq: 1 });
    await sink.close();
    const result = await verifyAuditLog(path, { key });
    expect(result.ok).toBe(true);
    expect(result.records[0]?.reason === longest.reason).toBe(true);
  });

  it("lands appends made together whose lines pass the longest string the runtime can hold, and goes on", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path);
    // About 4 MiB each: the 129 made while the first is written are more than 512 MiB of lines together.
    const reason = "z".repeat(AUDIT_LINE_MAX_BYTES - 1_000);
    const appends = Array.from({ length: 130 }, (_, i) => sink.append(gateRecord(i + 1, { reason })));
    const outcomes = await Promise.all(
      appends.map((p) =>
        p.then(
          (a) => a.seq,
          (e: { code: string }) => e.code,
        ),
      ),
    );
    expect(outcomes).toEqual(Array.from({ length: 130 }, (_, i) => i + 1));
    await expect(sink.append(gateRecord(131))).resolves.toMatchObject({ seq: 131 });
    await sink.close();
    expect(await verifyAuditLog(path, { records: false })).toMatchObject({ ok: true, anchor: { seq: 131 } });
  }, 120_000);

  it("rejects a record that throws when read, and reports it, never throwing itself", async () => {
    const path = fresh();
    const onError = vi.fn();
    const sink = await AuditSink.open(path, { onError });
    const throwing = {
      ...gateRecord(1),
      get verdict(): string {
        throw new Error("no verdict here");
      },
    } as unknown as GateDecision;
    const revoked = Proxy.revocable({}, {});
    revoked.revoke();
    for (const record of [throwing, revoked.proxy as unknown as GateDecision]) {
      let pending: Promise<unknown> | undefined;
      expect(() => (pending = sink.append(record))).not.toThrow();
      const error = await pending?.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AuditRecordError);
      expect((error as AuditRecordError).message).toMatch(/^not a GateDecision, not written to .*: /);
      expect(onError).toHaveBeenLastCalledWith(error);
    }
    expect(onError).toHaveBeenCalledTimes(2);
    await sink.append(gateRecord(2));
    await expect(sink.flush()).rejects.toBeInstanceOf(AuditRecordError);
    await sink.close();
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(2)] });
  });

  it("an async onError that rejects does not end the process with an unhandled rejection", async () => {
    // Before, the rejected promise went unheard: node ended the process at the first lost record.
    const child = await bundleChild("audit-async-on-error.ts");
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [child.path, fresh()], { timeout: 20_000 });
      expect(JSON.parse(stdout)).toEqual({ reported: ["AUDIT_RECORD", "AUDIT_CLOSED"], flushed: "AUDIT_RECORD" });
    } finally {
      child.dispose();
    }
  });

  it("flush settles once the appends made before it have, while more keep coming", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path);
    // Each append made as the one before it lands: a sink that is never idle, as under steady load.
    const total = 40;
    let made = 0;
    let settled = 0;
    const landed: Promise<unknown>[] = [];
    const next = (): void => {
      if (made === total) return;
      made += 1;
      const appended = sink.append(gateRecord(made));
      landed.push(appended);
      void appended.then(() => {
        settled += 1;
        next();
      });
    };
    next();
    next();
    const madeBefore = made;
    await sink.flush();
    expect(settled).toBeGreaterThanOrEqual(madeBefore);
    // Before, flush waited until no append was pending at all: here, until the last of the 40.
    expect(made).toBeLessThan(total);
    await Promise.all(landed);
    while (landed.length < total) await Promise.all(landed);
    await sink.close();
    const verified = await verifyAuditLog(path);
    expect(verified).toMatchObject({ ok: true, anchor: { seq: total } });
  });

  it("flush still rejects with the first record that did not land, and waits for the appends before it", async () => {
    const path = fresh();
    const sink = await AuditSink.open(path, { onError: () => undefined });
    const first = sink.append(gateRecord(1));
    const invalid = sink.append({ ...gateRecord(2), verdict: "maybe" } as unknown as GateDecision);
    await expect(invalid).rejects.toMatchObject({ code: "AUDIT_RECORD" });
    let landed = false;
    void first.then(() => (landed = true));
    await expect(sink.flush()).rejects.toMatchObject({ code: "AUDIT_RECORD" });
    expect(landed).toBe(true);
    await sink.close();
  });

  it("rejects appends after close, and reports them", async () => {
    const path = fresh();
    const onError = vi.fn(() => {
      throw new Error("a failing callback is ignored");
    });
    const sink = await AuditSink.open(path, { onError });
    const pending = sink.append(gateRecord(1));
    const closing = sink.close();
    await expect(sink.append(gateRecord(2))).rejects.toBeInstanceOf(AuditClosedError);
    await pending;
    await closing;
    await sink.close();
    expect(onError).toHaveBeenCalledTimes(1);
    await expect(sink.flush()).rejects.toMatchObject({ code: "AUDIT_CLOSED" });
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1)] });
  });
});

describe("a write that fails mid-line", () => {
  const repo = fileURLToPath(new URL("..", import.meta.url));
  interface WriterReport {
    outcomes: string[];
    errors: string[];
    flush: string;
  }
  // The writer bundled once, so that each child starts without loading tsx.
  let writer: Bundle | undefined;
  beforeAll(async () => {
    writer = await bundleChild("cli-audit-writer.ts");
  });
  afterAll(() => writer?.dispose());
  // A file size limit of 8 blocks of 512 bytes (POSIX sh counts ulimit -f so)
  // makes the fourth ~1 KiB line fail part-way with EFBIG, and leaves room
  // for a line of under 500 bytes after the third.
  const writeLimited = async (path: string, big: number, small: number, env: NodeJS.ProcessEnv = {}) => {
    if (writer === undefined) throw new Error("the writer is not bundled");
    const { stdout } = await promisify(execFile)(
      "/bin/sh",
      [
        "-c",
        'ulimit -f 8 && exec "$0" "$1" "$2" "$3" "$4"',
        process.execPath,
        writer.path,
        path,
        String(big),
        String(small),
      ],
      { cwd: repo, env: { ...process.env, ...env } },
    );
    return JSON.parse(stdout) as WriterReport;
  };

  it.each([
    { name: "without a key", key: undefined, fsync: false },
    { name: "with a key and fsync", key: randomBytes(32), fsync: true },
  ])(
    "fails that append, reports it, cuts the torn line off, and later appends continue ($name)",
    async ({ key, fsync }) => {
      const path = fresh();
      const env = { LOOPCTL_TEST_AUDIT_FSYNC: fsync ? "1" : "0" };
      const report = await writeLimited(
        path,
        12,
        1,
        key === undefined ? env : { ...env, LOOPCTL_TEST_AUDIT_KEY: key.toString("hex") },
      );
      const landed = report.outcomes.indexOf("error:AUDIT_IO");
      expect(landed).toBeGreaterThanOrEqual(1);
      // Every big line after the first failure fails too (the limit stays),
      // and the small one after them lands right after the last good line.
      expect(report.outcomes).toEqual([
        ...Array.from({ length: landed }, (_, i) => `ok:${i + 1}`),
        ...Array.from({ length: 12 - landed }, () => "error:AUDIT_IO"),
        `ok:${landed + 1}`,
      ]);
      expect(report.errors).toEqual(Array.from({ length: 12 - landed }, () => "AUDIT_IO"));
      expect(report.flush).toMatch(
        new RegExp(`^AUDIT_IO: cannot append line ${landed + 1} to audit log .*: EFBIG.*; nothing of them was kept`),
      );
      const options = key === undefined ? {} : { key };
      const records = [
        ...Array.from({ length: landed }, (_, i) => gateRecord(i + 1, { reason: "z".repeat(700) })),
        gateRecord(13),
      ];
      expect(await verifyAuditLog(path, options)).toMatchObject({ ok: true, records });
      const sink = await AuditSink.open(path, options);
      expect(await sink.append(gateRecord(14))).toMatchObject({ seq: landed + 2 });
      await sink.close();
      expect(await verifyAuditLog(path, options)).toMatchObject({ ok: true, records: [...records, gateRecord(14)] });
    },
  );

  it("says why the lock file could not be written when no byte more fits (a full disk, a file size limit)", async () => {
    const path = fresh();
    const seed = await AuditSink.open(path);
    await seed.append(gateRecord(1));
    await seed.close();
    const before = await readFile(path);
    // loopctl/audit built as the package ships it, so that the child starts without loading tsx.
    const builds = await bundleBuilds("audit");
    let stdout: string;
    try {
      const script =
        `import(${JSON.stringify(pathToFileURL(builds.esm).href)})` +
        ".then(({ AuditSink }) => AuditSink.open(process.argv[1]))" +
        '.then(() => console.log("opened"), (e) => console.log(`${e.code}: ${e.message}`));';
      // No write may grow any file (ulimit -f 0): the lock's record is the first write opening makes.
      ({ stdout } = await promisify(execFile)(
        "/bin/sh",
        ["-c", 'ulimit -f 0 && exec "$0" --input-type=module -e "$1" "$2"', process.execPath, script, path],
        { cwd: repo },
      ));
    } finally {
      builds.dispose();
    }
    expect(stdout.trim()).toBe(
      `AUDIT_LOCK: cannot lock audit log ${path} (${path}.lock): cannot write the lock file (EFBIG)`,
    );
    expect(await readFile(path)).toEqual(before);
    await expect(lstat(`${path}.lock`)).rejects.toMatchObject({ code: "ENOENT" });
  });

  // Only root can make a file append-only (chattr +a), the one way to make
  // cutting it back fail for real.
  it.skipIf(process.getuid?.() !== 0)(
    "refuses every later append when the torn line cannot be cut off, and the log stays refused",
    async () => {
      const path = fresh();
      const first = await AuditSink.open(path);
      await first.append(gateRecord(1));
      await first.close();
      await promisify(execFile)("chattr", ["+a", path]);
      let report: WriterReport;
      try {
        report = await writeLimited(path, 12, 1);
      } finally {
        await promisify(execFile)("chattr", ["-a", path]);
      }
      const failed = report.outcomes.indexOf("error:AUDIT_IO");
      expect(failed).toBeGreaterThanOrEqual(1);
      expect(report.outcomes).toEqual([
        ...Array.from({ length: failed }, (_, i) => `ok:${i + 2}`),
        ...Array.from({ length: 13 - failed }, () => "error:AUDIT_IO"),
      ]);
      expect(report.errors).toEqual(Array.from({ length: 13 - failed }, () => "AUDIT_IO"));
      expect(report.flush).toMatch(
        new RegExp(
          `^AUDIT_IO: cannot append line ${failed + 2} to audit log .*: EFBIG.*; ` +
            "cutting the log back to the \\d+ bytes before them failed too \\(EPERM.*this sink appends no more",
        ),
      );
      const result = await verifyAuditLog(path);
      expect(result).toMatchObject({ ok: false, line: failed + 2, problem: "truncated" });
      if (!result.ok) expect(result.records).toHaveLength(failed + 1);
      await expect(AuditSink.open(path)).rejects.toMatchObject({ code: "AUDIT_CORRUPT", problem: "truncated" });
    },
  );
});

describe("auditObserver", () => {
  it("refuses a sink that is not an AuditSink when it is made, not at the first decision", () => {
    for (const sink of [undefined, null, {}, { append: "no" }]) {
      const error = (() => {
        try {
          auditObserver(sink as unknown as AuditSink);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error).toBeInstanceOf(AuditConfigError);
      expect(error).toMatchObject({ code: "AUDIT_CONFIG", option: "sink" });
    }
  });

  it("appends every gate decision without throwing into the run", async () => {
    const path = fresh();
    const errors: unknown[] = [];
    const sink = await AuditSink.open(path, { onError: (e) => errors.push(e) });
    const observer = auditObserver(sink);
    expect(observer.onGate({ decision: gateRecord(1) })).toBeUndefined();
    const engineEvent = { turn: 0, callId: "call_1", decision: gateRecord(2) };
    observer.onGate(engineEvent);
    expect(() => observer.onGate({ decision: { nope: true } as unknown as GateDecision })).not.toThrow();
    expect(() => observer.onGate(undefined as unknown as { decision: GateDecision })).not.toThrow();
    const revoked = Proxy.revocable({}, {});
    revoked.revoke();
    expect(() => observer.onGate(revoked.proxy as { decision: GateDecision })).not.toThrow();
    const throwing = {
      get decision(): GateDecision {
        throw new Error("no decision here");
      },
    };
    expect(() => observer.onGate(throwing)).not.toThrow();
    await expect(sink.flush()).rejects.toBeInstanceOf(AuditRecordError);
    expect(errors).toHaveLength(4);
    await sink.close();
    observer.onGate({ decision: gateRecord(3) });
    await expect(sink.flush()).rejects.toBeInstanceOf(AuditRecordError);
    expect(errors).toHaveLength(5);
    expect(errors.slice(0, 4).every((e) => e instanceof AuditRecordError)).toBe(true);
    expect(errors[4]).toBeInstanceOf(AuditClosedError);
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, records: [gateRecord(1), gateRecord(2)] });
  });
});
