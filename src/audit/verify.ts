import { constants } from "node:fs";
import { open, realpath } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";
import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { GateDecisionSchema } from "../engine/records.js";
import type { GateDecision } from "../engine/records.js";
import { shownValue } from "../grant/errors.js";
import { zodIssuesLine } from "../zod-issues.js";
import { duplicateMember } from "./duplicate-member.js";
import { AuditConfigError, AuditIoError, AuditPathError } from "./errors.js";
import { assertOptionType, assertPathArgument, optionsArgument } from "./arguments.js";
import { describe, readFrom } from "./file-io.js";
import { auditKeyBytes, lineMac, sameMac, sealMac } from "./key.js";
import type { AuditKey } from "./key.js";
import { AUDIT_EMPTY_ANCHOR, assertAuditAnchor } from "./line.js";
import type { AuditAnchor } from "./line.js";
import { auditSealPath, parseSeal, readSealFile } from "./seal.js";

/**
 * What verification found wrong, at the first line where it shows:
 * - `"malformed"`: not a line this format produces (bad UTF-8, bad JSON, a
 *   member twice in one object, a missing or extra field of the line (a
 *   record's unknown fields are read past), an invalid record,
 *   an empty line, a line without a `mac` among lines with one, a byte order
 *   mark, a CRLF line ending).
 * - `"edited"`: the line's content does not match its own hash, or it does
 *   not link to the line before it (one of the two was rewritten and
 *   re-hashed), or the line an anchor or the seal vouches for differs from it.
 * - `"removed"`: a `seq` is missing (lines deleted before this one), or the
 *   log ends before the anchor's or the seal's `seq` (trailing lines deleted).
 * - `"reordered"`: a line's `seq` turns up later in the file than it should.
 * - `"duplicated"`: an exact copy of an earlier line.
 * - `"forked"`: an earlier `seq` again with other content (two writers, or
 *   a line spliced in from another log).
 * - `"truncated"`: the last line has no newline: a cut-short write, or a tail
 *   cut mid-line.
 * - `"forged"` (with a key): a line's `mac` is missing or was not made with
 *   the key, or the seal's was not: written by someone without the key.
 * - `"unsealed"` (with a key): the seal beside a non-empty log is missing or
 *   is not a seal, so lines removed from its end could not be told.
 */
export type AuditProblem =
  "malformed" | "edited" | "removed" | "reordered" | "duplicated" | "forked" | "truncated" | "forged" | "unsealed";

/**
 * The outcome of {@link verifyAuditLog}. On success, `records` are every
 * record in order, `anchor` is the log's last point (what a writer would
 * have reported) and `keyed` says whether its lines carry MACs (checked only
 * when a key was given). On failure, `line` is 1-based, `message` says what
 * is wrong in words, and `records` holds the verified prefix before `line`.
 */
export type AuditVerifyResult =
  | {
      readonly ok: true;
      readonly records: readonly GateDecision[];
      readonly anchor: AuditAnchor;
      readonly keyed: boolean;
    }
  | {
      readonly ok: false;
      readonly line: number;
      readonly problem: AuditProblem;
      readonly message: string;
      readonly records: readonly GateDecision[];
    };

/** Options of {@link verifyAuditLog}. */
export interface AuditVerifyOptions {
  /**
   * The last point the writer reported ({@link AuditSink.anchor}), kept
   * apart from the log. With it, removing whole trailing lines, or rewriting
   * and re-hashing the chain at or before the anchor, is detected; lines
   * appended after the anchor was taken are still accepted.
   */
  readonly anchor?: AuditAnchor;
  /**
   * The key the log was written with ({@link AuditSinkOptions.key}). With
   * it, every line's `mac` and the seal (`<log>.seal`) are checked: a line
   * forged by someone without the key, a chain re-hashed from any point,
   * and trailing lines removed are all detected without an anchor.
   */
  readonly key?: AuditKey;
  /** Stops reading the file; the promise rejects with the signal's reason. */
  readonly signal?: AbortSignal;
}

/** Options of {@link verifyAuditBytes}. */
export interface AuditVerifyBytesOptions {
  /** As {@link AuditVerifyOptions.anchor}. */
  readonly anchor?: AuditAnchor;
  /** As {@link AuditVerifyOptions.key}. */
  readonly key?: AuditKey;
  /** With a key: the seal file's content, or `null` (or absent) when there is none. */
  readonly seal?: string | null;
}

