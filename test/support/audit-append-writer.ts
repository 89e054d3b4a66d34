// A child process that appends records to an audit log while its siblings do
// the same: it opens its sink, says "ready", waits for "go" on stdin, then
// appends as fast as it can. Each record's tool names the writer and its count.
import { readFileSync } from "node:fs";
import { AuditSink } from "../../src/audit/index.js";
import { gateRecord } from "./cli-audit-fixtures.js";

const [path, writer, countText, keyFile] = process.argv.slice(2);
const key = keyFile === undefined ? undefined : readFileSync(keyFile);
const sink = await AuditSink.open(path as string, key === undefined ? {} : { key });
process.stdout.write("ready\n");
await new Promise<void>((resolve) => process.stdin.once("data", () => resolve()));
const outcomes: string[] = [];
for (let i = 1; i <= Number(countText); i++) {
  outcomes.push(
    await sink.append(gateRecord(i, { tool: `w${writer}_${i}` })).then(
      (anchor) => `ok:${anchor.seq}`,
      (error: { code: string; message: string }) => `error:${error.code}: ${error.message}`,
    ),
  );
}
await sink.close();
process.stdout.write(`${JSON.stringify({ outcomes })}\n`);
