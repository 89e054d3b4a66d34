import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { appendFileSync } from "node:fs";
import { mkdtemp, readFile, rm, truncate, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AUDIT_EMPTY_ANCHOR,
  AUDIT_GENESIS,
  AUDIT_LINE_MAX_BYTES,
  AuditConfigError,
  AuditIoError,
  auditSealPath,
  AuditPathError,
  AuditSink,
  formatAuditAnchor,
  parseAuditAnchor,
  AuditAnchorError,
  verifyAuditBytes,
  verifyAuditLog,
} from "../src/audit/index.js";
import type { AuditAnchor, AuditVerifyBytesOptions, AuditVerifyOptions } from "../src/audit/index.js";
import { CHUNK_BYTES } from "../src/audit/chain-file.js";
import { verifyLogFile } from "../src/audit/verify.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";

const FUZZ_RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 300);

let dir: string;
let logPath: string;
let original: Buffer;
let anchor: AuditAnchor;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-audit-verify-"));
  logPath = join(dir, "gates.jsonl");
  const sink = await AuditSink.open(logPath);
  for (let i = 1; i <= 5; i++) await sink.append(gateRecord(i, { reason: i === 3 ? "naïve ☃ \ud800" : null }));
  anchor = sink.anchor;
  await sink.close();
  original = await readFile(logPath);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const lines = (): string[] => original.toString("utf8").split("\n").slice(0, -1);
const join_ = (ls: string[]): Buffer => Buffer.from(ls.map((l) => `${l}\n`).join(""), "utf8");
const sha256 = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex");
/** The hash line `n` of a log's bytes carries. */
const lineHashOf = (bytes: Buffer, n: number): string =>
  (JSON.parse(bytes.toString("utf8").split("\n")[n - 1] as string) as { hash: string }).hash;

describe("the audit line format", () => {
  it("chains each line to the previous one's hash, from the genesis value", () => {
    let prev = AUDIT_GENESIS;
    expect(AUDIT_GENESIS).toBe("0".repeat(64));
    for (const [index, line] of lines().entries()) {
      const parsed = JSON.parse(line) as { seq: number; prev: string; hash: string };
      expect(Object.keys(parsed)).toEqual(["seq", "prev", "record", "hash"]);
      expect(parsed.seq).toBe(index + 1);
      expect(parsed.prev).toBe(prev);
      const body = line.replace(/,"hash":"[0-9a-f]{64}"\}$/, "}");
      expect(parsed.hash).toBe(sha256(body));
      prev = parsed.hash;
    }
    expect(anchor).toEqual({ seq: 5, hash: prev });
  });

  it("round-trips every record, a lone surrogate included", async () => {
    const result = await verifyAuditLog(logPath);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.records).toEqual(
      [1, 2, 3, 4, 5].map((i) => gateRecord(i, { reason: i === 3 ? "naïve ☃ \ud800" : null })),
    );
    expect(result.anchor).toEqual(anchor);
  });

  it("accepts an empty log, whose anchor is the genesis", () => {
    expect(verifyAuditBytes(new Uint8Array())).toEqual({
      ok: true,
      records: [],
      anchor: AUDIT_EMPTY_ANCHOR,
      keyed: false,
    });
  });

  it("prints and parses anchors as <seq>:<hash>", () => {
    expect(parseAuditAnchor(formatAuditAnchor(anchor))).toEqual(anchor);
    expect(() => parseAuditAnchor("5:XYZ")).toThrow(AuditAnchorError);
    expect(() => parseAuditAnchor(`-1:${AUDIT_GENESIS}`)).toThrow(/not <seq>:<64 lowercase hex digits>/);
  });
});

