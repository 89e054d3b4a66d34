import { constants } from "node:fs";
import { open, realpath } from "node:fs/promises";
import type { GateDecision } from "../engine/records.js";
import { shownValue } from "../errors.js";
import { ChainCheck, verifyChain } from "./chain.js";
import type { Chain, Failure, MacCheck } from "./chain.js";
import { checkLogFile } from "./chain-file.js";
import { AuditConfigError, AuditIoError, AuditPathError } from "./errors.js";
import { assertKeyNotUndefined, assertOptionType, assertPathArgument, optionsArgument } from "./arguments.js";
import { describe } from "./file-io.js";
import { auditKeyBytes, sameMac, sealMac } from "./key.js";
import type { AuditKey } from "./key.js";
import { AUDIT_EMPTY_ANCHOR, assertAuditAnchor } from "./line.js";
import type { AuditAnchor } from "./line.js";
import { auditSealPath, parseSeal, readSealFile } from "./seal.js";

/**
 * What verification found wrong, at the first line where it shows:
 * - `"malformed"`: not a line this format produces (longer than
 *   {@link AUDIT_LINE_MAX_BYTES}, bad UTF-8, bad JSON, a
 *   member twice in one object, a missing or extra field of the line (a
 *   record's unknown fields are read past), an invalid record,
 *   an empty line, a line without a `mac` among lines with one, a byte order
 *   mark, a CRLF line ending, whitespace at its end).
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
 * record in order (none with {@link AuditVerifyOptions.records} `false`),
 * `anchor` is the log's last point (what a writer would
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
   * and trailing lines removed are all detected without an anchor. Omitted
   * for a log without a key: a `key` set to `undefined` (an unset
   * environment variable) is refused, never taken for no key.
   */
  readonly key?: AuditKey;
  /**
   * Whether to keep every record for the result's `records`. With `false`,
   * `records` is empty, and what verification holds in memory stays the same
   * however long the log: for a log whose records do not fit in memory. How
   * many lines verified is still told: `anchor.seq` on success, `line - 1` on
   * failure.
   * @default true
   */
  readonly records?: boolean;
  /** Stops reading the file; the promise rejects with the signal's reason. */
  readonly signal?: AbortSignal;
}

/** Options of {@link verifyAuditBytes}. */
export interface AuditVerifyBytesOptions {
  /** As {@link AuditVerifyOptions.anchor}. */
  readonly anchor?: AuditAnchor;
  /** As {@link AuditVerifyOptions.key}. */
  readonly key?: AuditKey;
  /**
   * With a key: the seal file's content, or `null` (or absent) when there is
   * none. Only the key checks it: its text without `key` is refused.
   */
  readonly seal?: string | null;
}

/**
 * Verifies an audit log held in memory; {@link verifyAuditLog} reads the file
 * (and, with a key, its seal) and calls this. Never throws for any content:
 * every problem is a result.
 * @throws AuditConfigError when `data` is not a Uint8Array (a Buffer is one), `options` not an
 *   object or holding a key other than `anchor`, `key` and `seal`, or `options.seal` not a string,
 *   `null` or `undefined`, or a string without `options.key`, or `options.key` given as `undefined`.
 * @throws AuditAnchorError when `options.anchor` is not a seq with a 64-hex hash.
 * @throws AuditKeyError when `options.key` is not a string or bytes, or shorter than `AUDIT_KEY_MIN_BYTES`.
 */
export function verifyAuditBytes(data: Uint8Array, options?: AuditVerifyBytesOptions): AuditVerifyResult {
  const where = "cannot verify audit log bytes";
  // A string would read as one line cut short; what the caller meant is the file's bytes.
  if (!(data instanceof Uint8Array)) {
    // Named by its length: a log read with an encoding would put all of itself in the message.
    const got = typeof data === "string" ? `a string of ${(data as string).length} characters` : shownValue(data);
    throw new AuditConfigError("data", `${where}: data must be a Uint8Array (the file's bytes), got ${got}`);
  }
  options = optionsArgument(options, where, ["anchor", "key", "seal"]);
  assertKeyNotUndefined(options, where);
  if (options.seal !== undefined && options.seal !== null && typeof options.seal !== "string") {
    throw new AuditConfigError(
      "seal",
      `${where}: options.seal must be the seal file's text, null or undefined, got ${shownValue(options.seal)}`,
    );
  }
  // Only the key checks a seal: without it, one vouching for lines the bytes lack was passed over unsaid.
  if (typeof options.seal === "string" && options.key === undefined) {
    throw new AuditConfigError(
      "seal",
      `${where}: options.seal is checked only with options.key; pass the key the log was written with`,
    );
  }
  const { anchor } = options;
  if (anchor !== undefined) assertAuditAnchor(anchor);
  const key = options.key === undefined ? undefined : auditKeyBytes(options.key);
  const seal = options.seal ?? null;
  const chain = verifyChain(data, AUDIT_EMPTY_ANCHOR, macCheck(key), {
    records: true,
    hashes: [anchor?.seq, sealSeq(key, seal)],
  });
  if ("ok" in chain) return chain;
  return verifyVouched(chain, anchor, key, seal);
}