const Hex64Schema = z.string().regex(/^[0-9a-f]{64}$/);

const LineSchema = z
  .object({
    seq: z.number().int().min(1),
    prev: Hex64Schema,
    record: GateDecisionSchema,
    hash: Hex64Schema,
    mac: Hex64Schema.optional(),
  })
  .strict();

/** `,"hash":"…"` then, in a keyed log, `,"mac":"…"`, closing the line. */
const TAIL_PATTERN = /,"hash":"([0-9a-f]{64})"(?:,"mac":"([0-9a-f]{64})")?\}$/;
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const NEWLINE = 0x0a;
/**
 * How long verification waits for a writer to finish the last line it found
 * cut short. A write reaches the file a page at a time, and the kernel may
 * pause a writer between pages for up to 200 ms when memory is short.
 */
const TAIL_WAIT_MS = 250;

type ParsedLine =
  | {
      readonly type: "line";
      readonly seq: number;
      readonly prev: string;
      readonly hash: string;
      readonly mac: string | undefined;
      readonly computed: string;
      readonly record: GateDecision;
    }
  | { readonly type: "malformed"; readonly why: string };

function parseLine(bytes: Uint8Array): ParsedLine {
  if (bytes.length === 0) return { type: "malformed", why: "it is empty" };
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return { type: "malformed", why: "it is not valid UTF-8" };
  }
  // What an editor leaves in a log it saved: said as such, not as "not JSON".
  if (text.startsWith("\uFEFF")) return { type: "malformed", why: "it starts with a byte order mark (U+FEFF)" };
  if (text.endsWith("\r")) return { type: "malformed", why: "it ends with a carriage return (CRLF line endings)" };
  const tail = TAIL_PATTERN.exec(text);
  if (!tail || tail.index === 0) {
    return { type: "malformed", why: 'it does not end with a "hash" member' };
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { type: "malformed", why: "it is not JSON" };
  }
  const duplicate = duplicateMember(text);
  if (duplicate !== undefined) {
    return {
      type: "malformed",
      why: `it has member ${JSON.stringify(duplicate.key)} twice, at ${duplicate.path} (JSON readers disagree on which one counts)`,
    };
  }
  const parsed = LineSchema.safeParse(json);
  if (!parsed.success) return { type: "malformed", why: zodIssuesLine(parsed.error, 1) };
  if (parsed.data.hash !== tail[1] || parsed.data.mac !== tail[2]) {
    return { type: "malformed", why: 'its last members are not its "hash" and "mac"' };
  }
  // The body is the line minus its hash (and mac) members: hash the raw
  // bytes, never a re-serialization, so that any byte-level change is seen.
  // The tail is ASCII, so its length in characters is its length in bytes.
  const computed = createHash("sha256")
    .update(bytes.subarray(0, bytes.length - tail[0].length))
    .update("}")
    .digest("hex");
  return {
    type: "line",
    seq: parsed.data.seq,
    prev: parsed.data.prev,
    hash: parsed.data.hash,
    mac: parsed.data.mac,
    computed,
    record: parsed.data.record,
  };
}

function splitLines(data: Uint8Array): { lines: Uint8Array[]; tail: Uint8Array } {
  const lines: Uint8Array[] = [];
  let start = 0;
  for (let i = data.indexOf(NEWLINE); i !== -1; i = data.indexOf(NEWLINE, start)) {
    lines.push(data.subarray(start, i));
    start = i + 1;
  }
  return { lines, tail: data.subarray(start) };
}

type Failure = Extract<AuditVerifyResult, { ok: false }>;

/** How {@link verifyChain} checks MACs. */
export type MacCheck =
  | { readonly type: "key"; readonly key: Buffer }
  /** No key: lines with and without a `mac` must not mix; `keyed` fixes which, when known. */
  | { readonly type: "none"; readonly keyed: boolean | undefined };

/** A verified run of lines: its records, where it ends, and whether its lines carry MACs. */
export interface Chain {
  readonly records: GateDecision[];
  readonly anchor: AuditAnchor;
  readonly keyed: boolean | undefined;
  /** `hashes[i]` is the hash of line `start.seq + i` (`hashes[0]` is the start's). */
  readonly hashes: readonly string[];
}