describe("verifyAuditBytes finds each kind of tampering at its line", () => {
  it("an edited line", () => {
    const ls = lines();
    ls[2] = (ls[2] as string).replace('"tool_3"', '"tool_X"');
    expect(verifyAuditBytes(join_(ls))).toMatchObject({ ok: false, line: 3, problem: "edited" });
  });

  it("an edited line whose own hash was recomputed breaks the next link", () => {
    const ls = lines();
    const body = (ls[1] as string).replace('"tool_2"', '"tool_Y"').replace(/,"hash":"[0-9a-f]{64}"\}$/, "");
    ls[1] = `${body},"hash":"${sha256(`${body}}`)}"}`;
    const result = verifyAuditBytes(join_(ls));
    expect(result).toMatchObject({ ok: false, line: 3, problem: "edited" });
    if (!result.ok) expect(result.message).toMatch(/does not link to line 2/);
  });

  it("names a line's hostile member without a control character in the message", () => {
    // The file holds only JSON escapes; the message a sink's onError (console.error) prints must too.
    const rehash = (body: string): string => `${body},"hash":"${sha256(`${body}}`)}"}`;
    const record = JSON.stringify(gateRecord(1));
    const member = rehash(
      `{"seq":1,"prev":"${AUDIT_GENESIS}","\\u001b]0;x\\u0007\\u009b2J\\u202e":1,"record":${record}`,
    );
    const result = verifyAuditBytes(Buffer.from(`${member}\n`));
    expect(result).toMatchObject({ ok: false, line: 1, problem: "malformed" });
    if (!result.ok) {
      expect(result.message).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202e]/u);
      expect(result.message).toContain("\\u001b]0;x\\u0007\\u009b2J\\u202e");
    }
    // A member twice, named with a C1 control (which JSON.stringify leaves as it is) and a bidi override.
    const twice = rehash(
      `{"seq":1,"prev":"${AUDIT_GENESIS}","record":${record.slice(0, -1)},"\\u009b2J\\u202e":1,"\\u009b2J\\u202e":2}`,
    );
    const duplicate = verifyAuditBytes(Buffer.from(`${twice}\n`));
    expect(duplicate).toMatchObject({ ok: false, line: 1, problem: "malformed" });
    if (!duplicate.ok) {
      expect(duplicate.message).toContain("twice");
      expect(duplicate.message).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202e]/u);
    }
  });

  it("quotes at most the head of a line's hostile member in the message, however long its name", async () => {
    // Anyone who can write the log picks the name: every error that reports the line must not carry megabytes of it.
    const rehash = (body: string): string => `${body},"hash":"${sha256(`${body}}`)}"}`;
    const record = JSON.stringify(gateRecord(1));
    const long = "k".repeat(1_000_000);
    const extra = rehash(`{"seq":1,"prev":"${AUDIT_GENESIS}","${long}":1,"record":${record}`);
    const twice = rehash(`{"seq":1,"prev":"${AUDIT_GENESIS}","record":${record.slice(0, -1)},"${long}":1,"${long}":2}`);
    for (const [line, named] of [
      [extra, /Unrecognized key/],
      [twice, /twice/],
    ] as const) {
      const result = verifyAuditBytes(Buffer.from(`${line}\n`));
      expect(result).toMatchObject({ ok: false, line: 1, problem: "malformed" });
      if (!result.ok) {
        expect(result.message).toMatch(named);
        expect(result.message).toMatch(/k… \[\d+ characters cut\]/);
        expect(result.message.length).toBeLessThan(2_000);
      }
      const path = join(dir, `long-member-${line === extra ? "extra" : "twice"}.jsonl`);
      await writeFile(path, `${line}\n`);
      const refused = await AuditSink.open(path).catch((e: unknown) => e);
      expect(refused).toMatchObject({ code: "AUDIT_CORRUPT", problem: "malformed" });
      expect((refused as Error).message.length).toBeLessThan(2_000);
    }
  });

  it("a removed line, first or middle", () => {
    const middle = lines().filter((_, i) => i !== 2);
    expect(verifyAuditBytes(join_(middle))).toMatchObject({ ok: false, line: 3, problem: "removed" });
    const first = lines().slice(1);
    expect(verifyAuditBytes(join_(first))).toMatchObject({ ok: false, line: 1, problem: "removed" });
  });

  it("reordered lines", () => {
    const ls = lines();
    [ls[1], ls[3]] = [ls[3] as string, ls[1] as string];
    const result = verifyAuditBytes(join_(ls));
    expect(result).toMatchObject({ ok: false, line: 2, problem: "reordered" });
    if (!result.ok) expect(result.records).toHaveLength(1);
  });

  it("a duplicated line", () => {
    const ls = lines();
    ls.splice(2, 0, ls[1] as string);
    expect(verifyAuditBytes(join_(ls))).toMatchObject({ ok: false, line: 3, problem: "duplicated" });
  });

  it("a line from another chain (forked)", () => {
    const ls = lines();
    const body = `{"seq":2,"prev":"${AUDIT_GENESIS}","record":${JSON.stringify(gateRecord(9))}`;
    ls.splice(3, 0, `${body},"hash":"${sha256(`${body}}`)}"}`);
    expect(verifyAuditBytes(join_(ls))).toMatchObject({ ok: false, line: 4, problem: "forked" });
  });

  it("a truncated tail: a line cut mid-way, or only its newline lost", () => {
    const cut = original.subarray(0, original.length - 20);
    expect(verifyAuditBytes(cut)).toMatchObject({ ok: false, line: 5, problem: "truncated" });
    const noNewline = original.subarray(0, original.length - 1);
    const result = verifyAuditBytes(noNewline);
    expect(result).toMatchObject({ ok: false, line: 5, problem: "truncated" });
    if (!result.ok) expect(result.records).toHaveLength(4);
  });

  it("malformed lines: garbage, empty, bad UTF-8, an extra member, an invalid record", () => {
    const at = (i: number, line: string | Buffer): Buffer => {
      const ls: (string | Buffer)[] = lines();
      ls[i] = line;
      return Buffer.concat(ls.map((l) => Buffer.concat([Buffer.from(l), Buffer.from("\n")])));
    };
    expect(verifyAuditBytes(at(1, "not json"))).toMatchObject({ line: 2, problem: "malformed" });
    expect(verifyAuditBytes(at(3, ""))).toMatchObject({ line: 4, problem: "malformed" });
    const bad = Buffer.from(lines()[0] as string);
    bad[30] = 0xff;
    expect(verifyAuditBytes(at(0, bad))).toMatchObject({ line: 1, problem: "malformed" });
    const extra = (lines()[1] as string).replace('{"seq":2', '{"x":1,"seq":2');
    expect(verifyAuditBytes(at(1, extra))).toMatchObject({ line: 2, problem: "malformed" });
    const invalid = (lines()[1] as string).replace('"verdict":"allow"', '"verdict":"maybe"');
    const result = verifyAuditBytes(at(1, invalid));
    expect(result).toMatchObject({ line: 2, problem: "malformed" });
    if (!result.ok) expect(result.message).toMatch(/record\.verdict/);
    // A mac before the hash, the line re-hashed over it: the hash must close the line, the mac follow it.
    const body = (lines()[1] as string).replace(/,"hash":"[0-9a-f]{64}"\}$/, `,"mac":"${"0".repeat(64)}"`);
    const misplaced = verifyAuditBytes(join_([lines()[0] as string, `${body},"hash":"${sha256(`${body}}`)}"}`]));
    expect(misplaced).toMatchObject({ line: 2, problem: "malformed" });
    if (!misplaced.ok) expect(misplaced.message).toMatch(/its last members are not its "hash" and "mac"/);
  });

  it("a byte order mark or CRLF line endings (a log saved by an editor), named as such", () => {
    const bom = verifyAuditBytes(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), original]));
    expect(bom).toMatchObject({ ok: false, line: 1, problem: "malformed" });
    if (!bom.ok) expect(bom.message).toBe("line 1 is malformed: it starts with a byte order mark (U+FEFF)");
    const crlf = verifyAuditBytes(Buffer.from(original.toString("utf8").replaceAll("\n", "\r\n")));
    expect(crlf).toMatchObject({ ok: false, line: 1, problem: "malformed" });
    if (!crlf.ok) {
      expect(crlf.message).toBe("line 1 is malformed: it ends with a carriage return (CRLF line endings)");
    }
    const lastOnly = verifyAuditBytes(Buffer.from(`${original.toString("utf8").slice(0, -1)}\r\n`));
    expect(lastOnly).toMatchObject({ ok: false, line: 5, problem: "malformed" });
  });

  it("trailing whitespace after a line's last member, named as such rather than as a missing hash", () => {
    for (const space of [" ", "\t", "  \t"]) {
      const padded = verifyAuditBytes(join_(lines().map((l, i) => (i === 1 ? `${l}${space}` : l))));
      expect(padded).toMatchObject({ ok: false, line: 2, problem: "malformed" });
      if (!padded.ok) expect(padded.message).toBe("line 2 is malformed: it ends with whitespace after its last member");
    }
  });

  it("a line with a member twice, at any depth and however the key is spelled, re-hashed by the forger", () => {
    // JSON.parse keeps the last of two members; a reader that keeps the first would see another record.
    const rehash = (body: string): string => `${body},"hash":"${sha256(`${body}}`)}"}`;
    const bodyOf = (line: string): string => line.replace(/,"hash":"[0-9a-f]{64}"\}$/, "");
    const cases: [string, (body: string) => string, RegExp][] = [
      [
        "record.verdict",
        (b) => b.replace('"verdict":"allow"', '"verdict":"deny","verdict":"allow"'),
        /"verdict" twice, at record\.verdict/,
      ],
      [
        "an escaped spelling",
        (b) => b.replace('"verdict":"allow"', '"verdict":"deny","verd\\u0069ct":"allow"'),
        /"verdict" twice/,
      ],
      ["the top level", (b) => b.replace('{"seq":2,', '{"seq":2,"seq":2,'), /"seq" twice, at seq/],
      [
        "deep inside",
        (b) => b.replace(',"ts":', ',"extra":[1,{"a":{"b":[],"c":{},"b":2}}],"ts":'),
        /"b" twice, at record\.extra\[1\]\.a\.b/,
      ],
      [
        "the record itself",
        (b) =>
          `${b.slice(0, b.indexOf(',"record":'))},"record":${JSON.stringify(gateRecord(9))}${b.slice(b.indexOf(',"record":'))}`,
        /"record" twice/,
      ],
    ];
    for (const [what, edit, message] of cases) {
      const ls = lines();
      const edited = edit(bodyOf(ls[1] as string));
      expect(edited, what).not.toBe(bodyOf(ls[1] as string));
      ls[1] = rehash(edited);
      // The chain still links: only the duplicate gives it away.
      const third = JSON.parse(ls[2] as string) as { seq: number; prev: string; record: unknown };
      const thirdBody = `{"seq":3,"prev":"${(JSON.parse(ls[1]) as { hash: string }).hash}","record":${JSON.stringify(third.record)}`;
      ls[2] = rehash(thirdBody);
      const result = verifyAuditBytes(join_(ls.slice(0, 3)));
      expect(result, what).toMatchObject({ ok: false, line: 2, problem: "malformed" });
      if (!result.ok) {
        expect(result.message, what).toMatch(/^line 2 is malformed: /);
        expect(result.message, what).toMatch(message);
        expect(result.records).toHaveLength(1);
      }
    }
  });

  it("a first line that does not start from the genesis value", () => {
    const ls = lines();
    const body = `{"seq":1,"prev":"${"1".repeat(64)}","record":${JSON.stringify(gateRecord(1))}`;
    ls[0] = `${body},"hash":"${sha256(`${body}}`)}"}`;
    expect(verifyAuditBytes(join_(ls))).toMatchObject({ ok: false, line: 1, problem: "edited" });
  });
});

