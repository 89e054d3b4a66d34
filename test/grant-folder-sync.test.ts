import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { FileGrantStore, Grant, GrantScope } from "../src/grant/index.js";
import { useGrantShim } from "./support/native-shim.js";
import { bundleCli } from "./support/reliability-bundle.js";
import { unmet } from "./support/precondition.js";

// A child process saves and revokes through the real file system with a libc
// shim (LD_PRELOAD) that fails every fsync of a folder with EIO: the rename
// has happened, its durability could not be made sure of.

const CHILD = `
const [, esm, root, project, op] = process.argv;
const { FileGrantStore, Grant, GrantScope } = await import(esm);
const store = new FileGrantStore(root, project);
const grant = new Grant("write", "allow", GrantScope.thisTool());
try {
  if (op === "save") await store.save(grant);
  else if (op === "repair") await store.resetCorrupt();
  else if (op === "clear") await store.clear();
  else if (op === "revokeTool") await store.revokeTool("write");
  else await store.revoke(grant.id);
  console.log(JSON.stringify({ ok: true }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, name: error.name, code: error.code, message: error.message }));
}
`;

interface Outcome {
  readonly ok: boolean;
  readonly name?: string;
  readonly code?: string;
  readonly message?: string;
}

describe("FileGrantStore when the folder sync after the rename fails", () => {
  const setup = useGrantShim("fail-dir-fsync");

  const run = (op: "save" | "revoke" | "repair" | "clear" | "revokeTool", root: string, project: string): Outcome => {
    const child = spawnSync(
      process.execPath,
      ["--input-type=module", "-e", CHILD, pathToFileURL(setup.builds.esm).href, root, project, op],
      { encoding: "utf8", env: { ...process.env, LD_PRELOAD: setup.shim } },
    );
    expect(child.status, child.stderr).toBe(0);
    return JSON.parse(child.stdout) as Outcome;
  };

  it("rejects the save and the revoke with LEDGER_IO saying the change is in effect, which a reload shows", async (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const root = join(setup.dir, "root");
    const project = join(setup.dir, "project");
    const grant = new Grant("write", "allow", GrantScope.thisTool());
    const store = new FileGrantStore(root, project);

    const saved = run("save", root, project);
    expect(saved).toMatchObject({ ok: false, name: "LedgerIoError", code: "LEDGER_IO" });
    // The folder is what failed, and is named as one.
    expect(saved.message).toContain(`grant ledger folder ${dirname(store.ledgerPath)}: `);
    expect(saved.message).toContain("the ledger was replaced, but its folder cannot be synced (EIO)");
    expect(saved.message).toContain("the change is in effect and may not survive a power cut");
    expect((await store.load()).map((g) => g.id)).toEqual([grant.id]);

    const revoked = run("revoke", root, project);
    expect(revoked).toMatchObject({ ok: false, code: "LEDGER_IO" });
    expect(revoked.message).toContain("the change is in effect");
    expect(await store.load()).toEqual([]);
  }, 30_000);

  it("rejects a clear and a revokeTool with LEDGER_IO saying how many grants their removal in effect took", async (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const root = join(setup.dir, "count-root");
    const project = join(setup.dir, "count-project");
    const store = new FileGrantStore(root, project);
    const seedGrants = async (): Promise<void> => {
      await store.save(new Grant("write", "allow", GrantScope.thisTool()));
      await store.save(new Grant("write", "deny", GrantScope.thisCall({ path: "/etc" })));
      await store.save(new Grant("read", "allow", GrantScope.thisTool()));
    };

    await seedGrants();
    const cleared = run("clear", root, project);
    expect(cleared).toMatchObject({ ok: false, name: "LedgerIoError", code: "LEDGER_IO" });
    expect(cleared.message).toContain(
      "the ledger was replaced, but its folder cannot be synced (EIO): the removal of the ledger's 3 grants is in effect",
    );
    expect(await store.load()).toEqual([]);

    await seedGrants();
    const revoked = run("revokeTool", root, project);
    expect(revoked).toMatchObject({ ok: false, code: "LEDGER_IO" });
    expect(revoked.message).toContain(`the removal of 2 grants of tool "write" is in effect`);
    expect((await store.load()).map((g) => g.tool)).toEqual(["read"]);
  }, 30_000);

  it("loopctl grants reset says how many grants it removed when the folder sync after it fails", async (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const root = join(setup.dir, "cli-root");
    const project = join(setup.dir, "cli-project");
    mkdirSync(project);
    const store = new FileGrantStore(root, project);
    await store.save(new Grant("write", "allow", GrantScope.thisTool()));
    await store.save(new Grant("read", "allow", GrantScope.thisTool()));
    const bundle = await bundleCli();
    try {
      for (const [extra, said] of [
        [["--tool", "read"], `the removal of 1 grant of tool "read" is in effect`],
        [[], "the removal of the ledger's 1 grant is in effect"],
      ] as const) {
        const child = spawnSync(
          process.execPath,
          [bundle.path, "grants", "reset", ...extra, "--root", root, "--project", project],
          { encoding: "utf8", env: { ...process.env, LD_PRELOAD: setup.shim } },
        );
        expect(child.status, child.stderr).toBe(4);
        expect(child.stderr).toContain(said);
        expect(child.stderr).toContain("[LEDGER_IO]");
      }
    } finally {
      bundle.dispose();
    }
    expect(await store.load()).toEqual([]);
  }, 60_000);

  it("rejects a move aside of a corrupt ledger with LEDGER_IO naming where the ledger went, not as a replaced ledger", async (ctx) => {
    if (setup.shim === undefined) unmet(ctx, setup.why);
    const root = join(setup.dir, "aside-root");
    const project = join(setup.dir, "aside-project");
    const store = new FileGrantStore(root, project);
    await store.save(new Grant("write", "allow", GrantScope.thisTool()));
    writeFileSync(store.ledgerPath, "not a ledger");

    const repaired = run("repair", root, project);
    expect(repaired).toMatchObject({ ok: false, name: "LedgerIoError", code: "LEDGER_IO" });
    const aside = readdirSync(dirname(store.ledgerPath)).filter((name) => name.startsWith("grants.json.corrupt-"));
    expect(aside).toHaveLength(1);
    // The move happened: the message says so and where to, since a second repair finds no ledger to name it.
    expect(repaired.message).toContain(
      `the corrupt ledger was moved aside to ${join(dirname(store.ledgerPath), aside[0] ?? "")}, ` +
        "but its folder cannot be synced (EIO): the move is in effect and may not survive a power cut",
    );
    expect(repaired.message).not.toContain("the ledger was replaced");
    expect(await store.resetCorrupt()).toBeUndefined();
  }, 30_000);
});
