import { execFile } from "node:child_process";
import { createHash, createHmac, randomBytes } from "node:crypto";
import { constants, existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import {
  chmod,
  link,
  mkdir,
  mkdtemp,
  open,
  readFile,
  readdir,
  rename,
  rm,
  rmdir,
  stat,
  symlink,
  unlink,
  utimes,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AUDIT_KEY_MIN_BYTES,
  AuditConfigError,
  AuditCorruptError,
  AuditKeyError,
  AuditSink,
  readAuditKeyFile,
  verifyAuditBytes,
  verifyAuditLog,
} from "../src/audit/index.js";
import { openSink } from "../src/audit/sink.js";
import { verifyLogFile } from "../src/audit/verify.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";

let dir: string;
let counter = 0;
const key = randomBytes(32);
const fresh = (): string => join(dir, `log-${++counter}.jsonl`);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-audit-keyed-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const sha256 = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex");

/** A keyed log of `n` records, its path and text. */
async function keyedLog(n: number): Promise<{ path: string; text: string; seal: string }> {
  const path = fresh();
  const sink = await AuditSink.open(path, { key });
  for (let i = 1; i <= n; i++) await sink.append(gateRecord(i));
  await sink.close();
  return { path, text: await readFile(path, "utf8"), seal: await readFile(`${path}.seal`, "utf8") };
}

const linesOf = (text: string): string[] => text.split("\n").slice(0, -1);
const textOf = (lines: readonly string[]): string => lines.map((l) => `${l}\n`).join("");

/** A line as someone without the key would forge it: right seq, right prev, a fresh hash. */
function forgedLine(seq: number, prev: string, mac: string | null): string {
  const body = `{"seq":${seq},"prev":"${prev}","record":${JSON.stringify(gateRecord(seq + 100))}`;
  const hash = sha256(`${body}}`);
  return `${body},"hash":"${hash}"${mac === null ? "" : `,"mac":"${mac}"`}}`;
}

describe("a keyed audit log", () => {
  it("carries a MAC on every line and a seal at its end, and verifies with its key", async () => {
    const { path, text, seal } = await keyedLog(3);
    for (const line of linesOf(text)) {
      const { hash, mac } = JSON.parse(line) as { hash: string; mac: string };
      expect(mac).toBe(createHmac("sha256", key).update(`loopctl-audit-line:${hash}`).digest("hex"));
    }
    const last = JSON.parse(linesOf(text)[2] as string) as { hash: string };
    expect(JSON.parse(seal)).toEqual({
      seq: 3,
      hash: last.hash,
      mac: createHmac("sha256", key).update(`loopctl-audit-seal:3:${last.hash}`).digest("hex"),
    });
    expect(await verifyAuditLog(path, { key })).toMatchObject({
      ok: true,
      records: [gateRecord(1), gateRecord(2), gateRecord(3)],
      anchor: { seq: 3, hash: last.hash },
    });
    // Without the key the hash chain still verifies: the MACs ride along.
    expect(await verifyAuditLog(path)).toMatchObject({ ok: true, anchor: { seq: 3 } });
  });

  it("detects a forged line appended by someone without the key, which the hash chain alone accepts", async () => {
    const { path, text } = await keyedLog(2);
    const last = JSON.parse(linesOf(text)[1] as string) as { hash: string };
    for (const mac of [
      null,
      "0".repeat(64),
      createHmac("sha256", randomBytes(32)).update(`loopctl-audit-line:x`).digest("hex"),
    ]) {
      await writeFile(path, `${text}${forgedLine(3, last.hash, mac)}\n`);
      const keyed = await verifyAuditLog(path, { key });
      expect(keyed).toMatchObject({ ok: false, line: 3, problem: "forged" });
      if (!keyed.ok) expect(keyed.records).toHaveLength(2);
    }
    await writeFile(path, `${text}${forgedLine(3, last.hash, "ab".repeat(32))}\n`);
    expect((await verifyAuditLog(path)).ok).toBe(true);
  });

  it("detects trailing lines removed, without an anchor, which the hash chain alone accepts", async () => {
    const { path, text } = await keyedLog(4);
    for (const keep of [3, 1, 0]) {
      await writeFile(path, textOf(linesOf(text).slice(0, keep)));
      expect((await verifyAuditLog(path)).ok).toBe(true);
      const result = await verifyAuditLog(path, { key });
      expect(result).toMatchObject({ ok: false, line: keep + 1, problem: "removed" });
      if (!result.ok) expect(result.message).toMatch(/seal vouches for seq 4/);
    }
  });

  it("detects a chain rewritten and re-hashed from any line on", async () => {
    const { path, text } = await keyedLog(3);
    const lines = linesOf(text);
    const first = JSON.parse(lines[0] as string) as { hash: string; mac: string };
    // Line 2 onwards replaced; each forged line takes the real MAC of the line it replaces.
    const second = JSON.parse(lines[1] as string) as { mac: string };
    const forged = forgedLine(2, first.hash, second.mac);
    await writeFile(path, textOf([lines[0] as string, forged]));
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, line: 2, problem: "forged" });
  });

  it("verifies a log its first writer seals and writes to between the seal's read and the log's", async () => {
    // The writer seals a new log before its first line: the seal, missing
    // when read, was there before the lines the log read next holds.
    const path = fresh();
    let writes = 0;
    const result = await verifyLogFile(
      path,
      { key },
      {
        afterSeal: async () => {
          if (++writes > 1) return;
          const sink = await AuditSink.open(path, { key });
          await sink.append(gateRecord(1));
          await sink.close();
        },
      },
    );
    expect(result).toMatchObject({ ok: true, anchor: { seq: 1 }, keyed: true, records: [gateRecord(1)] });

    // A seal that stays missing is still unsealed.
    await unlink(`${path}.seal`);
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, line: 2, problem: "unsealed" });
  });

  it("verifies a log moved aside with its seal, and started afresh, between the seal's read and the log's", async () => {
    // Rotation as the docs tell it: the log and its seal moved aside together, a new sink opened.
    // The seal read was the old log's; the log read next is the new one.
    const { path } = await keyedLog(3);
    let rotations = 0;
    const result = await verifyLogFile(
      path,
      { key },
      {
        afterSeal: async () => {
          if (++rotations > 1) return;
          await rename(path, `${path}.1`);
          await rename(`${path}.seal`, `${path}.1.seal`);
          const sink = await AuditSink.open(path, { key });
          await sink.append(gateRecord(7));
          await sink.close();
        },
      },
    );
    // Before, the old seal was held against the new log: "removed", 2 trailing lines.
    expect(result).toMatchObject({ ok: true, anchor: { seq: 1 }, records: [gateRecord(7)] });

    // A seal that stays ahead of its log is still removed lines, however often it is read.
    const { path: cut } = await keyedLog(3);
    await writeFile(cut, textOf(linesOf(await readFile(cut, "utf8")).slice(0, 1)));
    let reads = 0;
    expect(await verifyLogFile(cut, { key }, { afterSeal: async () => void (reads += 1) })).toMatchObject({
      ok: false,
      line: 2,
      problem: "removed",
    });
    expect(reads).toBe(1);
  });

  it("reports a missing seal as unsealed, a tampered one as forged", async () => {
    const { path, seal } = await keyedLog(2);
    await unlink(`${path}.seal`);
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, line: 3, problem: "unsealed" });
    const parsed = JSON.parse(seal) as { seq: number; hash: string; mac: string };
    await writeFile(`${path}.seal`, `${JSON.stringify({ ...parsed, seq: 1 })}\n`);
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, problem: "forged" });
    await writeFile(`${path}.seal`, "not a seal\n");
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, problem: "unsealed" });
  });

  it("fails every line under another key, and an unkeyed log under a key", async () => {
    const { path } = await keyedLog(2);
    expect(await verifyAuditLog(path, { key: randomBytes(32) })).toMatchObject({
      ok: false,
      line: 1,
      problem: "forged",
    });
    const plain = fresh();
    const sink = await AuditSink.open(plain);
    await sink.append(gateRecord(1));
    await sink.close();
    const result = await verifyAuditLog(plain, { key });
    expect(result).toMatchObject({ ok: false, line: 1, problem: "forged" });
    if (!result.ok) expect(result.message).toMatch(/no mac/);
  });

  it("accepts an authentic line beyond the seal (a crash between the append and the seal), as documented", async () => {
    const { path, text } = await keyedLog(3);
    const sealAt2 = await keyedLog(0);
    // Rebuild the seal the writer had after line 2 by replaying the same three records on a fresh log.
    const replay = await AuditSink.open(sealAt2.path, { key });
    await replay.append(gateRecord(1));
    await replay.append(gateRecord(2));
    await replay.close();
    await writeFile(`${path}.seal`, await readFile(`${sealAt2.path}.seal`));
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: true, anchor: { seq: 3 } });
    expect(linesOf(text)).toHaveLength(3);
  });

  it("read through a symbolic link, is checked against the seal beside the file it points to", async () => {
    const { path, text } = await keyedLog(3);
    const link = join(dir, `current-${++counter}.jsonl`);
    await symlink(path, link);
    expect(await verifyAuditLog(link, { key })).toMatchObject({ ok: true, anchor: { seq: 3 } });
    await writeFile(path, textOf(linesOf(text).slice(0, 2)));
    expect(await verifyAuditLog(link, { key })).toMatchObject({ ok: false, line: 3, problem: "removed" });
  });

  it("checks the bytes in memory against a seal given as text", async () => {
    const { text, seal } = await keyedLog(2);
    expect(verifyAuditBytes(Buffer.from(text), { key, seal }).ok).toBe(true);
    expect(verifyAuditBytes(Buffer.from(text), { key, seal: null })).toMatchObject({ ok: false, problem: "unsealed" });
    expect(verifyAuditBytes(Buffer.from(""), { key, seal: null }).ok).toBe(true);
  });

  it("refuses a seal given without the key, which alone can check it: a log cut short under it verified", async () => {
    const { text, seal } = await keyedLog(3);
    const cut = Buffer.from(textOf(linesOf(text).slice(0, 1)));
    expect(verifyAuditBytes(cut, { key, seal })).toMatchObject({ ok: false, line: 2, problem: "removed" });
    let error: unknown;
    try {
      verifyAuditBytes(cut, { seal });
    } catch (e) {
      error = e;
    }
    expect(error).toMatchObject({ code: "AUDIT_CONFIG", option: "seal" });
    expect((error as Error).message).toContain("options.seal is checked only with options.key");
    // No seal to check, said as null, needs no key.
    expect(verifyAuditBytes(cut, { seal: null })).toMatchObject({ ok: true, anchor: { seq: 1 } });
  });
});