describe("an anchor", () => {
  it("reveals trailing lines removed, which the chain alone cannot", () => {
    const short = join_(lines().slice(0, 3));
    expect(verifyAuditBytes(short).ok).toBe(true);
    expect(verifyAuditBytes(short, { anchor })).toMatchObject({ ok: false, line: 4, problem: "removed" });
    expect(verifyAuditBytes(new Uint8Array(), { anchor })).toMatchObject({ ok: false, line: 1, problem: "removed" });
  });

  it("is refused with a typed error when malformed, before any file is read", async () => {
    for (const bad of [
      { seq: -1, hash: AUDIT_GENESIS },
      { seq: 1.5, hash: AUDIT_GENESIS },
      { seq: 1, hash: "ABC" },
      null,
    ]) {
      expect(() => verifyAuditBytes(original, { anchor: bad as unknown as AuditAnchor })).toThrow(AuditAnchorError);
      await expect(
        verifyAuditLog(join(dir, "missing.jsonl"), { anchor: bad as unknown as AuditAnchor }),
      ).rejects.toMatchObject({
        code: "AUDIT_ANCHOR",
      });
      await expect(
        AuditSink.open(join(dir, "never-created.jsonl"), { anchor: bad as unknown as AuditAnchor }),
      ).rejects.toBeInstanceOf(AuditAnchorError);
    }
  });

  it("that does not match the log: the verified prefix is the lines before the one it names", () => {
    const wrong = { seq: 2, hash: "ab".repeat(32) };
    const result = verifyAuditBytes(original, { anchor: wrong });
    expect(result).toMatchObject({ ok: false, line: 2, problem: "edited" });
    if (!result.ok) expect(result.records).toEqual([gateRecord(1, { reason: null })]);
  });

  it("accepts lines appended after it was taken", () => {
    const third = JSON.parse(lines()[2] as string) as { hash: string };
    expect(verifyAuditBytes(original, { anchor: { seq: 3, hash: third.hash } }).ok).toBe(true);
    expect(verifyAuditBytes(original, { anchor: AUDIT_EMPTY_ANCHOR }).ok).toBe(true);
  });

  it("reads past a record's member it does not know (a later version's), which the hash still covers; a line's own extra member is malformed", () => {
    const body = `{"seq":1,"prev":"${AUDIT_GENESIS}","record":${JSON.stringify({ ...gateRecord(1), origin: "cli" })}`;
    const later = `${body},"hash":"${sha256(`${body}}`)}"}`;
    expect(verifyAuditBytes(join_([later]))).toMatchObject({ ok: true, records: [gateRecord(1)] });
    // The member is hashed like the rest: changed, the line no longer matches its hash.
    expect(verifyAuditBytes(join_([later.replace('"origin":"cli"', '"origin":"web"')]))).toMatchObject({
      ok: false,
      line: 1,
      problem: "edited",
    });
    const extra = `{"seq":1,"prev":"${AUDIT_GENESIS}","record":${JSON.stringify(gateRecord(1))},"origin":"cli"`;
    expect(verifyAuditBytes(join_([`${extra},"hash":"${sha256(`${extra}}`)}"}`]))).toMatchObject({
      ok: false,
      line: 1,
      problem: "malformed",
    });
  });

  it("reveals a chain rewritten and re-hashed from scratch", () => {
    let prev = AUDIT_GENESIS;
    const forged = [1, 2, 3, 4, 5].map((i) => {
      const body = `{"seq":${i},"prev":"${prev}","record":${JSON.stringify(gateRecord(i + 10))}`;
      prev = sha256(`${body}}`);
      return `${body},"hash":"${prev}"}`;
    });
    expect(verifyAuditBytes(join_(forged)).ok).toBe(true);
    expect(verifyAuditBytes(join_(forged), { anchor })).toMatchObject({ ok: false, line: 5, problem: "edited" });
  });
});

