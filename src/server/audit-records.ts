import { constants } from "node:fs";
import { lstat, open, realpath } from "node:fs/promises";
import { resolve } from "node:path";
import { z } from "zod";
import { ChainCheck, lineHash } from "../audit/chain.js";
import type { Chain, Failure, MacCheck } from "../audit/chain.js";
import { auditKeyBytes, sameMac, sealMac } from "../audit/key.js";
import type { AuditKey } from "../audit/key.js";
import { AUDIT_EMPTY_ANCHOR, AUDIT_LINE_MAX_BYTES } from "../audit/line.js";
import type { AuditAnchor } from "../audit/line.js";
import { auditSealPath, parseSeal, readSealFile } from "../audit/seal.js";
import { GateDecisionSchema } from "../engine/records.js";
import type { GateDecision } from "../engine/records.js";
import { shownValue } from "../errors.js";
import { ServerConfigError } from "./errors.js";
import { callSignal, configFault, readOptions } from "./options.js";
import type { AuditLogCheck, AuditedRecord, AuditedRecords, RecordSource, RecordVouch } from "./records.js";
import { shownText } from "../shown.js";

/** Options of {@link auditLogRecords}. */
export interface AuditLogRecordsOptions {
  /**
   * How much of the end of the log is read per request. The decisions shown
   * are those whose lines lie wholly within it, so a request costs the same
   * however long the log has grown.
   * @default 1_048_576 (1 MiB)
   */
  readonly tailBytes?: number;
  /**
   * The key the log is written with (`AuditSinkOptions.key`). With it every
   * line read is checked against its MAC, and the seal beside the log too,
   * so a line written by anyone without the key is told; without it only the
   * hashes and links are, which anyone who can write the log can make.
   * Omitted for a log without a key: a `key` set to `undefined` (an unset
   * environment variable) is refused, never taken for no key.
   */
  readonly key?: AuditKey;
}

/** A {@link RecordSource} over an audit log, whose decisions come with what the log vouches for them. */
export interface AuditLogRecordSource extends RecordSource {
  recent(limit: number, options?: { readonly signal?: AbortSignal }): Promise<GateDecision[]>;
  audited(limit: number, options?: { readonly signal?: AbortSignal }): Promise<AuditedRecords>;
}

const LineSchema = z.object({ record: GateDecisionSchema });

/**
 * A {@link RecordSource} over an audit log written by `AuditSink` (in this
 * process or another): each read takes the latest lines from the end of the
 * file and checks them as `verifyAuditLog` checks a log, as far as the lines
 * read allow: each line's hash, its link to the line before, its `seq`, and
 * with `key` its MAC and the seal (read before the lines, as verification
 * reads it). `audited()` gives each decision its standing
 * ({@link RecordVouch}) and the check of the lines read; `recent()` the
 * decisions alone, as written, each line that reads as one (a line that does
 * not parse is skipped). The lines a request checked are not checked again by
 * the next while they are still there byte for byte: only the lines appended
 * since are. The lines before those read are not checked at each request:
 * `loopctl audit verify` checks the whole log. A log that does not exist yet
 * reads as empty.
 *
 * @throws {ServerConfigError} naming `path`, `options`, `tailBytes` or `key`
 * when one is unusable (a `key` given as `undefined` included).
 *
 * @example
 * ```ts
 * const key = await readAuditKeyFile("/etc/agent/audit.key");
 * await createApprovalServer({ approver, records: auditLogRecords("audit/gates.jsonl", { key }) });
 * ```
 */
