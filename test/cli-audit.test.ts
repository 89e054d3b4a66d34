import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import {
  appendFile,
  chmod,
  mkdtemp,
  readFile,
  readdir,
  readlink,
  realpath,
  rm,
  symlink,
  writeFile,
  mkdir,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditSink, formatAuditAnchor } from "../src/audit/index.js";
import type { AuditAnchor } from "../src/audit/index.js";
import { EXIT } from "../src/cli/index.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { cli } from "./support/cli-harness.js";

let dir: string;
let anchor: AuditAnchor;
let text: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-cli-audit-"));
  const sink = await AuditSink.open(join(dir, "gates.jsonl"));
  for (let i = 1; i <= 4; i++) await sink.append(gateRecord(i, i === 2 ? { tool: "evil\u001b[2Jtool" } : {}));
  anchor = sink.anchor;
  await sink.close();
  text = await readFile(join(dir, "gates.jsonl"), "utf8");
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Resolves once this process has `path` open (Linux: `/proc/self/fd`); rejects after 5 s. */
async function openHere(path: string): Promise<void> {
  const real = await realpath(path);
  for (const deadline = Date.now() + 5_000; Date.now() < deadline;) {
    const fds = await readdir("/proc/self/fd");
    const targets = await Promise.all(fds.map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => "")));
    if (targets.includes(real)) return;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  throw new Error(`${path} was not opened`);
}

const write = async (name: string, content: string): Promise<string> => {
  await writeFile(join(dir, name), content);
  return name;
};

