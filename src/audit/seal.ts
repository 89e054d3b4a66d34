import { constants } from "node:fs";
import { randomBytes } from "node:crypto";
import { open, rename, unlink } from "node:fs/promises";
import { dirname } from "node:path";
import type { FileHandle } from "node:fs/promises";
import { assertPathArgument } from "./arguments.js";
import { AuditIoError, AuditPathError } from "./errors.js";
import { sealMac } from "./key.js";
import type { AuditAnchor } from "./line.js";
import { describe, syncFolder, writeAll } from "./file-io.js";

/**
 * The seal of a keyed log: the last line its writer wrote, and a MAC over it
 * that only the key's holder can make. Kept beside the log in `<log>.seal`
 * and replaced after every append, so a log that ends before its seal has
 * lost lines, which no chain can show on its own.
 */
export interface AuditSeal {
  readonly seq: number;
  readonly hash: string;
  readonly mac: string;
}

/**
 * Where the seal of the log at `logPath` is kept: `<logPath>.seal`.
 * @throws AuditConfigError when `logPath` is not a non-empty string.
 */
export function auditSealPath(logPath: string): string {
  assertPathArgument(logPath, "auditSealPath");
  return `${logPath}.seal`;
}

/** The seal's file content for `anchor`: one JSON line. */
export function encodeSeal(key: Buffer, anchor: AuditAnchor): string {
  return `${JSON.stringify({ seq: anchor.seq, hash: anchor.hash, mac: sealMac(key, anchor.seq, anchor.hash) })}\n`;
}

const SEAL_PATTERN = /^\{"seq":(0|[1-9][0-9]{0,15}),"hash":"([0-9a-f]{64})","mac":"([0-9a-f]{64})"\}\n?$/;

/** Parses a seal file's content; `undefined` when it is not one. */
export function parseSeal(text: string): AuditSeal | undefined {
  const match = SEAL_PATTERN.exec(text);
  const seq = match ? Number(match[1]) : Number.NaN;
  if (!match || !Number.isSafeInteger(seq)) return undefined;
  return { seq, hash: match[2] as string, mac: match[3] as string };
}

const NO_FOLLOW = constants.O_NOFOLLOW ?? 0;
/** Far more than a seal; a larger file is not one, and is not read whole. */
const SEAL_MAX_BYTES = 4096;

/**
 * The seal file's content, or `null` when there is none.
 * @throws AuditPathError when it is a symbolic link or not a regular file.
 * @throws AuditIoError when it cannot be read.
 */
export async function readSealFile(path: string): Promise<string | null> {
  let handle: FileHandle;
  try {
    handle = await open(path, constants.O_RDONLY | NO_FOLLOW | (constants.O_NONBLOCK ?? 0));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    if (code === "ELOOP") throw new AuditPathError(path, `audit seal ${path} is a symbolic link`, { cause: error });
    throw new AuditIoError(path, `cannot open audit seal ${path}: ${describe(error)}`, { cause: error });
  }
  try {
    if (!(await handle.stat()).isFile()) throw new AuditPathError(path, `audit seal ${path} is not a regular file`);
    const buffer = Buffer.alloc(SEAL_MAX_BYTES + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return buffer.subarray(0, bytesRead).toString("utf8");
  } catch (error) {
    if (error instanceof AuditPathError) throw error;
    throw new AuditIoError(path, `cannot read audit seal ${path}: ${describe(error)}`, { cause: error });
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** `<seal>.tmp-<24 hex>`: the names of the seal's temporary files, beside it. */
const TEMPORARY_SUFFIX = /^\.tmp-[0-9a-f]{24}$/;

/**
 * A fresh name for a temporary file of the seal at `path`, beside it: random,
 * so that no one who can write the folder can put a file or a link there first.
 */
export function sealTemporaryPath(path: string): string {
  return `${path}.tmp-${randomBytes(12).toString("hex")}`;
}

/** Whether `name`, in the seal's folder, is one of the seal's temporary files (`sealName` being the seal's). */
export function isSealTemporaryName(sealName: string, name: string): boolean {
  return name.startsWith(sealName) && TEMPORARY_SUFFIX.test(name.slice(sealName.length));
}

/**
 * Replaces the seal file with `text`: written to a temporary file beside it
 * (`temporary`, a fresh random name by default) created for this write alone
 * (`O_EXCL`, never through a link, owner-only), then renamed over the seal,
 * so a reader sees the old seal or the new one, never half of one. A name
 * that is taken fails it, whatever is there: nothing already at the name is
 * written. When a step fails the temporary file is removed again.
 * @throws AuditIoError when any step fails.
 */
export async function writeSealFile(
  path: string,
  text: string,
  fsync: boolean,
  temporary: string = sealTemporaryPath(path),
): Promise<void> {
  let handle: FileHandle | undefined;
  let created = false;
  try {
    handle = await open(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | NO_FOLLOW, 0o600);
    created = true;
    await writeAll(handle, Buffer.from(text, "utf8"));
    if (fsync) await handle.sync();
    await handle.close();
    handle = undefined;
    await rename(temporary, path);
  } catch (error) {
    await handle?.close().catch(() => undefined);
    if (created) await unlink(temporary).catch(() => undefined);
    throw new AuditIoError(path, `cannot write audit seal ${path}: ${describe(error)}`, { cause: error });
  }
  if (fsync) await syncFolder(dirname(path));
}
