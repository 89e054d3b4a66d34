import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  FileGrantStore,
  Grant,
  GrantIdCollisionError,
  GrantPolicy,
  GrantScope,
  LedgerCorruptError,
  MemoryGrantStore,
} from "../src/grant/index.js";

// Grant ids are 64-bit FNV-1a digests, which can be made to collide on
// purpose. These two rules are a real collision, found by a birthday search
// over 11-character commands: two different `this_call` denies, one id. A
// crafted call whose deny replaced the first would forget the deny of `rm`.
const denyRm = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "BJKS_Ubr3rL" }));
const denyCrafted = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "EUpniFqMLxB" }));

let base: string;
beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "loopctl-collision-"));
});
afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

describe("a save whose id is taken by a different rule", () => {
  it("the two rules really share an id here", () => {
    expect(denyRm.id).toBe("b26c7f6973128459");
    expect(denyCrafted.id).toBe(denyRm.id);
    expect(denyCrafted.covers("shell", { cmd: "BJKS_Ubr3rL" })).toBe(false);
    expect(denyRm.covers("shell", { cmd: "BJKS_Ubr3rL" })).toBe(true);
  });

  it("is refused by FileGrantStore, leaving the ledger byte-identical", async () => {
    const store = new FileGrantStore(join(base, "root"), join(base, "project"));
    await store.save(denyRm);
    const before = await readFile(store.ledgerPath);
    const error = await store.save(denyCrafted).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as InstanceType<typeof GrantIdCollisionError>).code).toBe("GRANT_ID_COLLISION");
    expect((error as Error).message).toContain(denyRm.id);
    expect((error as Error).message).toContain(`grant ledger ${store.ledgerPath}`);
    expect(await readFile(store.ledgerPath)).toEqual(before);
    expect((await store.load()).map((g) => [g.id, g.covers("shell", { cmd: "BJKS_Ubr3rL" })])).toEqual([
      [denyRm.id, true],
    ]);
  });

  it("quotes a tool name that holds controls in JSON's escapes when it names the two rules", async () => {
    // The digest's state after the colliding args is the same, so any tool name after them collides too.
    const tool = "shell\n\u001b[32mloopctl: grant saved\u001b[0m";
    const first = new Grant(tool, "deny", GrantScope.thisCall({ cmd: "BJKS_Ubr3rL" }));
    const second = new Grant(tool, "deny", GrantScope.thisCall({ cmd: "EUpniFqMLxB" }));
    expect(second.id).toBe(first.id);
    const error = await new MemoryGrantStore([first]).save(second).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as Error).message).not.toMatch(/[\u0000-\u001f\u007f]/);
    expect((error as Error).message).toContain(`deny ${JSON.stringify(tool)} this_call {"cmd":"BJKS_Ubr3rL"}`);
    const plain = await new MemoryGrantStore([denyRm]).save(denyCrafted).catch((e: unknown) => e);
    expect((plain as Error).message).toContain(`deny 'shell' this_call {"cmd":"BJKS_Ubr3rL"}`);
  });

  it("is refused by MemoryGrantStore", async () => {
    const store = new MemoryGrantStore([denyRm]);
    await expect(store.save(denyCrafted)).rejects.toBeInstanceOf(GrantIdCollisionError);
    expect((await store.load()).map((g) => [g.id, g.covers("shell", { cmd: "BJKS_Ubr3rL" })])).toEqual([
      [denyRm.id, true],
    ]);
  });

  it("still lets the same rule be granted again with new metadata", async () => {
    const store = new FileGrantStore(join(base, "root"), join(base, "project"));
    await store.save(denyRm);
    await store.save(denyRm.withNote("re-granted").withCreatedAtMs(5));
    const [only, ...rest] = await store.load();
    expect(rest).toEqual([]);
    expect(only?.note).toBe("re-granted");
  });
});

describe("two different rules under one id where grants are loaded", () => {
  const tool = { name: "shell", description: "run a command", inputSchema: {} };

  async function ledgerOf(...grants: Grant[]): Promise<FileGrantStore> {
    const store = new FileGrantStore(join(base, "root"), join(base, "project"));
    await mkdir(dirname(store.ledgerPath), { recursive: true, mode: 0o700 });
    await writeFile(store.ledgerPath, `[${grants.map((g) => g.toLedgerText()).join(",")}]`, { mode: 0o600 });
    return store;
  }

  it("a ledger holding both is corrupt, naming the id; no decision, save, revoke or clear forgets the first", async () => {
    const store = await ledgerOf(denyRm, denyCrafted);
    const before = await readFile(store.ledgerPath);
    const error = await store.load().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LedgerCorruptError);
    expect((error as LedgerCorruptError).path).toBe(store.ledgerPath);
    expect((error as Error).message).toContain(`records 0 and 1 have the same id ${denyRm.id}`);
    await expect(new GrantPolicy(store).decide(tool, { cmd: "BJKS_Ubr3rL" })).rejects.toBeInstanceOf(
      LedgerCorruptError,
    );
    await expect(store.save(new Grant("read", "allow", GrantScope.thisTool()))).rejects.toBeInstanceOf(
      LedgerCorruptError,
    );
    await expect(store.revoke(denyRm.id)).rejects.toBeInstanceOf(LedgerCorruptError);
    await expect(store.clear()).rejects.toBeInstanceOf(LedgerCorruptError);
    expect(await readFile(store.ledgerPath)).toEqual(before);
  });

  it("a ledger holding one rule twice (granted again) loads it once, the later record winning", async () => {
    const store = await ledgerOf(denyRm.withCreatedAtMs(1), denyRm.withCreatedAtMs(2).withNote("again"));
    expect((await store.load()).map((g) => [g.id, g.createdAtMs, g.note])).toEqual([[denyRm.id, 2, "again"]]);
  });

  it("MemoryGrantStore refuses to start with both, as its save does", () => {
    let error: unknown;
    try {
      new MemoryGrantStore([denyRm, denyCrafted]);
    } catch (thrown) {
      error = thrown;
    }
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as GrantIdCollisionError).id).toBe(denyRm.id);
  });

  it("MemoryGrantStore starts with one rule given twice as the later one", async () => {
    const store = new MemoryGrantStore([denyRm, denyRm.withNote("again")]);
    expect((await store.load()).map((g) => [g.id, g.note])).toEqual([[denyRm.id, "again"]]);
  });
});
