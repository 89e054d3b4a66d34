// A child process whose audit log gets a lock file far larger than any lock
// record beside it (planted by someone who can write the log's folder): it
// appends, and prints how the append ended, how long it took, and the most
// memory the process held.
import { truncate, writeFile } from "node:fs/promises";
import { AuditSink } from "../../src/audit/index.js";
import { gateRecord } from "./cli-audit-fixtures.js";

const [path, sizeText] = process.argv.slice(2) as [string, string];
const size = Number(sizeText);

const sink = await AuditSink.open(path, { lockTimeoutMs: 5_000 });
await sink.append(gateRecord(1));
// Zeros to `size` (a sparse file: quick to make, and to read).
await writeFile(`${path}.lock`, "");
await truncate(`${path}.lock`, size);
const started = performance.now();
const appended = await sink.append(gateRecord(2)).then(
  (anchor) => ({ seq: anchor.seq }),
  (error: unknown) => {
    const { code, message } = error as { code: string; message: string };
    return { code, message };
  },
);
const ms = Math.round(performance.now() - started);
await sink.close();

process.stdout.write(`${JSON.stringify({ appended, ms, maxRssBytes: process.resourceUsage().maxRSS * 1024 })}\n`);