describe("verifyAuditLog on the file system", () => {
  it("throws a typed error for a missing file and for a folder", async () => {
    const missing = join(dir, "missing.jsonl");
    const error = await verifyAuditLog(missing).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuditIoError);
    expect((error as AuditIoError).code).toBe("AUDIT_IO");
    expect((error as AuditIoError).message).toContain(missing);
    expect(((error as AuditIoError).cause as NodeJS.ErrnoException).code).toBe("ENOENT");
    await mkdir(join(dir, "folder"));
    await expect(verifyAuditLog(join(dir, "folder"))).rejects.toBeInstanceOf(AuditPathError);
  });

  it("reports tampering in a file", async () => {
    const path = join(dir, "tampered.jsonl");
    await writeFile(path, join_(lines().filter((_, i) => i !== 1)));
    expect(await verifyAuditLog(path)).toMatchObject({ ok: false, line: 2, problem: "removed" });
  });

  it("refuses a path, options, bytes or a seal of the wrong type with a typed error naming it", async () => {
    const refusals: [() => unknown, string, string][] = [
      [() => verifyAuditLog(undefined as unknown as string), "AUDIT_CONFIG", "path"],
      [() => verifyAuditLog(""), "AUDIT_CONFIG", "path"],
      [() => verifyAuditLog(logPath, null as unknown as AuditVerifyOptions), "AUDIT_CONFIG", "options"],
      [() => verifyAuditLog(logPath, { signal: {} as AbortSignal }), "AUDIT_CONFIG", "signal"],
      [() => verifyAuditLog(logPath, { key: 42 as unknown as string }), "AUDIT_KEY", "key"],
      // A string would read as one line cut short: the caller meant the file's bytes.
      [() => verifyAuditBytes(original.toString("utf8") as unknown as Uint8Array), "AUDIT_CONFIG", "data"],
      [() => verifyAuditBytes(original, 7 as unknown as AuditVerifyBytesOptions), "AUDIT_CONFIG", "options"],
      [() => verifyAuditBytes(original, { key: "k".repeat(32), seal: 5 as unknown as string }), "AUDIT_CONFIG", "seal"],
      [() => formatAuditAnchor({} as AuditAnchor), "AUDIT_ANCHOR", "anchor"],
      [() => auditSealPath(undefined as unknown as string), "AUDIT_CONFIG", "path"],
    ];
    for (const [call, code, at] of refusals) {
      const error = await (async () => call())().catch((e: unknown) => e);
      expect(error, `${call.toString()}`).toMatchObject({ code });
      if (code === "AUDIT_CONFIG") expect(error, call.toString()).toMatchObject({ option: at });
    }
  });

  it("refuses an option it does not take, naming it and the one meant: a misspelt key verified a forged log", async () => {
    // A keyed log with a line forged at its end: without the key the chain alone accepts it.
    const path = join(dir, "keyed-unknown-option.jsonl");
    const key = "k".repeat(32);
    const sink = await AuditSink.open(path, { key });
    await sink.append(gateRecord(1));
    await sink.close();
    const forged = await AuditSink.open(join(dir, "unkeyed-unknown-option.jsonl"));
    await forged.append(gateRecord(1, { verdict: "allow" }));
    await forged.close();
    await writeFile(path, await readFile(join(dir, "unkeyed-unknown-option.jsonl")));
    expect(await verifyAuditLog(path, { key })).toMatchObject({ ok: false, problem: "forged" });
    const refusals: [() => unknown, string, string][] = [
      [() => verifyAuditLog(path, { Key: key } as AuditVerifyOptions), "Key", "did you mean key?"],
      [
        () => verifyAuditLog(path, { keyFile: "/etc/audit.key" } as AuditVerifyOptions),
        "keyFile",
        "key takes the key itself, a string or bytes: read a key file with readAuditKeyFile",
      ],
      [() => verifyAuditLog(path, { anchr: anchor } as AuditVerifyOptions), "anchr", "did you mean anchor?"],
      [() => verifyAuditLog(path, { record: false } as AuditVerifyOptions), "record", "did you mean records?"],
      [
        () => verifyAuditLog(path, { seal: "" } as AuditVerifyOptions),
        "seal",
        "the options are anchor, key, records and signal",
      ],
      [() => verifyAuditBytes(original, { keys: key } as AuditVerifyBytesOptions), "keys", "did you mean key?"],
      [
        () => verifyAuditBytes(original, { signal: undefined } as AuditVerifyBytesOptions),
        "signal",
        "the options are anchor, key and seal",
      ],
    ];
    for (const [call, option, meant] of refusals) {
      const error = await (async () => call())().catch((e: unknown) => e);
      expect(error, call.toString()).toBeInstanceOf(AuditConfigError);
      expect(error, call.toString()).toMatchObject({ code: "AUDIT_CONFIG", option });
      expect((error as Error).message, call.toString()).toContain(`unknown option '${option}' (${meant})`);
    }
    // An AbortSignal has no key of its own: read as options, its abort would go unheard.
    const signal = await verifyAuditLog(path, new AbortController().signal as AuditVerifyOptions).catch(
      (e: unknown) => e,
    );
    expect(signal).toMatchObject({ code: "AUDIT_CONFIG", option: "options" });
    expect((signal as Error).message).toContain(
      "options must be an object, got an AbortSignal (give it as { signal })",
    );
    // The key itself given where options go: refused without its text in the message.
    const bare = await verifyAuditLog(path, "s3cret-audit-key" as never).catch((e: unknown) => e);
    expect(bare).toMatchObject({ code: "AUDIT_CONFIG", option: "options" });
    expect((bare as Error).message).toContain("options must be an object, got a string");
    expect((bare as Error).message).not.toContain("s3cret");
    // An array has none either, and a proxy whose keys cannot be listed none that can be checked: read as
    // options, either would verify without the key.
    for (const [options, says] of [
      [[{ key }], "options must be an object, got an array"],
      [
        new Proxy(
          { key },
          {
            ownKeys: () => {
              throw new Error("no keys here");
            },
          },
        ),
        "options cannot be read: no keys here",
      ],
    ] as const) {
      const error = await (async () => verifyAuditBytes(original, options as AuditVerifyBytesOptions))().catch(
        (e: unknown) => e,
      );
      expect(error).toMatchObject({ code: "AUDIT_CONFIG", option: "options" });
      expect((error as Error).message).toBe(`cannot verify audit log bytes: ${says}`);
    }
  });

  it("names a string given for the bytes by its length, not by the log it holds", () => {
    // A log read with an encoding, megabytes long: the refusal must not carry all of it.
    const text = original.toString("utf8").repeat(2_000);
    const error = (() => {
      try {
        verifyAuditBytes(text as unknown as Uint8Array);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toMatchObject({ code: "AUDIT_CONFIG", option: "data" });
    expect((error as Error).message).toContain(`a string of ${text.length} characters`);
    expect((error as Error).message.length).toBeLessThan(500);
  });

  it("refuses a key of the wrong type without showing it: a key of digits read as a number stays secret", async () => {
    // A config reader turns a key of digits into a number; its value must not reach a log of errors.
    const secret = 4_815_162_342_108_151;
    for (const call of [
      () => verifyAuditLog(logPath, { key: secret as unknown as string }),
      () => verifyAuditBytes(original, { key: secret as unknown as string }),
    ]) {
      const error = await (async () => call())().catch((e: unknown) => e);
      expect(error).toMatchObject({ code: "AUDIT_KEY" });
      expect((error as Error).message).toBe("an audit key must be a string or a Uint8Array, got a number");
      expect(String((error as Error).stack)).not.toContain(String(secret).slice(0, 8));
    }
  });
  it("rejects with the signal's reason when aborted", async () => {
    const controller = new AbortController();
    controller.abort(new Error("stop"));
    await expect(verifyAuditLog(logPath, { signal: controller.signal })).rejects.toThrow("stop");
  });

  it("waits for the last line a writer is still writing; one no writer finishes is truncated", async () => {
    // A write of more than a page reaches the file a page at a time: a reader
    // can find the first part of a line whose rest is still being copied in.
    const path = join(dir, "mid-write.jsonl");
    const cut = original.length - 40;
    await writeFile(path, original.subarray(0, cut));
    const verifying = verifyAuditLog(path);
    setTimeout(() => appendFileSync(path, original.subarray(cut)), 20);
    expect(await verifying).toMatchObject({ ok: true, anchor });

    // The writer finished that line and is part-way through the next: the log up to it verifies.
    await writeFile(path, original.subarray(0, cut));
    const next = Buffer.from(`${(lines()[0] as string).slice(0, 50)}`);
    const verifyingMore = verifyAuditLog(path);
    setTimeout(() => appendFileSync(path, Buffer.concat([original.subarray(cut), next])), 20);
    expect(await verifyingMore).toMatchObject({ ok: true, anchor });

    await writeFile(path, original.subarray(0, cut));
    expect(await verifyAuditLog(path)).toMatchObject({ ok: false, line: 5, problem: "truncated" });
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("stop waiting")), 5);
    await expect(verifyAuditLog(path, { signal: controller.signal })).rejects.toThrow("stop waiting");
  });

  it("reads the log again when the writer cuts back the line it was writing (its write failed)", async () => {
    const path = join(dir, "cut-back.jsonl");
    const fourth = original.lastIndexOf(0x0a, original.length - 2) + 1;
    await writeFile(path, original.subarray(0, original.length - 40));
    const verifying = verifyAuditLog(path);
    setTimeout(() => void truncate(path, fourth), 20);
    const result = await verifying;
    expect(result).toMatchObject({ ok: true, records: { length: 4 } });
    expect(result).toEqual(verifyAuditBytes(original.subarray(0, fourth)));
  });

  /** Where line 3 of `original` starts, and the log another writer makes by appending its own line 3 after line 2. */
  const otherLineThree = async (name: string): Promise<{ third: number; other: Buffer }> => {
    const third = original.indexOf(0x0a, original.indexOf(0x0a) + 1) + 1;
    const copy = join(dir, name);
    await writeFile(copy, original.subarray(0, third));
    const sink = await AuditSink.open(copy);
    await sink.append(gateRecord(30));
    await sink.close();
    return { third, other: await readFile(copy) };
  };

  it("reads the log again when the writer cuts back the line it was writing and another writes other lines in its place", async () => {
    const path = join(dir, "cut-back-rewritten.jsonl");
    // What another writer, whose write then fails, puts after line 2: part of its line 3.
    const { third, other } = await otherLineThree("cut-back-rewritten-other.jsonl");
    await writeFile(path, other.subarray(0, third + 150));
    let looks = 0;
    const result = await verifyLogFile(
      path,
      {},
      {
        whileWaiting: async () => {
          // Between two looks at the line cut short, its writer cuts it back and
          // the next writer writes lines 3 to 5.
          if (++looks > 1) return;
          await truncate(path, third);
          appendFileSync(path, original.subarray(third));
        },
      },
    );
    expect(looks).toBeGreaterThan(0);
    expect(result).toEqual(verifyAuditBytes(original));
  });

  it("reads the log again when, after it read to the end, the lines there were cut back and other lines written in their place", async () => {
    const path = join(dir, "cut-back-whole-rewritten.jsonl");
    // Another writer's line 3, whole: its write fails after it (the seal, say) and is cut back.
    const { third, other } = await otherLineThree("cut-back-whole-rewritten-other.jsonl");
    await writeFile(path, other);
    let ends = 0;
    const result = await verifyLogFile(
      path,
      {},
      {
        afterEnd: async () => {
          // Between the read that reached the end and the next, that line is cut back and the
          // next writer writes lines 3 to 5.
          if (++ends > 1) return;
          await truncate(path, third);
          appendFileSync(path, original.subarray(third));
        },
      },
    );
    expect(ends).toBeGreaterThan(0);
    expect(result).toEqual(verifyAuditBytes(original));
  });
});

