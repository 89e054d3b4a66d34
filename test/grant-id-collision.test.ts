import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FileGrantStore, Grant, GrantIdCollisionError, GrantScope, MemoryGrantStore } from "../src/grant/index.js";

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
    expect(await readFile(store.ledgerPath)).toEqual(before);
    expect((await store.load()).map((g) => [g.id, g.covers("shell", { cmd: "BJKS_Ubr3rL" })])).toEqual([
      [denyRm.id, true],
    ]);
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
