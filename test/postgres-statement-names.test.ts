import { describe, expect, it, vi } from "vitest";
import { Grant, GrantScope } from "loopctl/grant";
import { PostgresGrantStore, migrate } from "loopctl/postgres";
import { freshSchema, usePostgres } from "./support/postgres.js";

const db = usePostgres();

describe("PostgresGrantStore: statements prepared on a pool another copy of loopctl uses too", () => {
  it("reads the grants of either copy's schema over the same connections", async () => {
    // Two copies of loopctl in one process (the ESM and the CommonJS build, or two versions in
    // node_modules), each with stores of its own, on the application's one pool.
    const pool = db.newPool(1);
    const other = freshSchema();
    await migrate(pool, { schema: other });
    try {
      const read = new Grant("read", "allow", GrantScope.thisTool());
      const ours = new PostgresGrantStore(pool, { project: "acme/shop", schema: db.schema });
      await ours.save(read);
      expect((await ours.load()).map((g) => g.tool)).toEqual(["read"]);
      vi.resetModules();
      const copy = await import("loopctl/postgres");
      expect(copy.PostgresGrantStore).not.toBe(PostgresGrantStore);
      const theirs = new copy.PostgresGrantStore(pool, { project: "acme/shop", schema: other });
      expect(await theirs.load()).toEqual([]);
      expect((await ours.covering("read", "{}")).map((g) => g.tool)).toEqual(["read"]);
      expect(await theirs.covering("read", "{}")).toEqual([]);
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${other}" CASCADE`);
    }
  });
});
