import { createHmac, timingSafeEqual } from "node:crypto";
import { constants } from "node:fs";
import { open, stat } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";
import { assertPathArgument } from "./arguments.js";
import { AuditIoError, AuditKeyError } from "./errors.js";

/**
 * The shortest key the keyed chain accepts, in bytes (128 bits). Use 32
 * random bytes (`openssl rand -hex 32 > audit.key`, or `randomBytes(32)`).
 */
export const AUDIT_KEY_MIN_BYTES = 16;

/** The secret of a keyed audit log: its bytes, or a string taken as UTF-8. */
export type AuditKey = Uint8Array | string;

/**
 * The key as bytes.
 * @throws AuditKeyError when it is neither a string nor a Uint8Array, or shorter than
 *   {@link AUDIT_KEY_MIN_BYTES}.
 */
export function auditKeyBytes(key: AuditKey): Buffer {
  // Buffer.from would take an array of numbers too, each one cut to a byte.
  // Only the type is shown: a number may be the secret itself (a key of digits a config reader parsed).
  if (typeof key !== "string" && !(key instanceof Uint8Array)) {
    const shown =
      key === null || key === undefined ? String(key) : typeof key === "object" ? "an object" : `a ${typeof key}`;
    throw new AuditKeyError(`an audit key must be a string or a Uint8Array, got ${shown}`);
  }
  const bytes = typeof key === "string" ? Buffer.from(key, "utf8") : Buffer.from(key);
  if (bytes.length < AUDIT_KEY_MIN_BYTES) {
    throw new AuditKeyError(`an audit key must be at least ${AUDIT_KEY_MIN_BYTES} bytes, got ${bytes.length}`);
  }
  return bytes;
}

/**
 * Reads a key file as the CLI's `--key-file` does: its bytes, and of a key
 * file of text (UTF-8 without control characters, as hex or base64 is) the
 * text without one trailing newline, so `openssl rand -hex 32 > audit.key`
 * works as it is; a file of raw bytes is read whole, a last byte 0x0a included.
 * A pipe is read too, to its end, its writer awaited (`--key-file <(pass show
 * audit-key)`, a FIFO): the key need never be on the disk.
 * On POSIX the file or pipe must not be readable or writable by group or others.
 *
 * @throws AuditConfigError when `path` is not a non-empty string.
 * @throws AuditKeyError naming the file when it is neither a regular file nor
 *   a pipe, is open to others, or the key is too short.
 * @throws AuditIoError when the file cannot be read (`cause.code` says why).
 */
export async function readAuditKeyFile(path: string): Promise<Uint8Array> {
  assertPathArgument(path, "cannot read an audit key file");
  let bytes: Buffer;
  try {
    // A pipe is opened to wait for its writer, once its mode is known to keep others out; anything else is opened
    // without waiting (a FIFO put in a file's place meanwhile is then refused below, not waited on).
    const found = await stat(path);
    const pipe = found.isFIFO();
    if (pipe) refuseOpenToOthers(path, found.mode);
    const handle = await open(path, constants.O_RDONLY | (pipe ? 0 : (constants.O_NONBLOCK ?? 0)));
    try {
      const opened = await handle.stat();
      if (!opened.isFile() && !(pipe && opened.isFIFO()))
        throw new AuditKeyError(`audit key file ${path} is neither a regular file nor a pipe`);
      refuseOpenToOthers(path, opened.mode);
      bytes = await readAtMost(handle, path);
    } finally {
      await handle.close().catch(() => undefined);
    }
  } catch (error) {
    if (error instanceof AuditKeyError) throw error;
    throw new AuditIoError(path, `cannot read audit key file ${path}: ${(error as Error).message}`, { cause: error });
  }
  try {
    return auditKeyBytes(withoutTextNewline(bytes));
  } catch (error) {
    throw new AuditKeyError(`audit key file ${path}: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * The most a key file may hold, in bytes: far more than any key (32 random
 * bytes, as hex 64), and little enough that a file named by mistake (the log
 * itself) or a pipe that never ends (`<(yes)`) is refused, not read whole.
 */
const KEY_FILE_MAX_BYTES = 64 * 1024;

/** What `handle` holds, to its end, refused once it holds more than {@link KEY_FILE_MAX_BYTES}. */
async function readAtMost(handle: FileHandle, path: string): Promise<Buffer> {
  const buffer = Buffer.alloc(KEY_FILE_MAX_BYTES + 1);
  let length = 0;
  for (;;) {
    const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
    if (bytesRead === 0) return buffer.subarray(0, length);
    length += bytesRead;
    if (length > KEY_FILE_MAX_BYTES)
      throw new AuditKeyError(`audit key file ${path} holds more than ${KEY_FILE_MAX_BYTES} bytes; is it the key?`);
  }
}

/** Refuses a key file (or pipe) of `mode` that group or others may read or write (POSIX). */
function refuseOpenToOthers(path: string, mode: number): void {
  if (process.platform !== "win32" && (mode & 0o077) !== 0) {
    throw new AuditKeyError(
      `audit key file ${path} is readable or writable by others (mode ${(mode & 0o777).toString(8)}); chmod 600 it`,
    );
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
/** A control character (C0, DEL, C1), which no key of text (hex, base64, a passphrase) holds. */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * A key file's bytes without one trailing newline (`\n` or `\r\n`) when the
 * rest is text, as `openssl rand -hex 32 > audit.key` or an editor leaves it;
 * a file of raw bytes is the key whole. One random key in 256 ends in 0x0a,
 * and taking that byte off made it another key than its writer's.
 */
function withoutTextNewline(bytes: Buffer): Buffer {
  if (bytes[bytes.length - 1] !== 0x0a) return bytes;
  const text = bytes.subarray(0, bytes.length - (bytes[bytes.length - 2] === 0x0d ? 2 : 1));
  try {
    return CONTROL.test(utf8.decode(text)) ? bytes : text;
  } catch {
    return bytes;
  }
}

/** The `mac` of the line whose `hash` is `hash`: HMAC-SHA256 over `loopctl-audit-line:<hash>`. */
export function lineMac(key: Buffer, hash: string): string {
  return createHmac("sha256", key).update(`loopctl-audit-line:${hash}`).digest("hex");
}

/** The `mac` of a seal vouching for line `seq` with `hash`: HMAC-SHA256 over `loopctl-audit-seal:<seq>:<hash>`. */
export function sealMac(key: Buffer, seq: number, hash: string): string {
  return createHmac("sha256", key).update(`loopctl-audit-seal:${seq}:${hash}`).digest("hex");
}

/** Whether two MACs (64 hex) are equal, in time that does not depend on where they differ. */
export function sameMac(a: string, b: string): boolean {
  return a.length === b.length && timingSafeEqual(Buffer.from(a, "latin1"), Buffer.from(b, "latin1"));
}
