import { constants } from "node:fs";
import { lstat, mkdir, open } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { GateDecisionSchema } from "../engine/records.js";
import type { GateDecision } from "../engine/records.js";
import {
  AuditBusyError,
  AuditClosedError,
  AuditCorruptError,
  AuditIoError,
  AuditPathError,
  AuditRecordError,
} from "./errors.js";
import type { AuditError } from "./errors.js";
import { assertAuditAnchor, encodeAuditLine } from "./line.js";
import type { AuditAnchor } from "./line.js";
import { describe, verifyAuditBytes } from "./verify.js";

/** Options of {@link AuditSink.open}. */
export interface AuditSinkOptions {
  /**
   * fsync the file after every line, so that a record whose append resolved
   * survives a power cut. Without it a crash of the machine (not of the
   * process) may lose the last lines; verify then sees a shorter log, which
   * only an anchor reveals.
   * @default false
   */
  readonly fsync?: boolean;
  /**
   * Called once for every record that did not land (invalid record, I/O
   * failure, closed sink), whichever way it was appended. The observer
   * built by {@link auditObserver} has no one to reject to: this is where
   * its failures surface, besides {@link AuditSink.flush}. Errors thrown by
   * the callback are ignored.
   */
  readonly onError?: (error: AuditError) => void;
  /**
   * The anchor the writer last reported for this log. When given, opening an
   * existing log also checks it against the anchor (see
   * {@link AuditVerifyOptions.anchor}).
   */
  readonly anchor?: AuditAnchor;
}

/** What one append wrote: the line's `seq` and `hash` (the log's new anchor). */
export type AuditAppend = AuditAnchor;

const NO_FOLLOW = constants.O_NOFOLLOW ?? 0;

/** The files (`dev:ino`) open for appending in this process. */
const OPEN_FILES = new Set<string>();

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
 *   line. The members always come in this order and `hash` is always last.
 * - `prev` is the previous line's `hash`; line 1 has {@link AUDIT_GENESIS}
 *   (64 zeros).
 * - `record` is the record as `GateDecisionSchema` parses it, keys in schema
 *   order: `tool, argsDigest, verdict, ruleId, ruleSource, matchedPattern,
 *   reason, ts`.
 *
 * The file is opened once, `O_APPEND | O_CREAT`, mode `0600` (tightened to
 * `0600` if it already exists wider), never through a symbolic link; a
 * missing folder is created `0700`. Appends are serialized in-process so lines
 * never interleave; one process should write a given log (a second writer's
 * lines would fork the chain, which verify reports). Opening an existing log
 * verifies it and resumes the chain from its last line; a log that does not
 * verify is refused with {@link AuditCorruptError} and never appended to. A
 * second sink on a file already open in this process is refused with
 * {@link AuditBusyError}.
 * After an I/O failure the sink refuses every later append: a half-written
 * line may be on disk, and lines after it would only hide it.
 */
export class AuditSink {
  /** The absolute path of the log file. */
  readonly path: string;
  readonly #handle: FileHandle;
  readonly #fileKey: string;
  readonly #fsync: boolean;
  readonly #onError: ((error: AuditError) => void) | undefined;
  #anchor: AuditAnchor;
  #queue: Promise<void> = Promise.resolve();
  #dead: AuditError | undefined;
  #lost: AuditError | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;

  private constructor(
    path: string,
    handle: FileHandle,
    fileKey: string,
    anchor: AuditAnchor,
    options: AuditSinkOptions,
  ) {
    this.path = path;
    this.#handle = handle;
    this.#fileKey = fileKey;
    this.#anchor = anchor;
    this.#fsync = options.fsync ?? false;
    this.#onError = options.onError;
  }