export function auditLogRecords(path: string, options: AuditLogRecordsOptions = {}): AuditLogRecordSource {
  // An empty path would resolve to the current folder, read as a log at every request.
  if (typeof path !== "string" || path === "") {
    throw new ServerConfigError("path", `must be the audit log's path, a non-empty string, got ${kindOf(path)}`);
  }
  const { tailBytes = 1_048_576, key: givenKey } = readOptions(options, ["tailBytes", "key"], configFault());
  const file = resolve(path);
  if (!Number.isSafeInteger(tailBytes) || tailBytes < 1) {
    throw new ServerConfigError("tailBytes", `must be a positive integer, got ${shownValue(tailBytes)}`);
  }
  // `{ key: process.env.AUDIT_KEY }` with the variable unset: taken for no key, a keyed log's lines would be
  // served checked without their MACs, and nothing would say the key never came.
  if (givenKey === undefined && Object.hasOwn(options, "key")) {
    throw new ServerConfigError("key", "is undefined (an unset environment variable?); omit key for an unkeyed log");
  }
  let key: Buffer | undefined;
  if (givenKey !== undefined) {
    try {
      key = auditKeyBytes(givenKey);
    } catch (error) {
      // The key's message names only its type or length, never the key.
      throw new ServerConfigError("key", (error as Error).message, { cause: error });
    }
  }
  // What the last request found, so that the next checks only the lines appended since (see checkTail).
  let memo: Memo | undefined;
  const audited = async (limit: number, callOptions?: { readonly signal?: AbortSignal }): Promise<AuditedRecords> => {
    const signal = callSignal(callOptions);
    for (let first = true; ; first = false) {
      // The seal before the lines: a writer replaces it only after the lines it vouches for are
      // written, so it never vouches for more than the lines read next hold.
      const sealPath = key === undefined ? undefined : await sealOf(file);
      const seal = sealPath === undefined ? null : await readSealFile(sealPath);
      const tail = await readTail(file, tailBytes, signal);
      const checked = checkTail(tail, key, seal, limit, memo);
      memo = checked.memo;
      const result = checked.result;
      if (key === undefined) {
        if (result.check.keyed || result.check.last === 0) return result;
        const sealBeside = await lstat(await sealOf(file)).then(
          () => true,
          () => false,
        );
        return { records: result.records, check: { ...result.check, sealBeside } };
      }
      // A log started (sealed first) or rotated with its seal between the two reads: read both again, once.
      if (result.check.ok || !first || (await readSealFile(sealPath as string).catch(() => seal)) === seal) {
        return result;
      }
    }
  };
  return {
    audited,
    async recent(limit: number, callOptions?: { readonly signal?: AbortSignal }): Promise<GateDecision[]> {
      return (await audited(limit, callOptions)).records.map((entry) => entry.record);
    },
  };
}

function kindOf(value: unknown): string {
  return value === null ? "null" : typeof value === "string" ? shownText(value) : typeof value;
}

/** The seal of the log at `file`: beside the file a symbolic link leads to, where its writer keeps it. */
async function sealOf(file: string): Promise<string> {
  return auditSealPath(await realpath(file).catch(() => file));
}

/** The end of the log as read: its bytes, where they start in it, and which file it was. */
interface Tail {
  readonly bytes: Buffer;
  readonly offset: number;
  readonly dev: number;
  readonly ino: number;
}

/** What was found wrong in the lines read: the index of the first line it leaves unvouched. */
interface Found {
  readonly problem: NonNullable<AuditLogCheck["problem"]>;
  readonly line: number | null;
  readonly message: string;
  readonly index: number;
}

/**
 * The lines a request checked, kept for the next: their bytes, where each
 * starts in the file, the `seq` before the first, and the chain's end when
 * they passed or what failed (the offset of the line it failed at).
 */
interface Memo {
  readonly dev: number;
  readonly ino: number;
  readonly bytes: Buffer;
  readonly starts: readonly number[];
  readonly base: number;
  readonly end: AuditAnchor | undefined;
  readonly keyed: boolean | undefined;
  readonly found: (Omit<Found, "index"> & { readonly at: number }) | undefined;
}

/**
 * Checks the whole lines in `tail` and reads their decisions; the last
 * `limit` of them are returned, each with its standing. Lines that `memo`
 * checked, found byte for byte where they were (same file, same bytes), are
 * not checked again: only the lines after them are, as the chain's
 * continuation, so a request's checking costs what was appended since the
 * last one. The seal is checked at every request.
 */
