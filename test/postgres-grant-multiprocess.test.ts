import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresGrantStore } from "loopctl/postgres";
import { resultOf, startChild } from "./support/child-process.js";
import { DATABASE_URL, usePostgres } from "./support/postgres.js";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";

const db = usePostgres();
const WRITERS = 8;
const PER_WRITER = 50;

describe("PostgresGrantStore across processes", () => {
  // Bundled once: each writer starts with plain node instead of loading tsx.
  let writer: Bundle | undefined;
  beforeAll(async () => {
    writer = await bundleChild("pg-grant-writer.ts");
  });
  afterAll(() => writer?.dispose());

  it(`loses nothing and resurrects nothing with ${WRITERS} processes × ${PER_WRITER} saves and revokes`, async () => {
    const writers = Array.from({ length: WRITERS }, (_, seed) =>
      startChild(writer!.path, [DATABASE_URL, db.schema, "shared", String(PER_WRITER), String(seed)]),
    );
    await Promise.all(writers.map((w) => w.ready));
    for (const writer of writers) writer.send("go");
    const outcomes = await Promise.all(
      writers.map(async (w) => JSON.parse(await w.waitForLine(() => true)) as { saved: string[]; revoked: string[] }),
    );
    for (const writer of writers) writer.send("go");
    const views = await Promise.all(writers.map((w, i) => resultOf<string[]>(w, `writer ${i}`)));

    const expected = outcomes.flatMap((o) => o.saved).sort();
    const revoked = new Set(outcomes.flatMap((o) => o.revoked));
    expect(expected).toHaveLength(WRITERS * (PER_WRITER - Math.ceil(PER_WRITER / 3)));
    expect(revoked.size).toBe(WRITERS * Math.ceil(PER_WRITER / 3));

    const loaded = await new PostgresGrantStore(db.pool, { project: "shared", schema: db.schema }).load();
    expect(loaded.map((g) => g.id).sort()).toEqual(expected);
    expect(loaded.filter((g) => g.note === "re-saved").length).toBeGreaterThan(0);
    // Every process's cache, built from deltas read while the others wrote, ends where the database is.
    for (const view of views) expect([...view].sort()).toEqual(expected);

    const { rows } = await db.pool.query<{ changes: string }>(
      `SELECT version::text AS changes FROM "${db.schema}".grant_projects WHERE project = 'shared'`,
    );
    const resaves = WRITERS * Array.from({ length: PER_WRITER }, (_, i) => i).filter((i) => i % 4 === 1).length;
    // One version per save, re-save and revoke: none was lost to a race.
    expect(Number(rows[0]?.changes)).toBe(WRITERS * PER_WRITER + resaves + revoked.size);
  });
});
