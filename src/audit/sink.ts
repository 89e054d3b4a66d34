import { constants } from "node:fs";
import { everyKey } from "../unknown-option.js";
import { lstat, mkdir, open, readdir, unlink } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { GateDecisionSchema } from "../engine/records.js";
import type { GateDecision } from "../engine/records.js";
import { LedgerLockError } from "../grant/errors.js";
import { zodIssuesLine } from "../zod-issues.js";
import { lockMsProblem, withLedgerLock } from "../grant/ledger-lock.js";
import type { HeldLock } from "../grant/ledger-lock.js";
import {
  AuditBusyError,
  AuditClosedError,
  AuditConfigError,
  AuditCorruptError,
  AuditIoError,
  AuditKeyError,
  AuditLockError,
  AuditPathError,
  AuditRecordError,
} from "./errors.js";
import type { AuditError } from "./errors.js";
import { assertKeyNotUndefined, assertOptionType, assertPathArgument, optionsArgument } from "./arguments.js";
import { foldersMade } from "../folders-made.js";
import { processShared } from "../process-shared.js";
import { describe, syncFolder, writeAll } from "./file-io.js";
import { auditKeyBytes, sameMac, sealMac } from "./key.js";
import type { AuditKey } from "./key.js";
import {
  AUDIT_EMPTY_ANCHOR,
  AUDIT_LINE_MAX_BYTES,
  RECORD_MAX_BYTES,
  assertAuditAnchor,
  encodeAuditLine,
} from "./line.js";
import type { AuditAnchor } from "./line.js";
import {
  auditSealPath,
  encodeSeal,
  isSealTemporaryName,
  parseSeal,
  readSealFile,
  sealTemporaryPath,
  writeSealFile,
} from "./seal.js";
import { ChainCheck, NEWLINE } from "./chain.js";
import type { Chain, Failure, MacCheck } from "./chain.js";
import { checkLogFile, holds } from "./chain-file.js";
import type { TailRule } from "./chain-file.js";
import { sealSeq, verifyVouched } from "./verify.js";
import type { AuditProblem } from "./verify.js";

/** Options of {@link AuditSink.open}. */
export interface AuditSinkOptions {
  /**
   * fsync the file after every line (and, with a key, the seal), so that a
   * record whose append resolved survives a power cut. Without it a crash of
   * the machine (not of the process) may lose the last lines; verify then
   * sees a shorter log, which only an anchor or the seal reveals.
   * @default false
   */
  readonly fsync?: boolean;
  /**
   * Called once for every record that did not land (invalid record, I/O
   * failure, lock not taken, closed sink), whichever way it was appended.
   * The observer built by {@link auditObserver} has no one to reject to:
   * this is where its failures surface, besides {@link AuditSink.flush}.
   * Errors thrown by the callback are ignored, and so is the rejection of a
   * promise it returns.
   */
  readonly onError?: (error: AuditError) => void;
  /**
   * The anchor the writer last reported for this log. When given, opening an
   * existing log also checks it against the anchor (see
   * {@link AuditVerifyOptions.anchor}).
   */
  readonly anchor?: AuditAnchor;
  /**
   * A secret only the writer holds (at least `AUDIT_KEY_MIN_BYTES` bytes; 32
   * random bytes are right). With it every line carries a `mac` and the
   * writer keeps a seal beside the log (`<log>.seal`), so that verification
   * with the same key detects lines forged by anyone without it and trailing
   * lines removed, with no anchor. A keyed log must always be opened with
   * its key, and an unkeyed one without: omit `key` (a `key` set to
   * `undefined`, as an unset environment variable gives it, is refused).
   */
  readonly key?: AuditKey;
  /**
   * How long an append waits for the lock another process holds on the log
   * before it fails with {@link AuditLockError}: a non-negative integer of
   * milliseconds (0 tries once).
   * @default 10000
   */
  readonly lockTimeoutMs?: number;
}

/** The keys of {@link AuditSinkOptions}, in the order an unknown one's refusal lists them. */
const SINK_OPTIONS = everyKey<AuditSinkOptions>()(["fsync", "onError", "anchor", "key", "lockTimeoutMs"]);

/** What one append wrote: the line's `seq` and `hash` (the log's new anchor). */
export type AuditAppend = AuditAnchor;

const NO_FOLLOW = constants.O_NOFOLLOW ?? 0;
/** A lock older than this was left by a writer that hung or died elsewhere; appends hold it for milliseconds. */
const STALE_LOCK_MS = 30_000;

/**
 * The most bytes of records one write takes. Appends made together beyond it
 * go out in the writes after it: one string of all their lines could pass the
 * longest string the runtime holds (512 MiB), and one write holds all of it.
 */
const BATCH_MAX_BYTES = 64 * 1024 * 1024;

/** How many bytes end a line from its `hash` on: `,"hash":"<64 hex>","mac":"<64 hex>"}` and its newline. */
const ANCHOR_TAIL_BYTES = ',"hash":"","mac":""}\n'.length + 2 * 64;

/**
 * Why a log with `names` names (hard links) is refused. The lock is a file
 * beside the name a writer opened: a writer through another name would take
 * another lock, and two writers appending at once would fork the chain.
 */