/**
 * Verifies the lines in `data` as the continuation of the chain at `start`
 * (the genesis for a whole log): each must carry the next `seq`, link to the
 * line before, match its own hash and, with a key, carry that key's MAC.
 * Line numbers in failures count from the log's first line.
 */
export function verifyChain(data: Uint8Array, start: AuditAnchor, macs: MacCheck): Chain | Failure {
  const { lines, tail } = splitLines(data);
  const parsed = lines.map(parseLine);
  const records: GateDecision[] = [];
  const hashes: string[] = [start.hash];
  let keyed = macs.type === "none" ? macs.keyed : true;
  const fail = (line: number, problem: AuditProblem, message: string): Failure => ({
    ok: false,
    line,
    problem,
    message,
    records,
  });

  for (const [index, entry] of parsed.entries()) {
    const n = start.seq + index + 1;
    if (entry.type === "malformed") {
      return fail(n, "malformed", `line ${n} is malformed: ${entry.why}`);
    }
    if (entry.computed !== entry.hash) {
      return fail(n, "edited", `line ${n} was edited: its content does not match its hash`);
    }
    if (entry.seq < n) {
      const earlier = hashes[entry.seq - start.seq];
      return earlier === entry.hash
        ? fail(n, "duplicated", `line ${n} duplicates line ${entry.seq}`)
        : fail(n, "forked", `line ${n} repeats seq ${entry.seq} with other content: the chain forked`);
    }
    if (entry.seq > n) {
      const later = parsed
        .slice(index + 1)
        .some((other) => other.type === "line" && other.seq >= n && other.seq < entry.seq);
      const missing = entry.seq - n;
      return later
        ? fail(n, "reordered", `line ${n} carries seq ${entry.seq}: lines were reordered`)
        : fail(
            n,
            "removed",
            `line ${n} carries seq ${entry.seq}: ${missing} line${missing === 1 ? "" : "s"} removed before it`,
          );
    }
    if (entry.prev !== hashes[index]) {
      return fail(
        n,
        "edited",
        n === 1
          ? "line 1 does not start the chain: its prev is not the genesis value"
          : `line ${n} does not link to line ${n - 1}: one of them was rewritten`,
      );
    }
    if (macs.type === "key") {
      if (entry.mac === undefined) {
        return fail(n, "forged", `line ${n} carries no mac: it was not written with this key`);
      }
      if (!sameMac(entry.mac, lineMac(macs.key, entry.hash))) {
        return fail(n, "forged", `line ${n} has a mac not made with this key: forged, or another key`);
      }
    } else if (keyed !== undefined && keyed !== (entry.mac !== undefined)) {
      return fail(
        n,
        "malformed",
        keyed
          ? `line ${n} carries no mac, unlike the lines before it`
          : `line ${n} carries a mac, unlike the lines before it`,
      );
    }
    keyed = entry.mac !== undefined;
    records.push(entry.record);
    hashes.push(entry.hash);
  }

  if (tail.length > 0) {
    const n = start.seq + lines.length + 1;
    return fail(n, "truncated", `line ${n} has no newline: the log was cut short mid-line`);
  }
  const seq = start.seq + lines.length;
  return { records, anchor: { seq, hash: hashes[lines.length] as string }, keyed, hashes };
}

/**
 * Verifies an audit log held in memory; {@link verifyAuditLog} reads the file
 * (and, with a key, its seal) and calls this. Never throws for any content:
 * every problem is a result.
 * @throws AuditConfigError when `data` is not a Uint8Array (a Buffer is one), `options` not an
 *   object, or `options.seal` not a string, `null` or `undefined`.
 * @throws AuditAnchorError when `options.anchor` is not a seq with a 64-hex hash.
 * @throws AuditKeyError when `options.key` is not a string or bytes, or shorter than `AUDIT_KEY_MIN_BYTES`.
 */
