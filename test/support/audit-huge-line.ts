// A child process that meets a line gigabytes long without a newline (the
// file's own bytes, or bytes another writer added under an open sink):
// verifies the log, opens it, appends after the line is added, and prints
// what each did and the most memory the process held.
import { stat, truncate } from "node:fs/promises";
import { AuditSink, verifyAuditLog } from "../../src/audit/index.js";
import { gateRecord } from "./cli-audit-fixtures.js";

const [path, added, sizeText] = process.argv.slice(2) as [string, string, string];
const size = Number(sizeText);

const failure = (error: unknown): unknown => {
  const { code, line, problem, message } = error as { code: string; line: number; problem: string; message: string };
  return { code, line, problem, message };
};

const verified = await verifyAuditLog(path, { records: false });
const opened = await AuditSink.open(path).then((sink) => sink.close().then(() => "opened"), failure);

const sink = await AuditSink.open(added);
await sink.append(gateRecord(1));
// Another writer's bytes, past the lock: zeros to `size`, no newline among them.
const addedAt = (await stat(added)).size;
await truncate(added, size);
const appended = await sink.append(gateRecord(2)).then(() => "appended", failure);
await sink.close();

process.stdout.write(
  `${JSON.stringify({ verified, opened, appended, addedAt, maxRssBytes: process.resourceUsage().maxRSS * 1024 })}\n`,
);
