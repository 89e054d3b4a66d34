import { PostgresConfigError } from "./errors.js";
import { shownText } from "../shown.js";

/** The schema loopctl's tables live in unless told otherwise. */
export const DEFAULT_SCHEMA = "loopctl";

// Lowercase only: an unquoted identifier folds to lowercase, so this is the
// one spelling that means the same quoted and unquoted. 48 leaves room for
// the channel and index names derived from it within Postgres's 63 bytes.
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,47}$/;

/** Where loopctl's objects live in one schema, quoted for SQL. */
export interface SchemaNames {
  /** The schema name as given, e.g. `loopctl`. */
  readonly name: string;
  /** `"loopctl"`. */
  readonly quoted: string;
  /** The `LISTEN`/`NOTIFY` channel of the ask queue, e.g. `loopctl.asks`. */
  readonly channel: string;
  /** A qualified, quoted table name, e.g. `"loopctl".grants`. */
  table(name: "migrations" | "grants" | "grant_projects" | "asks" | "workers"): string;
}

/**
 * Checks a schema name and derives the names loopctl uses in it.
 *
 * @throws {PostgresConfigError} unless `schema` is a lowercase identifier of
 *   at most 48 characters (`[a-z_][a-z0-9_]*`) that does not begin with `pg_`.
 */
export function schemaNames(where: string, schema: unknown = DEFAULT_SCHEMA): SchemaNames {
  if (typeof schema !== "string" || !SCHEMA_NAME.test(schema)) {
    throw new PostgresConfigError(
      where,
      `schema must be a lowercase identifier of at most 48 characters ([a-z_][a-z0-9_]*), got ${shownText(String(schema))}`,
    );
  }
  // PostgreSQL refuses to create one (42939): migrate would fail, and every store and queue say to run it.
  if (schema.startsWith("pg_")) {
    throw new PostgresConfigError(
      where,
      `schema ${shownText(schema)} begins with pg_, which PostgreSQL keeps for its own schemas; choose another name`,
    );
  }
  const quoted = `"${schema}"`;
  return { name: schema, quoted, channel: `${schema}.asks`, table: (name) => `${quoted}.${name}` };
}
