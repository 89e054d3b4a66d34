import pg from "pg";
import { describe, expectTypeOf, it } from "vitest";
import type { AskInbox, AskResolver, PendingAsk } from "loopctl/ask";
import { LoopManagers } from "loopctl/engine";
import type { GrantStore } from "loopctl/grant";
import { PostgresAskQueue, PostgresGrantStore, migrate } from "loopctl/postgres";
import * as postgres from "loopctl/postgres";
import type { MigrateResult, PgPool, PostgresApprover } from "loopctl/postgres";
import { createApprovalServer } from "loopctl/server";

const pool = new pg.Pool({ connectionString: "postgres://postgres@127.0.0.1:5432/test" });

describe("loopctl/postgres", () => {
  it("takes a node-postgres Pool", () => {
    expectTypeOf(pool).toExtend<PgPool>();
    expectTypeOf(migrate(pool, { schema: "loopctl" })).toEqualTypeOf<Promise<MigrateResult>>();
    // @ts-expect-error a pool, not a connection string
    void new PostgresAskQueue("postgres://postgres@127.0.0.1:5432/test");
  });

  it("queues asks: the resolver parks them, approver() answers them anywhere", () => {
    const queue = new PostgresAskQueue(pool, { schema: "loopctl", leaseMs: 30_000 });
    expectTypeOf(queue.resolver).toEqualTypeOf<AskResolver>();
    void new LoopManagers().withAskResolver(queue.resolver);
    const approver = queue.approver();
    expectTypeOf(approver).toEqualTypeOf<PostgresApprover>();
    expectTypeOf(approver).toExtend<AskInbox>();
    expectTypeOf(approver).toExtend<AsyncIterable<PendingAsk>>();
    // The resolve of a database answer waits for the row: a promise, which AskInbox allows.
    expectTypeOf(approver.resolve).returns.toEqualTypeOf<Promise<boolean>>();
    void createApprovalServer({ approver });
    // An approver comes from queue.approver() only: the class is not a value of the package.
    // @ts-expect-error PostgresApprover is exported as a type
    void postgres.PostgresApprover;
  });

  it("takes a signal that may be undefined, as GrantStore does", () => {
    const store = new PostgresGrantStore(pool, { project: "acme/shop" });
    const signal: AbortSignal | undefined = undefined;
    void store.load({ signal });
  });

  it("stores grants per project", () => {
    const store = new PostgresGrantStore(pool, { project: "acme/shop" });
    expectTypeOf(store).toExtend<GrantStore>();
    expectTypeOf(store.revokeTool).toExtend<NonNullable<GrantStore["revokeTool"]>>();
    void new LoopManagers().withGrantStore(store);
    // @ts-expect-error a store shares the grants of one named project
    void new PostgresGrantStore(pool, {});
  });
});
