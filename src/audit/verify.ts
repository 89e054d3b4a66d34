import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { createHash } from "node:crypto";
import { z } from "zod";
import { GateDecisionSchema } from "../engine/records.js";
import type { GateDecision } from "../engine/records.js";
import { duplicateMember } from "./duplicate-member.js";
import { AuditIoError, AuditPathError } from "./errors.js";
import { AUDIT_GENESIS, LINE_TAIL_LENGTH, assertAuditAnchor } from "./line.js";
import type { AuditAnchor } from "./line.js";

/**
 * What verification found wrong, at the first line where it shows:
 * - `"malformed"`: not a line this format produces (bad UTF-8, bad JSON, a
 *   member twice in one object, a missing or extra field, an invalid record,
 *   an empty line).
 * - `"edited"`: the line's content does not match its own hash, or it does
 *   not link to the line before it (one of the two was rewritten and
 *   re-hashed), or the line an anchor vouches for differs from the anchor.
 * - `"removed"`: a `seq` is missing (lines deleted before this one), or the
 *   log ends before the anchor's `seq` (trailing lines deleted).
 * - `"reordered"`: a line's `seq` turns up later in the file than it should.
 * - `"duplicated"`: an exact copy of an earlier line.
 * - `"forked"`: an earlier `seq` again with other content (two writers, or
 *   a line spliced in from another log).
 * - `"truncated"`: the last line has no newline: a cut-short write, or a tail
 *   cut mid-line.
 */
export type AuditProblem =
  | "malformed"
  | "edited"
  | "removed"
  | "reordered"
  | "duplicated"
  | "forked"
  | "truncated";

/**
 * The outcome of {@link verifyAuditLog}. On success, `records` are every
 * record in order and `anchor` is the log's last point (what a writer would
 * have reported). On failure, `line` is 1-based, `message` says what is wrong
 * in words, and `records` holds the verified prefix before `line`.
 */
export type AuditVerifyResult =
  | {
      readonly ok: true;
      readonly records: readonly GateDecision[];
      readonly anchor: AuditAnchor;
    }
  | {
      readonly ok: false;
      readonly line: number;
      readonly problem: AuditProblem;
      readonly message: string;
      readonly records: readonly GateDecision[];
    };

/** Options of {@link verifyAuditLog} and {@link verifyAuditBytes}. */
export interface AuditVerifyOptions {
  /**
   * The last point the writer reported ({@link AuditSink.anchor}), kept
   * apart from the log. With it, removing whole trailing lines, or rewriting
   * and re-hashing the chain at or before the anchor, is detected; lines
   * appended after the anchor was taken are still accepted.
   */
  readonly anchor?: AuditAnchor;
  /** Stops reading the file; the promise rejects with the signal's reason. */
  readonly signal?: AbortSignal;
}

const Hex64Schema = z.string().regex(/^[0-9a-f]{64}$/);

const LineSchema = z
  .object({
    seq: z.number().int().min(1),
    prev: Hex64Schema,
    record: GateDecisionSchema,
    hash: Hex64Schema,
  })
  .strict();

const TAIL_PATTERN = /,"hash":"([0-9a-f]{64})"\}$/;
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const NEWLINE = 0x0a;

