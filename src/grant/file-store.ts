import { constants as bufferConstants } from "node:buffer";
import { randomBytes } from "node:crypto";
import { constants, type BigIntStats, type Stats } from "node:fs";
import { chmod, lstat, mkdir, open, readdir, rename, stat, unlink, type FileHandle } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { duplicateMember } from "../duplicate-member.js";
import { foldersMade } from "../folders-made.js";
import { projectIdentity, requireFolderPath } from "./digest.js";
import {
  GrantConfigError,
  GrantRecordError,
  LedgerCorruptError,
  LedgerFormatError,
  LedgerIoError,
  LedgerLockError,
} from "./errors.js";
import { shownValue } from "../errors.js";
import { everyKey, optionsProblem } from "../unknown-option.js";
import { Grant } from "./grant.js";
import { GrantIndex, coveringList, requireCoveringQuery } from "./grant-index.js";
import { recordTexts } from "./record-texts.js";
import { lockMsProblem, withLedgerLock, type HeldLock, type LedgerLockOptions } from "./ledger-lock.js";
import {
  assertSameRule,
  callSignal,
  revokedId,
  describeRule,
  requireGrant,
  sameRule,
  type GrantStore,
  type StoreCallOptions,
} from "./store.js";
import { shownText } from "../shown.js";

/** Options for {@link FileGrantStore}. */
export interface FileGrantStoreOptions {
  /**
   * How long a write waits for another process's lock before failing with
   * LedgerLockError: a non-negative integer of milliseconds (0 tries once).
   * @default 10000
   */
  readonly lockTimeoutMs?: number;
  /**
   * A lock taken on another host and older than this is treated as abandoned
   * and broken: a non-negative integer of milliseconds. A lock taken on this
   * host is broken as soon as its process is gone (or, on Linux, no thread
   * of it has the lock open any more: a worker thread terminated while
   * holding it), and never while its holder runs, however long it holds it.
   * @default 30000
   */
  readonly staleLockMs?: number;
  /** The clock used to name a corrupt ledger moved aside. @default Date.now */
  readonly now?: () => number;
  /**
   * Receives a {@link LedgerWarning} when a change to the ledger makes one of
   * the store's folders (`projects`, `projects/<id>`) owner-only again; a read
   * never changes a mode. Called synchronously; if it throws, the warning goes
   * to `process.emitWarning` instead.
   * @default emits a process warning (`name` "LoopctlWarning", `code` "LOOPCTL_LEDGER_TIGHTENED")
   */
  readonly onWarning?: (warning: LedgerWarning) => void;
  /**
   * Called once by a change that finds the ledger's lock held by another
   * writer and waits for it, so a program can say why it is waiting (the
   * `loopctl` CLI prints `message`). Called synchronously; what it throws is
   * ignored.
   * @default nothing is reported
   */
  readonly onLockWait?: (wait: LedgerLockWait) => void;
}

/** A change to the ledger is waiting for the lock another writer holds. */
export interface LedgerLockWait {
  /** The lock file (`grants.json.lock`). */
  readonly path: string;
  /** The holder's process id and host, or null while its lock record is being written. */
  readonly holder: { readonly pid: number; readonly hostname: string } | null;
  /** A sentence naming the lock and its holder. */
  readonly message: string;
}

/**
 * One of the store's folders was readable or searchable by group or others
 * and a change to the ledger has made it owner-only.
 */
export interface LedgerWarning {
  /** Stable code; also the `code` of the default process warning. */
  readonly code: "LOOPCTL_LEDGER_TIGHTENED";
  /** The folder that was tightened. */
  readonly path: string;
  /** Its permission bits before, e.g. `0o755`. */
  readonly previousMode: number;
  /** Its permission bits now, e.g. `0o700`. */
  readonly mode: number;
  /** A sentence naming the path and both modes. */
  readonly message: string;
}

/** Options for {@link FileGrantStore.clear}. */
export interface ClearOptions extends StoreCallOptions {
  /**
   * What to do with a corrupt ledger: `"refuse"` throws LedgerCorruptError
   * and touches nothing; `"keep-aside"` moves it to
   * `grants.json.corrupt-<ms>-<hex>` (owner-only) and leaves an empty ledger.
   * @default "refuse"
   */
  readonly corrupt?: "refuse" | "keep-aside";
}

interface Snapshot {
  readonly key: string;
  readonly grants: readonly Grant[];
  /**
   * Each grant's record as the file holds it, written back as it is while the
   * grant stays: fields of a newer version, which a read ignores, are not lost
   * by this version's saves.
   */
  readonly texts: ReadonlyMap<Grant, string>;
  /** Built on the first decision that needs it: a save never does. */
  index: GrantIndex | undefined;
  /**
   * The bytes the grants came from, kept while the file's stat alone cannot
   * vouch for them (see {@link settled}); undefined once it can.
   */
  bytes: Buffer | undefined;
}

const EMPTY_SNAPSHOT: Snapshot = {
  key: "missing",
  grants: [],
  texts: new Map(),
  index: new GrantIndex([]),
  bytes: undefined,
};

/**
 * How long after a file's last change a later change is sure to get other timestamps:
 * some file systems keep whole seconds (HFS+, ext4 with 128-byte inodes, some
 * network file systems), and Linux before 6.13 stamps files from a clock that
 * ticks every 1 to 10 ms.
 */
const TIMESTAMP_WINDOW_MS = 2000;

/**
 * A temporary ledger: `grants.json.tmp-<8 hex>`. Only this exact shape is
 * ever removed as a leftover: a name a person might give a copy of the ledger
 * (`grants.json.20261204`, `grants.json.bak`) is never taken for one.
 */
const TEMP_NAME = /^grants\.json\.tmp-[0-9a-f]{8}$/;