function checkTail(
  tail: Tail,
  key: Buffer | undefined,
  sealText: string | null,
  limit: number,
  memo: Memo | undefined,
): { readonly result: AuditedRecords; readonly memo: Memo | undefined } {
  const { bytes, offset } = tail;
  let position = 0;
  if (offset > 0) {
    // The window starts a byte before its first line may: whatever comes before the first newline is cut.
    const newline = bytes.indexOf(0x0a);
    position = newline === -1 ? bytes.length : newline + 1;
  }
  const lines: Buffer[] = [];
  const starts: number[] = [];
  for (let i = bytes.indexOf(0x0a, position); i !== -1; i = bytes.indexOf(0x0a, position)) {
    lines.push(bytes.subarray(position, i));
    starts.push(offset + position);
    position = i + 1;
  }
  const end = offset + position;
  const head = lines.length === 0 ? undefined : parseJson(lines[0] as Buffer);
  const macs: MacCheck = key === undefined ? { type: "none", keyed: undefined } : { type: "key", key };
  const reused = reuse(memo, tail, starts, lines.length === 0 ? end : (starts[0] as number));

  let base: number;
  let found: Found | undefined;
  let chainEnd: AuditAnchor | undefined;
  let keyed: boolean | undefined;
  if (reused !== undefined) {
    // The lines before `from` passed (or failed) as they did for the last request.
    const { memo: last, skipped } = reused;
    base = last.base + skipped;
    const from = indexAt(starts, lastEnd(last));
    keyed = last.keyed;
    if (last.found !== undefined) {
      found = { ...last.found, index: indexAt(starts, last.found.at) };
    } else {
      // Without a key, the lines after must carry a mac as the lines before did, or not.
      const continued: MacCheck = macs.type === "key" ? macs : { type: "none", keyed };
      const outcome = checkLines(lines.slice(from), starts.slice(from), last.end as AuditAnchor, continued);
      if ("ok" in outcome) found = { ...outcome, index: clampIndex(outcome.line - base - 1, lines.length) };
      else {
        chainEnd = outcome.anchor;
        keyed = outcome.keyed ?? keyed;
      }
    }
  } else {
    const start = offset === 0 ? AUDIT_EMPTY_ANCHOR : startOf(head);
    base = start?.seq ?? 0;
    if (start === undefined) {
      if (lines.length > 0) {
        found = {
          problem: "malformed",
          line: null,
          message: "the first line read is malformed: it carries no seq and prev to check it by",
          index: 0,
        };
      }
    } else {
      const outcome = checkLines(lines, starts, start, macs);
      if ("ok" in outcome) found = { ...outcome, index: clampIndex(outcome.line - base - 1, lines.length) };
      else {
        chainEnd = outcome.anchor;
        keyed = outcome.keyed;
      }
    }
  }

  // The hash of line `seq` among those that passed, or of the line before them.
  const verified = found?.index ?? lines.length;
  const hashAt = (seq: number): string | undefined => {
    if (seq === base) return seq === 0 ? AUDIT_EMPTY_ANCHOR.hash : startOf(head)?.hash;
    if (seq < base || seq > base + verified) return undefined;
    return lineHash(lines[seq - base - 1] as Buffer);
  };
  let sealed: number | undefined;
  if (key !== undefined) {
    const sealing = checkSeal(key, sealText, found === undefined ? chainEnd : undefined, base + verified, hashAt);
    if ("problem" in sealing) found = { ...sealing, index: clampIndex(sealing.line - base - 1, lines.length) };
    else sealed = sealing.sealed;
  }

  const tailSeq = lines.length === 0 ? undefined : seqOf(parseJson(lines.at(-1) as Buffer));
  const check: AuditLogCheck = {
    by: key === undefined ? "chain" : "key",
    ok: found === undefined,
    ...(found === undefined ? {} : { problem: found.problem, line: found.line, message: found.message }),
    first: seqOf(head) ?? 0,
    last: tailSeq ?? 0,
    whole: offset === 0,
    keyed: typeof head?.["mac"] === "string",
    ...(sealed === undefined ? {} : { sealed }),
    partial: position < bytes.length,
  };
  const vouchedUpTo = found?.index ?? lines.length;
  const records: AuditedRecord[] = [];
  for (let i = lines.length - 1; i >= 0 && records.length < limit; i--) {
    const value = parseJson(lines[i] as Buffer);
    const parsed = LineSchema.safeParse(value);
    if (!parsed.success) continue;
    const vouched = i >= vouchedUpTo ? "none" : vouch(key, base + 1 + i, sealed);
    records.push({ record: parsed.data.record, seq: seqOf(value) ?? null, vouched });
  }

  // A failure found by the seal is looked at again at each request; one in the lines, once.
  const chainFound = chainEnd === undefined && lines.length > 0 ? chainFailure(found, reused, starts, end) : undefined;
  const next: Memo | undefined =
    lines.length === 0 || (chainEnd === undefined && chainFound === undefined)
      ? undefined
      : {
          dev: tail.dev,
          ino: tail.ino,
          bytes: bytes.subarray((starts[0] as number) - offset, position),
          starts,
          base,
          end: chainEnd,
          keyed,
          found: chainFound,
        };
  return { result: { records: records.reverse(), check }, memo: next };
}

