import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FileGrantStore, Grant, GrantScope, MemoryGrantStore, canonicalJson } from "loopctl/grant";
import type { GrantStore } from "loopctl/grant";
import { PostgresGrantStore } from "loopctl/postgres";
import { usePostgres } from "./support/postgres.js";

const db = usePostgres();

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "loopctl-contract-"));
});
afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

// Two different this_call denies under one id (the pair of test/grant-id-collision.test.ts).
const collidingA = { cmd: "BJKS_Ubr3rL" };
const collidingB = { cmd: "EUpniFqMLxB" };
const ARGS = [{}, { path: "a", mode: "w" }, { mode: "w", path: "a" }, collidingA, collidingB, { n: 1.5 }];
const RULES = ["shell", "Shell"].flatMap((tool) =>
  (["allow", "deny"] as const).flatMap((verdict) => [
    new Grant(tool, verdict, GrantScope.thisTool()),
    ...ARGS.map((args) => new Grant(tool, verdict, GrantScope.thisCall(args))),
  ]),
);

type Step =
  | { type: "save"; rule: number; note: string | null; pin: string | null; at: number }
  | { type: "revoke"; rule: number }
  | { type: "revokeUnknown" }
  | { type: "clear" };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant("save" as const),
      rule: fc.nat(RULES.length - 1),
      note: fc.option(fc.constantFrom("why", "again", ""), { nil: null }),
      pin: fc.option(fc.constantFrom("sha256:aa", "sha256:bb"), { nil: null }),
      at: fc.nat(10),
    }),
  },
  { weight: 2, arbitrary: fc.record({ type: fc.constant("revoke" as const), rule: fc.nat(RULES.length - 1) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant("revokeUnknown" as const) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant("clear" as const) }) },
);

/** What one step did, as a plain value: its result, or the error's class and code. */
async function outcome(store: GrantStore, s: Step): Promise<unknown> {
  try {
    switch (s.type) {
      case "save": {
        const grant = RULES[s.rule]!.withNote(s.note).withPinnedDescriptor(s.pin).withCreatedAtMs(s.at);
        return (await store.save(grant)).toJSON();
      }
      case "revoke":
        return (await store.revoke(RULES[s.rule]!.id))?.toJSON() ?? null;
      case "revokeUnknown":
        return (await store.revoke("0123456789abcdef")) ?? null;
      case "clear":
        return await store.clear();
    }
  } catch (error) {
    return { error: (error as Error).name, code: (error as { code?: unknown }).code };
  }
}

/** Everything the store answers: its grants in order, and what covers each call. */
async function view(store: GrantStore): Promise<unknown> {
  const covering: unknown[] = [];
  for (const tool of ["shell", "Shell", "other"]) {
    for (const args of ARGS) {
      const found = await store.covering!(tool, canonicalJson(args));
      covering.push(found.map((g) => g.toJSON()));
    }
  }
  return { loaded: (await store.load()).map((g) => g.toJSON()), covering };
}

describe("PostgresGrantStore keeps the GrantStore contract exactly as FileGrantStore and MemoryGrantStore do", () => {
  it("gives the same result for every step of any sequence of saves, re-grants, revokes and clears, and then answers the same", async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 14 }), async (steps) => {
        run += 1;
        const projectDir = join(root, `project-${run}`);
        mkdirSync(projectDir);
        const stores: [string, GrantStore][] = [
          ["memory", new MemoryGrantStore()],
          ["file", new FileGrantStore(root, projectDir)],
          ["postgres", new PostgresGrantStore(db.pool, { project: `contract-${run}`, schema: db.schema })],
        ];
        // Another process's view of the same project, reading only what the first wrote.
        const reader = new PostgresGrantStore(db.pool, { project: `contract-${run}`, schema: db.schema });
        for (const s of steps) {
          const results = await Promise.all(stores.map(async ([, store]) => outcome(store, s)));
          for (const [i, [kind]] of stores.entries())
            expect(results[i], `${kind}: ${JSON.stringify(s)}`).toEqual(results[0]);
          const views = await Promise.all([...stores.map(([, store]) => view(store)), view(reader)]);
          for (const [i, seen] of views.entries())
            expect(seen, `${stores[i]?.[0] ?? "reader"} after ${JSON.stringify(s)}`).toEqual(views[0]);
        }
      }),
      { numRuns: 30 },
    );
  }, 120_000);
});
