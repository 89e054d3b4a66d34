// A child process that appends to an audit log under a file size limit set by
// its parent (`ulimit -f`), so that a write really fails mid-line.
import { AuditSink } from "../../src/audit/index.js";
import { gateRecord } from "./cli-audit-fixtures.js";

const [path, countText] = process.argv.slice(2);
const errors: string[] = [];
const sink = await AuditSink.open(path as string, { onError: (error) => errors.push(error.code) });
const outcomes: string[] = [];
for (let i = 1; i <= Number(countText); i++) {
  outcomes.push(
    await sink.append(gateRecord(i, { reason: "z".repeat(900) })).then(
      (anchor) => `ok:${anchor.seq}`,
      (error: { code: string }) => `error:${error.code}`,
    ),
  );
}
const flush = await sink.flush().then(
  () => "ok",
  (error: { code: string; message: string }) => `${error.code}: ${error.message}`,
);
await sink.close();
process.stdout.write(JSON.stringify({ outcomes, errors, flush }));