function linkedMessage(path: string, names: number, refused: string): string {
  return (
    `audit log ${path} has ${names} names (hard links) and ${refused}: a writer through another name ` +
    `would take another lock (${path}.lock is beside this one) and fork the chain; remove the other names`
  );
}

/** Errors of writes that failed and were cut back, or wrote nothing: the log is as it was before them. */
const undone = new WeakSet<AuditError>();

/**
 * The files (`dev:ino`) open for appending in this process: one set for every
 * copy of loopctl the process loads (its ESM and CommonJS builds, a bundle),
 * so that no copy opens a second sink on a file another copy has open.
 */
function openFiles(): Set<string> {
  return processShared("loopctl.audit.openFiles", () => new Set<string>());
}

/** A chain check that keeps the last line it was handed (its bytes, not a copy), to find it again later. */
class LastLineCheck extends ChainCheck {
  last: Uint8Array | undefined;

  override line(bytes: Uint8Array): boolean {
    this.last = bytes;
    return super.line(bytes);
  }
}

/** What tests set to drive {@link AuditSink.open} through its edges. */
export interface SinkSeams {
  /** Runs after opening reads the log and before it takes the lock. */
  readonly beforeLock?: () => Promise<void>;
  /** The clock that spaces the sink's looks for abandoned claims; `performance.now` by default. */
  readonly now?: () => number;
  /** The path of the seal's next temporary file (`sealPath` being the seal's); a fresh random one by default. */
  readonly sealTemporary?: (sealPath: string) => string;
}

/** {@link AuditSink.open}, with its seams. */
export let openSink: (path: string, options: AuditSinkOptions | undefined, seams: SinkSeams) => Promise<AuditSink>;

/**
 * An append-only, hash-chained JSONL log of {@link GateDecision} records.
 *
 * Line format (one line per record, UTF-8, each ending in `\n`):
 *
 * ```text
 * {"seq":<n>,"prev":"<64 hex>","record":<GateDecision JSON>,"hash":"<64 hex>"}
 * ```
 *
 * - `seq` counts lines from 1 with no gaps.
 * - `hash` is sha256 (lowercase hex) over the exact UTF-8 bytes of the line
 *   without its hash member, that is `{"seq":…,"prev":…,"record":…}`; since
 *   `hash` is checked against those bytes, it commits to every byte of the
 *   line. The members always come in this order and `hash` is last, but for
 *   `mac` in a keyed log: `…,"hash":"<64 hex>","mac":"<64 hex>"}`, the
 *   HMAC-SHA256 of `loopctl-audit-line:<hash>` under the key.
 * - `prev` is the previous line's `hash`; line 1 has {@link AUDIT_GENESIS}
 *   (64 zeros).
 * - `record` is the record as `GateDecisionSchema` parses it, keys in schema
 *   order: `tool, argsDigest, argsSha256` (when the record has it)`, verdict,
 *   ruleId, ruleSource, matchedPattern, reason, ts`.
 *
 * The file is opened once, `O_APPEND | O_CREAT`, mode `0600` (tightened to
 * `0600` if it already exists wider), never through a symbolic link; a
 * missing folder is created `0700`. Every write takes a lock file beside
 * the log (`<log>.lock`), reads what other processes appended since, checks
 * it continues the chain, and only then, if the lock is still its own, writes
 * its lines after theirs: any number of processes can write one log and the
 * chain stays linear. Appends
 * within a process land in call order; those made while a write is under way
 * go out together in the next one. Opening an existing log
 * verifies it and resumes the chain from its last line (the lock is taken
 * only to check what other writers added while it was read, so they do not
 * wait on a long log's verification); a log that does not
 * verify, or that stops verifying (cut short, a line another writer forged),
 * is refused with {@link AuditCorruptError} and never appended to. A second
 * sink on a file already open in this process is refused with
 * {@link AuditBusyError}. A write that fails part-way (disk full, file too
 * large), or whose seal cannot be replaced after it, is cut back to where it
 * began, so the log stays one that verifies and later appends go on once
 * there is room; after any other I/O failure, or when cutting back fails
 * too, the sink refuses every later append: a half-written line may be on
 * disk, and lines after it would only hide it.
 */
