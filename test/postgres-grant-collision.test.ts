import { describe, expect, it } from "vitest";
import { Grant, GrantIdCollisionError, GrantScope } from "loopctl/grant";
import { PostgresGrantStore } from "loopctl/postgres";
import { usePostgres } from "./support/postgres.js";

const db = usePostgres();
// Grant ids are 64-bit FNV-1a digests, which can be made to collide on
// purpose. These two rules are a real collision (the pair of
// test/grant-id-collision.test.ts): two different `this_call` denies, one id.
// A crafted call whose deny replaced the first would forget the deny of the first command.
const denyFirst = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "BJKS_Ubr3rL" }));
const denyCrafted = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "EUpniFqMLxB" }));

describe("PostgresGrantStore: a save whose id is taken by a different rule", () => {
  it("is refused, naming both rules, and changes nothing", async () => {
    expect(denyCrafted.id).toBe(denyFirst.id);
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(denyFirst);
    const error = await store.save(denyCrafted).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as Error).message).toContain(`deny 'shell' this_call {"cmd":"BJKS_Ubr3rL"}`);
    expect((error as Error).message).toContain(`deny 'shell' this_call {"cmd":"EUpniFqMLxB"}`);
    expect((await store.load()).map((g) => g.toJSON())).toEqual([denyFirst.toJSON()]);
    const { rows } = await db.pool.query(`SELECT version::int AS version FROM "${db.schema}".grant_projects`);
    expect(rows).toEqual([{ version: 1 }]);
    // A second store (another worker) reads the first rule, and still refuses the crafted one.
    const other = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await expect(other.save(denyCrafted)).rejects.toBeInstanceOf(GrantIdCollisionError);
    expect((await other.load()).map((g) => g.covers("shell", { cmd: "BJKS_Ubr3rL" }))).toEqual([true]);
  });

  it("quotes a tool name that holds controls in JSON's escapes when it names the two rules", async () => {
    // The digest's state after the colliding args is the same, so any tool name after them collides too.
    const tool = "shell\n\u001b[32mloopctl: grant saved\u001b[0m";
    const first = new Grant(tool, "deny", GrantScope.thisCall({ cmd: "BJKS_Ubr3rL" }));
    const second = new Grant(tool, "deny", GrantScope.thisCall({ cmd: "EUpniFqMLxB" }));
    expect(second.id).toBe(first.id);
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(first);
    const error = await store.save(second).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as Error).message).not.toMatch(/[\u0000-\u001f\u007f]/);
    expect((error as Error).message).toContain(`deny ${JSON.stringify(tool)} this_call {"cmd":"BJKS_Ubr3rL"}`);
    expect((error as Error).message).toContain(`deny ${JSON.stringify(tool)} this_call {"cmd":"EUpniFqMLxB"}`);
  });

  it("still lets the same rule be granted again, and a revoked id be taken by another rule", async () => {
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(denyFirst);
    await store.save(denyFirst.withNote("re-granted"));
    expect((await store.load()).map((g) => g.note)).toEqual(["re-granted"]);
    await store.revoke(denyFirst.id);
    await store.save(denyCrafted);
    expect((await store.load()).map((g) => g.covers("shell", { cmd: "EUpniFqMLxB" }))).toEqual([true]);
  });
});