/** The failure in the lines themselves, to keep for the next request: the one reused, or the one found now. */
function chainFailure(
  found: Found | undefined,
  reused: { readonly memo: Memo } | undefined,
  starts: readonly number[],
  end: number,
): Memo["found"] {
  if (reused?.memo.found !== undefined) return reused.memo.found;
  if (found === undefined) return undefined;
  return { problem: found.problem, line: found.line, message: found.message, at: starts[found.index] ?? end };
}

/** Where the lines `memo` checked end in the file. */
function lastEnd(memo: Memo): number {
  return (memo.starts[0] as number) + memo.bytes.length;
}

/**
 * Whether the lines `memo` checked are still there, from `first` (where the
 * lines read now start) to their end: the same file, the same bytes. Gives
 * how many of its lines come before `first`.
 */
function reuse(
  memo: Memo | undefined,
  tail: Tail,
  starts: readonly number[],
  first: number,
): { readonly memo: Memo; readonly skipped: number } | undefined {
  if (memo === undefined || memo.dev !== tail.dev || memo.ino !== tail.ino || starts.length === 0) return undefined;
  const memoStart = memo.starts[0] as number;
  const memoEnd = lastEnd(memo);
  const tailEnd = tail.offset + tail.bytes.length;
  if (first < memoStart || first >= memoEnd || memoEnd > tailEnd) return undefined;
  // A failure no longer among the lines read rules none of them: they are checked as a first request checks them.
  if (memo.found !== undefined && memo.found.at < first) return undefined;
  const skipped = memo.starts.indexOf(first);
  if (skipped === -1) return undefined;
  const here = tail.bytes.subarray(first - tail.offset, memoEnd - tail.offset);
  return here.equals(memo.bytes.subarray(first - memoStart)) ? { memo, skipped } : undefined;
}

/** The index of the first line starting at or after `at`. */
function indexAt(starts: readonly number[], at: number): number {
  const index = starts.findIndex((start) => start >= at);
  return index === -1 ? starts.length : index;
}

function clampIndex(index: number, length: number): number {
  return Math.max(0, Math.min(index, length));
}

function vouch(key: Buffer | undefined, seq: number, sealed: number | undefined): RecordVouch {
  if (key === undefined) return "chain";
  return sealed !== undefined && seq <= sealed ? "sealed" : "mac";
}

/** Checks `lines` (starting at the file offsets `starts`) as the chain's continuation at `from`. */
function checkLines(
  lines: readonly Buffer[],
  starts: readonly number[],
  from: AuditAnchor,
  macs: MacCheck,
): Chain | Failure {
  const check = new ChainCheck(from, macs, { records: false, hashes: [] });
  for (const [i, line] of lines.entries()) {
    if (line.length > AUDIT_LINE_MAX_BYTES) {
      check.oversized(starts[i] as number);
      break;
    }
    if (!check.line(line)) break;
  }
  const outcome = check.end(0);
  if (!("type" in outcome)) return outcome;
  // A line repeating an earlier seq: that line's hash, read again, tells a copy from a fork.
  const earlier = lines[outcome.index - 1];
  return check.repeated(earlier === undefined ? undefined : lineHash(earlier));
}

/**
 * Checks the seal against the lines that passed, up to `seq` `verifiedTo`
 * (`end`, the chain's end, when every line read passed): `{ sealed }` when it
 * vouches for one of them, `{}` when it vouches for a line before them (the
 * lines read then rest on their MACs) or cannot be checked, or the problem
 * found, only when every line passed: a failure in the lines comes first.
 */