describe("verifyAuditLog reads the log a chunk at a time", () => {
  /** The log's bytes with each kind of tampering, every one read to its end or re-read to tell it. */
  const variants = (): Buffer[] => {
    const ls = lines();
    const forked = JSON.parse(ls[0] as string) as { record: { tool: string } };
    forked.record.tool = "spliced";
    const body = JSON.stringify({ ...forked, hash: undefined }).replace(/\}$/, "");
    const forkedLine = `${body},"hash":"${sha256(`${body}}`)}"}`;
    return [
      original,
      join_([...ls, ls[0] as string]), // line 1 again at the end: duplicated, told by reading line 1 again
      join_([...ls, forkedLine]), // seq 1 again with other content: forked
      join_([ls[0], ls[3], ls[1], ls[2], ls[4]] as string[]), // reordered, told by a later line
      join_(ls.filter((_, i) => i !== 2)), // removed, told only at the end
      Buffer.concat([original, Buffer.from("garbage\n")]),
    ];
  };

  it("joins a line split across chunk borders wherever they fall, even inside a character: results as from memory", async () => {
    const path = join(dir, "chunks.jsonl");
    const snowman = original.indexOf(Buffer.from("☃"));
    const firstLine = original.indexOf(0x0a) + 1;
    const sizes = [1, 2, 3, 5, 64, snowman + 1, snowman + 2, firstLine - 1, firstLine, firstLine + 1, 4096];
    expect(variants().map((bytes) => verifyAuditBytes(bytes, { anchor }))).toMatchObject([
      { ok: true },
      { problem: "duplicated", line: 6 },
      { problem: "forked", line: 6 },
      { problem: "reordered", line: 2 },
      { problem: "removed", line: 3 },
      { problem: "malformed", line: 6 },
    ]);
    for (const bytes of variants()) {
      await writeFile(path, bytes);
      const expected = verifyAuditBytes(bytes, { anchor });
      for (const chunkBytes of sizes) {
        expect(await verifyLogFile(path, { anchor }, { chunkBytes }), `${chunkBytes} bytes at a time`).toEqual(
          expected,
        );
      }
    }
  });

  it("property: any chunk size and any one-byte edit give the result the bytes give in memory", async () => {
    const path = join(dir, "chunks-property.jsonl");
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: original.length + 1 }),
        // Not the last byte: a log that loses its last newline is waited on, 250 ms a run.
        fc.nat(original.length - 2),
        fc.integer({ min: 0, max: 255 }),
        async (chunkBytes, position, delta) => {
          const copy = Buffer.from(original);
          copy[position] = ((copy[position] as number) + delta) % 256;
          await writeFile(path, copy);
          expect(await verifyLogFile(path, {}, { chunkBytes })).toEqual(verifyAuditBytes(copy));
        },
      ),
      { numRuns: Math.ceil(FUZZ_RUNS / 3) },
    );
  });

  it("verifies a log several chunks long, keyed, against its seal and an anchor, holding no record when asked", async () => {
    const path = join(dir, "long.jsonl");
    const key = "k".repeat(32);
    const sink = await AuditSink.open(path, { key });
    const count = 3 * Math.ceil(CHUNK_BYTES / 400);
    const appends = [];
    for (let i = 1; i <= count; i++)
      appends.push(sink.append(gateRecord(i, { reason: `r${i} ☃`.padEnd(40 + (i % 97), "é") })));
    await Promise.all(appends);
    const last = sink.anchor;
    await sink.close();
    const bytes = await readFile(path);
    expect(bytes.length).toBeGreaterThan(2 * CHUNK_BYTES);
    // Some line starts in one chunk and ends in the next.
    const border = bytes.lastIndexOf(0x0a, CHUNK_BYTES - 1);
    expect(bytes.indexOf(0x0a, CHUNK_BYTES)).toBeGreaterThan(CHUNK_BYTES);
    expect(border).toBeLessThan(CHUNK_BYTES - 1);

    const seal = await readFile(auditSealPath(path), "utf8");
    const result = await verifyAuditLog(path, { key, anchor: { seq: 7, hash: lineHashOf(bytes, 7) } });
    expect(result).toMatchObject({ ok: true, anchor: last, keyed: true, records: { length: count } });
    expect(result).toEqual(verifyAuditBytes(bytes, { key, seal, anchor: { seq: 7, hash: lineHashOf(bytes, 7) } }));
    expect(await verifyAuditLog(path, { key, records: false })).toEqual({
      ok: true,
      anchor: last,
      keyed: true,
      records: [],
    });

    // A line far back, repeated at the end: which of duplicated or forked it is, reading line 2 again tells.
    const second = bytes.subarray(bytes.indexOf(0x0a) + 1, bytes.indexOf(0x0a, bytes.indexOf(0x0a) + 1) + 1);
    await writeFile(path, Buffer.concat([bytes, second]));
    expect(await verifyAuditLog(path, { records: false })).toMatchObject({
      ok: false,
      line: count + 1,
      problem: "duplicated",
      message: `line ${count + 1} duplicates line 2`,
      records: [],
    });
    await expect(verifyAuditLog(path, { records: "no" as unknown as boolean })).rejects.toMatchObject({
      code: "AUDIT_CONFIG",
      option: "records",
    });
  });

  it("reports a long log whose last line is cut as truncated at that line, its lines before it verified", async () => {
    const path = join(dir, "long-cut.jsonl");
    const sink = await AuditSink.open(path);
    const appends = [];
    for (let i = 1; i <= 400; i++) appends.push(sink.append(gateRecord(i)));
    await Promise.all(appends);
    await sink.close();
    const bytes = await readFile(path);
    expect(bytes.length).toBeGreaterThan(CHUNK_BYTES);
    for (const cut of [bytes.length - 30, CHUNK_BYTES + 1]) {
      const kept = bytes.subarray(0, cut);
      await writeFile(path, kept);
      const whole = kept.lastIndexOf(0x0a) + 1;
      const line = kept.subarray(0, whole).toString("utf8").split("\n").length;
      const expected = { ok: false, line, problem: "truncated", records: { length: line - 1 } };
      expect(await verifyAuditLog(path)).toMatchObject(expected);
      expect(await verifyLogFile(path, {}, { chunkBytes: 61 })).toMatchObject(expected);
    }
  });
});

