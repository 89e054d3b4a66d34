import { createHash, randomUUID } from "node:crypto";
import { constants, type Stats } from "node:fs";
import {
  lstat,
  open,
  readFile,
  readdir,
  readlink,
  rename,
  stat as statOf,
  unlink,
  type FileHandle,
} from "node:fs/promises";
import { hostname } from "node:os";
import { basename, dirname, join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { z } from "zod";
import { processShared } from "../process-shared.js";
import { LedgerLockError } from "./errors.js";
import { shownValue } from "../errors.js";

/** How long to wait for, and when to break, a ledger lock. */
export interface LedgerLockOptions {
  /** Give up with LedgerLockError after waiting this long. */
  readonly timeoutMs: number;
  /**
   * A lock from another host older than this is abandoned. A lock from this
   * host is abandoned only when its process is gone, however old it is. A
   * lock whose record names this host name but another boot or PID namespace
   * (a container given the same host name) is another host's.
   */
  readonly staleMs: number;
  /** Stops waiting: the promise rejects with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /** Called once, when the lock is first found held by a writer that is not abandoning it. */
  readonly onWait?: ((holder: LockHolder | null) => void) | undefined;
}

/**
 * Why `value` cannot be a lock's wait or stale bound, or `undefined` when it
 * can: a non-negative safe integer of milliseconds. NaN or a string would make
 * the deadline NaN, which no wait ever reaches.
 */
export function lockMsProblem(value: unknown): string | undefined {
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return undefined;
  return `must be a non-negative integer of milliseconds, got ${shownValue(value)}`;
}

/** Who holds a lock, as its record says. */
export interface LockHolder {
  readonly pid: number;
  readonly hostname: string;
}

const LockInfoSchema = z.object({
  pid: z.number().int().positive(),
  hostname: z.string(),
  createdAtMs: z.number(),
  token: z.string(),
  /** The holder's start time as the kernel counts it (Linux), which tells it from a later process given its pid. */
  start: z.string().optional(),
  /** The boot the holder runs in (Linux): another machine with the same host name has another. */
  boot: z.string().optional(),
  /** The holder's PID namespace (Linux): a container on this machine with the same host name has another. */
  pidNamespace: z.string().optional(),
});

type LockInfo = z.infer<typeof LockInfoSchema>;

// A creator writes its record right after the O_EXCL create; an empty or
// unparseable lock older than this was left by a process that died in between.
const UNWRITTEN_GRACE_MS = 2_000;
/**
 * Far more than any lock record (a pid, a host name, a token, a boot id, a
 * namespace); a larger file is not one a writer made, and is not read.
 */
const LOCK_RECORD_MAX_BYTES = 64 * 1024;

/**
 * The lock file's text, read from its start no further than a lock record
 * can go; undefined when it holds more (it grew after its size was read).
 */
async function readRecord(handle: FileHandle): Promise<string | undefined> {
  const buffer = Buffer.alloc(LOCK_RECORD_MAX_BYTES + 1);
  let length = 0;
  while (length < buffer.length) {
    const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
    if (bytesRead === 0) break;
    length += bytesRead;
  }
  return length > LOCK_RECORD_MAX_BYTES ? undefined : buffer.toString("utf8", 0, length);
}
const MAX_BACKOFF_MS = 50;

/** The most locks stamped ahead of this host's clock whose first sight is remembered (see {@link lockAge}). */
const MAX_AHEAD_SEEN = 64;

/** When each lock stamped ahead of this host's clock was first seen, on the monotonic clock, by its identity. */
const aheadSeen = new Map<string, number>();

/**
 * How old the lock (or claim) `stat` is, in milliseconds: by its mtime, or,
 * for one stamped ahead of this host's clock (a clock set back since, or
 * another host's running ahead), for how long it has been seen unchanged
 * here: never older than it is, and not standing until that time comes,
 * which may be years away. A change to the file (a new lock, its record
 * rewritten) changes its identity and starts the count again.
 */
function lockAge(stat: Stats): number {
  const byClock = Date.now() - stat.mtimeMs;
  if (byClock >= 0) return byClock;
  const key = `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;
  const now = performance.now();
  const first = aheadSeen.get(key);
  if (first !== undefined) return now - first;
  if (aheadSeen.size >= MAX_AHEAD_SEEN) aheadSeen.delete(aheadSeen.keys().next().value as string);
  aheadSeen.set(key, now);
  return 0;
}
const GONE: Seen = { type: "gone" };

function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

function parseLock(text: string): LockInfo | null {
  try {
    const parsed = LockInfoSchema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : null;
  } catch {
    // unparseable: treated as unwritten
    return null;
  }
}

/**
 * When the process `pid` started, in clock ticks since boot (field 22 of
 * /proc/<pid>/stat): the same for every thread and every copy of this module
 * in that process, and different for a later process given the same pid.
 * `undefined` where there is no /proc or no such process.
 */
async function startOf(pid: number): Promise<string | undefined> {
  return (await procStat(pid))?.start;
}

/**
 * The state (field 3: `R`, `S`, … `Z` for a zombie) and start time (field 22)
 * of the process `pid` from /proc/<pid>/stat; `undefined` where there is none.
 */
async function procStat(
  pid: number,
): Promise<{ readonly state: string | undefined; readonly start: string | undefined } | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces and parentheses; the fields after the last ")" cannot.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state: fields[0], start: fields[19] };
  } catch {
    return undefined;
  }
}

/** Where this process runs, beyond its host name: its boot and PID namespace, where Linux's /proc says. */
async function placeHere(): Promise<Pick<LockInfo, "boot" | "pidNamespace">> {
  const [boot, pidNamespace] = await Promise.all([
    readFile("/proc/sys/kernel/random/boot_id", "utf8").then(
      (text) => text.trim(),
      () => undefined,
    ),
    readlink("/proc/self/ns/pid").catch(() => undefined),
  ]);
  return { ...(boot === undefined ? {} : { boot }), ...(pidNamespace === undefined ? {} : { pidNamespace }) };
}

/**
 * Whether `info` was written on this host, in a place whose pids this process
 * sees: the same host name, and the same boot and PID namespace where both
 * records say (a record of an older loopctl says neither). Two containers
 * given one host name are two hosts: a pid alive in one may be free in the other.
 */
function writtenHere(info: LockInfo, here: LockInfo): boolean {
  if (info.hostname !== here.hostname) return false;
  if (info.boot !== undefined && here.boot !== undefined && info.boot !== here.boot) return false;
  return info.pidNamespace === undefined || here.pidNamespace === undefined || info.pidNamespace === here.pidNamespace;
}

/**
 * The tokens of the {@link withLedgerLock} calls running in this thread, by
 * every copy of loopctl in it, from before each creates its lock until after
 * it has removed it. A lock bearing one is held: it needs no look through the
 * process's open files ({@link openHere}, a stat per open file on every retry
 * of every waiting store, which in a process with thousands of sockets kept
 * the holder's own file operations waiting past the waiters' deadline).
 */
function callsHere(): Set<string> {
  return processShared("loopctl.grant.ledgerLockCalls", () => new Set<string>());
}

/**
 * Whether the process that wrote `info` (on this host) still runs. A lock with
 * this process's pid was written by this process (another thread, or another
 * copy of this module: the ESM and CommonJS builds loaded side by side) unless
 * it predates this process, which makes it the leftover of an earlier process
 * that had the same pid (common in containers), or no thread of this process
 * has it open any more (see {@link openHere}).
 */
async function holderAlive(info: LockInfo, lockPath: string, seen: FileHandle, lock: Stats): Promise<boolean> {
  if (info.pid === process.pid && callsHere().has(info.token)) return true;
  if (info.pid !== process.pid && !pidAlive(info.pid)) return false;
  const proc = await procStat(info.pid);
  // A zombie (or a process being reaped) has exited: it holds no file and never runs again, though
  // its pid answers signals until its parent waits for it, which some never do.
  if (proc?.state === "Z" || proc?.state === "X") return false;
  const current = proc?.start;
  if (info.start !== undefined && current !== undefined) {
    if (info.start !== current) return false;
  } else if (info.pid === process.pid && info.createdAtMs < Date.now() - process.uptime() * 1_000) {
    return false;
  }
  if (info.pid !== process.pid) {
    // A legitimate hold lasts milliseconds: only a lock this old is worth a look through the holder's files.
    if (lockAge(lock) <= UNWRITTEN_GRACE_MS) return true;
    return (await openIn(info.pid, lock)) ?? true;
  }
  return (await openHere(lockPath, seen, lock)) ?? true;
}

/**
 * Whether the process `pid` (another process of this host) has the lock
 * `lock` open, where its open files can be listed (`/proc/<pid>/fd`, this
 * user's processes); `undefined` where they cannot. A holder keeps its lock
 * open from creating it until after removing it, so a live process without
 * it open holds it no more: a worker thread of its that held it was
 * terminated, and the lock would otherwise stay until the whole process
 * exits (a server, for days). The lock is open in the caller meanwhile, so
 * its inode cannot be handed to another file; one its holder removed since is
 * told apart before it is replaced (see {@link stillThere}).
 */
async function openIn(pid: number, lock: Stats): Promise<boolean | undefined> {
  const fds = `/proc/${pid}/fd`;
  let names: string[];
  try {
    names = await readdir(fds);
  } catch {
    return undefined;
  }
  // A file closed since the listing is not the lock (held, it stays open); any other failure says nothing.
  let unknown = false;
  const closed = (error: unknown): undefined => {
    if (errorCode(error) !== "ENOENT") unknown = true;
    return undefined;
  };
  // Sockets, pipes and the like (`socket:[…]`) are never the lock: only files named by a path are looked at.
  const targets = await Promise.all(
    names.map(async (fd) => {
      const target = await readlink(`${fds}/${fd}`).catch(closed);
      return target?.startsWith("/") === true ? statOf(`${fds}/${fd}`).catch(closed) : undefined;
    }),
  );
  if (targets.some((target) => target !== undefined && target.ino === lock.ino && target.dev === lock.dev)) return true;
  return unknown ? undefined : false;
}

/**
 * Whether the lock `lock` (open here as `seen`) is still held by a thread of
 * this process, where the process's open files can be listed
 * (`/proc/self/fd`); `undefined` where they cannot. A holder keeps its lock
 * open from creating it until after removing it, and a worker thread's files
 * are closed when it is terminated: a lock of this process that none of its
 * threads has open (but `seen`) was left by a thread that is gone, and would
 * otherwise stay until the process exits. Unless, that is, it was released
 * and removed meanwhile: so it counts as held unless it is still the file at
 * `lockPath` once no other open file was found.
 */
async function openHere(lockPath: string, seen: FileHandle, lock: Stats): Promise<boolean | undefined> {
  let fds: string[];
  try {
    fds = await readdir("/proc/self/fd");
  } catch {
    return undefined;
  }
  const others = fds.filter((fd) => fd !== String(seen.fd));
  const targets = await Promise.all(others.map((fd) => statOf(`/proc/self/fd/${fd}`).catch(() => undefined)));
  if (targets.some((target) => target !== undefined && target.ino === lock.ino && target.dev === lock.dev)) return true;
  const now = await lstat(lockPath).catch(() => undefined);
  return now === undefined || now.ino !== lock.ino || now.dev !== lock.dev;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return errorCode(error) === "EPERM";
  }
}

/**
 * Creates the lock and writes its record; the lock's handle, kept open while
 * the lock is held, or `undefined` when another holds it.
 */
async function tryCreate(lockPath: string, info: LockInfo): Promise<FileHandle | undefined> {
  let handle;
  try {
    handle = await open(lockPath, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY, 0o600);
  } catch (error) {
    if (errorCode(error) === "EEXIST") return undefined;
    throw new LedgerLockError(lockPath, `cannot create the lock file (${errorCode(error) ?? "error"})`, {
      cause: error,
    });
  }
  try {
    await handle.writeFile(JSON.stringify(info), "utf8");
  } catch (failure) {
    // Removed before it is closed: a lock of this process that no thread has open counts as abandoned.
    await unlink(lockPath).catch(() => undefined);
    await handle.close().catch(() => undefined);
    throw new LedgerLockError(lockPath, `cannot write the lock file (${errorCode(failure) ?? "error"})`, {
      cause: failure,
    });
  }
  return handle;
}

/**
 * What a look at a lock someone else created found: it is gone (retry at
 * once), it is held (by the holder its record names, or null while that
 * record is being written), or it was abandoned and is now ours.
 */
type Seen =
  | { readonly type: "gone" }
  | { readonly type: "held"; readonly holder: LockHolder | null }
  | { readonly type: "taken"; readonly handle: FileHandle };

/** A lock judged abandoned: the file as it was seen, to tell it from any lock made since. */
interface Abandoned {
  readonly stat: Stats;
  readonly text: string;
}

/**
 * Takes the lock at `lockPath` over if it is abandoned; otherwise says who
 * holds it (see {@link Seen}).
 */
async function breakIfStale(lockPath: string, staleMs: number, here: LockInfo): Promise<Seen> {
  const found = await judge(lockPath, staleMs, here);
  if (found.type !== "abandoned") return found;
  return takeOver(lockPath, found.judged, staleMs, here);
}

/** What a look at a lock (or a claim) found: gone, held (see {@link Seen}), or abandoned as it was seen. */
type Judged =
  | { readonly type: "gone" }
  | { readonly type: "held"; readonly holder: LockHolder | null }
  | { readonly type: "abandoned"; readonly judged: Abandoned };

/**
 * Whether the lock (or claim) at `lockPath` is abandoned: its writer's
 * process is gone on this host, or it is another host's and older than
 * `staleMs`, or its record was never written and it is older than the time a
 * writer needs to write it.
 */
async function judge(lockPath: string, staleMs: number, here: LockInfo): Promise<Judged> {
  let handle;
  try {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, past every deadline.
    handle = await open(lockPath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    if (errorCode(error) === "ENOENT") return { type: "gone" };
    // O_NOFOLLOW refuses a symbolic link with ELOOP, which alone would not say what is there.
    if (errorCode(error) === "ELOOP") {
      const problem = "is a symbolic link, so no writer made it; refusing to follow it; remove it";
      throw new LedgerLockError(lockPath, problem, { cause: error });
    }
    throw new LedgerLockError(lockPath, `cannot read the lock file (${errorCode(error) ?? "error"})`, {
      cause: error,
    });
  }
  let stat;
  let text: string;
  let info: LockInfo | null;
  let stale: boolean;
  try {
    try {
      stat = await handle.stat();
    } catch (error) {
      throw new LedgerLockError(lockPath, `cannot read the lock file (${errorCode(error) ?? "error"})`, {
        cause: error,
      });
    }
    // Only this user can put anything there (the folder is checked first), and no writer makes anything
    // but a regular file: whatever it is, it is left for a person to look at, never read or broken.
    if (!stat.isFile()) throw new LedgerLockError(lockPath, "is not a regular file, so no writer made it; remove it");
    // Read whole, a file of gigabytes (planted by anyone who can write the folder) would be held in
    // memory twice at every look while an append waits for the lock.
    if (stat.size > LOCK_RECORD_MAX_BYTES) {
      throw new LedgerLockError(
        lockPath,
        `is ${stat.size} bytes, larger than any lock record, so no writer made it; remove it`,
      );
    }
    let read: string | undefined;
    try {
      read = await readRecord(handle);
    } catch (error) {
      throw new LedgerLockError(lockPath, `cannot read the lock file (${errorCode(error) ?? "error"})`, {
        cause: error,
      });
    }
    // Grown since its size was read: read only as far as a lock record could go, and refused alike.
    if (read === undefined) {
      throw new LedgerLockError(lockPath, "is larger than any lock record, so no writer made it; remove it");
    }
    text = read;
    const ageMs = lockAge(stat);
    info = parseLock(text);
    // A live holder on this host is never robbed, however long it holds the
    // lock (paused, swapped out): it would go on to rename its ledger over the
    // next writer's. Another host's processes cannot be seen: age decides there.
    // The handle stays open meanwhile, so the lock's inode cannot be reused.
    // An unwritten record says nothing of its writer, which may be running: only the time a
    // writer needs to write it decides, never a stale bound meant for other hosts' locks.
    if (info === null) stale = ageMs > UNWRITTEN_GRACE_MS;
    else if (writtenHere(info, here)) stale = !(await holderAlive(info, lockPath, handle, stat));
    else stale = ageMs > staleMs;
  } finally {
    await handle.close();
  }
  if (!stale) return { type: "held", holder: info === null ? null : { pid: info.pid, hostname: info.hostname } };
  return { type: "abandoned", judged: { stat, text } };
}

/**
 * Replaces the abandoned lock at `lockPath` with one of ours, never any
 * other lock. Removing it, by name or by moving it aside, cannot be made
 * safe: a writer that judged it abandoned a moment after another, once that
 * other has broken it and taken the lock, removes (or moves aside for a
 * moment) the new holder's lock, and that holder then fails its check
 * before its rename. So the right to replace this one lock goes to the one
 * writer that creates its claim, `<lockPath>.break-<id of the lock>`
 * (O_EXCL, holding our record), and that writer renames its claim over the
 * lock once it has checked the lock is still the one judged. The lock
 * cannot change meanwhile: only its holder (gone) or a claimant (us) moves
 * it, and none can be created while it exists. A writer that finds the
 * claim taken waits, or, when the claim's own writer died, takes the claim
 * over the same way.
 */
async function takeOver(lockPath: string, judged: Abandoned, staleMs: number, here: LockInfo): Promise<Seen> {
  const claim = `${lockPath}.break-${lockId(judged)}`;
  let handle = await tryCreate(claim, here);
  if (handle === undefined) {
    const seen = await breakIfStale(claim, staleMs, here);
    if (seen.type !== "taken") return seen;
    handle = seen.handle;
  }
  try {
    if (await stillThere(lockPath, judged)) {
      await rename(claim, lockPath);
      return { type: "taken", handle };
    }
  } catch (error) {
    await unlink(claim).catch(() => undefined);
    await handle.close().catch(() => undefined);
    throw new LedgerLockError(lockPath, "cannot replace an abandoned lock", { cause: error });
  }
  // Another writer took it over first, or its holder removed it: try again.
  await unlink(claim).catch(() => undefined);
  await handle.close().catch(() => undefined);
  return GONE;
}

/** Names a judged lock in its claim's file name: the same for every writer that judged this very file. */
function lockId(judged: Abandoned): string {
  const { dev, ino, mtimeMs } = judged.stat;
  return createHash("sha256").update(`${dev}:${ino}:${mtimeMs}:${judged.text}`).digest("hex").slice(0, 16);
}

/**
 * Whether the file at `lockPath` is the lock judged abandoned. An inode
 * number is no proof: a lock created since can get the freed inode back, so
 * the modification time and the bytes must match too.
 */
async function stillThere(lockPath: string, judged: Abandoned): Promise<boolean> {
  let handle;
  try {
    handle = await open(lockPath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return false;
  }
  try {
    const found = await handle.stat();
    return (
      found.ino === judged.stat.ino &&
      found.dev === judged.stat.dev &&
      found.mtimeMs === judged.stat.mtimeMs &&
      found.size <= LOCK_RECORD_MAX_BYTES &&
      (await readRecord(handle)) === judged.text
    );
  } catch {
    return false;
  } finally {
    await handle.close();
  }
}

/**
 * Runs `body` while holding the O_EXCL lock file `lockPath` (pid, host,
 * start, time and a token inside), so writers in every process, thread and
 * module copy on the ledger are serialized. Waits with backoff up to
 * `timeoutMs`, breaking a lock whose holder died on this host, or from another
 * host and older than `staleMs`. The lock is released in `finally`, and only
 * if it is still ours.
 *
 * @throws {LedgerLockError} naming the lock file when it cannot be taken.
 */
export async function withLedgerLock<T>(
  lockPath: string,
  options: LedgerLockOptions,
  body: (lock: HeldLock) => Promise<T>,
): Promise<T> {
  const [start, place] = await Promise.all([startOf(process.pid), placeHere()]);
  const info: LockInfo = {
    pid: process.pid,
    hostname: hostname(),
    createdAtMs: Date.now(),
    token: randomUUID(),
    ...(start === undefined ? {} : { start }),
    ...place,
  };
  const calls = callsHere();
  calls.add(info.token);
  try {
    const lock = await acquire(lockPath, info, options);
    try {
      return await body({
        async assertHeld() {
          if (!(await isOurs(lockPath, lock)))
            throw new LedgerLockError(lockPath, "was broken while this writer held it");
        },
        removeAbandonedClaims: (names) => removeAbandonedClaims(lockPath, names, options.staleMs, info),
      });
    } finally {
      await release(lockPath, lock);
    }
  } finally {
    calls.delete(info.token);
  }
}

/** Creates the lock with the record `info`, waiting for another holder and breaking an abandoned lock. */
async function acquire(lockPath: string, info: LockInfo, options: LedgerLockOptions): Promise<FileHandle> {
  // By the monotonic clock: a wall clock set back an hour while waiting would make the wait an hour longer.
  const deadline = performance.now() + options.timeoutMs;
  let backoff = 1;
  let waited = false;
  for (;;) {
    options.signal?.throwIfAborted();
    const held = await tryCreate(lockPath, info);
    if (held !== undefined) return held;
    const seen = await breakIfStale(lockPath, options.staleMs, info);
    if (seen.type === "taken") return seen.handle;
    if (seen.type === "gone") continue;
    if (!waited) {
      waited = true;
      options.onWait?.(seen.holder);
    }
    const remaining = deadline - performance.now();
    if (remaining <= 0) {
      const by = seen.holder === null ? "" : ` (held by pid ${seen.holder.pid} on ${seen.holder.hostname})`;
      throw new LedgerLockError(lockPath, `not acquired within ${options.timeoutMs} ms${by}`);
    }
    const { signal } = options;
    await delay(Math.min(remaining, backoff + Math.random() * backoff), undefined, { signal }).catch(
      (error: unknown) => {
        // timers/promises rejects with an AbortError; the caller expects the signal's own reason.
        throw signal?.aborted === true ? signal.reason : error;
      },
    );
    backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
  }
}

/** The lock, while the body of {@link withLedgerLock} runs. */
export interface HeldLock {
  /**
   * Throws LedgerLockError unless the lock file is still the one this writer
   * created: it may not be when a lock from another host was broken for its age.
   */
  assertHeld(): Promise<void>;
  /**
   * Removes the claims to break a lock (`<lock>.break-<16 hex>`, see
   * {@link withLedgerLock}) among `names`, the files in the lock's folder,
   * that were abandoned: older than the stale bound and their writer gone,
   * as for a lock. A writer that dies between making its claim and renaming
   * it over the lock (or removing it, once it finds the lock changed) leaves
   * one, which nothing else would ever remove. One whose writer runs is
   * left alone, however old. Never fails: a claim it cannot judge or remove
   * is left for the next writer.
   */
  removeAbandonedClaims(names: readonly string[]): Promise<void>;
}

/**
 * Whether `name` is a claim on the lock named `lockName` or, once taken over,
 * on such a claim: `<lockName>.break-<16 hex>`, the suffix repeated.
 */
function isClaimName(lockName: string, name: string): boolean {
  return name.startsWith(`${lockName}.`) && /^(\.break-[0-9a-f]{16})+$/.test(name.slice(lockName.length));
}

/**
 * See {@link HeldLock.removeAbandonedClaims}. Runs under the lock, so no
 * claim judged here is for a lock that is still there (unless the lock held
 * is another host's, broken for its age): its writer, were it alive, would
 * find the lock changed and remove it itself. A claim taken over between its
 * judgment and its removal is told apart by {@link stillThere}.
 */
async function removeAbandonedClaims(
  lockPath: string,
  names: readonly string[],
  staleMs: number,
  here: LockInfo,
): Promise<void> {
  const dir = dirname(lockPath);
  const lockName = basename(lockPath);
  await Promise.all(
    names
      .filter((name) => isClaimName(lockName, name))
      .map(async (name) => {
        const path = join(dir, name);
        try {
          const found = await judge(path, staleMs, here);
          if (found.type !== "abandoned" || lockAge(found.judged.stat) <= staleMs) return;
          if (await stillThere(path, found.judged)) await unlink(path);
        } catch {
          // Not a regular file, unreadable, or gone meanwhile: left as it is.
        }
      }),
  );
}

/**
 * Whether the file at `lockPath` is still the one `held` opened. While `held`
 * is open its inode cannot be freed, so no other file can have its number.
 */
async function isOurs(lockPath: string, held: FileHandle): Promise<boolean> {
  try {
    const [mine, found] = await Promise.all([held.stat(), lstat(lockPath)]);
    return mine.ino === found.ino && mine.dev === found.dev;
  } catch {
    // Gone: broken after an overlong hold.
    return false;
  }
}

/**
 * Removes the lock if it is still ours. It may not be: a lock from another
 * host held past the stale limit can be broken and another writer's lock
 * made in its place, which must stay.
 */
async function release(lockPath: string, held: FileHandle): Promise<void> {
  const ours = await isOurs(lockPath, held);
  if (ours && process.platform !== "win32") {
    // Removed before it is closed: a lock of this process that no thread has open counts as
    // abandoned. On Windows a file deleted while open stays "delete pending" until it is closed,
    // and a new lock could not be made in that moment.
    await unlink(lockPath).catch(() => undefined);
    await held.close().catch(() => undefined);
    return;
  }
  await held.close().catch(() => undefined);
  if (ours) await unlink(lockPath).catch(() => undefined);
}