function macCheck(key: Buffer | undefined): MacCheck {
  return key === undefined ? { type: "none", keyed: undefined } : { type: "key", key };
}

/** The `seq` the seal vouches for, whose hash verification keeps: with a key, when it is a seal. */
export function sealSeq(key: Buffer | undefined, sealText: string | null): number | undefined {
  return key === undefined || sealText === null ? undefined : parseSeal(sealText)?.seq;
}

/**
 * Checks a whole log's verified chain against what vouches for a point in
 * it: with a key, the seal (`sealText`, its file's text or `null`), and the
 * anchor, if any. The chain must have kept the hashes of their `seq`s
 * ({@link sealSeq}, the anchor's).
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
    const hash = hashes.get(point.seq);
    if (hash === undefined) throw new Error(`the hash of line ${point.seq} was not kept to check the ${what}`);
    if (hash !== point.hash) {
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
 * Reads and verifies the audit log at `path` (see {@link AuditSink} for the
 * line format). Every content problem is a result value, never a throw. The
 * file is read a chunk at a time and checked line by line, so a log of any
 * length verifies; with `records: false` what is held of it stays the same
 * however long it is. A line longer than {@link AUDIT_LINE_MAX_BYTES} is
 * `"malformed"` once that much of it is read, and is not read further.
 *
 * A log may be verified while writers append to it. With a key, the seal is
 * read first, so it never vouches for lines the log read after it lacks (a
 * seal missing then and there once the log is read, as when its first writer
 * is opening it, or another seal there once the log fails against the one
 * read, as when the log and its seal were rotated meanwhile, makes
 * verification read both again, once). It takes no
 * lock, so writers never wait for it: the result is the log as read, without
 * the lines appended after, and with any lines of a failed write read before
 * its writer cut them back. A last line found cut short is waited for,
 * briefly, in case a writer is still writing it (or cuts it off again, its
 * write having failed: the log is then read again); one no writer finishes is
 * `"truncated"`.
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
 * @throws AuditConfigError when `path` is not a non-empty string, `options` not an object (or an
 *   AbortSignal) or holding a key other than `anchor`, `key`, `records` and `signal`, or
 *   `options.signal` not an AbortSignal, or `options.key` given as `undefined`.
 * @throws AuditAnchorError when `options.anchor` is malformed.
 * @throws AuditKeyError when `options.key` is not a string or bytes, or too short.
 * @throws AuditPathError when `path` (or its seal) is not a regular file.
 * @throws AuditIoError when the file cannot be read (a missing file included:
 *   its `cause.code` is `"ENOENT"`).
 */
export async function verifyAuditLog(path: string, options?: AuditVerifyOptions): Promise<AuditVerifyResult> {
  return verifyLogFile(path, options, {});
}

/** What tests set to drive {@link verifyLogFile} through its edges. */
export interface VerifySeams {
  /** How many bytes are read at a time (`CHUNK_BYTES`). */
  readonly chunkBytes?: number;
  /** Runs after the seal is read and before the log is, each time. */
  readonly afterSeal?: () => Promise<void>;
  /** Runs each time a last line found cut short is to be looked at again. */
  readonly whileWaiting?: () => Promise<void>;
  /** Runs each time a read of the log reaches its end, before the next read. */
  readonly afterEnd?: () => Promise<void>;
}

/** {@link verifyAuditLog}, with its seams. */
export async function verifyLogFile(
  path: string,
  options: AuditVerifyOptions | undefined,
  seams: VerifySeams,
): Promise<AuditVerifyResult> {
  return (await verifySealedLogFile(path, options, seams)).result;
}