describe("a line longer than AUDIT_LINE_MAX_BYTES", () => {
  /** `original`'s first `n` lines, then a line `n + 1` that continues them and is `length` bytes long. */
  const withLineOf = (n: number, length: number): Buffer => {
    const before = lines().slice(0, n);
    const prev = (JSON.parse(before[n - 1] as string) as { hash: string }).hash;
    const frame = (reason: string): string =>
      `{"seq":${n + 1},"prev":"${prev}","record":${JSON.stringify(gateRecord(n + 1, { reason }))}`;
    const hashMember = `,"hash":"${"0".repeat(64)}"}`;
    const body = frame("x".repeat(length - Buffer.byteLength(frame("") + hashMember)));
    return Buffer.concat([join_(before), Buffer.from(`${body},"hash":"${sha256(`${body}}`)}"}\n`)]);
  };

  it("verifies a line of exactly the limit, and reports one byte more malformed at its line and offset, as from memory", async () => {
    expect(AUDIT_LINE_MAX_BYTES).toBe(4 * 1024 * 1024);
    const path = join(dir, "longest-line.jsonl");
    const longest = withLineOf(2, AUDIT_LINE_MAX_BYTES);
    expect(longest.length - longest.lastIndexOf(0x0a, longest.length - 2) - 2).toBe(AUDIT_LINE_MAX_BYTES);
    const tooLong = withLineOf(2, AUDIT_LINE_MAX_BYTES + 1);
    const offset = join_(lines().slice(0, 2)).length;
    expect(verifyAuditBytes(longest)).toMatchObject({ ok: true, anchor: { seq: 3 } });
    const expected = {
      ok: false,
      line: 3,
      problem: "malformed",
      message:
        `line 3 is malformed: it is longer than AUDIT_LINE_MAX_BYTES (${AUDIT_LINE_MAX_BYTES} bytes) ` +
        `from byte ${offset} on, which no line of this format is; the rest of it was not read`,
      records: [gateRecord(1, { reason: null }), gateRecord(2, { reason: null })],
    };
    expect(verifyAuditBytes(tooLong)).toEqual(expected);
    // Without its newline, and with lines after it, the same.
    expect(verifyAuditBytes(tooLong.subarray(0, tooLong.length - 1))).toEqual(expected);
    expect(verifyAuditBytes(Buffer.concat([tooLong, original.subarray(offset)]))).toEqual(expected);
    for (const bytes of [longest, tooLong]) {
      await writeFile(path, bytes);
      for (const chunkBytes of [CHUNK_BYTES, 1000, AUDIT_LINE_MAX_BYTES + 7]) {
        expect(await verifyLogFile(path, {}, { chunkBytes })).toEqual(verifyAuditBytes(bytes));
      }
    }
    // A sink opens the longest line's log and goes on after it; the one past the limit it refuses.
    await writeFile(path, longest);
    const sink = await AuditSink.open(path);
    await expect(sink.append(gateRecord(4))).resolves.toMatchObject({ seq: 4 });
    await sink.close();
    await writeFile(path, tooLong);
    await expect(AuditSink.open(path)).rejects.toMatchObject({
      code: "AUDIT_CORRUPT",
      path,
      line: 3,
      problem: "malformed",
      message: `audit log ${path} does not verify, refusing to append: ${expected.message}`,
    });
    expect((await readFile(path)).equals(tooLong)).toBe(true);
  });

  it("a gigabyte without a newline is reported after the limit, with memory flat: verified, opened and added under a sink", async () => {
    const size = 1024 * 1024 * 1024;
    const path = join(dir, "huge-line.jsonl");
    const added = join(dir, "huge-added.jsonl");
    // Two lines, then zeros to 1 GiB (a sparse file: quick to make and to read).
    await writeFile(path, join_(lines().slice(0, 2)));
    await truncate(path, size);
    const script = fileURLToPath(new URL("./support/audit-huge-line.ts", import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [
      "--import",
      "tsx",
      script,
      path,
      added,
      String(size),
    ]);
    const report = JSON.parse(stdout) as Record<string, unknown> & { addedAt: number; maxRssBytes: number };
    const message = (line: number, offset: number): string =>
      `line ${line} is malformed: it is longer than AUDIT_LINE_MAX_BYTES (${AUDIT_LINE_MAX_BYTES} bytes) ` +
      `from byte ${offset} on, which no line of this format is; the rest of it was not read`;
    const twoLines = join_(lines().slice(0, 2)).length;
    expect(report).toMatchObject({
      verified: { ok: false, line: 3, problem: "malformed", message: message(3, twoLines), records: [] },
      opened: { code: "AUDIT_CORRUPT", line: 3, problem: "malformed" },
      appended: { code: "AUDIT_CORRUPT", line: 2, problem: "malformed" },
    });
    expect((report["opened"] as { message: string }).message).toContain(message(3, twoLines));
    expect((report["appended"] as { message: string }).message).toContain(message(2, report.addedAt));
    // Before, each of the three held the whole gigabyte; now a line is held up to the limit, no more.
    expect(report.maxRssBytes).toBeLessThan(size / 4);
  }, 60_000);
});