  /**
   * Opens (creating if missing) the log at `path` and resumes its chain.
   * @throws AuditAnchorError when `options.anchor` is malformed.
   * @throws AuditPathError when `path` is a symbolic link or not a regular file.
   * @throws AuditCorruptError when the existing log does not verify (or not against `options.anchor`).
   * @throws AuditIoError when the folder or file cannot be created or read.
   */
  static async open(path: string, options: AuditSinkOptions = {}): Promise<AuditSink> {
    if (options.anchor !== undefined) assertAuditAnchor(options.anchor);
    const abs = resolve(path);
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
    if (!before) {
      try {
        await mkdir(dirname(abs), { recursive: true, mode: 0o700 });
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
      handle = await open(
        abs,
        constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | NO_FOLLOW,
        0o600,
      );
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
      const key = `${stat.dev}:${stat.ino}`;
      if (OPEN_FILES.has(key)) throw new AuditBusyError(abs);
      OPEN_FILES.add(key);
      fileKey = key;
      if ((stat.mode & 0o077) !== 0) await handle.chmod(0o600);
      const data = await readAll(handle, stat.size);
      const result = verifyAuditBytes(data, options.anchor ? { anchor: options.anchor } : {});
      if (!result.ok) {
        throw new AuditCorruptError(
          abs,
          result.line,
          result.problem,
          `audit log ${abs} does not verify, refusing to append: ${result.message}`,
        );
      }
      if (!before && options.fsync) await syncFolder(dirname(abs));
      return new AuditSink(abs, handle, fileKey, result.anchor, options);
    } catch (error) {
      if (fileKey !== undefined) OPEN_FILES.delete(fileKey);
      await handle.close().catch(() => undefined);
      if (
        error instanceof AuditPathError ||
        error instanceof AuditCorruptError ||
        error instanceof AuditBusyError
      ) {
        throw error;
      }
      throw new AuditIoError(abs, `cannot read or tighten audit log ${abs}: ${describe(error)}`, { cause: error });
    }
  }

  /**
   * The `seq` and `hash` of the last line written: keep it apart from the log
   * and pass it to {@link verifyAuditLog} to detect removed trailing lines.
   */
  get anchor(): AuditAnchor {
    return this.#anchor;
  }

  /**
   * Appends one record as the next line. Appends run one at a time in call
   * order. Resolves once the line is written (and synced, with `fsync`).
   * @throws AuditRecordError when `record` is not a valid GateDecision.
   * @throws AuditIoError when writing failed (the sink then refuses later appends).
   * @throws AuditClosedError after {@link AuditSink.close}.
   */
  append(record: GateDecision): Promise<AuditAppend> {
    if (this.#closed) return Promise.reject(this.#lose(new AuditClosedError(this.path)));
    const parsed = GateDecisionSchema.safeParse(record);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue && issue.path.length > 0 ? issue.path.join(".") : "the record";
      return Promise.reject(
        this.#lose(
          new AuditRecordError(`not a GateDecision, not written to ${this.path}: ${where}: ${issue?.message ?? "invalid"}`, {
            cause: parsed.error,
          }),
        ),
      );
    }
    const step = this.#queue.then(() => this.#write(parsed.data));
    this.#queue = step.then(
      () => undefined,
      () => undefined,
    );
    return step;
  }

  /**
   * Waits for every append made so far to settle. Rejects with the first
   * failure since the sink was opened, if any record did not land: a lost
   * audit record stays reported.
   */
  async flush(): Promise<void> {
    await this.#queue;
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
      this.#closing = this.#queue.then(async () => {
        OPEN_FILES.delete(this.#fileKey);
        try {
          await this.#handle.close();
        } catch (error) {
          throw new AuditIoError(this.path, `cannot close audit log ${this.path}: ${describe(error)}`, {
            cause: error,
          });
        }
      });
    }
    return this.#closing;
  }

  async #write(record: GateDecision): Promise<AuditAppend> {
    if (this.#dead) throw this.#lose(this.#dead);
    const seq = this.#anchor.seq + 1;
    const line = encodeAuditLine(seq, this.#anchor.hash, record);
    const bytes = Buffer.from(line.text, "utf8");
    try {
      let offset = 0;
      while (offset < bytes.length) {
        const { bytesWritten } = await this.#handle.write(bytes, offset, bytes.length - offset, null);
        if (bytesWritten <= 0) throw new Error("the file system accepted no bytes");
        offset += bytesWritten;
      }
      if (this.#fsync) await this.#handle.sync();
    } catch (error) {
      this.#dead = new AuditIoError(
        this.path,
        `cannot append line ${seq} to audit log ${this.path}: ${describe(error)}`,
        { cause: error },
      );
      throw this.#lose(this.#dead);
    }
    this.#anchor = { seq, hash: line.hash };
    return this.#anchor;
  }

  #lose(error: AuditError): AuditError {
    this.#lost ??= error;
    try {
      this.#onError?.(error);
    } catch {
      // A failing error callback must not turn one lost record into a crash.
    }
    return error;
  }
}

async function readAll(handle: FileHandle, size: number): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let position = 0;
  for (;;) {
    const buffer = Buffer.alloc(Math.max(64 * 1024, size - position));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, position);
    if (bytesRead === 0) break;
    chunks.push(buffer.subarray(0, bytesRead));
    position += bytesRead;
  }
  return Buffer.concat(chunks);
}

async function syncFolder(folder: string): Promise<void> {
  let dir: FileHandle | undefined;
  try {
    dir = await open(folder, constants.O_RDONLY);
    await dir.sync();
  } catch {
    // Some file systems cannot fsync a folder; the file's own fsync still holds.
  } finally {
    await dir?.close().catch(() => undefined);
  }
}
