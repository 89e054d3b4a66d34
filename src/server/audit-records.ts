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
import type { AuditLogCheck, AuditedRecord, AuditedRecords, RecordSource, RecordVouch } from "./records.js";

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
   */
  readonly key?: AuditKey;
}

/** A {@link RecordSource} over an audit log, whose decisions come with what the log vouches for them. */
export interface AuditLogRecordSource extends RecordSource {
  audited(limit: number): Promise<AuditedRecords>;
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
 * not parse is skipped). The lines before those read are not checked at each
 * request: `loopctl audit verify` checks the whole log. A log that does not
 * exist yet reads as empty.
 *
 * @throws {ServerConfigError} naming `path`, `options`, `tailBytes` or `key`
 * when one is unusable.
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
  if (typeof options !== "object" || (options as unknown) === null) {
    throw new ServerConfigError("options", `must be an object, got ${kindOf(options)}`);
  }
  const file = resolve(path);
  const tailBytes = options.tailBytes ?? 1_048_576;
  if (!Number.isSafeInteger(tailBytes) || tailBytes < 1) {
    throw new ServerConfigError("tailBytes", `must be a positive integer, got ${shownValue(tailBytes)}`);
  }
  let key: Buffer | undefined;
  if (options.key !== undefined) {
    try {
      key = auditKeyBytes(options.key);
    } catch (error) {
      // The key's message names only its type or length, never the key.
      throw new ServerConfigError("key", (error as Error).message, { cause: error });
    }
  }
  const audited = async (limit: number): Promise<AuditedRecords> => {
    for (let first = true; ; first = false) {
      // The seal before the lines: a writer replaces it only after the lines it vouches for are
      // written, so it never vouches for more than the lines read next hold.
      const sealPath = key === undefined ? undefined : await sealOf(file);
      const seal = sealPath === undefined ? null : await readSealFile(sealPath);
      const tail = await readTail(file, tailBytes);
      const result = checkTail(tail, key, seal, limit);
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
    async recent(limit: number): Promise<GateDecision[]> {
      return (await audited(limit)).records.map((entry) => entry.record);
    },
  };
}

function kindOf(value: unknown): string {
  return value === null ? "null" : typeof value === "string" ? JSON.stringify(value) : typeof value;
}

/** The seal of the log at `file`: beside the file a symbolic link leads to, where its writer keeps it. */
async function sealOf(file: string): Promise<string> {
  return auditSealPath(await realpath(file).catch(() => file));
}

/** The end of the log as read: its bytes, and whether they start at the log's first byte. */
interface Tail {
  readonly bytes: Buffer;
  readonly whole: boolean;
}

/** What was found wrong in the lines read: the index of the first line it leaves unvouched. */
interface Found {
  readonly problem: NonNullable<AuditLogCheck["problem"]>;
  readonly line: number | null;
  readonly message: string;
  readonly index: number;
}

/**
 * Checks the whole lines in `tail` and reads their decisions; the last
 * `limit` of them are returned, each with its standing.
 */
