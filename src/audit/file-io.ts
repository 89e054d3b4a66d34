import { constants } from "node:fs";
import { open } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";

/** The message of an error from the file system, for our own messages. */
export function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code && !error.message.startsWith(code) ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}

/** Writes all of `bytes` at the handle's position (the end, for an append handle). */
export async function writeAll(handle: FileHandle, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, offset, bytes.length - offset, null);
    if (bytesWritten <= 0) throw new Error("the file system accepted no bytes");
    offset += bytesWritten;
  }
}

/** fsyncs `folder`, so that a file created or renamed in it survives a power cut. */
export async function syncFolder(folder: string): Promise<void> {
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
