// A child process that keeps appending to an audit log while its parent reads
// it: it opens its sink (with the key in <keyFile>, if given), appends <warm>
// records, says "ready", then appends one record after another until it reads
// "stop" on stdin, and prints {"appended": <count>}.
import { readFileSync } from "node:fs";
import { AuditSink } from "../../src/audit/index.js";
import { gateRecord } from "./cli-audit-fixtures.js";
import { waitForGo } from "./child-process.js";

const [path, warmText, keyFile] = process.argv.slice(2);
const key = keyFile === undefined ? undefined : readFileSync(keyFile);
const sink = await AuditSink.open(path as string, key === undefined ? {} : { key });
let appended = 0;
await Promise.all(Array.from({ length: Number(warmText) }, () => sink.append(gateRecord(++appended))));
process.stdout.write("ready\n");
let stop = false;
void waitForGo().then(() => (stop = true));
while (!stop) await sink.append(gateRecord(++appended));
await sink.close();
process.stdout.write(`${JSON.stringify({ appended })}\n`);