/**
 * The ledger's bytes: `[record,record,…]`. Written into one buffer sized
 * first rather than through one joined string: with 10k grants that is about
 * 2.5 ms instead of 8.7 ms per save, the rest being a 2 MB string and its
 * flattened copy for the collector.
 */
function encodeLedger(texts: readonly string[]): Buffer {
  let size = 2 + Math.max(texts.length - 1, 0);
  for (const text of texts) size += Buffer.byteLength(text, "utf8");
  const bytes = Buffer.allocUnsafe(size);
  let at = bytes.write("[");
  for (const [i, text] of texts.entries()) at += bytes.write(i === 0 ? text : `,${text}`, at);
  bytes.write("]", at);
  return bytes;
}

/**
 * Writes `bytes` to the new file `path` (0600, never through a symlink) and
 * syncs it. FileHandle.writeFile writes until every byte is down or throws
 * (ENOSPC on a full disk); write-file-atomic, used before, issued one write
 * and ignored a short count, so a full disk left half a ledger renamed into
 * place and reported success. The size is checked once more before the caller
 * renames the file over the ledger.
 */
async function writeWhole(path: string, bytes: Buffer): Promise<void> {
  const handle = await open(
    path,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  );
  try {
    // The umask may have taken bits from the owner.
    await handle.chmod(0o600);
    await handle.writeFile(bytes);
    await handle.sync();
    const { size } = await handle.stat();
    if (size !== bytes.length) throw new Error(`wrote ${size} of ${bytes.length} bytes`);
  } finally {
    await handle.close();
  }
}

/** The options of {@link FileGrantStore}: any other is refused. */
const OPTIONS = everyKey<FileGrantStoreOptions>()(["lockTimeoutMs", "staleLockMs", "now", "onWarning", "onLockWait"]);

/** Where a signal goes, for one given to the constructor: the store itself waits on nothing. */
const SIGNAL_HINT = "a signal is given to each call: { signal }";

/**
 * The constructor's `options`, refused unless an object of its options.
 * Ignored, a misspelt `lockTimeoutMs` would leave a save waiting the default
 * 10 s for a lock, and a misspelt `staleLockMs` an abandoned lock unbroken.
 */
function storeOptions(options: unknown): FileGrantStoreOptions {
  const hint = (key: string): string | undefined => (key === "signal" ? SIGNAL_HINT : undefined);
  const wrong = optionsProblem(options, OPTIONS, { signal: SIGNAL_HINT, hint });
  if (wrong === undefined) return options as FileGrantStoreOptions;
  throw new GrantConfigError(
    "FileGrantStore",
    "options",
    wrong.key === undefined ? wrong.problem : `holds an ${wrong.problem}`,
  );
}

/** The option's value, or `fallback` when it is not given. */
function lockMs(value: unknown, option: "lockTimeoutMs" | "staleLockMs", fallback: number): number {
  if (value === undefined) return fallback;
  const problem = lockMsProblem(value);
  if (problem !== undefined) throw new GrantConfigError("FileGrantStore", `options.${option}`, problem);
  return value as number;
}

/** The `now` option, or `Date.now` when it is not given. */
function nowOption(value: unknown): () => number {
  if (value === undefined) return Date.now;
  if (typeof value !== "function") {
    throw new GrantConfigError("FileGrantStore", "options.now", `must be a function, got ${shownValue(value)}`);
  }
  return value as () => number;
}

/** A reporting option (`onWarning`, `onLockWait`): a function, or undefined for none. */
function reportOption<T extends (...args: never[]) => void>(
  value: unknown,
  option: "onWarning" | "onLockWait",
): T | undefined {
  if (value === undefined || typeof value === "function") return value as T | undefined;
  throw new GrantConfigError("FileGrantStore", `options.${option}`, `must be a function, got ${shownValue(value)}`);
}

/** Resolves when `turn` settles, or rejects with the signal's reason if it aborts first. */
function untilSettled(turn: Promise<unknown>, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = (): void => reject(signal?.reason as Error);
    signal?.addEventListener("abort", onAbort, { once: true });
    void turn.finally(() => {
      try {
        signal?.removeEventListener("abort", onAbort);
      } catch {
        // callSignal saw it work; one that throws since must not leave this call, and every later one, waiting.
      }
      resolve();
    });
  });
}

/** `1 grant`, `2 grants`. */
function grantCount(count: number): string {
  return `${count} grant${count === 1 ? "" : "s"}`;
}

/** The nearest existing path above `path`, when it is not a folder (the file that makes `path` ENOTDIR). */
async function fileAbove(path: string): Promise<string | undefined> {
  for (let above = dirname(path); ; above = dirname(above)) {
    const found = await stat(above).catch(() => undefined);
    if (found !== undefined) return found.isDirectory() ? undefined : above;
    if (dirname(above) === above) return undefined;
  }
}

function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

// Windows has no POSIX modes or owners to check; symlinks are still refused there.
const POSIX_PERMISSIONS = process.platform !== "win32";
const GROUP_OTHER_BITS = 0o077;
const GROUP_OTHER_WRITE = 0o022;
const STICKY = 0o1000;

const { MAX_STRING_LENGTH } = bufferConstants;

/** What a call does to the ledger: read it, change it, or change it creating it if missing. */
type Access = "read" | "write" | "create";

interface OwnerAndMode {
  readonly uid: number | bigint;
  readonly mode: number | bigint;
}

/**
 * Where in `text` the fault `JSON.parse` reported lies, as ` at line L, column C` (C in characters),
 * when its message gives a position: a ledger edited over many lines needs its line.
 */
function placeOf(text: string, message: string): string {
  const position = /at position (\d+)/.exec(message)?.[1];
  if (position === undefined) return "";
  const before = text.slice(0, Number(position));
  const lineStart = before.lastIndexOf("\n") + 1;
  const line = before.split("\n").length;
  return ` at line ${line}, column ${Array.from(before.slice(lineStart)).length + 1}`;
}