describe("property: every tampering of one kind is detected", () => {
  it("any single-byte edit", () => {
    fc.assert(
      fc.property(fc.nat(original.length - 1), fc.integer({ min: 1, max: 255 }), (position, delta) => {
        const copy = Buffer.from(original);
        copy[position] = ((copy[position] as number) + delta) % 256;
        expect(verifyAuditBytes(copy).ok).toBe(false);
      }),
      { numRuns: FUZZ_RUNS },
    );
  });

  it("any line deletion (the last one with the anchor)", () => {
    fc.assert(
      fc.property(fc.nat(4), (index) => {
        const tampered = join_(lines().filter((_, i) => i !== index));
        expect(verifyAuditBytes(tampered, { anchor }).ok).toBe(false);
        if (index < 4) expect(verifyAuditBytes(tampered)).toMatchObject({ ok: false, line: index + 1 });
      }),
    );
  });

  it("any swap of two lines", () => {
    fc.assert(
      fc.property(fc.nat(4), fc.nat(4), (a, b) => {
        fc.pre(a !== b);
        const ls = lines();
        [ls[a], ls[b]] = [ls[b] as string, ls[a] as string];
        expect(verifyAuditBytes(join_(ls))).toMatchObject({
          ok: false,
          line: Math.min(a, b) + 1,
          problem: "reordered",
        });
      }),
    );
  });

  it("any failure: the records returned are exactly the lines before the one named", () => {
    fc.assert(
      fc.property(
        fc.nat(original.length - 1),
        fc.integer({ min: 1, max: 255 }),
        fc.option(fc.record({ seq: fc.nat(6), hash: fc.constantFrom(anchor.hash, "ab".repeat(32)) })),
        (position, delta, someAnchor) => {
          const copy = Buffer.from(original);
          if (someAnchor === null) copy[position] = ((copy[position] as number) + delta) % 256;
          const result = verifyAuditBytes(copy, someAnchor === null ? {} : { anchor: someAnchor });
          if (!result.ok) expect(result.records).toHaveLength(result.line - 1);
        },
      ),
      { numRuns: FUZZ_RUNS },
    );
  });

  it("never throws on arbitrary bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 400 }), (bytes) => {
        const result = verifyAuditBytes(Buffer.concat([original, bytes]));
        expect(typeof result.ok).toBe("boolean");
      }),
      { numRuns: FUZZ_RUNS },
    );
  });
});
