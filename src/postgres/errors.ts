import { LoopctlError } from "../errors.js";

/**
 * `loopctl/postgres` was given something it cannot work with: a schema name
 * that is not a plain lowercase identifier, a project that is not a
 * non-empty string (or holds U+0000 or a lone surrogate, which PostgreSQL
 * cannot store as given), a lease or interval out of range, an object that
 * is not a node-postgres pool (a `pg.Client` is one connection, not a pool),
 * or a schema for {@link migrate} whose
 * `migrations` table is another tool's, or that holds a table (index,
 * function, type) of one of loopctl's names that loopctl did not create.
 * `code` is `"POSTGRES_CONFIG"`.
 */
export class PostgresConfigError extends LoopctlError {
  constructor(where: string, problem: string) {
    super("POSTGRES_CONFIG", `${where}: ${problem}`);
  }
}

/**
 * A statement failed, or the schema is not what this version of loopctl
 * expects. Codes:
 * - `"POSTGRES_NOT_MIGRATED"`: the schema or one of its tables is missing, or
 *   it is at an older version; run `migrate(pool, { schema })`.
 * - `"POSTGRES_SCHEMA_TOO_NEW"`: a newer loopctl migrated the schema; this
 *   one refuses to read or write it rather than guess.
 * - `"POSTGRES_QUERY"`: the server or the connection failed (the driver's
 *   error is the `cause`).
 *
 * `operation` names what was being done, e.g. `"PostgresGrantStore.save"`.
 */
export class PostgresQueryError extends LoopctlError {
  /** What was being done when it failed. */
  readonly operation: string;

  constructor(
    code: "POSTGRES_NOT_MIGRATED" | "POSTGRES_SCHEMA_TOO_NEW" | "POSTGRES_QUERY",
    operation: string,
    problem: string,
    options?: ErrorOptions,
  ) {
    super(code, `${operation}: ${problem}`, options);
    this.operation = operation;
  }
}

/**
 * A row read from loopctl's tables does not hold what loopctl writes there: a
 * grant whose id is not the id of its rule, arguments that are not JSON, an
 * ask that is not a pending ask, an answer that is not a resolution. Nothing
 * read from such a row is used: a grant store refuses to decide from it, a
 * parked call is denied. `code` is `"POSTGRES_ROW_MALFORMED"`.
 */
export class PostgresRowError extends LoopctlError {
  /** The table, e.g. `"loopctl.grants"`. */
  readonly table: string;
  /** The row's key: a grant id or an ask id. */
  readonly key: string;

  constructor(table: string, key: string, problem: string, options?: ErrorOptions) {
    super("POSTGRES_ROW_MALFORMED", `row ${key} of ${table} is malformed: ${problem}`, options);
    this.table = table;
    this.key = key;
  }
}

/**
 * An ask could not be parked on a {@link PostgresAskQueue}: it is not a
 * pending ask, holds text PostgreSQL's `jsonb` cannot store (U+0000 or a lone
 * surrogate, in its prompt, tool or call id), came without an `AbortSignal`
 * or with one that cannot be listened to (`cause`: what it threw), or its id
 * is already in the queue. `code` is `"POSTGRES_ASK_INVALID"` or `"POSTGRES_ASK_DUPLICATE"`.
 * The resolver rejects with it, which the engine turns into a denial.
 */
export class PostgresAskError extends LoopctlError {
  /** The ask's id, when it had a readable one. */
  readonly askId: string | undefined;

  constructor(
    code: "POSTGRES_ASK_INVALID" | "POSTGRES_ASK_DUPLICATE",
    askId: string | undefined,
    problem: string,
    options?: ErrorOptions,
  ) {
    super(code, `${askId === undefined ? "ask" : `ask ${askId}`}: ${problem}`, options);
    this.askId = askId;
  }
}

/**
 * A worker lost its lease: the database could not be reached to renew it in
 * time, or it lapsed and its asks were closed as abandoned. Every call parked
 * under it was denied; the next ask takes a new lease. Reported to the
 * queue's `onError`, and again for each such call whose row an answer had
 * reached unheard (the message names the ask and the verdict), once the
 * worker reaches the database. `code` is `"POSTGRES_LEASE_LOST"`.
 */
export class PostgresLeaseError extends LoopctlError {
  /** The lost lease's worker id. */
  readonly workerId: string;

  constructor(workerId: string, problem: string) {
    super("POSTGRES_LEASE_LOST", `worker lease ${workerId} ${problem}; its parked calls were denied`);
    this.workerId = workerId;
  }
}