describe("loopctl audit verify", () => {
  it("passes an intact log, resolving FILE against cwd, and prints its anchor", async () => {
    const run = await cli(["audit", "verify", "gates.jsonl"], { cwd: dir });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain(`${join(dir, "gates.jsonl")}: 4 records, chain intact`);
    expect(run.stdout).toContain(`anchor: ${formatAuditAnchor(anchor)}`);
  });

  it("prints JSON with --json", async () => {
    const run = await cli(["audit", "verify", "--json", join(dir, "gates.jsonl")], { cwd: "/" });
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({
      ok: true,
      file: join(dir, "gates.jsonl"),
      records: 4,
      anchor,
      keyed: false,
      authenticated: false,
      sealBeside: false,
    });
  });

  it("without --key-file, says so when a seal lies beside a log whose lines carry no MACs (MACs stripped and lines hashed again)", async () => {
    const key = randomBytes(32);
    await writeFile(join(dir, "downgrade.key"), key, { mode: 0o600 });
    const keyed = await AuditSink.open(join(dir, "downgraded.jsonl"), { key });
    await keyed.append(gateRecord(1));
    await keyed.close();
    // One who may write the log but has no key writes it again without MACs, and leaves the seal.
    const plain = await AuditSink.open(join(dir, "plain.jsonl"));
    await plain.append(gateRecord(1, { tool: "tool_forged" }));
    await plain.close();
    await writeFile(join(dir, "downgraded.jsonl"), await readFile(join(dir, "plain.jsonl")));
    const unchecked = await cli(["audit", "verify", "downgraded.jsonl"], { cwd: dir });
    expect(unchecked.code).toBe(EXIT.ok);
    expect(unchecked.stdout).toContain(
      "1 record, chain intact (a seal lies beside it, as a keyed writer leaves one, though no line carries a MAC: pass --key-file to check the log against it)",
    );
    const asJson = await cli(["audit", "verify", "downgraded.jsonl", "--json"], { cwd: dir });
    expect(JSON.parse(asJson.stdout)).toMatchObject({ ok: true, keyed: false, authenticated: false, sealBeside: true });
    // With the key, the downgrade fails.
    const checked = await cli(["audit", "verify", "downgraded.jsonl", "--key-file", "downgrade.key"], { cwd: dir });
    expect(checked.code).toBe(EXIT.failed);
  });

  it("looks for that seal beside the file a symbolic link to the log leads to, where its writer left it", async () => {
    const key = randomBytes(32);
    await mkdir(join(dir, "rotated"));
    const keyed = await AuditSink.open(join(dir, "rotated", "gates-1.jsonl"), { key });
    await keyed.append(gateRecord(1));
    await keyed.close();
    const plain = await AuditSink.open(join(dir, "rotated", "plain.jsonl"));
    await plain.append(gateRecord(1, { tool: "tool_forged" }));
    await plain.close();
    await writeFile(join(dir, "rotated", "gates-1.jsonl"), await readFile(join(dir, "rotated", "plain.jsonl")));
    // The log as its operator names it: a link to this rotation's file, its seal beside the file.
    await symlink(join("rotated", "gates-1.jsonl"), join(dir, "current.jsonl"));
    const unchecked = await cli(["audit", "verify", "current.jsonl"], { cwd: dir });
    expect(unchecked.code).toBe(EXIT.ok);
    // Before, the note was looked for beside the link, and missing.
    expect(unchecked.stdout).toContain("(a seal lies beside it, as a keyed writer leaves one");
    const asJson = await cli(["audit", "verify", "current.jsonl", "--json"], { cwd: dir });
    expect(JSON.parse(asJson.stdout)).toMatchObject({ ok: true, keyed: false, sealBeside: true });
  });

  it("fails with exit 1, naming the line and the problem, for each tampering", async () => {
    const lines = text.split("\n").slice(0, -1);
    const cases: [string, string, number, string][] = [
      ["edited.jsonl", text.replace('"tool_3"', '"tool_9"'), 3, "edited"],
      ["removed.jsonl", [lines[0], lines[2], lines[3]].map((l) => `${l}\n`).join(""), 2, "removed"],
      ["reordered.jsonl", [lines[0], lines[2], lines[1], lines[3]].map((l) => `${l}\n`).join(""), 2, "reordered"],
      ["truncated.jsonl", text.slice(0, -10), 4, "truncated"],
    ];
    for (const [name, content, line, problem] of cases) {
      await write(name, content);
      const run = await cli(["audit", "verify", name], { cwd: dir });
      expect(run.code, name).toBe(EXIT.failed);
      expect(run.stdout).toBe("");
      expect(run.stderr).toContain(`FAILED at line ${line} (${problem})`);
      const asJson = await cli(["audit", "verify", name, "--json"], { cwd: dir });
      expect(asJson.code).toBe(EXIT.failed);
      expect(JSON.parse(asJson.stdout)).toMatchObject({ ok: false, line, problem, verifiedRecords: line - 1 });
    }
  });

  it("checks --anchor: trailing lines removed fail, the full log passes", async () => {
    const name = await write(
      "short.jsonl",
      text
        .split("\n")
        .slice(0, 2)
        .map((l) => `${l}\n`)
        .join(""),
    );
    expect((await cli(["audit", "verify", name], { cwd: dir })).code).toBe(EXIT.ok);
    const run = await cli(["audit", "verify", name, "--anchor", formatAuditAnchor(anchor)], { cwd: dir });
    expect(run.code).toBe(EXIT.failed);
    expect(run.stderr).toContain("FAILED at line 3 (removed)");
    const full = await cli(["audit", "verify", "gates.jsonl", `--anchor=${formatAuditAnchor(anchor)}`], { cwd: dir });
    expect(full.code).toBe(EXIT.ok);
    const mismatch = await cli(["audit", "verify", "gates.jsonl", "--anchor", `2:${"ab".repeat(32)}`, "--json"], {
      cwd: dir,
    });
    expect(mismatch.code).toBe(EXIT.failed);
    expect(JSON.parse(mismatch.stdout)).toMatchObject({ ok: false, line: 2, problem: "edited", verifiedRecords: 1 });
    const asText = await cli(["audit", "verify", "gates.jsonl", "--anchor", `2:${"ab".repeat(32)}`], { cwd: dir });
    expect(asText.stderr).toContain("FAILED at line 2 (edited)");
    expect(asText.stderr).toContain("the 1 line before it verified");
  });

  it("checks a keyed log with --key-file: forged lines and a cut tail fail without an anchor", async () => {
    const key = randomBytes(32);
    const keyFile = join(dir, "audit.key");
    await writeFile(keyFile, `${key.toString("hex")}\n`, { mode: 0o600 });
    const sink = await AuditSink.open(join(dir, "keyed.jsonl"), { key: Buffer.from(key.toString("hex")) });
    for (let i = 1; i <= 3; i++) await sink.append(gateRecord(i));
    await sink.close();
    const ok = await cli(["audit", "verify", "keyed.jsonl", "--key-file", "audit.key"], { cwd: dir });
    expect(ok).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(ok.stdout).toContain("3 records, chain intact, every line's mac and the seal verified with the key");
    const unchecked = await cli(["audit", "verify", "keyed.jsonl"], { cwd: dir });
    expect(unchecked.stdout).toContain("its lines carry MACs: pass --key-file to check them and the seal");
    const asJson = await cli(["audit", "verify", join(dir, "keyed.jsonl"), "--key-file", keyFile, "--json"], {
      cwd: "/",
    });
    expect(JSON.parse(asJson.stdout)).toMatchObject({ ok: true, records: 3, keyed: true, authenticated: true });

    const full = await readFile(join(dir, "keyed.jsonl"), "utf8");
    await writeFile(
      join(dir, "keyed.jsonl"),
      full
        .split("\n")
        .slice(0, 2)
        .map((l) => `${l}\n`)
        .join(""),
    );
    const cut = await cli(["audit", "verify", "keyed.jsonl", "--key-file", "audit.key"], { cwd: dir });
    expect(cut.code).toBe(EXIT.failed);
    expect(cut.stderr).toContain("FAILED at line 3 (removed)");
    expect((await cli(["audit", "verify", "keyed.jsonl"], { cwd: dir })).code).toBe(EXIT.ok);

    await writeFile(join(dir, "other.key"), randomBytes(32), { mode: 0o600 });
    const wrong = await cli(["audit", "verify", "keyed.jsonl", "--key-file", "other.key", "--json"], { cwd: dir });
    expect(wrong.code).toBe(EXIT.failed);
    expect(JSON.parse(wrong.stdout)).toMatchObject({ ok: false, line: 1, problem: "forged", verifiedRecords: 0 });
  });

  it("says, checking a keyed log with --key-file, when its seal vouches for a line before its last", async () => {
    const key = randomBytes(32);
    const keyFile = join(dir, "stale.key");
    await writeFile(keyFile, key, { mode: 0o600 });
    const log = join(dir, "stale.jsonl");
    const sink = await AuditSink.open(log, { key });
    await sink.append(gateRecord(1));
    const earlySeal = await readFile(`${log}.seal`);
    for (let i = 2; i <= 4; i++) await sink.append(gateRecord(i));
    await sink.close();
    const current = await cli(["audit", "verify", "stale.jsonl", "--key-file", "stale.key", "--json"], { cwd: dir });
    expect(JSON.parse(current.stdout)).toMatchObject({ ok: true, records: 4, authenticated: true, sealed: 4 });
    // The seal as it was after line 1, put back (or left by a writer stopped before its next seal):
    // lines 2-4 rest on their MACs alone, and cutting them off would not be told.
    await writeFile(`${log}.seal`, earlySeal);
    const text = await cli(["audit", "verify", "stale.jsonl", "--key-file", "stale.key"], { cwd: dir });
    expect(text.code).toBe(EXIT.ok);
    expect(text.stdout).toContain(
      "4 records, chain intact, every line's mac verified with the key; the seal vouches for line 1 only: " +
        "lines 2-4 rest on their MACs alone (a writer stopped between its lines and its seal, wrote them after " +
        "the seal was read, or an older seal was put back), and lines cut off after line 1 would not be told",
    );
    expect(text.stdout).not.toContain("the seal verified");
    const asJson = await cli(["audit", "verify", "stale.jsonl", "--key-file", "stale.key", "--json"], { cwd: dir });
    expect(JSON.parse(asJson.stdout)).toMatchObject({ ok: true, records: 4, authenticated: true, sealed: 1 });
  });

  it.skipIf(!existsSync("/proc/self/fd"))(
    "says what the seal verification checked vouches for, not one put in its place while it read the log",
    async () => {
      const key = randomBytes(32);
      await writeFile(join(dir, "swapped.key"), key, { mode: 0o600 });
      const log = join(dir, "swapped.jsonl");
      const sink = await AuditSink.open(log, { key });
      await sink.append(gateRecord(1));
      const earlySeal = await readFile(`${log}.seal`);
      for (let i = 2; i <= 4; i++) await sink.append(gateRecord(i));
      await sink.close();
      // An older seal put back, and line 4 part-way, as a writer still writing it leaves it: verification
      // reads the seal, then the log, and waits for line 4.
      const whole = await readFile(log);
      const cut = whole.length - 40;
      await writeFile(log, whole.subarray(0, cut));
      await writeFile(`${log}.seal`, earlySeal);
      const run = cli(["audit", "verify", "swapped.jsonl", "--key-file", "swapped.key", "--json"], { cwd: dir });
      // Once verification has the log open (it read the seal before), a seal no key made takes the seal's place.
      await openHere(log);
      await writeFile(`${log}.seal`, `${JSON.stringify({ seq: 999, hash: "0".repeat(64), mac: "0".repeat(64) })}\n`);
      await appendFile(log, whole.subarray(cut));
      const result = await run;
      expect(result.code).toBe(EXIT.ok);
      // Before, the seal was read again after verification, unchecked: `sealed: 999`, and "the seal verified".
      expect(JSON.parse(result.stdout)).toMatchObject({ ok: true, records: 4, authenticated: true, sealed: 1 });
    },
  );

  it("says of an empty log checked with --key-file that the key had nothing to check, not that a seal verified, in JSON too", async () => {
    await writeFile(join(dir, "empty.key"), randomBytes(32), { mode: 0o600 });
    await writeFile(join(dir, "empty.jsonl"), "");
    const run = await cli(["audit", "verify", "empty.jsonl", "--key-file", "empty.key"], { cwd: dir });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain("0 records, chain intact (no line yet: nothing for the key to check)");
    expect(run.stdout).not.toContain("seal verified");
    const asJson = await cli(["audit", "verify", "empty.jsonl", "--key-file", "empty.key", "--json"], { cwd: dir });
    expect(asJson.code).toBe(EXIT.ok);
    expect(JSON.parse(asJson.stdout)).toMatchObject({
      ok: true,
      file: join(dir, "empty.jsonl"),
      records: 0,
      anchor: { seq: 0, hash: "0".repeat(64) },
      authenticated: false,
    });
  });

  it("verifies with a --key-file of raw bytes whose last byte is 0x0a, as the writer's key", async () => {
    const key = Buffer.concat([randomBytes(30), Buffer.from([0x00, 0x0a])]);
    await writeFile(join(dir, "raw.key"), key, { mode: 0o600 });
    const sink = await AuditSink.open(join(dir, "raw-keyed.jsonl"), { key });
    await sink.append(gateRecord(1));
    await sink.close();
    const run = await cli(["audit", "verify", "raw-keyed.jsonl", "--key-file", "raw.key", "--json"], { cwd: dir });
    expect(JSON.parse(run.stdout)).toMatchObject({ ok: true, records: 1, keyed: true, authenticated: true });
    expect(run.code).toBe(EXIT.ok);
  });

  it("refuses a key file others can read, a short one, and a missing one, as usage errors", async () => {
    await writeFile(join(dir, "open.key"), randomBytes(32));
    await chmod(join(dir, "open.key"), 0o644);
    await writeFile(join(dir, "short.key"), "abc", { mode: 0o600 });
    const cases: [string, RegExp][] = [
      [
        "open.key",
        /--key-file: audit key file .*open\.key is readable or writable by others \(mode 644\); chmod 600 it/,
      ],
      ["short.key", /--key-file: audit key file .*short\.key: an audit key must be at least 16 bytes, got 3/],
      ["missing.key", /--key-file: .*missing\.key: no such file/],
    ];
    for (const [file, message] of cases) {
      const run = await cli(["audit", "verify", "gates.jsonl", "--key-file", file], { cwd: dir });
      expect(run.code, file).toBe(EXIT.usage);
      expect(run.stderr, file).toMatch(message);
    }
  });

  it("says, refusing a --key-file starting with a ~ the shell left as it is, how to write it", async () => {
    // bash expands ~ in --key-file ~/k, not in --key-file=~/k: that is a file under a folder named ~ here.
    const run = await cli(["audit", "verify", "gates.jsonl", "--key-file=~/audit.key"], { cwd: dir });
    expect(run.code).toBe(EXIT.usage);
    expect(run.stderr).toContain(
      `--key-file: ${join(dir, "~", "audit.key")}: no such file; the shell leaves a ~ after = as it is ` +
        "(--key-file=~/…); write --key-file ~/… or $HOME/…\n",
    );
    const plain = await cli(["audit", "verify", "gates.jsonl", "--key-file", "missing.key"], { cwd: dir });
    expect(plain.stderr).toContain(`--key-file: ${join(dir, "missing.key")}: no such file\n`);
  });

  it("exits 1 for a missing file, 4 for a folder", async () => {
    const missing = await cli(["audit", "verify", "nope.jsonl"], { cwd: dir });
    expect(missing.code).toBe(EXIT.failed);
    expect(missing.stderr).toBe(`loopctl audit verify: ${join(dir, "nope.jsonl")}: no such file\n`);
    await mkdir(join(dir, "folder"), { recursive: true });
    const folder = await cli(["audit", "verify", "folder"], { cwd: dir });
    expect(folder.code).toBe(EXIT.io);
    expect(folder.stderr).toMatch(/not a regular file \[AUDIT_PATH\]/);
  });

  it("prints JSON with --json when the file is missing or cannot be read", async () => {
    const missing = await cli(["audit", "verify", "nope.jsonl", "--json"], { cwd: dir });
    expect(missing).toMatchObject({ code: EXIT.failed, stderr: "" });
    expect(JSON.parse(missing.stdout)).toEqual({
      ok: false,
      file: join(dir, "nope.jsonl"),
      problem: "missing",
      message: "no such file",
    });
    await mkdir(join(dir, "folder"), { recursive: true });
    const folder = await cli(["audit", "verify", "folder", "--json"], { cwd: dir });
    expect(folder).toMatchObject({ code: EXIT.io, stderr: "" });
    expect(JSON.parse(folder.stdout)).toMatchObject({ ok: false, file: join(dir, "folder"), error: "AUDIT_PATH" });
    // A key file that cannot be read (a path through a file, ENOTDIR) is a document too.
    const key = await cli(["audit", "verify", "gates.jsonl", "--key-file", "gates.jsonl/audit.key", "--json"], {
      cwd: dir,
    });
    expect(key).toMatchObject({ code: EXIT.io, stderr: "" });
    expect(JSON.parse(key.stdout)).toMatchObject({
      ok: false,
      file: join(dir, "gates.jsonl"),
      error: "AUDIT_IO",
      message: expect.stringMatching(/^cannot read audit key file .*gates\.jsonl\/audit\.key: ENOTDIR/),
    });
  });

  it("prints JSON with --json when the verify is stopped, exit 4 and the stderr line as without", async () => {
    const signal = AbortSignal.abort(new Error("shutting down"));
    const run = await cli(["audit", "verify", "gates.jsonl", "--json"], { cwd: dir, signal });
    expect(run.code).toBe(EXIT.io);
    expect(JSON.parse(run.stdout)).toEqual({
      ok: false,
      file: join(dir, "gates.jsonl"),
      error: "STOPPED",
      message: "stopped: Error: shutting down",
    });
    expect(run.stderr).toBe("loopctl: stopped: Error: shutting down\n");
  });

  it("never lets a file name drive the terminal", async () => {
    const run = await cli(["audit", "verify", "evil\u001b[2J.jsonl"], { cwd: dir });
    expect(run.code).toBe(EXIT.failed);
    expect(run.stderr).toContain("evil\\u001b[2J.jsonl: no such file");
    expect(run.stderr).not.toContain("\u001b");
  });

  it("reports usage errors with exit 2 and a help hint", async () => {
    const cases: [string[], RegExp][] = [
      [["audit", "verify"], /missing the FILE to verify/],
      [["audit", "verify", "a", "b"], /unexpected argument "b"/],
      [["audit", "verify", "a", "--bogus"], /unknown option "--bogus"\n/],
      [["audit", "verify", "a", "--ancor", "1:x"], /unknown option "--ancor"; did you mean --anchor\?/],
      [["audit", "verify", "a", "--keyfile", "k"], /unknown option "--keyfile"; did you mean --key-file\?/],
      [["audit", "verfy", "a"], /unknown command "audit verfy"; did you mean "audit verify"\?/],
      [
        ["audit", "verify", "a", "--anchor", "12"],
        /--anchor: audit anchor "12" is not <seq>:<64 lowercase hex digits>/,
      ],
      [["audit", "verify", "a", "--anchor"], /--anchor/],
      // An unset "$LOG" or "$KEY" would otherwise name the current folder.
      [["audit", "verify", ""], /FILE is empty: name the audit log to verify/],
      [["audit", "verify", "", "--json"], /FILE is empty: name the audit log to verify/],
      [["audit", "verify", "gates.jsonl", "--key-file", ""], /--key-file needs the FILE of a key/],
      [["audit", "verify", "gates.jsonl", "--key-file="], /--key-file needs the FILE of a key/],
      [["audit", "check"], /unknown command "audit check"/],
    ];
    for (const [argv, message] of cases) {
      const run = await cli(argv, { cwd: dir });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      // With --json, the error is also the one document on stdout.
      if (argv.includes("--json")) {
        expect(JSON.parse(run.stdout)).toMatchObject({ error: "USAGE", message: expect.stringMatching(message) });
      } else {
        expect(run.stdout).toBe("");
      }
      expect(run.stderr).toMatch(message);
      expect(run.stderr).toMatch(/Run 'loopctl audit( verify)? --help' for usage\.\n$/);
    }
  });

  it("prints help for audit and audit verify", async () => {
    for (const argv of [
      ["audit", "--help"],
      ["audit", "verify", "-h"],
      ["audit", "verify", "x", "--help"],
    ]) {
      const run = await cli(argv, { cwd: dir });
      expect(run.code).toBe(EXIT.ok);
      expect(run.stdout).toMatch(/^loopctl audit/);
      expect(run.stdout).toContain("Exit codes:");
      expect(run.stderr).toBe("");
    }
    const bare = await cli(["audit"], { cwd: dir });
    expect(bare.code).toBe(EXIT.usage);
    expect(bare.stderr).toMatch(/^loopctl audit:/);
  });
});
