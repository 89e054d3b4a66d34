import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { resolve } from "node:path";
import { z } from "zod";
import { GateDecisionSchema } from "../engine/records.js";
import type { GateDecision } from "../engine/records.js";
import { shownValue } from "../errors.js";
import { ServerConfigError } from "./errors.js";
import type { RecordSource } from "./records.js";

/** Options of {@link auditLogRecords}. */
export interface AuditLogRecordsOptions {
  /**
   * How much of the end of the log is read per request. The decisions shown
   * are those whose lines lie wholly within it, so a request costs the same
   * however long the log has grown.
   * @default 1_048_576 (1 MiB)
   */
  readonly tailBytes?: number;
}

const LineSchema = z.object({ record: GateDecisionSchema });

/**
 * A {@link RecordSource} over an audit log written by `AuditSink` (in this
 * process or another): each read takes the latest lines from the end of the
 * file. It shows records as written and does not check the hash chain
 * (`loopctl audit verify` does); a line that does not parse is skipped. A log
 * that does not exist yet reads as empty.
 *
 * @throws {ServerConfigError} naming `path`, `options` or `tailBytes` when
 * one is unusable.
 *
 * @example
 * ```ts
 * await createApprovalServer({ approver, records: auditLogRecords("audit/gates.jsonl") });
 * ```
 */
export function auditLogRecords(path: string, options: AuditLogRecordsOptions = {}): RecordSource {
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
  return {
    async recent(limit: number, callOptions?: { readonly signal?: AbortSignal }): Promise<GateDecision[]> {
      const text = await readTail(file, tailBytes, callOptions?.signal);
      const lines = text.split("\n");
      // The first piece may be the end of a line cut by the window; whole lines parse, the rest is skipped.
      const records: GateDecision[] = [];
      for (let i = lines.length - 1; i >= 0 && records.length < limit; i--) {
        const line = lines[i] as string;
        if (line === "") continue;
        const record = parseLine(line);
        if (record !== undefined) records.push(record);
      }
      return records.reverse();
    },
  };
}

function kindOf(value: unknown): string {
  return value === null ? "null" : typeof value === "string" ? JSON.stringify(value) : typeof value;
}

function parseLine(line: string): GateDecision | undefined {
  try {
    const parsed = LineSchema.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data.record : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The last `tailBytes` of `file`. Opened without blocking and read only if
 * it is a regular file: a FIFO put in the log's place would hold the open
 * (and the request) until something writes to it. Stops between reads once
 * `signal` aborts (the request no longer waits), rejecting with its reason.
 */
async function readTail(file: string, tailBytes: number, signal: AbortSignal | undefined): Promise<string> {
  signal?.throwIfAborted();
  let handle;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return "";
    throw error;
  }
  try {
    signal?.throwIfAborted();
    const stat = await handle.stat();
    if (!stat.isFile()) throw new Error(`the audit log ${file} is not a regular file`);
    const { size } = stat;
    const length = Math.min(size, tailBytes);
    const buffer = Buffer.alloc(length);
    let read = 0;
    while (read < length) {
      signal?.throwIfAborted();
      const { bytesRead } = await handle.read(buffer, read, length - read, size - length + read);
      if (bytesRead === 0) break;
      read += bytesRead;
    }
    return buffer.subarray(0, read).toString("utf8");
  } finally {
    await handle.close();
  }
}