function checkSeal(
  key: Buffer,
  sealText: string | null,
  end: AuditAnchor | undefined,
  verifiedTo: number,
  hashAt: (seq: number) => string | undefined,
):
  | { readonly sealed?: number }
  | {
      readonly problem: "unsealed" | "forged" | "removed" | "edited";
      readonly line: number;
      readonly message: string;
    } {
  const seal = sealText === null ? undefined : parseSeal(sealText);
  const valid = seal !== undefined && sameMac(seal.mac, sealMac(key, seal.seq, seal.hash));
  if (end === undefined) {
    return valid && seal.seq <= verifiedTo && hashAt(seal.seq) === seal.hash ? { sealed: seal.seq } : {};
  }
  const last = end.seq;
  const after = last + 1;
  if (sealText === null) {
    return last === 0
      ? {}
      : {
          problem: "unsealed",
          line: after,
          message: "the log has no seal: lines removed from its end could not be told",
        };
  }
  if (seal === undefined) {
    return {
      problem: "unsealed",
      line: after,
      message: "the seal is not a seal: lines removed from its end could not be told",
    };
  }
  if (!valid) {
    return {
      problem: "forged",
      line: after,
      message: "the seal has a mac not made with this key: forged, or another key",
    };
  }
  if (seal.seq > last) {
    const missing = seal.seq - last;
    return {
      problem: "removed",
      line: after,
      message:
        `the log ends at seq ${last} but the seal vouches for seq ${seal.seq}: ` +
        `${missing} trailing line${missing === 1 ? "" : "s"} removed`,
    };
  }
  const hash = seal.seq === last ? end.hash : hashAt(seal.seq);
  if (hash === undefined) return {};
  if (hash !== seal.hash) {
    return {
      problem: "edited",
      line: Math.max(seal.seq, 1),
      message: `line ${seal.seq} does not match the seal: the chain was rewritten at or before it`,
    };
  }
  return { sealed: seal.seq };
}

/** The chain point a line continues, from its own `seq` and `prev`; `undefined` when it carries none. */
function startOf(value: Readonly<Record<string, unknown>> | undefined): AuditAnchor | undefined {
  const seq = value?.["seq"];
  const prev = value?.["prev"];
  if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 1) return undefined;
  if (typeof prev !== "string" || !/^[0-9a-f]{64}$/.test(prev)) return undefined;
  return { seq: seq - 1, hash: prev };
}

function seqOf(value: Readonly<Record<string, unknown>> | undefined): number | undefined {
  const seq = value?.["seq"];
  return typeof seq === "number" && Number.isSafeInteger(seq) && seq >= 0 ? seq : undefined;
}

function parseJson(line: Buffer): Readonly<Record<string, unknown>> | undefined {
  try {
    const value: unknown = JSON.parse(line.toString("utf8"));
    return typeof value === "object" && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The last `tailBytes` of `file`, and the byte before them when there is
 * one (so that a first line starting right at the window is kept whole).
 * Opened without blocking and read only if it is a regular file: a FIFO put
 * in the log's place would hold the open (and the request) until something
 * writes to it. Stops between reads once `signal` aborts (the request no
 * longer waits), rejecting with its reason.
 */
async function readTail(file: string, tailBytes: number, signal: AbortSignal | undefined): Promise<Tail> {
  signal?.throwIfAborted();
  let handle;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT")
      return { bytes: Buffer.alloc(0), offset: 0, dev: 0, ino: 0 };
    throw error;
  }
  try {
    signal?.throwIfAborted();
    const stat = await handle.stat();
    if (!stat.isFile()) throw new ServerConfigError("path", `the audit log ${file} is not a regular file`);
    const { size } = stat;
    const start = Math.max(0, size - tailBytes - 1);
    const length = size - start;
    const buffer = Buffer.alloc(length);
    let read = 0;
    while (read < length) {
      signal?.throwIfAborted();
      const { bytesRead } = await handle.read(buffer, read, length - read, start + read);
      if (bytesRead === 0) break;
      read += bytesRead;
    }
    return { bytes: buffer.subarray(0, read), offset: start, dev: stat.dev, ino: stat.ino };
  } finally {
    await handle.close();
  }
}