describe("the keyed sink", () => {
  it("refuses a key shorter than the minimum", async () => {
    expect(AUDIT_KEY_MIN_BYTES).toBe(16);
    await expect(AuditSink.open(fresh(), { key: randomBytes(15) })).rejects.toBeInstanceOf(AuditKeyError);
    await expect(verifyAuditLog(fresh(), { key: "short" })).rejects.toMatchObject({ code: "AUDIT_KEY" });
  });

  it("refuses a key given as undefined (an unset environment variable) with an AuditConfigError naming key, never taking it for no key", async () => {
    const { path, text, seal } = await keyedLog(2);
    // `{ key: process.env.AUDIT_KEY }` with the variable unset.
    const unset = { key: undefined } as never;
    const plain = fresh();
    const refusals = [
      await AuditSink.open(plain, unset).catch((e: unknown) => e),
      await AuditSink.open(path, unset).catch((e: unknown) => e),
      await verifyAuditLog(path, unset).catch((e: unknown) => e),
      await verifyAuditLog(path, { key: undefined, records: false } as never).catch((e: unknown) => e),
    ];
    try {
      verifyAuditBytes(Buffer.from(text), unset);
    } catch (e) {
      refusals.push(e);
    }
    try {
      verifyAuditBytes(Buffer.from(text), { key: undefined, seal } as never);
    } catch (e) {
      refusals.push(e);
    }
    expect(refusals).toHaveLength(6);
    for (const error of refusals) {
      expect(error).toBeInstanceOf(AuditConfigError);
      expect(error).toMatchObject({ code: "AUDIT_CONFIG", option: "key" });
      expect((error as Error).message).toContain("options.key is undefined");
      expect((error as Error).message).toContain("omit key for an unkeyed log");
    }
    // Nothing was started, and the keyed log is as it was.
    await expect(stat(plain)).rejects.toMatchObject({ code: "ENOENT" });
    expect(await readFile(path, "utf8")).toBe(text);
    // Omitted, the log is unkeyed: a key only inherited is not an own key set to undefined either.
    const sink = await AuditSink.open(plain, {});
    await sink.append(gateRecord(1));
    await sink.close();
    expect(await verifyAuditLog(plain, Object.create({ key: undefined }) as never)).toMatchObject({ ok: true });
    expect(verifyAuditBytes(Buffer.from(text))).toMatchObject({ ok: true, keyed: true });
  });

  it("refuses to open a keyed log without its key, and an unkeyed one with a key", async () => {
    const { path } = await keyedLog(1);
    await expect(AuditSink.open(path)).rejects.toBeInstanceOf(AuditKeyError);
    await expect(AuditSink.open(path, { key: randomBytes(32) })).rejects.toMatchObject({ problem: "forged" });
    const plain = fresh();
    const sink = await AuditSink.open(plain);
    await sink.append(gateRecord(1));
    await sink.close();
    await expect(AuditSink.open(plain, { key })).rejects.toBeInstanceOf(AuditCorruptError);
  });

  it("refuses to start over when the log is gone but its seal vouches for lines", async () => {
    const { path } = await keyedLog(2);
    await unlink(path);
    const error = await AuditSink.open(path, { key }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditCorruptError);
    expect((error as AuditCorruptError).problem).toBe("removed");
  });

  it("refuses to append after a truncation it did not make, and leaves the log alone", async () => {
    const { path, text } = await keyedLog(3);
    const sink = await AuditSink.open(path, { key });
    await writeFile(path, textOf(linesOf(text).slice(0, 2)));
    await expect(sink.append(gateRecord(9))).rejects.toBeInstanceOf(AuditCorruptError);
    await sink.close();
    expect(await readFile(path, "utf8")).toBe(textOf(linesOf(text).slice(0, 2)));
  });

  it("cuts its lines back when the seal cannot be updated, and goes on once it can", async () => {
    const { path, text, seal } = await keyedLog(2);
    const errors: string[] = [];
    for (const fsync of [false, true]) {
      const sink = await openSink(
        path,
        { key, fsync, onError: (error) => errors.push(error.code) },
        { sealTemporary: (sealPath) => `${sealPath}.tmp` },
      );
      // A folder where the seal's temporary file goes: creating it fails with EEXIST.
      await mkdir(`${path}.seal.tmp`);
      const error = await sink.append(gateRecord(3)).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: "AUDIT_IO", path });
      expect((error as Error).message).toMatch(
        /^cannot append line 3 to audit log .*: the seal could not be updated: .*EEXIST.*; nothing of them was kept/,
      );
      expect(await readFile(path, "utf8")).toBe(text);
      expect(await readFile(`${path}.seal`, "utf8")).toBe(seal);
      await rmdir(`${path}.seal.tmp`);
      await expect(sink.append(gateRecord(4))).resolves.toMatchObject({ seq: 3 });
      await expect(sink.flush()).rejects.toBe(error);
      await sink.close();
      expect(await verifyAuditLog(path, { key })).toMatchObject({
        ok: true,
        records: [gateRecord(1), gateRecord(2), gateRecord(4)],
      });
      await writeFile(path, text);
      await writeFile(`${path}.seal`, seal);
    }
    expect(errors).toEqual(["AUDIT_IO", "AUDIT_IO"]);
  });

  it("writes the seal through no file planted at a name beside it: a hard link or a symbolic link to a file elsewhere stays untouched", async () => {
    const outside = await mkdtemp(join(tmpdir(), "loopctl-audit-outside-"));
    try {
      const victim = join(outside, "victim.txt");
      await writeFile(victim, "not the seal\n");
      const { path } = await keyedLog(1);
      const folder = join(dir, `planted-${++counter}`);
      await mkdir(folder);
      const log = join(folder, "gates.jsonl");
      await writeFile(log, await readFile(path));
      await writeFile(`${log}.seal`, await readFile(`${path}.seal`));
      // At the name the seal's temporary file had, which anyone who can write the folder knew.
      await link(victim, `${log}.seal.tmp`);
      const planted = (await readdir(folder)).sort();
      const sink = await AuditSink.open(log, { key });
      await expect(sink.append(gateRecord(2))).resolves.toMatchObject({ seq: 2 });
      await unlink(`${log}.seal.tmp`);
      await symlink(join(outside, "made-by-the-writer"), `${log}.seal.tmp`);
      await expect(sink.append(gateRecord(3))).resolves.toMatchObject({ seq: 3 });
      await sink.close();
      expect(await readFile(victim, "utf8")).toBe("not the seal\n");
      expect((await stat(victim)).nlink).toBe(1);
      expect(await readdir(outside)).toEqual(["victim.txt"]);
      // Nothing is left beside the log but what was there: no temporary file either.
      expect((await readdir(folder)).sort()).toEqual(planted);
      expect((await stat(`${log}.seal`)).mode & 0o777).toBe(0o600);
      expect(await verifyAuditLog(log, { key })).toMatchObject({ ok: true, anchor: { seq: 3 } });
    } finally {
      await rm(outside, { recursive: true, force: true });
    }
  });

  it("removes the seal's temporary file when the seal cannot be replaced, and one a dead writer left once it is old", async () => {
    const { path, text, seal } = await keyedLog(2);
    const temporaries = async (): Promise<string[]> =>
      (await readdir(dir)).filter((name) => name.startsWith(`${basename(path)}.seal.tmp`)).sort();
    // A folder put in the seal's place once the sink has checked the seal, as it names the seal's
    // temporary file: the rename over it fails, after the temporary file was written.
    const sink = await openSink(
      path,
      { key },
      {
        sealTemporary: (sealPath) => {
          if (!existsSync(`${sealPath}.kept`)) {
            renameSync(sealPath, `${sealPath}.kept`);
            mkdirSync(sealPath);
            writeFileSync(join(sealPath, "x"), "");
          }
          return `${sealPath}.tmp-${"c".repeat(24)}`;
        },
      },
    );
    const error = await sink.append(gateRecord(3)).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "AUDIT_IO", path });
    expect((error as Error).message).toMatch(/the seal could not be updated: .*; nothing of them was kept/);
    expect(await temporaries()).toEqual([]);
    expect(await readFile(path, "utf8")).toBe(text);
    await sink.close();
    await rm(`${path}.seal`, { recursive: true });
    await rename(`${path}.seal.kept`, `${path}.seal`);
    // A folder found in the seal's place is no seal: the sink refuses to write, nothing written.
    const refusing = await AuditSink.open(path, { key });
    await rename(`${path}.seal`, `${path}.seal.kept`);
    await mkdir(`${path}.seal`);
    await expect(refusing.append(gateRecord(3))).rejects.toMatchObject({ code: "AUDIT_PATH", path: `${path}.seal` });
    expect(await temporaries()).toEqual([]);
    expect(await readFile(path, "utf8")).toBe(text);
    await refusing.close();
    await rmdir(`${path}.seal`);
    await rename(`${path}.seal.kept`, `${path}.seal`);

    const old = `${path}.seal.tmp-${"a".repeat(24)}`;
    const recent = `${path}.seal.tmp-${"b".repeat(24)}`;
    const other = `${path}.seal.tmp-mine`;
    for (const name of [old, recent, other]) await writeFile(name, seal, { mode: 0o600 });
    const hourAgo = new Date(Date.now() - 3_600_000);
    await utimes(old, hourAgo, hourAgo);
    await utimes(other, hourAgo, hourAgo);
    const reopened = await AuditSink.open(path, { key });
    await reopened.close();
    expect(await temporaries()).toEqual([basename(recent), basename(other)].sort());
  });

  it("fails an append, not hangs it holding the lock, when a FIFO is where the seal's temporary file goes", async () => {
    const { path, text, seal } = await keyedLog(2);
    const sink = await openSink(path, { key, lockTimeoutMs: 100 }, { sealTemporary: (sealPath) => `${sealPath}.tmp` });
    await promisify(execFile)("mkfifo", [`${path}.seal.tmp`]);
    // With no reader, opening it to write waited for one for good, holding the log's lock.
    const error = await Promise.race([
      sink.append(gateRecord(3)).catch((e: unknown) => e),
      new Promise((resolve) => setTimeout(() => resolve("still waiting after 5 s"), 5_000)),
    ]);
    expect(error).toMatchObject({ code: "AUDIT_IO", path });
    expect((error as Error).message).toMatch(
      /^cannot append line 3 to audit log .*: the seal could not be updated: .*EEXIST.*; nothing of them was kept/,
    );
    expect(await readFile(path, "utf8")).toBe(text);
    expect(await readFile(`${path}.seal`, "utf8")).toBe(seal);
    // Held open for reading, it is not opened to write either: the name is taken.
    const reader = await open(`${path}.seal.tmp`, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      const again = await sink.append(gateRecord(4)).catch((e: unknown) => e);
      expect(again).toMatchObject({ code: "AUDIT_IO", path });
      expect((again as Error).message).toMatch(/the seal could not be updated: .*EEXIST/);
    } finally {
      await reader.close();
    }
    expect(await readFile(`${path}.seal`, "utf8")).toBe(seal);
    await unlink(`${path}.seal.tmp`);
    await expect(sink.append(gateRecord(5))).resolves.toMatchObject({ seq: 3 });
    await sink.close();
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: true, anchor: { seq: 3 } });
  });

  it("opens a log whose seal moved, between its read and the lock, to a line before the end it read", async () => {
    // Seals as the writer left them after each line, and one of another log under the same key.
    const seals = async (path: string, offset: number): Promise<string[]> => {
      const sink = await AuditSink.open(path, { key });
      const left = [];
      for (let i = 1; i <= 5; i++) {
        await sink.append(gateRecord(i + offset));
        left.push(await readFile(`${path}.seal`, "utf8"));
      }
      await sink.close();
      return left;
    };
    const path = fresh();
    const [, , at3, at4] = await seals(path, 0);
    const [, , , otherAt4] = await seals(fresh(), 100);
    const text = await readFile(path, "utf8");
    // The opener reads the seal at line 3 (its writer, and the next, crashed before sealing lines
    // 4 and 5), then all five lines; before it has the lock, a seal at line 4 is put in place.
    for (const [moved, outcome] of [
      [at4 as string, { seq: 5 }],
      [otherAt4 as string, { line: 4, problem: "edited" }],
    ] as const) {
      await writeFile(path, text);
      await writeFile(`${path}.seal`, at3 as string);
      let ran = false;
      const opened = await openSink(
        path,
        { key },
        {
          beforeLock: async () => {
            ran = true;
            await writeFile(`${path}.seal`, moved);
          },
        },
      ).catch((e: unknown) => e);
      expect(ran).toBe(true);
      if ("seq" in outcome) {
        // Line 4's hash was not kept by the first read: the log is read again, under the lock.
        expect(opened).toBeInstanceOf(AuditSink);
        const sink = opened as AuditSink;
        expect(sink.anchor.seq).toBe(5);
        await expect(sink.append(gateRecord(6))).resolves.toMatchObject({ seq: 6 });
        await sink.close();
        expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: true, anchor: { seq: 6 } });
      } else {
        expect(opened).toBeInstanceOf(AuditCorruptError);
        expect(opened).toMatchObject({ ...outcome, message: expect.stringContaining("does not match the seal") });
        expect(await readFile(path, "utf8")).toBe(text);
      }
    }
  });

  it("resumes a keyed chain after reopening, and seals it at its new end", async () => {
    const { path } = await keyedLog(2);
    const sink = await AuditSink.open(path, { key });
    await sink.append(gateRecord(3));
    await sink.close();
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: true, anchor: { seq: 3 } });
    expect((JSON.parse(await readFile(`${path}.seal`, "utf8")) as { seq: number }).seq).toBe(3);
  });
});