export function verifyAuditBytes(data: Uint8Array, options?: AuditVerifyBytesOptions): AuditVerifyResult {
  const where = "cannot verify audit log bytes";
  // A string would read as one line cut short; what the caller meant is the file's bytes.
  if (!(data instanceof Uint8Array)) {
    throw new AuditConfigError("data", `${where}: data must be a Uint8Array, got ${shownValue(data)}`);
  }
  options = optionsArgument(options, where);
  if (options.seal !== undefined && options.seal !== null && typeof options.seal !== "string") {
    throw new AuditConfigError(
      "seal",
      `${where}: options.seal must be the seal file's text, null or undefined, got ${shownValue(options.seal)}`,
    );
  }
  const { anchor } = options;
  if (anchor !== undefined) assertAuditAnchor(anchor);
  const key = options.key === undefined ? undefined : auditKeyBytes(options.key);
  const chain = verifyChain(
    data,
    AUDIT_EMPTY_ANCHOR,
    key === undefined ? { type: "none", keyed: undefined } : { type: "key", key },
  );
  if ("ok" in chain) return chain;
  return verifyVouched(chain, anchor, key, options.seal ?? null);
}

/**
 * Checks a whole log's verified chain against what vouches for a point in
 * it: with a key, the seal (`sealText`, its file's text or `null`), and the
 * anchor, if any.
 */
export function verifyVouched(
  chain: Chain,
  anchor: AuditAnchor | undefined,
  key: Buffer | undefined,
  sealText: string | null,
): AuditVerifyResult {
  const { records, hashes } = chain;
  const last = chain.anchor;
  // The verified prefix is the lines before the one named, whichever that is.
  const fail = (line: number, problem: AuditProblem, message: string): AuditVerifyResult => ({
    ok: false,
    line,
    problem,
    message,
    records: records.slice(0, line - 1),
  });
  const vouched = (what: string, point: AuditAnchor): AuditVerifyResult | undefined => {
    if (point.seq > last.seq) {
      const missing = point.seq - last.seq;
      return fail(
        last.seq + 1,
        "removed",
        `the log ends at seq ${last.seq} but the ${what} vouches for seq ${point.seq}: ` +
          `${missing} trailing line${missing === 1 ? "" : "s"} removed`,
      );
    }
    if (hashes[point.seq] !== point.hash) {
      return fail(
        Math.max(point.seq, 1),
        "edited",
        `line ${point.seq} does not match the ${what}: the chain was rewritten at or before it`,
      );
    }
    return undefined;
  };

  if (key !== undefined) {
    // A log and its seal deleted together look like no log at all; an empty
    // log without a seal is one a keyed writer is about to start.
    if (sealText === null && last.seq > 0) {
      return fail(last.seq + 1, "unsealed", "the log has no seal: lines removed from its end could not be told");
    }
    if (sealText !== null) {
      const parsed = parseSeal(sealText);
      if (parsed === undefined) {
        return fail(last.seq + 1, "unsealed", "the seal is not a seal: lines removed from its end could not be told");
      }
      if (!sameMac(parsed.mac, sealMac(key, parsed.seq, parsed.hash))) {
        return fail(last.seq + 1, "forged", "the seal has a mac not made with this key: forged, or another key");
      }
      const problem = vouched("seal", parsed);
      if (problem !== undefined) return problem;
    }
  }
  if (anchor !== undefined) {
    const problem = vouched("anchor", anchor);
    if (problem !== undefined) return problem;
  }
  return { ok: true, records, anchor: last, keyed: chain.keyed === true };
}

/**
 * `data`, the log as read, which ends mid-line, with that line finished if a
 * writer finishes it within {@link TAIL_WAIT_MS}: what the file has gained
 * since, up to its last newline (a line begun after it is still being written
 * too). A writer whose write failed cuts the log back to where the write
 * began instead: the log is then read again as it is. A line no one finishes
 * stays cut short, and verification says so.
 */
async function finishTail(handle: FileHandle, data: Buffer, signal: AbortSignal | undefined): Promise<Buffer> {
  for (let delay = 1, waited = 0; waited < TAIL_WAIT_MS; waited += delay, delay *= 2) {
    await sleep(delay, undefined, signal ? { signal } : {});
    const size = (await handle.stat()).size;
    if (size < data.length) {
      data = await readFrom(handle, 0, size);
      if (data.length === 0 || data[data.length - 1] === NEWLINE) return data;
      continue;
    }
    const more = await readFrom(handle, data.length, data.length);
    const end = more.lastIndexOf(NEWLINE);
    if (end >= 0) return Buffer.concat([data, more.subarray(0, end + 1)]);
  }
  return data;
}