function checkTail(tail: Tail, key: Buffer | undefined, sealText: string | null, limit: number): AuditedRecords {
  const { bytes } = tail;
  let position = 0;
  if (!tail.whole) {
    // The window starts a byte before its first line may: whatever comes before the first newline is cut.
    const newline = bytes.indexOf(0x0a);
    position = newline === -1 ? bytes.length : newline + 1;
  }
  const lines: Buffer[] = [];
  const starts: number[] = [];
  for (let i = bytes.indexOf(0x0a, position); i !== -1; i = bytes.indexOf(0x0a, position)) {
    lines.push(bytes.subarray(position, i));
    starts.push(position);
    position = i + 1;
  }
  const values = lines.map(parseJson);
  const seqs = values.map((value) => {
    const seq = value?.["seq"];
    return typeof seq === "number" && Number.isSafeInteger(seq) && seq >= 0 ? seq : null;
  });

  const start = tail.whole ? AUDIT_EMPTY_ANCHOR : startOf(values[0]);
  let found: Found | undefined;
  let sealed: number | undefined;
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
    const unvouched = (line: number): number => Math.max(0, Math.min(line - start.seq - 1, lines.length));
    const outcome = checkLines(lines, starts, start, key, sealText);
    if ("ok" in outcome) {
      found = {
        problem: outcome.problem,
        line: outcome.line,
        message: outcome.message,
        index: unvouched(outcome.line),
      };
      // The seal may still vouch for a line of those that verified before it: they are checked again, alone, for it.
      const prefix = checkLines(lines.slice(0, found.index), starts, start, key, sealText);
      if (key !== undefined && !("ok" in prefix)) {
        const sealing = checkSeal(prefix, start, key, sealText);
        if (!("problem" in sealing)) sealed = sealing.sealed;
      }
    } else if (key !== undefined) {
      const sealing = checkSeal(outcome, start, key, sealText);
      if ("problem" in sealing) found = { ...sealing, index: unvouched(sealing.line) };
      else sealed = sealing.sealed;
    }
  }

  const check: AuditLogCheck = {
    by: key === undefined ? "chain" : "key",
    ok: found === undefined,
    ...(found === undefined ? {} : { problem: found.problem, line: found.line, message: found.message }),
    first: seqs.find((seq) => seq !== null) ?? 0,
    last: seqs.findLast((seq) => seq !== null) ?? 0,
    whole: tail.whole,
    keyed: values.some((value) => typeof value?.["mac"] === "string"),
    ...(sealed === undefined ? {} : { sealed }),
    partial: position < bytes.length,
  };
  const vouchedUpTo = found?.index ?? lines.length;
  const records: AuditedRecord[] = [];
  for (let i = lines.length - 1; i >= 0 && records.length < limit; i--) {
    const parsed = LineSchema.safeParse(values[i]);
    if (!parsed.success) continue;
    const vouched = i >= vouchedUpTo ? "none" : vouch(key, seqs[i] ?? 0, sealed);
    records.push({ record: parsed.data.record, seq: seqs[i] ?? null, vouched });
  }
  return { records: records.reverse(), check };
}

function vouch(key: Buffer | undefined, seq: number, sealed: number | undefined): RecordVouch {
  if (key === undefined) return "chain";
  return sealed !== undefined && seq <= sealed ? "sealed" : "mac";
}

/** Checks `lines` as the chain's continuation at `from`; line numbers in failures are `seq`s. */
function checkLines(
  lines: readonly Buffer[],
  starts: readonly number[],
  from: AuditAnchor,
  key: Buffer | undefined,
  sealText: string | null,
): Chain | Failure {
  const macs: MacCheck = key === undefined ? { type: "none", keyed: undefined } : { type: "key", key };
  const sealSeq = key === undefined || sealText === null ? undefined : parseSeal(sealText)?.seq;
  const check = new ChainCheck(from, macs, { records: false, hashes: [sealSeq] });
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
 * Checks the seal against the lines read: `{ sealed }` when it vouches for
 * one of them (or the line just before them), `{}` when for a line before
 * that (the lines read then rest on their MACs), or the problem found.
 */
function checkSeal(
  chain: Chain,
  from: AuditAnchor,
  key: Buffer,
  sealText: string | null,
):
  | { readonly sealed?: number }
  | {
      readonly problem: "unsealed" | "forged" | "removed" | "edited";
      readonly line: number;
      readonly message: string;
    } {
  const last = chain.anchor.seq;
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
  const seal = parseSeal(sealText);
  if (seal === undefined) {
    return {
      problem: "unsealed",
      line: after,
      message: "the seal is not a seal: lines removed from its end could not be told",
    };
  }
  if (!sameMac(seal.mac, sealMac(key, seal.seq, seal.hash))) {
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
  if (seal.seq < from.seq) return {};
  if (chain.hashes.get(seal.seq) !== seal.hash) {
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
 * writes to it.
 */
async function readTail(file: string, tailBytes: number): Promise<Tail> {
  let handle;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { bytes: Buffer.alloc(0), whole: true };
    throw error;
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new Error(`the audit log ${file} is not a regular file`);
    const { size } = stat;
    const start = Math.max(0, size - tailBytes - 1);
    const length = size - start;
    const buffer = Buffer.alloc(length);
    let read = 0;
    while (read < length) {
      const { bytesRead } = await handle.read(buffer, read, length - read, start + read);
      if (bytesRead === 0) break;
      read += bytesRead;
    }
    return { bytes: buffer.subarray(0, read), whole: start === 0 };
  } finally {
    await handle.close();
  }
}
