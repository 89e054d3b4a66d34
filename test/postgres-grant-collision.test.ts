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

describe("PostgresGrantStore: a row whose arguments are JSON text of another form (written by hand or by SQL)", () => {
  const deployProd = new Grant("deploy", "deny", GrantScope.thisCall({ env: "production", version: "1.4.0" }));

  async function rewriteArgs(id: string, args: string): Promise<void> {
    await db.pool.query(`UPDATE "${db.schema}".grants SET args = $2 WHERE id = $1`, [id, args]);
  }

  async function storedArgs(id: string): Promise<unknown> {
    const { rows } = await db.pool.query<{ args: string }>(`SELECT args FROM "${db.schema}".grants WHERE id = $1`, [
      id,
    ]);
    return rows.map((r) => r.args);
  }

  it("is read as its rule, and saving that rule again replaces it, writing its canonical form", async () => {
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(deployProd);
    await rewriteArgs(deployProd.id, '{ "version" : "1.4.0",\n  "env": "production" }');
    const other = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    expect((await other.load()).map((g) => g.toJSON())).toEqual([deployProd.toJSON()]);
    expect(await other.covering("deploy", deployProd.canonicalArgs ?? "")).toHaveLength(1);

    // A re-grant of the same rule is no collision: it replaces the row, in canonical form.
    const again = deployProd.withNote("never on a Friday");
    expect(await other.save(again)).toBe(again);
    expect(await storedArgs(deployProd.id)).toEqual([deployProd.canonicalArgs]);
    expect((await store.load()).map((g) => g.toJSON())).toEqual([again.toJSON()]);
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".grants`);
    expect(rows).toEqual([{ n: 1 }]);
    expect((await store.revoke(deployProd.id))?.toJSON()).toEqual(again.toJSON());
    expect(await other.load()).toEqual([]);
  });

  it("still refuses a different rule whose id collides with it, naming the stored rule in canonical form", async () => {
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(denyFirst);
    await rewriteArgs(denyFirst.id, '{ "cmd" : "BJKS_Ubr3rL" }');
    const error = await store.save(denyCrafted).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as Error).message).toContain(`deny 'shell' this_call {"cmd":"BJKS_Ubr3rL"}`);
    expect(await storedArgs(denyFirst.id)).toEqual(['{ "cmd" : "BJKS_Ubr3rL" }']);
    expect((await store.load()).map((g) => g.toJSON())).toEqual([denyFirst.toJSON()]);
  });

  it("names a malformed row that holds the id with its controls escaped: a row's text cannot forge lines in an error", async () => {
    const store = new PostgresGrantStore(db.pool, { project: "p", schema: db.schema });
    await store.save(denyFirst);
    // Arguments of another rule under the id: the row is malformed (its id is not its rule's), its text is shown.
    await rewriteArgs(denyFirst.id, '{"cmd":\n"rm -rf /"}\u001b[2K\u202e');
    const error = await store.save(denyFirst).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(GrantIdCollisionError);
    expect((error as Error).message).not.toMatch(/[\u0000-\u001f\u007f\u202e]/);
    expect((error as Error).message).toContain('deny \'shell\' this_call {"cmd":\\u000a"rm -rf /"}\\u001b[2K\\u202e');
  });
});
