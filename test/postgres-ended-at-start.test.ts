import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resultOf, startChild } from "./support/child-process.js";
import { DATABASE_URL, usePostgres } from "./support/postgres.js";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";

const db = usePostgres({ migrated: false });
// The child, bundled once: each case starts it with plain node instead of loading tsx.
let child: Bundle | undefined;
beforeAll(async () => {
  child = await bundleChild("pg-ended-at-start.ts");
});
afterAll(() => child?.dispose());

interface Result {
  readonly scenario: string;
  readonly first: string;
  readonly second: string;
  readonly ended: number;
  readonly [more: string]: unknown;
}

/**
 * Each case runs in a process of its own (test/support/pg-ended-at-start.ts):
 * the server ends a connection loopctl just checked out, in the same read
 * that started it. An error event nobody listens to would end that process,
 * and `resultOf` would reject with its exit code and stderr.
 */
function run(scenario: string): Promise<Result> {
  return resultOf<Result>(startChild(child!.path, [scenario, DATABASE_URL, db.schema]), scenario);
}

describe("Postgres: a connection the server ends as it starts", () => {
  it("fails migrate() with a PostgresQueryError, and the next migrate() applies the schema", async () => {
    const result = await run("migrate");
    expect(result.ended).toBe(1);
    // Named by the server's own reason, not by the driver's "not queryable".
    expect(result.first).toMatch(/^PostgresQueryError: migrate\(.*\): terminating connection .*\[SQLSTATE 57P01\]$/);
    expect(result.second).toBe("ok");
  });

  it("sends a grant store's transaction once more on another connection, as nothing of it ran: the save is made once", async () => {
    const result = await run("transaction");
    expect(result.ended).toBe(1);
    // Its BEGIN met the ended session: no statement of it ran, so it is run again, not failed.
    expect(result.first).toBe("ok");
    expect(result.second).toBe("ok");
    expect(result["grants"]).toBe("saved once");
  });

  it("reports the listening connection lost, listens again, and the inbox still gets and answers the ask", async () => {
    const result = await run("listener");
    expect(result.ended).toBe(1);
    expect(result.first).toBe("ok");
    expect(result.second).toBe("ok");
    expect(result["parked"]).toBe("approve");
    expect(result["heard"]).toEqual([
      expect.stringMatching(/^PostgresAskQueue: listening on .*: terminating connection .*\[SQLSTATE 57P01\]$/),
    ]);
  });

  it("works over a pool whose connect() ignores a callback and returns a promise", async () => {
    const result = await run("promise-pool");
    expect(result).toMatchObject({ first: "ok", second: "ok", ended: 0 });
  });
});
