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
export { PostgresAskError, PostgresConfigError, PostgresQueryError, PostgresRowError } from "./errors.js";
export type { PgNotification, PgPool, PgPoolClient, PgResult } from "./pg.js";
