/**
 * `loopctl/postgres`: grants and asks shared by every worker and every
 * approval console through one PostgreSQL database. Takes a node-postgres
 * (`pg`) pool; never loads `pg` itself.
 *
 * @packageDocumentation
 */
export { migrate } from "./migrate.js";
export type { MigrateOptions, MigrateResult } from "./migrate.js";
export { DEFAULT_SCHEMA } from "./schema.js";
export { SCHEMA_VERSION } from "./migrations.js";
export { PostgresGrantStore } from "./grant-store.js";
export type { GrantCallOptions, PostgresGrantStoreOptions } from "./grant-store.js";
export { PostgresAskQueue, LEASE_LOST_REASON, QUEUE_CLOSED_REASON } from "./ask-queue.js";
export type { PostgresAskQueueOptions } from "./ask-queue.js";
// The class itself stays inside: an approver is made by queue.approver(), never by hand.
export type { PostgresApprover } from "./ask-inbox.js";
export {
  PostgresAskError,
  PostgresConfigError,
  PostgresLeaseError,
  PostgresQueryError,
  PostgresRowError,
} from "./errors.js";
export type { PgNotification, PgPool, PgPoolClient, PgResult } from "./pg.js";