/**
 * Reads and verifies the audit log at `path` (see {@link AuditSink} for the
 * line format). Every content problem is a result value, never a throw.
 *
 * A log may be verified while writers append to it. With a key, the seal is
 * read first, so it never vouches for lines the log read after it lacks. A
 * last line found cut short is waited for, briefly, in case a writer is still
 * writing it (or cuts it off again, its write having failed: the log is then
 * read again); one no writer finishes is `"truncated"`.
 *
 * What the chain detects without a key or an anchor: any edit of any byte, a
 * line removed anywhere but at the end, lines reordered or duplicated, a
 * member twice in a line, and a truncated (cut mid-line) tail. What it cannot
 * detect without one: whole lines removed from the end, a log emptied or
 * deleted, or a log rewritten by someone who re-hashes every line after
 * their edit: sha256 has no key, anyone with write access can compute a
 * fresh chain.
 *
 * With the key it was written with, verification also checks each line's
 * `mac` and the seal beside the log (`<path>.seal`; for a symbolic link,
 * beside the file it leads to): a line added, or a chain re-hashed, by anyone
 * without the key is `"forged"`, and trailing lines removed are `"removed"`.
 * What the key cannot catch: the log and its seal both rolled back to a state
 * someone copied earlier, both deleted, or both replaced by another log's
 * written under the same key; lines the writer appended after its last seal
 * (a crash between the two) are accepted on their MACs alone. An anchor kept
 * out of reach (another host, a ticket, a signed message) closes those gaps
 * up to its `seq`. No chain proves that the records were true when the writer
 * wrote them.
 *
 * @throws AuditConfigError when `path` is not a non-empty string, `options` not an object, or
 *   `options.signal` not an AbortSignal.
 * @throws AuditAnchorError when `options.anchor` is malformed.
 * @throws AuditKeyError when `options.key` is not a string or bytes, or too short.
 * @throws AuditPathError when `path` (or its seal) is not a regular file.
 * @throws AuditIoError when the file cannot be read (a missing file included:
 *   its `cause.code` is `"ENOENT"`).
 */
export async function verifyAuditLog(path: string, options?: AuditVerifyOptions): Promise<AuditVerifyResult> {
  assertPathArgument(path, "cannot verify an audit log");
  options = optionsArgument(options, `cannot verify audit log ${path}`);
  assertOptionType(options.signal, "signal", "AbortSignal", `cannot verify audit log ${path}`);
  const { signal, anchor, key } = options;
  signal?.throwIfAborted();
  if (anchor !== undefined) assertAuditAnchor(anchor);
  if (key !== undefined) auditKeyBytes(key);
  // A log read through a symbolic link has its seal beside the file the link
  // leads to; when the path cannot be resolved, opening it says why.
  const file = await realpath(path).catch(() => path);
  // The seal before the log: a writer replaces the seal only after the lines
  // it vouches for are written, so a seal read first never vouches for more
  // than the log read next holds, however busy the writer is.
  const seal = key === undefined ? null : await readSealFile(auditSealPath(file));
  let data: Buffer;
  let handle;
  try {
    // O_NONBLOCK: a FIFO put in the log's place must not hang the verifier.
    handle = await open(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch (error) {
    throw new AuditIoError(path, `cannot open audit log ${path}: ${describe(error)}`, {
      cause: error,
    });
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) {
      throw new AuditPathError(path, `audit log ${path} is not a regular file`);
    }
    data = await handle.readFile(signal ? { signal } : {});
    if (data.length > 0 && data[data.length - 1] !== NEWLINE) data = await finishTail(handle, data, signal);
  } catch (error) {
    if (signal?.aborted) throw signal.reason;
    if (error instanceof AuditPathError) throw error;
    throw new AuditIoError(path, `cannot read audit log ${path}: ${describe(error)}`, {
      cause: error,
    });
  } finally {
    await handle.close().catch(() => undefined);
  }
  signal?.throwIfAborted();
  return verifyAuditBytes(data, {
    ...(anchor !== undefined ? { anchor } : {}),
    ...(key !== undefined ? { key, seal } : {}),
  });
}
