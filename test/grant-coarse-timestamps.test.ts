import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { useGrantShim } from "./support/native-shim.js";
import { unmet } from "./support/precondition.js";

// A child process runs two stores on one ledger through the real file system
// with a libc shim (LD_PRELOAD) that makes it look like a file system with
// whole-second timestamps that hands a freed inode straight back: every
// ledger has inode 4242 and mtime and ctime in whole seconds. One store's
// change that keeps the ledger's size then leaves its stat as it was.

const CHILD = `
const [, esm, root, project] = process.argv;
const { FileGrantStore, Grant, GrantScope } = await import(esm);
const { lstatSync } = await import("node:fs");
const a = new FileGrantStore(root, project);
const b = new FileGrantStore(root, project);
// Tool names of one length: every record is as long as any other.
const [write, erase, fetch, patch] = ["write", "erase", "fetch", "patch"].map(
  (tool) => new Grant(tool, "allow", GrantScope.thisTool()),
);
const tools = async (store) => (await store.load()).map((g) => g.tool);
const covering = async (store, tool) => (await store.covering(tool, "{}")).map((g) => g.tool);
const out = {};

// A's snapshot read from B's ledger.
await b.save(write);
out.first = await tools(a);
const seen = lstatSync(a.ledgerPath, { bigint: true });
out.shim = { ino: String(seen.ino), wholeSeconds: seen.mtimeNs % 1_000_000_000n === 0n };
await b.revoke(write.id);
await b.save(erase);
out.afterB = await tools(a);
out.coveringWrite = await covering(a, "write");
await a.save(fetch);
out.afterSave = await tools(new FileGrantStore(root, project));

// A's snapshot from its own write.
await b.revoke(erase.id);
await b.save(patch);
out.afterB2 = await tools(a);
out.coveringErase = await covering(a, "erase");
await a.revoke(fetch.id);
out.afterRevoke = await tools(new FileGrantStore(root, project));

// A changes the ledger with no read before: only the read under the lock sees B's change.
await b.revoke(patch.id);
await b.save(write);
await a.save(erase);
out.afterSave2 = await tools(new FileGrantStore(root, project));
console.log(JSON.stringify(out));
`;

describe("FileGrantStore on a file system with coarse timestamps that reuses inodes", () => {
  const setup = useGrantShim("coarse-stat");

  it("sees another store's change of the same size, and neither loses nor resurrects a grant writing its own", (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const child = spawnSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        CHILD,
        pathToFileURL(setup.builds.esm).href,
        join(setup.dir, "root"),
        join(setup.dir, "project"),
      ],
      { encoding: "utf8", env: { ...process.env, LD_PRELOAD: setup.shim } },
    );
    expect(child.status, child.stderr).toBe(0);
    const out = JSON.parse(child.stdout) as Record<string, unknown>;
    // The shim is in effect: without it the stat would tell the ledgers apart.
    expect(out["shim"]).toEqual({ ino: "4242", wholeSeconds: true });
    expect(out["first"]).toEqual(["write"]);
    // B revoked the allow for write: A must not keep allowing it.
    expect(out["afterB"]).toEqual(["erase"]);
    expect(out["coveringWrite"]).toEqual([]);
    // A's save merges into B's ledger, not into the one A had seen.
    expect(out["afterSave"]).toEqual(["erase", "fetch"]);
    expect(out["afterB2"]).toEqual(["fetch", "patch"]);
    expect(out["coveringErase"]).toEqual([]);
    expect(out["afterRevoke"]).toEqual(["patch"]);
    expect(out["afterSave2"]).toEqual(["write", "erase"]);
  }, 30_000);
});