describe("readAuditKeyFile", () => {
  it("reads the key's bytes, without one trailing newline", async () => {
    const file = join(dir, "hex.key");
    const hex = randomBytes(32).toString("hex");
    await writeFile(file, `${hex}\n`, { mode: 0o600 });
    expect(Buffer.from(await readAuditKeyFile(file)).toString()).toBe(hex);
    const raw = join(dir, "raw.key");
    await writeFile(raw, key, { mode: 0o600 });
    expect(Buffer.from(await readAuditKeyFile(raw)).equals(key)).toBe(true);
  });

  it("reads a raw key whole, a last byte 0x0a included; a key of text without its newline", async () => {
    // One random 32-byte key in 256 ends in 0x0a: before, the file gave 31 bytes of it and the log
    // its writer made with the key verified as forged.
    const raw = join(dir, "raw-newline.key");
    const bytes = Buffer.concat([randomBytes(30), Buffer.from([0x00, 0x0a])]);
    await writeFile(raw, bytes, { mode: 0o600 });
    expect(Buffer.from(await readAuditKeyFile(raw)).equals(bytes)).toBe(true);
    const crlf = Buffer.concat([randomBytes(29), Buffer.from([0xff, 0x0d, 0x0a])]);
    await writeFile(raw, crlf, { mode: 0o600 });
    expect(Buffer.from(await readAuditKeyFile(raw)).equals(crlf)).toBe(true);
    const log = fresh();
    const sink = await AuditSink.open(log, { key: bytes });
    await sink.append(gateRecord(1));
    await sink.close();
    await writeFile(raw, bytes, { mode: 0o600 });
    expect(await verifyAuditLog(log, { key: await readAuditKeyFile(raw) })).toMatchObject({ ok: true, keyed: true });
    for (const [text, read] of [
      ["a passphrase, spelled å\r\n", "a passphrase, spelled å"],
      [`${"ab".repeat(16)}\n`, "ab".repeat(16)],
    ]) {
      await writeFile(raw, text as string, { mode: 0o600 });
      expect(Buffer.from(await readAuditKeyFile(raw)).toString("utf8")).toBe(read);
    }
  });

  it("reads a key from a pipe (a FIFO whose writer comes later, as `--key-file <(pass show key)` gives), kept off the disk", async () => {
    const fifo = join(dir, "key.fifo");
    await promisify(execFile)("mkfifo", ["-m", "600", fifo]);
    const hex = randomBytes(32).toString("hex");
    // The writer opens the pipe after the read began, and writes in two pieces.
    const writer = promisify(execFile)("sh", [
      "-c",
      `sleep 0.2; { printf %s ${hex.slice(0, 10)}; sleep 0.1; echo ${hex.slice(10)}; } > "$0"`,
      fifo,
    ]);
    const [read] = await Promise.all([readAuditKeyFile(fifo), writer]);
    expect(Buffer.from(read).toString()).toBe(hex);
    // A pipe others may write is refused as a file others may write is, before its writer is waited for.
    const open = join(dir, "open.fifo");
    await promisify(execFile)("mkfifo", ["-m", "622", open]);
    await expect(readAuditKeyFile(open)).rejects.toThrow(/readable or writable by others.*chmod 600/);
  });

  it("refuses a key file of more than 64 KiB, and a pipe that never ends, without reading it whole", async () => {
    const big = join(dir, "big.key");
    await writeFile(big, "a".repeat(64 * 1024 + 1), { mode: 0o600 });
    await expect(readAuditKeyFile(big)).rejects.toThrow(`audit key file ${big} holds more than 65536 bytes`);
    const most = join(dir, "most.key");
    await writeFile(most, "a".repeat(64 * 1024), { mode: 0o600 });
    expect((await readAuditKeyFile(most)).length).toBe(64 * 1024);
    const endless = join(dir, "endless.fifo");
    await promisify(execFile)("mkfifo", ["-m", "600", endless]);
    const writer = promisify(execFile)("sh", ["-c", 'yes > "$0" 2>/dev/null || true', endless]);
    await expect(readAuditKeyFile(endless)).rejects.toBeInstanceOf(AuditKeyError);
    await writer;
  });

  it("refuses a path that is not a non-empty string with a typed error naming it", async () => {
    for (const path of [undefined, "", 7]) {
      await expect(readAuditKeyFile(path as string)).rejects.toMatchObject({ code: "AUDIT_CONFIG", option: "path" });
    }
  });

  it("refuses a key file others can read, and one too short", async () => {
    const open = join(dir, "open.key");
    await writeFile(open, randomBytes(32));
    await chmod(open, 0o644);
    await expect(readAuditKeyFile(open)).rejects.toThrow(/readable or writable by others.*chmod 600/);
    const short = join(dir, "short.key");
    await writeFile(short, "abc\n", { mode: 0o600 });
    await expect(readAuditKeyFile(short)).rejects.toBeInstanceOf(AuditKeyError);
    await expect(readAuditKeyFile(short)).rejects.toThrow(
      `audit key file ${short}: an audit key must be at least 16 bytes, got 3`,
    );
  });
});
