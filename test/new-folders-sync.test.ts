import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { projectIdentity } from "../src/grant/index.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { useShim } from "./support/native-shim.js";
import { unmet } from "./support/precondition.js";

// A child process writes through the real file system with a libc shim
// (LD_PRELOAD) that records every folder it fsyncs. A folder that mkdir has
// just made is an entry in its parent: until the parent is synced, a power cut
// may take the new folder away, and the file written in it with it.

const GRANT_CHILD = `
const [, esm, root, project] = process.argv;
const { FileGrantStore, Grant, GrantScope } = await import(esm);
await new FileGrantStore(root, project).save(new Grant("write", "allow", GrantScope.thisTool()));
`;

// The first save fails its first folder sync (the shim's LOOPCTL_FSYNC_FAIL_FIRST); the second must
// still sync the parents of the folders the first one made.
const GRANT_RETRY_CHILD = `
const [, esm, root, project] = process.argv;
const { FileGrantStore, Grant, GrantScope } = await import(esm);
const store = new FileGrantStore(root, project);
const failed = await store.save(new Grant("write", "allow", GrantScope.thisTool())).then(() => "saved", (e) => e.code);
if (failed !== "LEDGER_IO") throw new Error("the first save did not fail its folder sync: " + failed);
await store.save(new Grant("read", "allow", GrantScope.thisTool()));
`;

const AUDIT_CHILD = `
const [, esm, path, fsync, record] = process.argv;
const { AuditSink } = await import(esm);
const sink = await AuditSink.open(path, { fsync: fsync === "true" });
await sink.append(JSON.parse(record));
await sink.close();
`;

const RECORD = JSON.stringify(gateRecord(1));

/** Runs `script` with the shim and `args`; the folders it fsynced, in order. */
function syncedBy(
  setup: { builds: { esm: string }; shim: string | undefined; dir: string },
  script: string,
  args: string[],
  env: Record<string, string> = {},
): string[] {
  const log = join(setup.dir, `fsyncs-${Math.random().toString(16).slice(2)}.log`);
  const child = spawnSync(
    process.execPath,
    ["--input-type=module", "-e", script, pathToFileURL(setup.builds.esm).href, ...args],
    {
      encoding: "utf8",
      env: { ...process.env, ...env, LD_PRELOAD: setup.shim, LOOPCTL_FSYNC_LOG: log },
    },
  );
  expect(child.status, child.stderr).toBe(0);
  try {
    return readFileSync(log, "utf8").split("\n").filter(Boolean);
  } catch {
    return [];
  }
}

describe("FileGrantStore syncs the parent of each folder it creates", () => {
  const setup = useShim("record-dir-fsync", "grant");

  it("on the save that creates them, and only then", (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const base = realpathSync(setup.dir);
    const root = join(base, "state", "grants");
    const project = join(base, "project");
    mkdirSync(project);
    const dir = join(root, "projects", projectIdentity(project));

    const first = syncedBy(setup, GRANT_CHILD, [root, project]);
    // state, grants, projects and projects/<id> are new: their parents, and the ledger's folder.
    expect([...new Set(first)].sort()).toEqual([base, join(base, "state"), root, join(root, "projects"), dir].sort());
    // Nothing new: the ledger's folder alone.
    expect(syncedBy(setup, GRANT_CHILD, [root, project])).toEqual([dir]);
    rmSync(join(base, "state"), { recursive: true });
  });

  it("on a later save when the sync of the save that created them failed", (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const base = realpathSync(setup.dir);
    const root = join(base, "retry", "grants");
    const project = join(base, "retry-project");
    mkdirSync(project);
    const dir = join(root, "projects", projectIdentity(project));

    const synced = syncedBy(setup, GRANT_RETRY_CHILD, [root, project], { LOOPCTL_FSYNC_FAIL_FIRST: "1" });
    expect([...new Set(synced)].sort()).toEqual([base, join(base, "retry"), root, join(root, "projects"), dir].sort());
    rmSync(join(base, "retry"), { recursive: true });
  });
});

describe("AuditSink syncs the parent of each folder it creates, with fsync", () => {
  const setup = useShim("record-dir-fsync", "audit");

  it("when it opens the log that needs them, and only then", (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const base = realpathSync(setup.dir);
    const path = join(base, "var", "audit", "gates.jsonl");

    const first = syncedBy(setup, AUDIT_CHILD, [path, "true", RECORD]);
    // var and var/audit are new: their parents, and the log's folder for the new log.
    expect([...new Set(first)].sort()).toEqual([base, join(base, "var"), dirname(path)].sort());
    // Nothing new: no folder (the log's lines and seal are synced as files).
    expect(syncedBy(setup, AUDIT_CHILD, [path, "true", RECORD])).toEqual([]);
    // Without fsync nothing is synced, new folders or not.
    const other = join(base, "tmp", "audit", "gates.jsonl");
    expect(syncedBy(setup, AUDIT_CHILD, [other, "false", RECORD])).toEqual([]);
  });
});