/**
 * {@link verifyAuditLog}, and the `seq` the seal it checked the log against
 * vouches for: with a key, of a log with lines that verified (`undefined`
 * otherwise). The seal as verification read it and checked its MAC, never read
 * again: one put in its place meanwhile vouches for nothing.
 */
export async function verifyAuditLogSealed(
  path: string,
  options?: AuditVerifyOptions,
): Promise<{ readonly result: AuditVerifyResult; readonly sealed: number | undefined }> {
  const { result, seal } = await verifySealedLogFile(path, options, {});
  const sealed = result.ok && result.anchor.seq > 0 && seal !== null ? parseSeal(seal)?.seq : undefined;
  return { result, sealed };
}

/** {@link verifyLogFile}, and the seal's text it checked the log against (`null`: none, or no key). */
async function verifySealedLogFile(
  path: string,
  options: AuditVerifyOptions | undefined,
  seams: VerifySeams,
): Promise<{ readonly result: AuditVerifyResult; readonly seal: string | null }> {
  assertPathArgument(path, "cannot verify an audit log");
  options = optionsArgument(options, `cannot verify audit log ${path}`, ["anchor", "key", "records", "signal"]);
  assertOptionType(options.signal, "signal", "AbortSignal", `cannot verify audit log ${path}`);
  assertOptionType(options.records, "records", "boolean", `cannot verify audit log ${path}`);
  const { signal, anchor } = options;
  signal?.throwIfAborted();
  if (anchor !== undefined) assertAuditAnchor(anchor);
  assertKeyNotUndefined(options, `cannot verify audit log ${path}`);
  const key = options.key === undefined ? undefined : auditKeyBytes(options.key);
  // A log read through a symbolic link has its seal beside the file the link
  // leads to; when the path cannot be resolved, opening it says why.
  const file = await realpath(path).catch(() => path);
  const sealPath = auditSealPath(file);
  for (let first = true; ; first = false) {
    // The seal before the log: a writer replaces the seal only after the lines
    // it vouches for are written, so a seal read first never vouches for more
    // than the log read next holds, however busy the writer is.
    const seal = key === undefined ? null : await readSealFile(sealPath);
    await seams.afterSeal?.();
    const outcome = await readLog(path, file, {
      newCheck: () =>
        new ChainCheck(AUDIT_EMPTY_ANCHOR, macCheck(key), {
          records: options.records ?? true,
          hashes: [anchor?.seq, sealSeq(key, seal)],
        }),
      signal,
      chunkBytes: seams.chunkBytes,
      whileWaiting: seams.whileWaiting,
      afterEnd: seams.afterEnd,
    });
    signal?.throwIfAborted();
    if ("ok" in outcome) return { result: outcome, seal };
    // A keyed log's first writer seals it before its first line: a seal
    // missing when read, and there once lines are, was written meanwhile, and
    // the log had it before it had lines. Both are read again, in order, once.
    const sealedSince =
      first && key !== undefined && seal === null && outcome.anchor.seq > 0 && (await readSealFile(sealPath)) !== null;
    if (sealedSince) continue;
    const result = verifyVouched(outcome, anchor, key, seal);
    // A log moved aside with its seal (rotated) and started afresh between the two reads: the seal
    // read was the old log's, and is no longer there. Both are read again, in order, once.
    const replaced =
      first &&
      key !== undefined &&
      seal !== null &&
      !result.ok &&
      (await readSealFile(sealPath).catch(() => seal)) !== seal;
    if (!replaced) return { result, seal };
  }
}

/** Opens the log at `file` (`path` as the caller named it) and checks its chain. */
async function readLog(
  path: string,
  file: string,
  how: {
    readonly newCheck: () => ChainCheck;
    readonly signal: AbortSignal | undefined;
    readonly chunkBytes: number | undefined;
    readonly whileWaiting: (() => Promise<void>) | undefined;
    readonly afterEnd: (() => Promise<void>) | undefined;
  },
): Promise<Chain | Failure> {
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
    const { outcome } = await checkLogFile(handle, how.newCheck, {
      tail: "wait",
      signal: how.signal,
      chunkBytes: how.chunkBytes,
      whileWaiting: how.whileWaiting,
      afterEnd: how.afterEnd,
    });
    return outcome;
  } catch (error) {
    if (how.signal?.aborted) throw how.signal.reason;
    if (error instanceof AuditPathError) throw error;
    throw new AuditIoError(path, `cannot read audit log ${path}: ${describe(error)}`, {
      cause: error,
    });
  } finally {
    await handle.close().catch(() => undefined);
  }
}
