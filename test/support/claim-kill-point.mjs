// A kill point for the crash tests, loaded into a ledger writer process with
// `node --import <this file> <writer> …`. The file system stays the real one;
// only the moment of death is chosen:
// - when the writer is about to create a claim to break an abandoned lock
//   (`….lock.break-<16 hex>`, O_EXCL), it prints "claiming" and waits for a
//   line on stdin, so the parent can let another writer go first;
// - when it is about to rename that claim over the lock or remove it, it
//   prints "killed" and SIGKILLs itself: it dies holding its claim.
import { writeSync } from "node:fs";
import { constants } from "node:fs";
import { createRequire, syncBuiltinESMExports } from "node:module";
import { createInterface } from "node:readline";

const require = createRequire(import.meta.url);
const fsp = require("node:fs/promises");
const CLAIM = /\.lock\.break-[0-9a-f]{16}$/;
const { open, rename, unlink } = fsp;

let paused = false;
fsp.open = async (path, flags, ...rest) => {
  if (!paused && CLAIM.test(String(path)) && typeof flags === "number" && (flags & constants.O_EXCL) !== 0) {
    paused = true;
    writeSync(1, "claiming\n");
    const lines = createInterface({ input: process.stdin });
    await new Promise((resolve) => lines.once("line", resolve));
    lines.close();
  }
  return open(path, flags, ...rest);
};
const dieHoldingClaim = (path) => {
  if (!CLAIM.test(String(path))) return;
  writeSync(1, "killed\n");
  process.kill(process.pid, "SIGKILL");
};
fsp.rename = async (from, to) => {
  dieHoldingClaim(from);
  return rename(from, to);
};
fsp.unlink = async (path) => {
  dieHoldingClaim(path);
  return unlink(path);
};
syncBuiltinESMExports();
