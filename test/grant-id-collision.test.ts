import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

// Grant ids are 64-bit FNV-1a digests, which can be made to collide on
// purpose. Forcing every digest to one value stands in for a crafted pair.
vi.mock("../src/grant/digest.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../src/grant/digest.js")>();
  return { ...original, digest16: (): string => "00000000deadbeef" };
});

const { FileGrantStore, Grant, GrantIdCollisionError, GrantScope, MemoryGrantStore } = await import(
  "../src/grant/index.js"
);

const denyRm = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "rm -rf /" }));
const allowCrafted = new Grant("shell", "allow", GrantScope.thisCall({ cmd: "crafted" }));

let base: string;
beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "loopctl-collision-"));
});
afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

describe("a save whose id is taken by a different rule", () => {
  it("the two rules really share an id here", () => {
    expect(allowCrafted.id).toBe(denyRm.id);
  });

  it("is refused by FileGrantStore, leaving the ledger byte-identical", async () => {
    const store = new FileGrantStore(join(base, "root"), join(base, "project"));
    await store.save(denyRm);
    const before = await readFile(store.ledgerPath);
    const error = await store.save(allowCrafted).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as InstanceType<typeof GrantIdCollisionError>).code).toBe("GRANT_ID_COLLISION");
    expect((error as Error).message).toContain(denyRm.id);
    expect(await readFile(store.ledgerPath)).toEqual(before);
    expect((await store.load()).map((g) => g.verdict)).toEqual(["deny"]);
  });

  it("is refused by MemoryGrantStore", async () => {
    const store = new MemoryGrantStore([denyRm]);
    await expect(store.save(allowCrafted)).rejects.toBeInstanceOf(GrantIdCollisionError);
    expect((await store.load()).map((g) => g.verdict)).toEqual(["deny"]);
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
