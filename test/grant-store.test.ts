import { describe, expect, it } from "vitest";
import { Grant, GrantRecordError, GrantScope, MemoryGrantStore } from "../src/grant/index.js";

const allowRead = new Grant("read", "allow", GrantScope.thisTool());
const denyWrite = new Grant("write", "deny", GrantScope.thisCall({ path: "/etc/passwd" }));

describe("MemoryGrantStore", () => {
  it("starts empty, or with the grants given", async () => {
    expect(await new MemoryGrantStore().load()).toEqual([]);
    expect(await new MemoryGrantStore([allowRead, denyWrite]).load()).toEqual([allowRead, denyWrite]);
  });

  it("save resolves to the grant and replaces a grant with the same id", async () => {
    const store = new MemoryGrantStore([allowRead, denyWrite]);
    const renoted = allowRead.withNote("again");
    expect(await store.save(renoted)).toBe(renoted);
    const loaded = await store.load();
    expect(loaded).toHaveLength(2);
    expect(loaded.map((g) => g.note)).toEqual([null, "again"]);
  });

  it("revoke resolves to the removed grant, or undefined for an unknown id", async () => {
    const store = new MemoryGrantStore([allowRead, denyWrite]);
    expect(await store.revoke(allowRead.id)).toBe(allowRead);
    expect(await store.revoke(allowRead.id)).toBeUndefined();
    expect(await store.load()).toEqual([denyWrite]);
  });

  it("clear resolves to how many grants it removed", async () => {
    const store = new MemoryGrantStore([allowRead, denyWrite]);
    expect(await store.clear()).toBe(2);
    expect(await store.clear()).toBe(0);
    expect(await store.load()).toEqual([]);
  });

  it("hands out an index that follows changes", async () => {
    const store = new MemoryGrantStore([allowRead]);
    const first = await store.index();
    expect(await store.index()).toBe(first);
    expect(first.lookup("read", {}).thisTool.allow).toBe(allowRead);
    await store.save(denyWrite);
    const second = await store.index();
    expect(second).not.toBe(first);
    expect(second.lookup("write", { path: "/etc/passwd" }).thisCall.deny).toBe(denyWrite);
    await store.revoke(allowRead.id);
    expect((await store.index()).lookup("read", {}).thisTool.allow).toBeUndefined();
  });

  it("refuses to save something that is not a Grant", async () => {
    const store = new MemoryGrantStore();
    await expect(store.save(allowRead.toJSON() as unknown as Grant)).rejects.toBeInstanceOf(GrantRecordError);
    expect(() => new MemoryGrantStore([{} as Grant])).toThrow(GrantRecordError);
  });
});