function octal(mode: number): string {
  return mode.toString(8).padStart(3, "0");
}

function emitProcessWarning(warning: LedgerWarning): void {
  process.emitWarning(warning.message, { type: "LoopctlWarning", code: warning.code });
}

function statKey(stat: BigIntStats): string {
  return `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`;
}

/**
 * Whether bytes read from the file at `readAtMs` (taken before the read) are
 * the only bytes its stat can stand for. A change made within a timestamp
 * tick of the file's last change may keep every field of the stat: the same
 * size, the same times, and the same inode, which ext4 hands straight back to
 * the next temporary ledger once a rename frees it. A change made after
 * `readAtMs` gets a later ctime, and one well after it a different one. The
 * ctime, not the mtime: `cp -p`, `rsync -t` or `tar x` give a file the mtime
 * it had elsewhere, an hour ahead of this clock say (whose bytes would then be
 * read again at every decision for that hour), or one long past (whose stat
 * would be trusted at once, though the file changed a moment ago); the ctime
 * is always the time of its last change.
 */
function settled(stat: BigIntStats, readAtMs: number): boolean {
  return Number(stat.ctimeNs / 1_000_000n) + TIMESTAMP_WINDOW_MS < readAtMs;
}

/**
 * A {@link GrantStore} that keeps one JSON ledger per project, readable and
 * writable by the original implementation:
 * `<rootDir>/projects/<projectIdentity(projectDir)>/grants.json`, a compact
 * array of `{"id","tool","verdict","scope","pinned_descriptor","created_at_ms","note"}`.
 *
 * - Fail closed: a missing ledger is empty; an empty, unparseable or
 *   malformed one throws LedgerCorruptError and is never overwritten by
 *   `save`, `revoke` or `clear` (see `clear({ corrupt: "keep-aside" })`). A
 *   ledger in a later format (a JSON object with a `version`) throws
 *   LedgerFormatError and is never overwritten or moved aside.
 * - Writes replace the file atomically (owner-only 0600 from creation,
 *   fsynced, folder fsynced after the rename); folders are created 0700; a
 *   ledger path that is a symlink or not a regular file is never read or
 *   written through (LedgerIoError `"LEDGER_NOT_REGULAR_FILE"`).
 * - Every read and write first checks each folder from the root down
 *   (`<root>`, `projects`, `projects/<id>`): a symlink or non-folder beneath
 *   the root is refused (`"LEDGER_UNSAFE_PATH"`), so a swapped folder is never
 *   written through and a ledger planted elsewhere is never trusted (the
 *   root itself may be a symlink you set up). On POSIX systems a folder or
 *   ledger owned by another user (root excepted) or writable by group or
 *   others is refused (`"LEDGER_PERMISSIONS"`: whoever could write there could
 *   have planted grants), except a sticky root such as /tmp. Reading never
 *   changes a mode. A change makes `projects` and `projects/<id>` owner-only
 *   (0700) when others could read them, reported through `onWarning` (by
 *   default a process warning with code `"LOOPCTL_LEDGER_TIGHTENED"`), and
 *   writes the ledger as a new 0600 file; the root is never changed.
 * - Writers in any number of processes are serialized by the lock file
 *   `grants.json.lock`, and each change is a read-merge-write under it, so no
 *   grant or revocation is lost. A ledger with another name (a hard link),
 *   whose writers through that name would take the lock beside it, is never
 *   read or written (`"LEDGER_UNSAFE_PATH"`): its link count is checked at
 *   every read, and under the lock before every write.
 * - Parsed ledgers are cached by the file's identity (dev, ino, size, mtime,
 *   ctime), so repeated decisions do not reparse an unchanged file. That
 *   identity alone is trusted only for a ledger read more than 2 s after its
 *   ctime (its last change; its mtime may be a copied one): a change within
 *   one timestamp tick (a whole second on some file systems) can keep all
 *   five, since a freed inode is handed straight back to the next ledger. Until then each read, decisions and the read under
 *   the lock alike, compares the file's bytes with those the cache came from.
 */
export class FileGrantStore implements GrantStore {
  /** The ledger file this store reads and writes. */
  readonly ledgerPath: string;
  /** The lock file serializing writers (`<ledgerPath>.lock`). */
  readonly lockPath: string;
  readonly #root: string;
  readonly #projects: string;
  readonly #dir: string;
  readonly #lockTimeoutMs: number;
  readonly #staleLockMs: number;
  readonly #now: () => number;
  readonly #onWarning: (warning: LedgerWarning) => void;
  readonly #onLockWait: ((wait: LedgerLockWait) => void) | undefined;
  #snapshot: Snapshot | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  /** The folders this store made whose parents the next folder sync syncs too (see {@link #syncFolder}). */
  #madeFolders: string[] = [];

