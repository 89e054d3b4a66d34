import { describe, expect, it, vi } from "vitest";

// Grant ids are 64-bit FNV-1a digests, which can be made to collide on
// purpose. Forcing every digest to one value stands in for a crafted pair.
vi.mock("../src/grant/digest.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../src/grant/digest.js")>();
  return { ...original, digest16: (): string => "00000000deadbeef" };
});

const { Grant, GrantIdCollisionError, GrantScope } = await import("loopctl/grant");
const { PostgresGrantStore } = await import("loopctl/postgres");
const { usePostgres } = await import("./support/postgres.js");

const db = usePostgres();
const denyRm = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "rm -rf /" }));
const allowCrafted = new Grant("shell", "allow", GrantScope.thisCall({ cmd: "crafted" }));

describe("PostgresGrantStore: a save whose id is taken by a different rule", () => {
  it("is refused, naming both rules, and changes nothing", async () => {
    expect(allowCrafted.id).toBe(denyRm.id);
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(denyRm);
    const error = await store.save(allowCrafted).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as Error).message).toContain('deny \'shell\' this_call {"cmd":"rm -rf /"}');
    expect((error as Error).message).toContain('allow \'shell\' this_call {"cmd":"crafted"}');
    expect((await store.load()).map((g) => g.toJSON())).toEqual([denyRm.toJSON()]);
    const { rows } = await db.pool.query(`SELECT version::int AS version FROM "${db.schema}".grant_projects`);
    expect(rows).toEqual([{ version: 1 }]);
  });

  it("still lets the same rule be granted again, and a revoked id be taken by another rule", async () => {
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(denyRm);
    await store.save(denyRm.withNote("re-granted"));
    expect((await store.load()).map((g) => g.note)).toEqual(["re-granted"]);
    await store.revoke(denyRm.id);
    await store.save(allowCrafted);
    expect((await store.load()).map((g) => g.verdict)).toEqual(["allow"]);
  });
});
