// A child process that appends to an audit log under a file size limit set by
// its parent (`ulimit -f 8`: 4 KiB), so that a write really fails mid-line: `big`
// records of about 1 KiB each, then `small` ones of under 500 bytes, which
// still fit in what the limit leaves. LOOPCTL_TEST_AUDIT_KEY (hex) opens the
// log with that key and LOOPCTL_TEST_AUDIT_FSYNC=1 with fsync.
import { AuditSink } from "../../src/audit/index.js";
import type { AuditSinkOptions } from "../../src/audit/index.js";
import { gateRecord } from "./cli-audit-fixtures.js";

const [path, bigText, smallText = "0"] = process.argv.slice(2);
const keyHex = process.env["LOOPCTL_TEST_AUDIT_KEY"];
const errors: string[] = [];
const options: AuditSinkOptions = {
  onError: (error) => errors.push(error.code),
  fsync: process.env["LOOPCTL_TEST_AUDIT_FSYNC"] === "1",
  ...(keyHex === undefined ? {} : { key: Buffer.from(keyHex, "hex") }),
};
const sink = await AuditSink.open(path as string, options);
const outcomes: string[] = [];
const big = Number(bigText);
for (let i = 1; i <= big + Number(smallText); i++) {
  const record = i <= big ? gateRecord(i, { reason: "z".repeat(700) }) : gateRecord(i);
  outcomes.push(
    await sink.append(record).then(
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