export class AuditSink {
  /** The absolute path of the log file. */
  readonly path: string;
  readonly #handle: FileHandle;
  readonly #fileKey: string;
  readonly #fsync: boolean;
  readonly #key: Buffer | undefined;
  readonly #lockTimeoutMs: number;
  readonly #onError: ((error: AuditError) => void) | undefined;
  readonly #now: () => number;
  readonly #sealTemporary: (sealPath: string) => string;
  /** When this sink last looked for abandoned claims beside the log, by {@link #now}. */
  #claimsSweptAt: number | undefined;
  #anchor: AuditAnchor;
  /**
   * With a key: the line the seal vouched for when this sink last checked or
   * replaced it. A seal found there again, or at a line this sink read since,
   * is taken at once; any other is checked against the whole log.
   */
  #sealed: AuditAnchor | undefined;
  /** How many bytes of the file have been verified (or written) by this sink. */
  #size: number;
  /** Appends waiting for the next write. */
  #pending: {
    record: GateDecision;
    bytes: number;
    resolve: (anchor: AuditAppend) => void;
    reject: (error: AuditError) => void;
  }[] = [];
  /** The loop writing pending appends, while it runs. */
  #draining: Promise<void> | undefined;
  /**
   * Settles once the last append queued so far has: appends settle in the
   * order they were queued, so every earlier one has then too.
   */
  #queued: Promise<void> = Promise.resolve();
  #dead: AuditError | undefined;
  #lost: AuditError | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;

  private constructor(
    path: string,
    handle: FileHandle,
    fileKey: string,
    key: Buffer | undefined,
    options: AuditSinkOptions,
    seams: SinkSeams,
  ) {
    this.path = path;
    this.#handle = handle;
    this.#fileKey = fileKey;
    this.#key = key;
    this.#anchor = AUDIT_EMPTY_ANCHOR;
    this.#size = 0;
    this.#fsync = options.fsync ?? false;
    this.#lockTimeoutMs = options.lockTimeoutMs ?? 10_000;
    this.#onError = options.onError;
    this.#now = seams.now ?? (() => performance.now());
    this.#sealTemporary = seams.sealTemporary ?? sealTemporaryPath;
  }

  /**
   * Opens (creating if missing) the log at `path` and resumes its chain.
   * @throws AuditConfigError when `path` is not a non-empty string, `options` not an object (or
   *   an AbortSignal) or holding a key that is not one of these options,
   *   `options.lockTimeoutMs` not a non-negative integer, `fsync` not a boolean, `onError` not a
   *   function, or `key` given as `undefined`.
   * @throws AuditAnchorError when `options.anchor` is malformed.
   * @throws AuditKeyError when `options.key` is not a string or bytes, too short, or the log is
   *   keyed and no key is given.
   * @throws AuditPathError when `path` is a symbolic link, not a regular file, or a file with
   *   another name (a hard link).
   * @throws AuditCorruptError when the existing log does not verify (against
   *   `options.anchor`, and with a key against the key and its seal).
   * @throws AuditLockError when another process holds the log's lock too long.
   * @throws AuditIoError when the folder or file cannot be created or read.
   */
  static async open(path: string, options?: AuditSinkOptions): Promise<AuditSink> {
    return openSink(path, options, {});
  }

  // `this`, not `AuditSink`: a class that names itself in its own body is renamed by the bundler
  // (`var AuditSink = class _AuditSink`). #open is only ever called here, on the class.
  static {
    openSink = (path, options, seams) => this.#open(path, options, seams);
  }

  static async #open(path: string, options: AuditSinkOptions | undefined, seams: SinkSeams): Promise<AuditSink> {
    assertPathArgument(path, "cannot open an audit log");
    const abs = resolve(path);
    options = optionsArgument(options, `cannot open audit log ${abs}`, SINK_OPTIONS);
    assertOptionType(options.fsync, "fsync", "boolean", `cannot open audit log ${abs}`);
    assertOptionType(options.onError, "onError", "function", `cannot open audit log ${abs}`);
    if (options.anchor !== undefined) assertAuditAnchor(options.anchor);
    assertKeyNotUndefined(options, `cannot open audit log ${abs}`);
    const key = options.key === undefined ? undefined : auditKeyBytes(options.key);
    const problem = options.lockTimeoutMs === undefined ? undefined : lockMsProblem(options.lockTimeoutMs);
    if (problem !== undefined) {
      throw new AuditConfigError("lockTimeoutMs", `cannot open audit log ${abs}: options.lockTimeoutMs ${problem}`);
    }
    const before = await lstat(abs).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw new AuditIoError(abs, `cannot inspect audit log ${abs}: ${describe(error)}`, {
        cause: error,
      });
    });
    if (before?.isSymbolicLink()) {
      throw new AuditPathError(abs, `audit log ${abs} is a symbolic link; refusing to write through it`);
    }
    if (before && !before.isFile()) {
      throw new AuditPathError(abs, `audit log ${abs} is not a regular file`);
    }
    // The folders made for the log: with fsync, their parents are synced too.
    let made: string[] = [];
    if (!before) {
      try {
        made = foldersMade(dirname(abs), await mkdir(dirname(abs), { recursive: true, mode: 0o700 }));
      } catch (error) {
        throw new AuditIoError(abs, `cannot create the folder of audit log ${abs}: ${describe(error)}`, {
          cause: error,
        });
      }
    }

    let handle: FileHandle;
    try {
      // O_NOFOLLOW closes the gap between lstat and open: a link swapped in
      // meanwhile fails here (ELOOP) instead of being written through.
      handle = await open(abs, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | NO_FOLLOW, 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ELOOP") {
        throw new AuditPathError(abs, `audit log ${abs} is a symbolic link; refusing to write through it`, {
          cause: error,
        });
      }
      throw new AuditIoError(abs, `cannot open audit log ${abs}: ${describe(error)}`, { cause: error });
    }

    let fileKey: string | undefined;
    try {
      const stat = await handle.stat();
      if (!stat.isFile()) {
        throw new AuditPathError(abs, `audit log ${abs} is not a regular file`);
      }
      if (before && (before.ino !== stat.ino || before.dev !== stat.dev)) {
        throw new AuditPathError(abs, `audit log ${abs} was replaced while being opened`);
      }
      if (stat.nlink > 1) throw new AuditPathError(abs, linkedMessage(abs, stat.nlink, "is not opened"));
      const id = `${stat.dev}:${stat.ino}`;
      if (openFiles().has(id)) throw new AuditBusyError(abs);
      openFiles().add(id);
      fileKey = id;
      if ((stat.mode & 0o077) !== 0) await handle.chmod(0o600);
      const sink = new this(abs, handle, fileKey, key, options, seams);
      await sink.#resume(options.anchor, seams);
      if (!before && options.fsync) {
        for (const folder of [...made.map((folder) => dirname(folder)), dirname(abs)]) await syncFolder(folder);
      }
      return sink;
    } catch (error) {
      if (fileKey !== undefined) openFiles().delete(fileKey);
      await handle.close().catch(() => undefined);
      if (
        error instanceof AuditPathError ||
        error instanceof AuditCorruptError ||
        error instanceof AuditBusyError ||
        error instanceof AuditKeyError ||
        error instanceof AuditLockError ||
        error instanceof AuditIoError
      ) {
        throw error;
      }
      throw new AuditIoError(abs, `cannot read or tighten audit log ${abs}: ${describe(error)}`, { cause: error });
    }
  }

  /**
   * Verifies the whole log (and its seal) and takes its end as this sink's
   * starting point. The log as it is found is read and verified before the
   * lock is taken, however long it is; under the lock only what other writers
   * added meanwhile is, so that they never wait on a long log's verification
   * (the whole log again only when the line it read last is no longer at its end).
   */
  async #resume(anchor: AuditAnchor | undefined, seams: SinkSeams): Promise<void> {
    const key = this.#key;
    const sealPath = auditSealPath(this.path);
    const macs: MacCheck = key === undefined ? { type: "none", keyed: undefined } : { type: "key", key };
    // Of every line only the hashes the anchor and the seal vouch for are
    // kept, so that opening a log holds no more of it however long it is.
    let last: Uint8Array | undefined;
    const readWhole = async (tail: TailRule, seal: string | null): Promise<Chain> => {
      let check: LastLineCheck | undefined;
      const { outcome, bytes } = await checkLogFile(
        this.#handle,
        () =>
          (check = new LastLineCheck(AUDIT_EMPTY_ANCHOR, macs, {
            records: false,
            hashes: [anchor?.seq, sealSeq(key, seal)],
          })),
        { tail },
      );
      if ("ok" in outcome) throw this.#corrupt(outcome.line, outcome.problem, outcome.message);
      this.#anchor = outcome.anchor;
      this.#size = bytes;
      last = check?.last;
      return outcome;
    };
    // The seal found now is, but for a write meanwhile, the one found under the lock.
    // A writer may be part-way through a line: the rest of it is read under the lock.
    let read = await readWhole("cut", key === undefined ? null : await readSealFile(sealPath));
    await seams.beforeLock?.();
    await this.#locked(async (lock) => {
      await this.#removeAbandonedClaims(lock);
      const seal = await readSealFile(sealPath);
      // A writer whose write failed cuts the log back under the lock, taking
      // away whole lines of it this read may have seen, and other writers may
      // have written other lines in their place since: unless the log still
      // holds, where this read ended, the line it read last, read it again.
      if (!(await this.#endsWith(this.#size, last))) read = await readWhole("strict", seal);
      const added = await this.#catchUp(key === undefined ? { type: "none", keyed: read.keyed } : undefined, [
        anchor?.seq,
        sealSeq(key, seal),
      ]);
      let chain: Chain = added === undefined ? read : { ...added, hashes: new Map([...read.hashes, ...added.hashes]) };
      const sealed = sealSeq(key, seal);
      if (sealed !== undefined && sealed <= chain.anchor.seq && !chain.hashes.has(sealed)) {
        // A seal replaced after the first read, vouching for a line before
        // the log's end (its writer stopped before its next seal): read the
        // log again, keeping that line's hash.
        chain = await readWhole("strict", seal);
      }
      const result = verifyVouched(chain, anchor, key, seal);
      if (!result.ok) throw this.#corrupt(result.line, result.problem, result.message);
      if (key === undefined && (result.keyed || seal !== null)) {
        throw new AuditKeyError(`audit log ${this.path} was written with a key; open it with its key`);
      }
      // A keyed log gets its seal before its first line, so that a seal gone
      // missing later always means it was removed.
      if (key !== undefined && seal === null) {
        await writeSealFile(sealPath, encodeSeal(key, result.anchor), this.#fsync, this.#sealTemporary(sealPath));
      }
      this.#sealed = key === undefined ? undefined : seal === null ? result.anchor : parseSeal(seal);
    });
  }

  /**
   * Whether the file still ends, at this sink's end ({@link #size}), with the
   * `hash` (and any `mac`) of the line this sink's anchor names: that hash
   * commits to the line and every line before it. An empty log ends anywhere.
   */
  async #endsWithAnchor(): Promise<boolean> {
    if (this.#size === 0) return true;
    const at = Math.max(0, this.#size - ANCHOR_TAIL_BYTES);
    const found = Buffer.alloc(this.#size - at);
    const { bytesRead } = await this.#handle.read(found, 0, found.length, at);
    const tail = found.subarray(0, bytesRead).toString("latin1");
    const hash = `,"hash":"${this.#anchor.hash}"`;
    return (
      bytesRead === found.length &&
      (tail.endsWith(`${hash}}\n`) || new RegExp(`${hash},"mac":"[0-9a-f]{64}"\\}\n$`).test(tail))
    );
  }

  /** Whether the file holds `line` (`undefined`: no line) and its newline right before byte `end`. */
  async #endsWith(end: number, line: Uint8Array | undefined): Promise<boolean> {
    if (line === undefined) return end === 0;
    // The byte before it too: the line must start a line, not end a longer one.
    const start = end - line.length - 1;
    const newline = Buffer.from([NEWLINE]);
    const bytes = start > 0 ? Buffer.concat([newline, line, newline]) : Buffer.concat([line, newline]);
    return holds(this.#handle, { at: start > 0 ? start - 1 : start, bytes });
  }

  #corrupt(line: number, problem: AuditProblem, message: string): AuditCorruptError {
    return new AuditCorruptError(
      this.path,
      line,
      problem,
      `audit log ${this.path} does not verify, refusing to append: ${message}`,
    );
  }

  /** Runs `body` holding the log's cross-process lock. */
  async #locked<T>(body: (lock: HeldLock) => Promise<T>): Promise<T> {
    const lockPath = `${this.path}.lock`;
    try {
      return await withLedgerLock(lockPath, { timeoutMs: this.#lockTimeoutMs, staleMs: STALE_LOCK_MS }, body);
    } catch (error) {
      if (error instanceof LedgerLockError) {
        // The lock's own message starts with the path it names; say the rest in the log's terms.
        const at = error.message.indexOf(`${lockPath}: `);
        const problem = at < 0 ? error.message : error.message.slice(at + lockPath.length + 2);
        throw new AuditLockError(this.path, `cannot lock audit log ${this.path} (${lockPath}): ${problem}`, {
          cause: error,
        });
      }
      throw error;
    }
  }

  /**
   * Removes the claims to break the log's lock (`<log>.lock.break-<16 hex>`)
   * that writers killed while breaking an abandoned lock left beside the log,
   * once they are abandoned (see {@link HeldLock.removeAbandonedClaims}): a
   * live breaker's stays, and the seal's temporary files (`<log>.seal.tmp-<24 hex>`)
   * writers that died while replacing the seal left, once as old as an abandoned
   * lock. Runs under the lock, when the sink opens and then at
   * most once every {@link STALE_LOCK_MS}, the age a claim must reach first, so
   * that appends do not each read a folder that may hold many rotated logs.
   * Never fails.
   */
  async #removeAbandonedClaims(lock: HeldLock): Promise<void> {
    const now = this.#now();
    if (this.#claimsSweptAt !== undefined && now - this.#claimsSweptAt < STALE_LOCK_MS) return;
    this.#claimsSweptAt = now;
    const folder = dirname(this.path);
    const names = await readdir(folder).catch(() => []);
    await lock.removeAbandonedClaims(names);
    // A writer holds the lock while it replaces the seal, for milliseconds: a
    // temporary file of the seal as old as an abandoned lock is one a writer
    // that died mid-replace left behind.
    const seal = basename(auditSealPath(this.path));
    for (const name of names) {
      if (!isSealTemporaryName(seal, name)) continue;
      const file = join(folder, name);
      const found = await lstat(file).catch(() => undefined);
      if (found && Date.now() - found.mtimeMs > STALE_LOCK_MS) await unlink(file).catch(() => undefined);
    }
  }

  /**
   * The `seq` and `hash` of the log's last line as this sink last saw it:
   * its own last append, or a later line another process added before it.
   * Keep it apart from the log and pass it to {@link verifyAuditLog} to
   * detect removed trailing lines.
   */
  get anchor(): AuditAnchor {
    return this.#anchor;
  }

  /**
   * Appends one record as the next line. Appends land in call order; those
   * made while a write is under way go out together in the next one (one
   * lock, one write, one seal). Resolves once the line is written (and
   * synced, with `fsync`).
   * @throws AuditRecordError when `record` is not a valid GateDecision, or its line would be longer
   *   than `AUDIT_LINE_MAX_BYTES`.
   * @throws AuditLockError when another process held the log's lock too long, or broke this
   *   sink's lock before it wrote (nothing was written).
   * @throws AuditCorruptError when the log no longer verifies where this sink left it (cut short, or
   *   a line another writer added does not continue the chain), or, keyed, against its seal; the sink
   *   then refuses later appends.
   * @throws AuditIoError when writing failed. What was written of the failed lines is cut off
   *   again and later appends may go on; when that fails too, or reading the log failed, the sink
   *   refuses later appends.
   * @throws AuditPathError when the log has another name (a hard link) meanwhile: nothing was
   *   written, and later appends go on once it is gone.
   * @throws AuditPathError when the log's path no longer leads to the file this sink opened (moved
   *   aside, replaced, removed): nothing was written, and the sink refuses later appends.
   * @throws AuditKeyError when this sink has no key and a writer with one sealed the log, still
   *   empty, since it opened: nothing was written, and the sink refuses later appends.
   * @throws AuditClosedError after {@link AuditSink.close}.
   */
  append(record: GateDecision): Promise<AuditAppend> {
    if (this.#closed) return Promise.reject(this.#lose(new AuditClosedError(this.path)));
    const parsed = this.#parse(record);
    if (parsed instanceof AuditRecordError) return Promise.reject(this.#lose(parsed));
    let settled!: () => void;
    this.#queued = new Promise((done) => (settled = done));
    return new Promise((resolve, reject) => {
      this.#pending.push({
        ...parsed,
        resolve: (anchor) => {
          resolve(anchor);
          settled();
        },
        reject: (error) => {
          reject(error);
          settled();
        },
      });
      this.#draining ??= this.#drain();
    });
  }

  /** `record` as the schema reads it and the bytes of its JSON, or why it is not a GateDecision. */
  #parse(record: unknown): { record: GateDecision; bytes: number } | AuditRecordError {
    const refuse = (why: string, cause: unknown): AuditRecordError =>
      new AuditRecordError(`not a GateDecision, not written to ${this.path}: ${why}`, { cause });
    try {
      const parsed = GateDecisionSchema.safeParse(record);
      if (!parsed.success) return refuse(zodIssuesLine(parsed.error, 1), parsed.error);
      // Verification reports a line longer than AUDIT_LINE_MAX_BYTES as
      // malformed: a log this sink wrote must never hold one.
      const bytes = Buffer.byteLength(JSON.stringify(parsed.data), "utf8");
      if (bytes > RECORD_MAX_BYTES) {
        return new AuditRecordError(
          `a record of ${bytes} bytes of JSON, not written to ${this.path}: a line of the log holds at ` +
            `most ${RECORD_MAX_BYTES} bytes of record (AUDIT_LINE_MAX_BYTES, ${AUDIT_LINE_MAX_BYTES}, with its seq and hashes)`,
        );
      }
      return { record: parsed.data, bytes };
    } catch (error) {
      // A getter that throws, a revoked Proxy: safeParse lets that through.
      return refuse(`reading it threw: ${describe(error)}`, error);
    }
  }

  /**
   * Waits for every append made so far to settle, not for those made after
   * it: under a steady stream of appends it still settles. Rejects with the
   * first failure since the sink was opened, if any record did not land: a
   * lost audit record stays reported.
   */
  async flush(): Promise<void> {
    await this.#queued;
    if (this.#lost) throw this.#lost;
  }

  /**
   * Waits for pending appends, then closes the file. Later appends reject with
   * {@link AuditClosedError}. Idempotent. Failed appends are reported by
   * {@link AuditSink.flush}, not here.
   * @throws AuditIoError when closing the file fails.
   */
  close(): Promise<void> {
    if (!this.#closing) {
      this.#closed = true;
      this.#closing = (async () => {
        while (this.#draining) await this.#draining;
        openFiles().delete(this.#fileKey);
        try {
          await this.#handle.close();
        } catch (error) {
          throw new AuditIoError(this.path, `cannot close audit log ${this.path}: ${describe(error)}`, {
            cause: error,
          });
        }
      })();
    }
    return this.#closing;
  }

  /** Writes the pending appends, a batch at a time, until none is left. */
  async #drain(): Promise<void> {
    while (this.#pending.length > 0) {
      let take = 1;
      let bytes = (this.#pending[0] as { bytes: number }).bytes;
      for (let next = this.#pending[take]; next !== undefined && bytes + next.bytes <= BATCH_MAX_BYTES;) {
        bytes += next.bytes;
        next = this.#pending[++take];
      }
      const batch = this.#pending.splice(0, take);
      try {
        const anchors = await this.#write(batch.map((append) => append.record));
        batch.forEach((append, i) => append.resolve(anchors[i] as AuditAppend));
      } catch (error) {
        for (const append of batch) append.reject(this.#lose(error as AuditError));
      }
    }
    this.#draining = undefined;
  }

  async #write(records: readonly GateDecision[]): Promise<AuditAppend[]> {
    if (this.#dead) throw this.#dead;
    try {
      return await this.#locked(async (lock) => {
        await this.#removeAbandonedClaims(lock);
        await this.#assertAtPath();
        if (this.#key === undefined && this.#anchor.seq === 0) await this.#assertUnsealed();
        if (this.#key === undefined) await this.#catchUp();
        else await this.#catchUpSealed(this.#key);
        return this.#appendLines(records, lock);
      });
    } catch (thrown) {
      const error =
        thrown instanceof AuditCorruptError ||
        thrown instanceof AuditIoError ||
        thrown instanceof AuditKeyError ||
        thrown instanceof AuditLockError ||
        thrown instanceof AuditPathError
          ? thrown
          : new AuditIoError(this.path, `cannot append to audit log ${this.path}: ${describe(thrown)}`, {
              cause: thrown,
            });
      // A lock not taken wrote nothing, and a failed write cut back left the
      // log as it was; anything else may have left the log in a state no later
      // line should be written after.
      if (!(error instanceof AuditLockError) && !undone.has(error)) this.#dead = error;
      throw error;
    }
  }

  /**
   * Checks that the log's path still leads to the file this sink has open.
   * Runs under the lock. A file moved aside (rotated), replaced or removed
   * would take the lines, or lose them with its last handle, while the log at
   * the path went on without them and no append failed.
   * @throws AuditPathError when it does not, or when the file has another name (a hard link).
   */
  async #assertAtPath(): Promise<void> {
    let mine;
    let named;
    try {
      [mine, named] = await Promise.all([
        this.#handle.stat(),
        lstat(this.path).catch((error: unknown) => {
          if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
          throw error;
        }),
      ]);
    } catch (error) {
      throw new AuditIoError(this.path, `cannot inspect audit log ${this.path}: ${describe(error)}`, { cause: error });
    }
    if (named === undefined || named.ino !== mine.ino || named.dev !== mine.dev) {
      throw new AuditPathError(
        this.path,
        `audit log ${this.path} was moved, replaced or removed while this sink had it open; ` +
          "nothing more is written through it (close it, and open the log again)",
      );
    }
    if (mine.nlink > 1) {
      // Nothing was written: once the other name is gone, the next append goes on.
      const error = new AuditPathError(this.path, linkedMessage(this.path, mine.nlink, "is not written to"));
      undone.add(error);
      throw error;
    }
  }

  /**
   * Checks, for a sink without a key on a log still empty, that no writer
   * with a key has sealed the log since: a keyed writer that opened it empty
   * sealed it before any line, and a line without a `mac` would then start a
   * log that is keyed from its seal on. Runs under the lock; a log with lines
   * is checked line by line instead ({@link AuditSink.#catchUp}).
   * @throws AuditKeyError when the log has a seal.
   */
  async #assertUnsealed(): Promise<void> {
    if ((await readSealFile(auditSealPath(this.path))) !== null) {
      throw new AuditKeyError(
        `audit log ${this.path} was sealed by a writer with a key since this sink opened it without one; ` +
          "nothing is written through it (open the log with its key)",
      );
    }
  }

  /**
   * Reads and checks what other writers appended since this sink last read
   * or wrote, and moves this sink's end after it. Runs under the lock.
   * Resolves to the chain of the lines added, if any.
   * @throws AuditCorruptError when the log shrank or what was added does not continue the chain.
   */
  async #catchUp(
    macs: MacCheck = this.#key === undefined ? { type: "none", keyed: false } : { type: "key", key: this.#key },
    hashes: readonly (number | undefined)[] = [],
  ): Promise<Chain | undefined> {
    let outcome: Chain | Failure;
    let end: number;
    try {
      const size = (await this.#handle.stat()).size;
      if (size < this.#size) {
        throw this.#corrupt(
          this.#anchor.seq,
          "removed",
          `the log shrank from ${this.#size} to ${size} bytes since this sink last read it`,
        );
      }
      // A log cut back and written again since (logrotate's copytruncate, then
      // another process starting it afresh) may have reached or passed this
      // sink's end again: its last line must still end there.
      if (!(await this.#endsWithAnchor())) {
        throw this.#corrupt(
          this.#anchor.seq,
          "edited",
          `line ${this.#anchor.seq} is no longer where this sink last read or wrote it: ` +
            "the log was cut back or rewritten since (rotated by copytruncate?)",
        );
      }
      if (size === this.#size) return undefined;
      // Read as verification reads: a chunk at a time, so that however much
      // was added (a line gigabytes long, without a newline) this holds no
      // more than a line of it.
      ({ outcome, bytes: end } = await checkLogFile(
        this.#handle,
        () => new ChainCheck(this.#anchor, macs, { records: false, hashes }),
        { tail: "strict", from: this.#size },
      ));
    } catch (error) {
      if (error instanceof AuditCorruptError) throw error;
      throw new AuditIoError(this.path, `cannot read audit log ${this.path}: ${describe(error)}`, { cause: error });
    }
    if ("ok" in outcome) {
      // The added lines alone cannot tell a copy of a line before them from a
      // spliced one; the whole chain can, and finds an earlier change first.
      const failure = outcome;
      const whole = await checkLogFile(
        this.#handle,
        () => new ChainCheck(AUDIT_EMPTY_ANCHOR, macs, { records: false, hashes: [] }),
        { tail: "strict" },
      ).then(
        (checked) => checked.outcome,
        () => failure,
      );
      const found = "ok" in whole ? whole : failure;
      throw this.#corrupt(found.line, found.problem, found.message);
    }
    this.#anchor = outcome.anchor;
    this.#size = end;
    return outcome;
  }

  /**
   * {@link AuditSink.#catchUp} for a keyed log, which also checks that the
   * seal still vouches for a line the log holds before this sink replaces it.
   * Lines cut off a log's end are told only by the seal that vouches for
   * them: a sink that had not read that far, sealing the shorter log at its
   * own new end, would hide them for good. Runs under the lock. A seal at the
   * line this sink last found it at, or at one of the lines it read since, is
   * checked on its own; any other (missing, older, not a seal) is checked with
   * the whole log, as verification does.
   * @throws AuditCorruptError when the log does not verify against the seal.
   */
  async #catchUpSealed(key: Buffer): Promise<void> {
    const text = await readSealFile(auditSealPath(this.path));
    const seal = text === null ? undefined : parseSeal(text);
    const added = await this.#catchUp(undefined, [seal?.seq]);
    const known = [this.#sealed, this.#anchor];
    if (
      seal !== undefined &&
      sameMac(seal.mac, sealMac(key, seal.seq, seal.hash)) &&
      (known.some((point) => point?.seq === seal.seq && point.hash === seal.hash) ||
        added?.hashes.get(seal.seq) === seal.hash)
    ) {
      this.#sealed = { seq: seal.seq, hash: seal.hash };
      return;
    }
    let outcome: Chain | Failure;
    try {
      ({ outcome } = await checkLogFile(
        this.#handle,
        () => new ChainCheck(AUDIT_EMPTY_ANCHOR, { type: "key", key }, { records: false, hashes: [seal?.seq] }),
        { tail: "strict" },
      ));
    } catch (error) {
      throw new AuditIoError(this.path, `cannot read audit log ${this.path}: ${describe(error)}`, { cause: error });
    }
    const result = "ok" in outcome ? outcome : verifyVouched(outcome, undefined, key, text);
    if (!result.ok) throw this.#corrupt(result.line, result.problem, result.message);
    this.#sealed = seal === undefined ? undefined : { seq: seal.seq, hash: seal.hash };
  }

  /**
   * Writes the next lines in one write (and, keyed, the seal after them), if
   * the lock is still this sink's. Runs under the lock.
   * @throws AuditLockError when the lock was broken meanwhile (nothing written).
   */
  async #appendLines(records: readonly GateDecision[], lock: HeldLock): Promise<AuditAppend[]> {
    const anchors: AuditAppend[] = [];
    let text = "";
    let { seq, hash } = this.#anchor;
    for (const record of records) {
      const line = encodeAuditLine(++seq, hash, record, this.#key);
      hash = line.hash;
      text += line.text;
      anchors.push({ seq, hash });
    }
    const bytes = Buffer.from(text, "utf8");
    const lines = records.length === 1 ? `line ${seq}` : `lines ${seq - records.length + 1}-${seq}`;
    try {
      // A writer robbed of its lock (only ever for its age, by another host)
      // must not write: the new holder may have chained its own lines to the
      // same last line, and the forked log would be refused from then on.
      await lock.assertHeld();
    } catch (error) {
      throw new AuditLockError(
        this.path,
        `audit log ${this.path}: its lock ${this.path}.lock was broken while this writer held it; ${lines} not written`,
        { cause: error },
      );
    }
    const start = this.#size;
    try {
      await writeAll(this.#handle, bytes);
      if (this.#fsync) await this.#handle.sync();
    } catch (error) {
      throw await this.#cutBack(start, `cannot append ${lines} to audit log ${this.path}: ${describe(error)}`, error);
    }
    if (this.#key !== undefined) {
      try {
        const sealPath = auditSealPath(this.path);
        await writeSealFile(sealPath, encodeSeal(this.#key, { seq, hash }), this.#fsync, this.#sealTemporary(sealPath));
      } catch (error) {
        // The old seal still stands (it is replaced by a rename, last), so
        // cutting the lines off leaves the log and its seal as they were.
        throw await this.#cutBack(
          start,
          `cannot append ${lines} to audit log ${this.path}: the seal could not be updated: ${describe(error)}`,
          error,
        );
      }
    }
    this.#anchor = { seq, hash };
    if (this.#key !== undefined) this.#sealed = this.#anchor;
    this.#size += bytes.length;
    return anchors;
  }

  /**
   * Cuts the log back to `start`, where this sink's write began, after the
   * write or the seal after it failed (disk full, file too large, an I/O
   * error), and returns the error to report, `failed` saying what failed.
   * Runs under the lock, so every byte past `start` is this sink's. Part of
   * the write may be on disk: a torn last line would make every writer refuse
   * the log until someone repaired it by hand, and whole lines left there
   * would hold records whose appends were rejected. When the cut (and, with
   * `fsync`, its sync) succeeds the log is as it was before the write and
   * later appends may go on; when it fails, the error is not marked so, and
   * the sink refuses every later append.
   */
  async #cutBack(start: number, failed: string, failure: unknown): Promise<AuditIoError> {
    try {
      await this.#handle.truncate(start);
      if (this.#fsync) await this.#handle.sync();
    } catch (error) {
      return new AuditIoError(
        this.path,
        `${failed}; cutting the log back to the ${start} bytes before them failed too (${describe(error)}), ` +
          "so it may end in a torn line or in lines whose appends failed, and this sink appends no more",
        { cause: failure },
      );
    }
    const error = new AuditIoError(this.path, `${failed}; nothing of them was kept, the log is as it was`, {
      cause: failure,
    });
    undone.add(error);
    return error;
  }

  #lose(error: AuditError): AuditError {
    this.#lost ??= error;
    try {
      const returned = this.#onError?.(error) as unknown;
      // An async callback's rejection, left unheard, would end the process (node's default for
      // unhandled rejections) at the first lost record: any thenable, not only this realm's Promise.
      if (typeof (returned as { then?: unknown } | null | undefined)?.then === "function") {
        (returned as PromiseLike<unknown>).then(undefined, () => undefined);
      }
    } catch {
      // A failing error callback must not turn one lost record into a crash.
    }
    return error;
  }
}