type ParsedLine =
  | {
      readonly type: "line";
      readonly seq: number;
      readonly prev: string;
      readonly hash: string;
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
  const tail = TAIL_PATTERN.exec(text);
  if (!tail || bytes.length <= LINE_TAIL_LENGTH) {
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
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue && issue.path.length > 0 ? issue.path.join(".") : "the line";
    return { type: "malformed", why: `${where}: ${issue?.message ?? "invalid"}` };
  }
  if (parsed.data.hash !== tail[1]) {
    return { type: "malformed", why: 'its last member is not its "hash"' };
  }
  // The body is the line minus its hash member: hash the raw bytes, never a
  // re-serialization, so that any byte-level change is seen.
  const computed = createHash("sha256")
    .update(bytes.subarray(0, bytes.length - LINE_TAIL_LENGTH))
    .update("}")
    .digest("hex");
  return {
    type: "line",
    seq: parsed.data.seq,
    prev: parsed.data.prev,
    hash: parsed.data.hash,
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

/**
 * Verifies an audit log held in memory; {@link verifyAuditLog} reads the file
 * and calls this. Never throws for any content: every problem is a result.
 * @throws AuditAnchorError when `options.anchor` is not a seq with a 64-hex hash.
 */
export function verifyAuditBytes(
  data: Uint8Array,
  options: Pick<AuditVerifyOptions, "anchor"> = {},
): AuditVerifyResult {
  const anchor = options.anchor;
  if (anchor !== undefined) assertAuditAnchor(anchor);
  const { lines, tail } = splitLines(data);
  const parsed = lines.map(parseLine);
  const records: GateDecision[] = [];
  const hashes: string[] = [AUDIT_GENESIS];
  const fail = (line: number, problem: AuditProblem, message: string): AuditVerifyResult => ({
    ok: false,
    line,
    problem,
    message,
    records,
  });

  for (const [index, entry] of parsed.entries()) {
    const n = index + 1;
    if (entry.type === "malformed") {
      return fail(n, "malformed", `line ${n} is malformed: ${entry.why}`);
    }
    if (entry.computed !== entry.hash) {
      return fail(n, "edited", `line ${n} was edited: its content does not match its hash`);
    }
    if (entry.seq < n) {
      return hashes[entry.seq] === entry.hash
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
    records.push(entry.record);
    hashes.push(entry.hash);
  }

  if (tail.length > 0) {
    const n = lines.length + 1;
    return fail(n, "truncated", `line ${n} has no newline: the log was cut short mid-line`);
  }

  const last: AuditAnchor = { seq: lines.length, hash: hashes[lines.length] ?? AUDIT_GENESIS };
  if (anchor !== undefined) {
    if (anchor.seq > last.seq) {
      const missing = anchor.seq - last.seq;
      return fail(
        last.seq + 1,
        "removed",
        `the log ends at seq ${last.seq} but the anchor vouches for seq ${anchor.seq}: ` +
          `${missing} trailing line${missing === 1 ? "" : "s"} removed`,
      );
    }
    if (hashes[anchor.seq] !== anchor.hash) {
      return fail(
        Math.max(anchor.seq, 1),
        "edited",
        `line ${anchor.seq} does not match the anchor: the chain was rewritten at or before it`,
      );
    }
  }
  return { ok: true, records, anchor: last };
}

/**
 * Reads and verifies the audit log at `path` (see {@link AuditSink} for the
 * line format). Every content problem is a result value, never a throw.
 *
 * What the chain detects without an anchor: any edit of any byte, a line
 * removed anywhere but at the end, lines reordered or duplicated, and a
 * truncated (cut mid-line) tail. What it cannot detect without one: whole
 * lines removed from the end, a log emptied or deleted, or a log rewritten
 * by someone who re-hashes every line after their edit: sha256 has no key,
 * anyone with write access can compute a fresh chain. An anchor kept out of
 * that person's reach (another host, a ticket, a signed message) closes both
 * gaps up to the anchor's `seq`. No chain proves that the records were true
 * when the writer wrote them.
 *
 * @throws AuditAnchorError when `options.anchor` is malformed.
 * @throws AuditPathError when `path` is not a regular file.
 * @throws AuditIoError when the file cannot be read (a missing file included:
 *   its `cause.code` is `"ENOENT"`).
 */
export async function verifyAuditLog(
  path: string,
  options: AuditVerifyOptions = {},
): Promise<AuditVerifyResult> {
  const { signal, anchor } = options;
  signal?.throwIfAborted();
  if (anchor !== undefined) assertAuditAnchor(anchor);
  let data: Uint8Array;
  let handle;
  try {
    // O_NONBLOCK: a FIFO put in the log's place must not hang the verifier.
    handle = await open(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
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
  return verifyAuditBytes(data, options.anchor ? { anchor: options.anchor } : {});
}

/** The message of an error from the file system, for our own messages. */
export function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code && !error.message.startsWith(code) ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}
