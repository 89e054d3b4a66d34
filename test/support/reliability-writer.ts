// A ledger writer for the crash and concurrency tests, run in its own process:
//   node <bundle> churn <root> <project> <tag>
//     saves grant n, then revokes grant n-2, forever, printing each completed
//     operation ("saved <id>" / "revoked <id>") before starting the next, until
//     the parent SIGKILLs it.
//   node <bundle> race <root> <project> <tag> <own> <shared>
//     saves <own> grants of its own and revokes every other one, interleaved
//     with save/revoke/save of <shared> grants every racer touches, then prints
//     one JSON line with what each operation returned, and exits.
//   node <bundle> deny <root> <project> <tag>
//     prints "ready", waits for a line on stdin, then saves one deny grant
//     with a stale-lock bound of 1 ms, printing "waiting <pid>" if it finds
//     the lock held, then "saved <id>", and exits.
//   node <bundle> revoke <root> <project> <tag>
//     prints "ready", waits for a line on stdin, then revokes ownGrant(<tag>, 0),
//     printing "revoked <id>" or "missing <id>", and exits.
// Lines are written with writeSync so that a line the parent read is an
// operation that had returned before the kill.
import { writeSync } from "node:fs";
import { createInterface } from "node:readline";
import { FileGrantStore } from "../../src/grant/index.js";
import { denyGrant, ownGrant, sharedGrant } from "./reliability-grants.js";

const [mode, root, project, tag, ownArg, sharedArg] = process.argv.slice(2);
if (mode === undefined || root === undefined || project === undefined || tag === undefined) {
  throw new Error("usage: reliability-writer.ts churn|race <root> <project> <tag> [own shared]");
}
const store = new FileGrantStore(root, project, { lockTimeoutMs: 20_000 });
const say = (line: string): void => {
  writeSync(1, `${line}\n`);
};

if (mode === "churn") {
  say("ready");
  for (let n = 0; ; n += 1) {
    const grant = ownGrant(tag, n);
    await store.save(grant);
    say(`saved ${grant.id}`);
    if (n >= 2) {
      const old = ownGrant(tag, n - 2);
      const gone = await store.revoke(old.id);
      say(`${gone === undefined ? "missing" : "revoked"} ${old.id}`);
    }
  }
} else if (mode === "race") {
  const own = Number(ownArg);
  const shared = Number(sharedArg);
  const ops: { op: string; id: string; returned: boolean }[] = [];
  for (let n = 0; n < Math.max(own, shared); n += 1) {
    if (n < own) {
      const grant = ownGrant(tag, n);
      await store.save(grant);
      ops.push({ op: "save", id: grant.id, returned: true });
      if (n % 2 === 1) ops.push({ op: "revoke", id: grant.id, returned: (await store.revoke(grant.id)) !== undefined });
    }
    if (n < shared) {
      // Every racer saves, revokes and saves again the same ids, with its own note.
      const grant = sharedGrant(n).withNote(tag);
      await store.save(grant);
      ops.push({ op: "save", id: grant.id, returned: true });
      ops.push({ op: "revoke", id: grant.id, returned: (await store.revoke(grant.id)) !== undefined });
      await store.save(grant);
      ops.push({ op: "save", id: grant.id, returned: true });
    }
  }
  say(JSON.stringify({ tag, ops }));
} else if (mode === "deny") {
  const waiting = new FileGrantStore(root, project, {
    staleLockMs: 1,
    lockTimeoutMs: 60_000,
    onLockWait: (wait) => say(`waiting ${String(wait.holder?.pid)}`),
  });
  const lines = createInterface({ input: process.stdin });
  say("ready");
  await new Promise<void>((resolve) => lines.once("line", () => resolve()));
  lines.close();
  const saved = await waiting.save(denyGrant(tag));
  say(`saved ${saved.id}`);
} else if (mode === "revoke") {
  const lines = createInterface({ input: process.stdin });
  say("ready");
  await new Promise<void>((resolve) => lines.once("line", () => resolve()));
  lines.close();
  const id = ownGrant(tag, 0).id;
  say(`${(await store.revoke(id)) === undefined ? "missing" : "revoked"} ${id}`);
} else {
  throw new Error(`unknown mode ${mode}`);
}