  /**
   * @param rootDir The grants root, usually {@link FileGrantStore.defaultRoot}.
   * @param projectDir The project folder; its {@link projectIdentity} names the ledger folder.
   * @throws {GrantConfigError} naming the argument when `rootDir` or
   *   `projectDir` is not a non-empty string or holds a NUL character, `options` is not an object (an
   *   `AbortSignal` included) or holds a key that is not one of its options,
   *   `lockTimeoutMs` or `staleLockMs` is not a non-negative integer, or `now`
   *   is given and is not a function, or `onWarning` or `onLockWait` is given
   *   and is not a function.
   */
  constructor(rootDir: string, projectDir: string, options: FileGrantStoreOptions = {}) {
    requireFolderPath(rootDir, "FileGrantStore", "rootDir");
    requireFolderPath(projectDir, "FileGrantStore", "projectDir");
    const given = storeOptions(options);
    this.#lockTimeoutMs = lockMs(given.lockTimeoutMs, "lockTimeoutMs", 10_000);
    this.#staleLockMs = lockMs(given.staleLockMs, "staleLockMs", 30_000);
    this.#root = resolve(rootDir);
    this.#projects = join(this.#root, "projects");
    this.#dir = join(this.#projects, projectIdentity(projectDir));
    this.ledgerPath = join(this.#dir, "grants.json");
    this.lockPath = `${this.ledgerPath}.lock`;
    this.#now = nowOption(given.now);
    this.#onWarning =
      reportOption<(warning: LedgerWarning) => void>(given.onWarning, "onWarning") ?? emitProcessWarning;
    this.#onLockWait = reportOption<(wait: LedgerLockWait) => void>(given.onLockWait, "onLockWait");
  }

  /**
   * The grants covering a call (see {@link GrantStore.covering}), looked up
   * in an index kept while the ledger is unchanged on disk.
   *
   * @throws {GrantConfigError} naming `tool` when it is not a non-empty
   *   string, or `canonicalArgs` when it is not `canonicalJson(args)`.
   * @throws {LedgerCorruptError} / {@link LedgerIoError} as {@link FileGrantStore.load} does.
   */
  async covering(tool: string, canonicalArgs: string, options: StoreCallOptions = {}): Promise<readonly Grant[]> {
    callSignal("FileGrantStore.covering", options);
    requireCoveringQuery("FileGrantStore.covering", tool, canonicalArgs);
    const snapshot = await this.#read();
    snapshot.index ??= new GrantIndex(snapshot.grants);
    return coveringList(snapshot.index.lookup(tool, canonicalArgs));
  }

  /**
   * The default grants root: `$XDG_STATE_HOME/loopctl/grants` when that is
   * an absolute path, else `~/.local/state/loopctl/grants` (home from
   * `$HOME`, else the OS).
   */
  static defaultRoot(env: Readonly<Record<string, string | undefined>> = process.env): string {
    const state = env["XDG_STATE_HOME"];
    if (state !== undefined && isAbsolute(state)) return join(state, "loopctl", "grants");
    const home = env["HOME"] !== undefined && env["HOME"] !== "" ? env["HOME"] : homedir();
    return join(home, ".local", "state", "loopctl", "grants");
  }

  /**
   * Every grant in the ledger, in file order.
   *
   * @throws {LedgerCorruptError} when the ledger exists but cannot be trusted.
   * @throws {LedgerFormatError} when the ledger is in a later format (a newer loopctl's).
   * @throws {LedgerIoError} when it cannot be read, is not a regular file, has
   *   another name (a hard link), or a folder on its path is a symlink or open
   *   to writes by others.
   */
  async load(options: StoreCallOptions = {}): Promise<Grant[]> {
    callSignal("FileGrantStore.load", options);
    return [...(await this.#read()).grants];
  }

  /**
   * Stores `grant` under the lock, replacing (and moving to the end) any
   * grant with its id; resolves to it.
   *
   * @throws {LedgerCorruptError} and leaves the file untouched when the ledger is corrupt.
   * @throws {LedgerLockError} when the lock cannot be taken in time.
   * @throws {LedgerIoError} when the ledger or a folder on its path is unsafe
   *   (a symlink, another user's, writable by others) or cannot be written.
   */
  async save(grant: Grant, options: StoreCallOptions = {}): Promise<Grant> {
    const signal = callSignal("FileGrantStore.save", options);
    requireGrant(grant, `FileGrantStore.save (${this.ledgerPath})`);
    return this.#locked(signal, "create", async (lock) => {
      const current = await this.#read(true);
      const at = current.grants.findIndex((g) => g.id === grant.id);
      assertSameRule(current.grants[at], grant, `grant ledger ${this.ledgerPath}`);
      await this.#write([...current.grants.filter((_, i) => i !== at), grant], current, lock);
      return grant;
    });
  }

  /**
   * Removes the grant with `id` under the lock; resolves to it, or to
   * `undefined` (writing nothing) when no such grant is stored.
   */
  async revoke(id: string, options: StoreCallOptions = {}): Promise<Grant | undefined> {
    const signal = callSignal("FileGrantStore.revoke", options);
    revokedId("FileGrantStore.revoke", id);
    const absent = (ledger: Snapshot): boolean => !ledger.grants.some((g) => g.id === id);
    return this.#locked(
      signal,
      undefined,
      async (lock) => {
        const current = await this.#read(true);
        const at = current.grants.findIndex((g) => g.id === id);
        const found = current.grants[at];
        if (found === undefined) return undefined;
        await this.#write(
          current.grants.filter((_, i) => i !== at),
          current,
          lock,
        );
        return found;
      },
      absent,
    );
  }

  /**
   * Removes every grant of `tool` (matched exactly) in one change under the
   * lock; resolves to them, in ledger order, or to an empty array (writing
   * nothing) when there are none. The ledger is replaced once, however many
   * grants go: revoking them one by one rewrites it once per grant.
   *
   * @throws {GrantConfigError} naming `tool` when it is not a non-empty string.
   * @throws {LedgerCorruptError} and leaves the file untouched when the ledger is corrupt.
   */
  async revokeTool(tool: string, options: StoreCallOptions = {}): Promise<Grant[]> {
    const signal = callSignal("FileGrantStore.revokeTool", options);
    if (typeof tool !== "string" || tool === "") {
      throw new GrantConfigError(
        "FileGrantStore.revokeTool",
        "tool",
        `must be a non-empty string, got ${shownValue(tool)}`,
      );
    }
    const none: Grant[] = [];
    const absent = (ledger: Snapshot): boolean => !ledger.grants.some((g) => g.tool === tool);
    return this.#locked(
      signal,
      none,
      async (lock) => {
        const current = await this.#read(true);
        const removed = current.grants.filter((g) => g.tool === tool);
        if (removed.length > 0) {
          await this.#write(
            current.grants.filter((g) => g.tool !== tool),
            current,
            lock,
            `the removal of ${grantCount(removed.length)} of tool ${shownText(tool)}`,
          );
        }
        return removed;
      },
      absent,
    );
  }

  /**
   * Removes every grant; resolves to how many were removed (a missing or
   * already empty ledger is left as it is). A corrupt ledger is refused
   * unless `options.corrupt` is `"keep-aside"`, which moves it aside (see
   * {@link FileGrantStore.resetCorrupt}) and resolves to 0.
   */
  async clear(options: ClearOptions = {}): Promise<number> {
    const empty = (ledger: Snapshot): boolean => ledger.grants.length === 0;
    return this.#locked(
      callSignal("FileGrantStore.clear", options, everyKey<ClearOptions>()(["signal", "corrupt"])),
      0,
      async (lock) => {
        let current: Snapshot;
        try {
          current = await this.#read(true);
        } catch (error) {
          if (!(error instanceof LedgerCorruptError && options.corrupt === "keep-aside")) throw error;
          await this.#moveAside();
          return 0;
        }
        const count = current.grants.length;
        if (count > 0) await this.#write([], current, lock, `the removal of the ledger's ${grantCount(count)}`);
        return count;
      },
      empty,
    );
  }

  /**
   * When the ledger is corrupt, moves it to `grants.json.corrupt-<ms>-<hex>`
   * beside it (owner-only, bytes untouched) so the next save starts a fresh
   * ledger; resolves to that path. Resolves to `undefined` and changes
   * nothing when the ledger is missing or sound. A ledger in a later format
   * is not corrupt: it is left where it is, and LedgerFormatError thrown.
   */
  async resetCorrupt(options: StoreCallOptions = {}): Promise<string | undefined> {
    return this.#locked(callSignal("FileGrantStore.resetCorrupt", options), undefined, async () => {
      try {
        await this.#read(true);
        return undefined;
      } catch (error) {
        if (error instanceof LedgerCorruptError) return this.#moveAside();
        throw error;
      }
    });
  }

  /**
   * Runs `change` under the lock, after this store's earlier changes and
   * the folder checks. `missing` is what a change resolves to without
   * running when the ledger's folders do not exist; `"create"` makes them.
   * `nothingToDo`, when given, is asked first of the ledger as read without
   * the lock: if it says so, the call resolves to `missing` taking no lock
   * and changing nothing (no folder made owner-only), so a revoke of what is
   * not there answers on a read-only file system too. Another process's
   * change made since is ordered after this call; a ledger that cannot be
   * read goes to the locked path, which says why.
   */
  #locked<T>(
    signal: AbortSignal | undefined,
    missing: T | "create",
    change: (lock: HeldLock) => Promise<T>,
    nothingToDo?: (ledger: Snapshot) => boolean,
  ): Promise<T> {
    return this.#serial(signal, async () => {
      if (nothingToDo !== undefined && missing !== "create") {
        const ledger = await this.#read().catch(() => undefined);
        if (ledger !== undefined && nothingToDo(ledger)) return missing;
      }
      if (!(await this.#secureFolders(missing === "create" ? "create" : "write"))) return missing as T;
      return withLedgerLock(this.lockPath, this.#lockOptions(signal), change);
    });
  }

  #lockOptions(signal: AbortSignal | undefined): LedgerLockOptions {
    const report = this.#onLockWait;
    const path = this.lockPath;
    const onWait = (holder: LedgerLockWait["holder"]): void => {
      const by = holder === null ? "a writer still writing its lock record" : `pid ${holder.pid} on ${holder.hostname}`;
      try {
        report?.({ path, holder, message: `waiting for the grant ledger lock ${path}, held by ${by}` });
      } catch {
        // Only a report: the wait goes on either way.
      }
    };
    return { timeoutMs: this.#lockTimeoutMs, staleMs: this.#staleLockMs, signal, onWait };
  }

  /**
   * Chains this store's own writes so they do not contend for the file lock.
   * A call aborted while it waits for its turn rejects at once; the call
   * after it still waits for the ones before.
   */
  #serial<T>(signal: AbortSignal | undefined, task: () => Promise<T>): Promise<T> {
    const turn = this.#queue;
    const run = untilSettled(turn, signal).then(() => {
      signal?.throwIfAborted();
      return task();
    });
    this.#queue = turn.then(() => run).catch(() => undefined);
    return run;
  }

  /**
   * Checks `<root>`, `projects` and `projects/<id>` in that order; false when
   * one is missing. `"create"` makes missing ones (0700). A write (`"write"`,
   * `"create"`) makes `projects` and `projects/<id>` owner-only when others
   * could read them; a read changes nothing. The root is the caller's choice
   * and is only checked, never changed. Checking from the root down is what
   * makes the later path-based calls safe: once a folder is known to be ours
   * and closed to writes by others, nobody else can swap what lies beneath it.
   */
  async #secureFolders(access: Access): Promise<boolean> {
    const folders = [this.#root, this.#projects, this.#dir];
    // The root is the caller's choice and may be a symlink; beneath it nothing is followed.
    const stats = await Promise.all(folders.map((path, i) => this.#inspectFolder(path, i === 0)));
    for (const [i, path] of folders.entries()) {
      let found = stats[i];
      if (found === undefined && i === 0) {
        // Nothing checks the folders above the root: one that is a file makes the root a path that
        // can never be a folder, to be refused as a root that is a file is, not read as no grants.
        const file = await fileAbove(path);
        if (file !== undefined) throw this.#unsafePath(path, `is under ${file}, which is a file, not a folder`);
      }
      if (found === undefined) {
        if (access !== "create") return false;
        found = await this.#makeFolder(path, i === 0);
      }
      if (found.isSymbolicLink()) throw this.#unsafePath(path, "is a symlink; refusing to follow it");
      if (!found.isDirectory()) throw this.#unsafePath(path, "is not a folder");
      if (this.#openToOthers(path, found, i === 0 ? "root" : "folder") && access !== "read" && i > 0) {
        await this.#tighten(path, found.mode & 0o777);
      }
    }
    return true;
  }

  /** The folder's stat, or undefined when it (or a folder above it) is missing. */
  async #inspectFolder(path: string, follow: boolean): Promise<Stats | undefined> {
    try {
      return await (follow ? stat(path) : lstat(path));
    } catch (error) {
      const code = errorCode(error);
      // ENOTDIR: a file sits where a folder above should be; the check of that folder names it.
      if (code === "ENOENT" || code === "ENOTDIR") return undefined;
      throw new LedgerIoError("LEDGER_IO", path, `cannot inspect it (${code ?? "error"})`, {
        cause: error,
        folder: true,
      });
    }
  }

  async #makeFolder(path: string, isRoot: boolean): Promise<Stats> {
    try {
      // Only the root's own parents are created recursively; beneath it each folder is made alone.
      const first = await mkdir(path, { recursive: isRoot, mode: 0o700 });
      this.#madeFolders.push(...(isRoot ? foldersMade(path, first) : [path]));
    } catch (error) {
      if (errorCode(error) !== "EEXIST") {
        throw new LedgerIoError("LEDGER_IO", path, `cannot create it (${errorCode(error) ?? "error"})`, {
          cause: error,
          folder: true,
        });
      }
    }
    const made = await this.#inspectFolder(path, isRoot);
    if (made === undefined) {
      throw new LedgerIoError("LEDGER_IO", path, "vanished as it was created", { folder: true });
    }
    return made;
  }

  /**
   * Throws for a path owned by another user (root excepted) or writable by
   * group or others; true when it is only readable or searchable by them.
   * A root folder writable by all but sticky (like /tmp) is accepted: nobody
   * can remove or rename what this user made in it.
   */
  #openToOthers(path: string, found: OwnerAndMode, what: "root" | "folder" | "ledger"): boolean {
    if (!POSIX_PERMISSIONS) return false;
    const isRoot = what === "root";
    const folder = what !== "ledger";
    const uid = process.getuid?.();
    const owner = Number(found.uid);
    if (uid !== undefined && owner !== uid && owner !== 0) {
      throw new LedgerIoError("LEDGER_PERMISSIONS", path, `is owned by uid ${owner}, not by this user (uid ${uid})`, {
        folder,
      });
    }
    const mode = Number(found.mode) & 0o777;
    if ((mode & GROUP_OTHER_WRITE) !== 0 && !(isRoot && (Number(found.mode) & STICKY) !== 0)) {
      throw new LedgerIoError(
        "LEDGER_PERMISSIONS",
        path,
        `is writable by group or others (mode ${octal(mode)}), so its grants may have been planted; check it, then run chmod go-w on it`,
        { folder },
      );
    }
    return (mode & GROUP_OTHER_BITS) !== 0;
  }

  async #tighten(path: string, previous: number): Promise<void> {
    const mode = previous & ~GROUP_OTHER_BITS;
    try {
      await chmod(path, mode);
    } catch (error) {
      throw new LedgerIoError("LEDGER_IO", path, `cannot make it owner-only (${errorCode(error) ?? "error"})`, {
        cause: error,
        folder: true,
      });
    }
    const warning: LedgerWarning = {
      code: "LOOPCTL_LEDGER_TIGHTENED",
      path,
      previousMode: previous,
      mode,
      message: `grant ledger path ${path} was open to group or others (mode ${octal(previous)}); made owner-only (mode ${octal(mode)})`,
    };
    try {
      this.#onWarning(warning);
    } catch {
      // The path is already secured; a failing handler must not lose the warning or fail the call.
      emitProcessWarning(warning);
    }
  }

  #unsafePath(path: string, problem: string): LedgerIoError {
    return new LedgerIoError("LEDGER_UNSAFE_PATH", path, `${problem}; refusing to use the ledger ${this.ledgerPath}`, {
      folder: true,
    });
  }

  #notRegular(): LedgerIoError {
    return new LedgerIoError(
      "LEDGER_NOT_REGULAR_FILE",
      this.ledgerPath,
      "is a symlink or not a regular file; refusing to read or write through it",
    );
  }

  /**
   * Refuses a ledger with `names` names (hard links). Its lock is a file
   * beside the name a writer uses: a writer through another name would take
   * another lock, and a change renamed over one name leaves the other on the
   * old file, so changes through one name would be lost through the other (a
   * save missing, a revoked grant still honoured).
   */
  #linked(names: bigint): LedgerIoError {
    return new LedgerIoError(
      "LEDGER_UNSAFE_PATH",
      this.ledgerPath,
      `has ${names} names (hard links); refusing to read or write it: a writer through another name ` +
        `would take another lock (${this.lockPath} is beside this one) and the names would part, ` +
        "losing changes; remove the other names (copy the ledger rather than link it)",
    );
  }

  /**
   * The ledger as it is on disk, from the cache while its stat is unchanged
   * (a chmod or chown changes the stat too) and, for a snapshot its stat
   * cannot vouch for yet (see {@link settled}), while its bytes are too: they
   * are read again, with every check of a first read, and compared.
   * `foldersChecked`: the caller has just run {@link #secureFolders} (the
   * writers do, before taking the lock). Never changes a mode: a ledger
   * readable by others is replaced by an owner-only one at the next change.
   */
  async #read(foldersChecked = false): Promise<Snapshot> {
    const path = this.ledgerPath;
    if (!foldersChecked && !(await this.#secureFolders("read"))) {
      this.#snapshot = undefined;
      return EMPTY_SNAPSHOT;
    }
    let stat: BigIntStats;
    try {
      stat = await lstat(path, { bigint: true });
    } catch (error) {
      if (errorCode(error) === "ENOENT") {
        this.#snapshot = undefined;
        return EMPTY_SNAPSHOT;
      }
      throw new LedgerIoError("LEDGER_IO", path, `cannot inspect (${errorCode(error) ?? "error"})`, { cause: error });
    }
    if (!stat.isFile()) throw this.#notRegular();
    if (stat.nlink > 1n) throw this.#linked(stat.nlink);
    const cached = this.#snapshot;
    if (cached !== undefined && cached.bytes === undefined && cached.key === statKey(stat)) return cached;

    const readAtMs = Date.now();
    let handle;
    try {
      // O_NONBLOCK: a FIFO swapped in since the lstat opens at once, and the check below refuses it.
      handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch (error) {
      const code = errorCode(error);
      if (code === "ENOENT") return EMPTY_SNAPSHOT;
      if (code === "ELOOP") throw this.#notRegular();
      throw new LedgerIoError("LEDGER_IO", path, `cannot open (${code ?? "error"})`, { cause: error });
    }
    let bytes: Buffer;
    let opened: BigIntStats;
    try {
      opened = await handle.stat({ bigint: true });
      if (!opened.isFile()) throw this.#notRegular();
      if (opened.nlink > 1n) throw this.#linked(opened.nlink);
      // Judged on the opened file: a check by path could be sent elsewhere by a swap.
      this.#openToOthers(path, opened, "ledger");
      // Past the longest string the engine makes it cannot be decoded: that says nothing of its content.
      if (opened.size > BigInt(MAX_STRING_LENGTH)) {
        throw new LedgerIoError(
          "LEDGER_IO",
          path,
          `is ${opened.size} bytes, more than the ${MAX_STRING_LENGTH} a grant ledger can be read at; left as it is`,
        );
      }
      bytes = await handle.readFile();
    } catch (error) {
      if (error instanceof LedgerIoError) throw error;
      throw new LedgerIoError("LEDGER_IO", path, `cannot read (${errorCode(error) ?? "error"})`, { cause: error });
    } finally {
      await handle.close();
    }
    const key = statKey(opened);
    const trusted = settled(opened, readAtMs);
    if (cached?.bytes !== undefined && cached.key === key && cached.bytes.equals(bytes)) {
      if (trusted) cached.bytes = undefined;
      return cached;
    }
    const snapshot: Snapshot = {
      key,
      ...this.#parse(bytes),
      index: undefined,
      bytes: trusted ? undefined : bytes,
    };
    this.#snapshot = snapshot;
    return snapshot;
  }

  #parse(bytes: Buffer): Pick<Snapshot, "grants" | "texts"> {
    const path = this.ledgerPath;
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch (error) {
      throw new LedgerCorruptError(path, "not valid UTF-8", { cause: error });
    }
    if (text.trim() === "") throw new LedgerCorruptError(path, "the file is empty");
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      const message = (error as Error).message;
      throw new LedgerCorruptError(path, `not JSON${placeOf(text, message)} (${message})`, { cause: error });
    }
    if (!Array.isArray(value)) {
      // A later format says so with a version: its grants are sound to the loopctl that wrote it.
      if (typeof value === "object" && value !== null && Object.hasOwn(value, "version")) {
        throw new LedgerFormatError(path, (value as { version: unknown }).version);
      }
      throw new LedgerCorruptError(path, "not a JSON array of grant records");
    }
    // JSON.parse keeps the last of two members; another reader (the original
    // included) keeps the first or refuses the record, so the ledger would
    // read as one grant here and another there.
    const twice = duplicateMember(text);
    if (twice !== undefined) {
      const record = /^\[(\d+)\]/.exec(twice.path)?.[1] ?? "?";
      throw new LedgerCorruptError(path, `record ${record} has member ${shownText(twice.key)} twice, at ${twice.path}`);
    }
    const texts = recordTexts(text);
    const byId = new Map<string, { readonly grant: Grant; readonly at: number }>();
    value.forEach((record: unknown, i: number) => {
      let grant: Grant;
      try {
        grant = Grant.fromJSON(record);
      } catch (error) {
        if (error instanceof GrantRecordError) {
          throw new LedgerCorruptError(path, `record ${i}: ${error.message}`, { cause: error });
        }
        throw error;
      }
      const earlier = byId.get(grant.id);
      if (earlier !== undefined) {
        // One rule granted again is one entry, the later record winning. Two
        // rules under one id (ids are FNV-1a digests, which can be made to
        // collide) cannot both be kept, and keeping one would silently drop
        // the other (a deny, say), and the next save would erase it.
        if (!sameRule(earlier.grant, grant)) {
          throw new LedgerCorruptError(
            path,
            `records ${earlier.at} and ${i} have the same id ${grant.id} but are different rules ` +
              `(${describeRule(earlier.grant)}; ${describeRule(grant)})`,
          );
        }
        byId.delete(grant.id);
      }
      byId.set(grant.id, { grant, at: i });
    });
    const kept = new Map<Grant, string>();
    for (const { grant, at } of byId.values()) {
      const record = texts[at];
      if (record !== undefined) kept.set(grant, record);
    }
    return { grants: [...byId.values()].map((entry) => entry.grant), texts: kept };
  }

  /**
   * Replaces the ledger with one holding `grants`, in that order: a grant of
   * `current` as its record was there, unknown fields, key order and numbers
   * alike, any other in this version's spelling. Called
   * under the lock, right after {@link #read} found the ledger a regular file
   * or missing: nothing but this user can swap it since (its folders are
   * closed to others). The new ledger is written whole and synced under a
   * temporary name, then renamed over the old one if the lock is still ours,
   * and the folder is synced, which is what makes the rename durable.
   * `effect` says what the change did when that sync fails (see {@link #syncFolder}).
   * Temporary files left by writers that died holding the lock go first.
   */
  async #write(grants: readonly Grant[], current: Snapshot, lock: HeldLock, effect?: string): Promise<void> {
    const path = this.ledgerPath;
    const temp = `${path}.tmp-${randomBytes(4).toString("hex")}`;
    this.#snapshot = undefined;
    await this.#removeLeftovers(lock);
    const records = grants.map((grant) => current.texts.get(grant) ?? grant.toLedgerText());
    const bytes = encodeLedger(records);
    try {
      await writeWhole(temp, bytes);
      // A writer robbed of its lock (only ever for its age, by another host)
      // must not put its ledger over the one the new holder may have written.
      await lock.assertHeld();
      await rename(temp, path);
    } catch (error) {
      await unlink(temp).catch(() => undefined);
      if (error instanceof LedgerLockError) throw error;
      throw new LedgerIoError("LEDGER_IO", path, `cannot write (${errorCode(error) ?? "error"})`, { cause: error });
    }
    // The stat that keys the cache is taken while the folder syncs; the rename is already done.
    const [stat] = await Promise.all([
      lstat(path, { bigint: true }).catch(() => undefined),
      this.#syncFolder(undefined, effect),
    ]);
    // Without it, the next read reparses. Its ctime is now: the next read compares the bytes.
    if (stat !== undefined) {
      const texts = new Map(grants.map((grant, i) => [grant, records[i] ?? grant.toLedgerText()]));
      this.#snapshot = { key: statKey(stat), grants, texts, index: undefined, bytes };
    }
  }

  /**
   * Removes the temporary ledgers (`grants.json.tmp-<hex>`, regular files of this
   * user) beside the ledger. Called under the lock, which every writer holds
   * from before it creates one until after it renames it: what is there now
   * was left by a writer killed mid-write, or by one whose lock was broken,
   * which then fails its check before the rename. Removes the abandoned
   * claims to break the lock too (see {@link HeldLock.removeAbandonedClaims}).
   */
  async #removeLeftovers(lock: HeldLock): Promise<void> {
    const names = await readdir(this.#dir).catch(() => []);
    const uid = process.getuid?.();
    await Promise.all([
      lock.removeAbandonedClaims(names),
      ...names
        .filter((name) => TEMP_NAME.test(name))
        .map(async (name) => {
          const path = join(this.#dir, name);
          const found = await lstat(path).catch(() => undefined);
          if (found?.isFile() === true && (uid === undefined || found.uid === uid))
            await unlink(path).catch(() => undefined);
        }),
    ]);
  }

  /**
   * Syncs the ledger's folder: without this a power cut may bring the old
   * ledger back. The parents of the folders this store made since its last
   * successful sync are synced too: a new folder is an entry in its parent, and
   * without it a power cut may take the folder, ledger and all, away (the
   * root's parents may lead through symbolic links the caller set up, so
   * they are followed). Some platforms and file systems cannot fsync a
   * folder; the rename itself still happened then. Any other failure rejects
   * the change with an error that says it is in effect (a reload sees it), so
   * nobody retries a revoke that happened or trusts a grant to outlive a crash.
   * `done` says what the rename did, `effect` what is in effect.
   */
  async #syncFolder(done = "the ledger was replaced", effect = "the change"): Promise<void> {
    await this.#syncOne(this.#dir, constants.O_NOFOLLOW, "its folder", done, effect);
    const made = this.#madeFolders;
    for (const parent of new Set(made.map((folder) => dirname(folder)))) {
      await this.#syncOne(parent, 0, "a folder holding a folder made for it", done, effect);
    }
    // Forgotten only once synced: after a failed sync, the next change's sync tries them again.
    this.#madeFolders = this.#madeFolders.filter((folder) => !made.includes(folder));
  }

  /**
   * Syncs the folder `path`, opened with the extra `flags`; `what` it is to
   * the ledger names it in the error, `done` and `effect` say what is in
   * effect (see {@link #syncFolder}).
   */
  async #syncOne(path: string, flags: number, what: string, done: string, effect: string): Promise<void> {
    let folder: FileHandle | undefined;
    try {
      folder = await open(path, constants.O_RDONLY | constants.O_DIRECTORY | flags);
      await folder.sync();
    } catch (error) {
      const code = errorCode(error);
      if (folder === undefined || !["EINVAL", "ENOTSUP", "EISDIR", "EPERM", "EBADF"].includes(code ?? "")) {
        throw new LedgerIoError(
          "LEDGER_IO",
          path,
          `${done}, but ${what} cannot be synced (${code ?? "error"}): ${effect} is in effect and may not survive a power cut`,
          { cause: error, folder: true },
        );
      }
    } finally {
      await folder?.close().catch(() => undefined);
    }
  }

  async #moveAside(): Promise<string> {
    const aside = `${this.ledgerPath}.corrupt-${this.#now()}-${randomBytes(3).toString("hex")}`;
    try {
      // Made owner-only in place first: a failure then leaves the ledger where it was.
      await chmod(this.ledgerPath, 0o600);
      await rename(this.ledgerPath, aside);
    } catch (error) {
      throw new LedgerIoError("LEDGER_IO", this.ledgerPath, `cannot move the corrupt ledger aside to ${aside}`, {
        cause: error,
      });
    }
    this.#snapshot = undefined;
    // A failure must still say where the ledger went: a second repair finds none to move.
    await this.#syncFolder(`the corrupt ledger was moved aside to ${aside}`, "the move");
    return aside;
  }
}
