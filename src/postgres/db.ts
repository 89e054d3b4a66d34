import { createHash } from "node:crypto";
import { LoopctlError, shownValue } from "../errors.js";
import { PostgresConfigError, PostgresQueryError } from "./errors.js";
import { SCHEMA_VERSION } from "./migrations.js";
import type { PgPool, PgPoolClient, PgQueryConfig, PgResult } from "./pg.js";
import type { SchemaNames } from "./schema.js";
import { abortReason, unlisten } from "../abort-signal.js";
import { optionsProblem, type EveryKey } from "../unknown-option.js";

/** A statement runner inside one transaction. */
export interface Tx {
  query(sql: string, values?: unknown[]): Promise<Rows>;
  /** Ends the transaction with ROLLBACK instead of COMMIT (nothing to change after all). */
  abandon(): void;
}

/** What a statement returned. */
export interface Rows {
  readonly rows: readonly Record<string, unknown>[];
  readonly rowCount: number;
}

/** SQLSTATEs that mean "the schema or one of its objects is not there". */
/**
 * How long a statement waits for its reply by default, in milliseconds, before it fails and its
 * connection is closed (`PostgresGrantStore`'s `replyMs`, the CLI's own statements): a server that
 * stops answering after the connection is made fails the call instead of hanging it.
 */
export const DEFAULT_REPLY_MS = 15_000;

const MISSING_OBJECT = new Set(["42P01", "3F000", "42883", "42703"]);

const backendPids = new WeakMap<PgPoolClient, number>();

/**
 * The name each statement text is prepared under. A name must never stand for two texts on a
 * connection, and the pool's connections may carry the statements of another copy of loopctl in
 * the process too (the ESM build beside the CommonJS one, another version): the name is a digest
 * of the text, so every copy gives one text the same name, and two texts two names.
 */
const statementNames = new Map<string, string>();

/**
 * The name {@link migrate} locks (`pg_advisory_xact_lock(hashtext(…))`) for
 * the whole of its transaction; loopctl's transactions lock it shared.
 * Every version of loopctl must keep it.
 */
export function migrateLockKey(names: SchemaNames): string {
  return `loopctl.migrate:${names.name}`;
}

/** The schema's version: the highest applied, 0 when none is. */
export function versionQuery(names: SchemaNames): string {
  return `SELECT coalesce(max(version), 0)::int AS version FROM ${names.table("migrations")}`;
}

/** How long a transaction's session may sit idle, waiting for its client, before the server ends it. */
const IDLE_IN_TRANSACTION_MS = 5_000;

/**
 * Opens a transaction. A client that goes silent mid-transaction (a network
 * that swallows packets) would hold its locks (a project's row, the
 * reaper's, a migration's) for as long as the server keeps its session: the
 * server ends such a session instead, once idle in the transaction this long.
 *
 * READ COMMITTED whatever the database or role defaults to: each statement
 * must see what committed before it, the writes and the migration that ran
 * while it waited for the lock taken before it. Under REPEATABLE READ or
 * SERIALIZABLE the snapshot is taken as that wait begins: a grant's save
 * after another's would fail with a serialization error, and a migrate after
 * another would find the tables without the rows that record them.
 */
export const BEGIN = `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL idle_in_transaction_session_timeout = ${IDLE_IN_TRANSACTION_MS}`;

/**
 * `reply`, a statement's, unless none comes within `ms`: a network that
 * swallows packets answers nothing and closes nothing. Then `silent()` runs
 * (the caller gives the connection up there) and the call rejects with the
 * error it returns.
 */
export async function replyWithin<T>(reply: Promise<T>, ms: number, silent: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(silent()), ms);
    timer.unref();
  });
  try {
    return await Promise.race([reply, late]);
  } finally {
    clearTimeout(timer);
  }
}

function prepared(text: string, values: unknown[]): PgQueryConfig {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `loopctl_${createHash("sha256").update(text).digest("hex").slice(0, 32)}`;
    statementNames.set(text, name);
  }
  return { name, text, values };
}

function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * True when `error` (a failed statement's, as {@link Db} made it, or the driver's own) is the
 * server failing the statement for its conflict with another transaction: a serialization failure
 * (`40001`) or a deadlock (`40P01`, the one of the two transactions the server chose to end). A
 * statement sent alone (no BEGIN around it) is its own transaction: it was rolled back whole, and
 * may be sent once more.
 */
export function conflictFailure(error: unknown): boolean {
  const state = sqlState((error as { cause?: unknown } | null)?.cause) ?? sqlState(error);
  return state === "40001" || state === "40P01";
}

/**
 * SQLSTATEs of a server ending the session: `57P01` admin_shutdown (`pg_terminate_backend`, a
 * fast or immediate shutdown), `57P02` crash_shutdown, `57P03` cannot_connect_now (a server
 * starting up or shutting down refuses the connection), `57P05` idle_session_timeout (a pooled
 * connection left idle longer than the server's `idle_session_timeout`).
 */
const SESSION_ENDED = new Set(["57P01", "57P02", "57P03", "57P05"]);

/** A statement (or transaction) given up for want of a reply: its connection was closed. */
class NoReplyError extends Error {}

/**
 * True when `error` (a failed statement's, as {@link Db} made it) is the
 * server ending the session ({@link SESSION_ENDED}), as the statement's own
 * error or as the connection's, heard before the statement's reply: the
 * statement did not commit and never will, or it committed and the commit
 * was visible to every other session before this error was sent.
 *
 * Why: `57P03` comes only while a connection starts, before any statement.
 * `57P01` as an error (not a notice) is raised where the backend handles its
 * termination signal, which it never does while committing (interrupts are
 * held from the commit record to the end of the transaction's visibility): a
 * transaction not committed by then is rolled back as the backend exits.
 * `57P05` is raised at that same place, by a timer that runs only while the
 * session waits, idle, for its next statement. A crash or an immediate
 * shutdown reports `57P01`/`57P02` only as a warning and then drops the
 * connection (a lost connection, no SQLSTATE), as does a backend whose
 * synchronous-replication wait is cut short after a local commit; neither is
 * taken for this.
 */
export function sessionEnded(error: unknown): boolean {
  const state = sqlState((error as { cause?: unknown } | null)?.cause) ?? sqlState(error);
  return state !== undefined && SESSION_ENDED.has(state);
}

/**
 * True when `error` (a failed statement's, as {@link Db} made it) says the
 * connection was lost or the server ended the session, not that the server
 * refused the statement or did not reply in time: a read that failed so may
 * be sent again on another connection.
 */
export function connectionLost(error: unknown): boolean {
  if (!(error instanceof PostgresQueryError) || error.code !== "POSTGRES_QUERY") return false;
  const cause = error.cause;
  if (cause instanceof NoReplyError) return false;
  const state = sqlState(cause);
  return state === undefined ? cause instanceof Error : state.startsWith("08") || SESSION_ENDED.has(state);
}

/** True when a connection whose statement failed with `error` cannot be used again. */
function unusable(error: unknown): boolean {
  if (error instanceof LoopctlError) return false;
  const state = sqlState(error);
  return state === undefined || state.startsWith("08") || SESSION_ENDED.has(state);
}

/**
 * True unless `error` (a failed statement's, as {@link queryFailure} made it)
 * is the server's refusal of the statement itself, which therefore did not
 * commit. No reply, a lost connection or a server going away leaves it
 * unknown whether the statement committed, or will.
 */
export function inDoubt(error: unknown): boolean {
  const state = sqlState((error as { cause?: unknown } | null)?.cause) ?? sqlState(error);
  return state === undefined || /^(08|57|58|XX)/.test(state);
}

/**
 * The error to report for a statement that failed: when the driver's error
 * only says the connection is gone ("not queryable", "terminated
 * unexpectedly"), the connection's own `lost` error, which says why (the
 * server's FATAL message and its SQLSTATE, say).
 */
export function connectionFailure(error: unknown, lost: Error | undefined): unknown {
  return lost !== undefined && !(error instanceof LoopctlError) && sqlState(error) === undefined ? lost : error;
}

/**
 * The driver's error as a {@link PostgresQueryError} naming the operation,
 * and `subject` (what it was done to, e.g. a project in a schema) when
 * given; loopctl's own errors pass through.
 */
export function queryFailure(operation: string, schema: SchemaNames, error: unknown, subject?: string): Error {
  if (error instanceof LoopctlError) return error;
  const state = sqlState(error);
  const message = error instanceof Error ? error.message : String(error);
  if (state !== undefined && MISSING_OBJECT.has(state)) {
    return new PostgresQueryError(
      "POSTGRES_NOT_MIGRATED",
      operation,
      `schema ${schema.quoted} is not migrated (${message}); run migrate(pool, { schema: ${JSON.stringify(schema.name)} })`,
      { cause: error },
    );
  }
  // 25006 read_only_sql_transaction: the pool's connections cannot write, whatever the statement.
  const why =
    state === "25006"
      ? "; the pool's connections are read-only (default_transaction_read_only is on, or the server is a standby): give loopctl a pool of writable connections to the primary"
      : "";
  return new PostgresQueryError(
    "POSTGRES_QUERY",
    operation,
    `${subject === undefined ? "" : `${subject}: `}${message}${state === undefined ? "" : ` [SQLSTATE ${state}]`}${why}`,
    {
      cause: error,
    },
  );
}

/** `value` when it is an integer from `min` to `max`, `fallback` when it is undefined; else a PostgresConfigError of `where`. */
export function positiveInteger(
  where: string,
  name: string,
  value: number | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new PostgresConfigError(where, `${name} must be an integer from ${min} to ${max}, got ${shownValue(value)}`);
  }
  return value;
}

/**
 * Throws unless `pool` looks like a node-postgres pool. A `pg.Client` has a
 * pool's `query` and `connect` too, but it is one connection: `connect` opens
 * it once and fails the next time, so a store given one would fail at its
 * first transaction. It is told apart by what every node-postgres client
 * (`pg.Client`, the native one, a connection checked out of a pool) carries
 * and a pool does not: its `connectionParameters`, or a checked-out
 * connection's `release`.
 */
export function requirePool(where: string, pool: unknown): PgPool {
  const p = pool as (Partial<PgPool> & { connectionParameters?: unknown; release?: unknown }) | null;
  if (typeof p !== "object" || p === null || typeof p.query !== "function" || typeof p.connect !== "function") {
    throw new PostgresConfigError(where, "pool must be a node-postgres Pool (with query and connect)");
  }
  if (
    (typeof p.connectionParameters === "object" && p.connectionParameters !== null) ||
    typeof p.release === "function"
  ) {
    throw new PostgresConfigError(
      where,
      "pool must be a node-postgres Pool (new pg.Pool(...)), not a Client: a Client is one connection, " +
        "and loopctl checks connections out of a pool and gives them back",
    );
  }
  return pool as PgPool;
}

/**
 * Throws unless `options` is an object (or left out, which reads as `{}`) of the options `known`, every key of
 * its type ({@link optionsProblem}). A key that is not (`leaseMS`, `Schema`) is refused, never ignored: ignored,
 * its default would stand in for what was meant, the `loopctl` schema for one meant to keep a tenant's grants
 * and asks apart, say.
 */
export function requireOptions<T extends object, const K extends readonly (keyof T & string)[]>(
  where: string,
  options: T | undefined,
  known: EveryKey<T, K>,
): T | Record<string, never> {
  if (options === undefined) return {};
  const wrong = optionsProblem(options, known);
  if (wrong !== undefined)
    throw new PostgresConfigError(where, wrong.key === undefined ? `options ${wrong.problem}` : wrong.problem);
  return options;
}

/**
 * Checks a connection out of `pool` with `onError` listening on it.
 *
 * A server that ends a connection as it starts (a backend terminated by an
 * administrator, a server shutting down) can send the end in the same read
 * as the start. node-postgres then reports the end as an `error` event
 * before any `await` on the promise form of `connect()` resumes; with no
 * listener yet, the event is thrown out of the process. The callback form
 * hands the connection over within that read, and `onError` is attached
 * there. A pool whose `connect` ignores the callback and returns a promise
 * is awaited instead.
 */
export function checkOut(pool: PgPool, onError: (error: Error) => void): Promise<PgPoolClient> {
  return new Promise<PgPoolClient>((resolve, reject) => {
    let handed = false;
    const take = (error: unknown, client: PgPoolClient | undefined): void => {
      if (handed) return;
      handed = true;
      if (client === undefined || (error !== undefined && error !== null)) {
        client?.release(true);
        reject(error instanceof Error ? error : new Error(`the pool handed over no connection (${String(error)})`));
        return;
      }
      client.on("error", onError);
      resolve(client);
    };
    const returned: unknown = pool.connect(take);
    if (isThenable(returned))
      returned.then(
        (client) => take(undefined, client as PgPoolClient),
        (e) => take(e, undefined),
      );
  });
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === "function";
}

/** The last statement sent on each connection held outside the pool (the listening one). */
const lastSent = new WeakMap<PgPoolClient, Promise<unknown>>();

/**
 * Sends with `send` on `client` once every statement sent on it before has
 * its reply. node-postgres queues statements sent together on one connection
 * itself, but warns that it will stop (pg 9) with a DeprecationWarning in the
 * user's process; the listening connection carries the queue's reads of
 * endings, its re-reads and the lease's renewals, which may come together.
 */
export function inTurn<T>(client: PgPoolClient, send: () => Promise<T>): Promise<T> {
  const sent = (lastSent.get(client) ?? Promise.resolve()).then(send, send);
  lastSent.set(
    client,
    sent.catch(() => undefined),
  );
  return sent;
}

/**
 * Statements against one schema through one pool: errors become
 * {@link PostgresQueryError}s naming the operation, the schema's version is
 * checked once before first use (and again by every transaction, and by the
 * statements that read it along with their work: a newer loopctl's version
 * found then refuses every statement after), and a statement whose caller's signal
 * aborts is cancelled on the server (`pg_cancel_backend`) while the caller
 * is rejected at once with the signal's reason.
 */
export class Db {
  readonly pool: PgPool;
  readonly names: SchemaNames;
  readonly #replyMs: number | undefined;
  /** What the statements are about, named in their errors (e.g. a project in a schema). */
  readonly #subject: string | undefined;
  #checked: Promise<void> | undefined;
  /** The version of a newer loopctl found in the schema since the check: every statement is refused from then on. */
  #newer: number | undefined;
  /**
   * Opens a transaction that first checks the schema's version, in the same
   * round trip: under a shared lock on the name `migrate` locks exclusively,
   * so no migration commits between that check and the transaction's end.
   */
  readonly #begin: string;

  /**
   * With `replyMs`, a statement (or transaction) given a connection of the
   * pool that has no reply within that long is given up: the call rejects
   * and the connection is closed, not handed to the next caller. A network
   * that swallows packets answers nothing and closes nothing, and a
   * connection that swallowed one statement swallows the next.
   *
   * With `subject` (e.g. `project "acme/shop" in schema "loopctl"`), a
   * statement that fails says what it was about as well as what was being done.
   */
  constructor(pool: PgPool, names: SchemaNames, replyMs?: number, subject?: string) {
    this.pool = pool;
    this.names = names;
    this.#replyMs = replyMs;
    this.#subject = subject;
    this.#begin = `${BEGIN}; SELECT pg_advisory_xact_lock_shared(hashtext('${migrateLockKey(names)}')); ${versionQuery(names)}`;
  }

  /** True once a newer loopctl's version was found in the schema: every statement is refused. */
  get tooNew(): boolean {
    return this.#newer !== undefined;
  }

  /**
   * `error` as a {@link PostgresQueryError} naming `operation` and what the
   * statements are about; loopctl's own errors pass through.
   */
  failure(operation: string, error: unknown): Error {
    return this.#failure(operation, error);
  }

  /**
   * Takes note of the schema's version as a statement read it along with
   * its own work (`coalesce(max(version), 0)` of the migrations table).
   *
   * @throws {PostgresQueryError} `"POSTGRES_SCHEMA_TOO_NEW"` when a newer
   *   loopctl migrated the schema since the first check; so does every
   *   statement from then on.
   */
  sawVersion(operation: string, version: number): void {
    if (version <= SCHEMA_VERSION) return;
    this.#newer ??= version;
    throw this.#tooNewError(operation, version);
  }

  #tooNewError(operation: string, version: number): PostgresQueryError {
    return new PostgresQueryError(
      "POSTGRES_SCHEMA_TOO_NEW",
      operation,
      `schema ${this.names.quoted} is at version ${version}, newer than the ${SCHEMA_VERSION} this loopctl knows; upgrade loopctl`,
    );
  }

  #failure(operation: string, error: unknown): Error {
    return queryFailure(operation, this.names, error, this.#subject);
  }

  /**
   * One statement, outside any transaction, prepared once per connection:
   * the statements here run on every decision, park and answer, and planning
   * them anew each time cost as much as running them.
   *
   * Such a statement runs at the isolation level the session defaults to.
   * At `REPEATABLE READ` or `SERIALIZABLE` one that waited for a row another
   * statement changed (two answers to one ask, an answer and a withdrawal)
   * fails with a serialization error (`40001`) where `READ COMMITTED` would
   * have read the row again: it did not commit, and it is sent once more,
   * with a snapshot that sees the change (an answer then finds the ask ended).
   * So is one the server ended to break a deadlock (`40P01`): loopctl's own
   * statements that change several asks lock them in one order (see
   * `lockedInOrder`), but another transaction may take the same rows in
   * another (the closing of a lapsed worker's asks, a statement run by hand).
   * Rolled back whole, it takes its locks again, behind the other's.
   */
  async query(operation: string, sql: string, values: unknown[] = [], signal?: AbortSignal): Promise<Rows> {
    try {
      return await this.#statement(operation, sql, values, signal);
    } catch (error) {
      if (signal?.aborted === true || !conflictFailure(error)) throw error;
      return this.#statement(operation, sql, values, signal);
    }
  }

  async #statement(operation: string, sql: string, values: unknown[], signal: AbortSignal | undefined): Promise<Rows> {
    const statement = prepared(sql, values);
    if (signal === undefined && this.#replyMs === undefined) {
      await this.#ready(operation);
      try {
        return normalize(await this.pool.query(statement));
      } catch (error) {
        throw this.#failure(operation, error);
      }
    }
    return this.#withClient(operation, signal, (client) => client.query(statement).then(normalize));
  }

  /**
   * A statement that changes rows only while they are still pending (`WHERE … pending`: a
   * withdrawal, `close()` closing its calls' rows), as {@link Db.query} runs it, sent once more on
   * another connection when the server ended the session under the first ({@link sessionEnded}: a
   * pooled connection terminated while idle, or ended by `idle_session_timeout`). The first did not
   * commit and never will, or it committed visibly before the error: the second then changes
   * nothing, and the rows, read again, say how they ended. A second failure rejects as the first
   * would.
   */
  async settle(operation: string, sql: string, values: unknown[]): Promise<Rows> {
    try {
      return await this.query(operation, sql, values);
    } catch (error) {
      if (!sessionEnded(error)) throw error;
      return this.query(operation, sql, values);
    }
  }

  /**
   * A statement that changes nothing, as {@link Db.query} runs it, sent once
   * more on another connection when the first failed in a way `again` says
   * may pass there: by default with its connection ({@link connectionLost}),
   * a pooled connection whose server process was being terminated, say;
   * {@link sessionEnded} for the server ending the session alone. Not after
   * no reply within `replyMs`, which would double the wait, nor after the
   * caller's signal aborted. A second failure rejects as the first would.
   */
  async read(
    operation: string,
    sql: string,
    values: unknown[] = [],
    signal?: AbortSignal,
    again: (error: unknown) => boolean = connectionLost,
  ): Promise<Rows> {
    try {
      return await this.query(operation, sql, values, signal);
    } catch (error) {
      if (signal?.aborted === true || !again(error)) throw error;
      return this.query(operation, sql, values, signal);
    }
  }

  /**
   * One statement on `client` when given (a connection held for another
   * purpose, idle most of the time; sent in its turn, see {@link inTurn}),
   * else as {@link Db.query} does.
   */
  async queryOn(client: PgPoolClient | undefined, operation: string, sql: string, values: unknown[]): Promise<Rows> {
    if (client === undefined) return this.query(operation, sql, values);
    await this.#ready(operation);
    try {
      return normalize(await inTurn(client, () => client.query(prepared(sql, values))));
    } catch (error) {
      throw this.#failure(operation, error);
    }
  }

  /**
   * Runs `work` in one transaction. An abort before COMMIT is sent rolls it
   * back and rejects with the signal's reason; once COMMIT is on its way the
   * call waits for its outcome, because only then is it known.
   *
   * A transaction whose BEGIN met a session the server had ended (a pooled
   * connection terminated while idle, or ended by `idle_session_timeout`:
   * see {@link sessionEnded}) ran nothing, and committed nothing: it is run
   * once more on another connection. Once begun, it is never run again.
   */
  async transaction<T>(operation: string, signal: AbortSignal | undefined, work: (tx: Tx) => Promise<T>): Promise<T> {
    let begun = false;
    try {
      return await this.#transaction(operation, signal, work, () => {
        begun = true;
      });
    } catch (error) {
      if (begun || signal?.aborted === true || !sessionEnded(error)) throw error;
      return this.#transaction(operation, signal, work, () => undefined);
    }
  }

  async #transaction<T>(
    operation: string,
    signal: AbortSignal | undefined,
    work: (tx: Tx) => Promise<T>,
    began: () => void,
  ): Promise<T> {
    return this.#withClient(operation, signal, async (client, state) => {
      const run = async (sql: string, values: unknown[] = []): Promise<Rows> => {
        if (state.aborted) throw new Error("aborted");
        return normalize(await client.query(sql, values));
      };
      const rollback = (): Promise<void> =>
        client.query("ROLLBACK").then(
          () => undefined,
          () => {
            state.broken = true;
          },
        );
      if (state.aborted) throw new Error("aborted");
      let opened: unknown;
      try {
        opened = await client.query(this.#begin);
      } catch (error) {
        // A statement after its BEGIN failed (the wait for migrate's lock cut short by lock_timeout, the
        // migrations table gone): the session is left in the failed transaction, which every statement
        // the pool's next user sends on it would meet. It goes back to the pool rolled back, or closed.
        await rollback();
        throw error;
      }
      began();
      const results = opened as PgResult | PgResult[];
      const checked = Array.isArray(results) ? results.at(-1) : results;
      const version = Number((checked?.rows[0] as { version?: unknown } | undefined)?.version ?? 0);
      if (version > SCHEMA_VERSION) {
        await rollback();
        this.sawVersion(operation, version);
      }
      let result: T;
      let abandoned = false;
      try {
        result = await work({ query: run, abandon: () => (abandoned = true) });
      } catch (error) {
        await rollback();
        throw error;
      }
      if (abandoned) {
        await rollback();
        return result;
      }
      if (state.aborted) throw new Error("aborted");
      state.committing = true;
      await client.query("COMMIT");
      return result;
    });
  }

  /**
   * Runs `work` on one connection of the pool, once it has one: for a
   * caller that must know when its statement left, not when it began to
   * wait for a connection.
   */
  session<T>(operation: string, work: (client: PgPoolClient) => Promise<T>): Promise<T> {
    return this.#withClient(operation, undefined, (client) => work(client));
  }

  /**
   * Checks once that the schema is at the version this build knows (later
   * calls reuse the outcome, unless it failed).
   *
   * @throws {PostgresQueryError} `"POSTGRES_NOT_MIGRATED"`,
   *   `"POSTGRES_SCHEMA_TOO_NEW"`, or `"POSTGRES_QUERY"` when the server
   *   cannot be reached, naming `operation`.
   */
  ready(operation: string): Promise<void> {
    return this.#ready(operation);
  }

  #ready(operation: string): Promise<void> {
    if (this.#newer !== undefined) return Promise.reject(this.#tooNewError(operation, this.#newer));
    this.#checked ??= this.#checkVersion(operation).catch((error: unknown) => {
      this.#checked = undefined;
      throw error;
    });
    return this.#checked;
  }

  async #checkVersion(operation: string): Promise<void> {
    let version: number;
    try {
      const sql = versionQuery(this.names);
      // Every statement waits on this check: one swallowed by the network must not hold them all up.
      const result = this.#replyMs === undefined ? await this.pool.query(sql) : await this.#replyIn(sql, this.#replyMs);
      version = Number((result.rows[0] as { version?: unknown } | undefined)?.version ?? 0);
    } catch (error) {
      throw this.#failure(operation, error);
    }
    if (version > SCHEMA_VERSION) throw this.#tooNewError(operation, version);
    if (version < SCHEMA_VERSION) {
      throw new PostgresQueryError(
        "POSTGRES_NOT_MIGRATED",
        operation,
        `schema ${this.names.quoted} is at version ${version}, this loopctl needs ${SCHEMA_VERSION}; run migrate(pool, { schema: ${JSON.stringify(this.names.name)} })`,
      );
    }
  }

  /** `sql` on a connection of the pool, closed instead of handed on when it has no reply within `ms`. */
  async #replyIn(sql: string, ms: number): Promise<PgResult> {
    let lost: Error | undefined;
    const onError = (error: Error): void => {
      lost ??= error;
    };
    const client = await checkOut(this.pool, onError);
    let broken = false;
    try {
      return await replyWithin(client.query(sql), ms, () => {
        broken = true;
        return new NoReplyError(`no reply within ${ms} ms; the connection was closed`);
      });
    } catch (error) {
      broken ||= unusable(error);
      throw connectionFailure(error, lost);
    } finally {
      client.removeListener("error", onError);
      client.release(broken ? true : undefined);
    }
  }

  #withClient<T>(
    operation: string,
    signal: AbortSignal | undefined,
    body: (client: PgPoolClient, state: ClientState) => Promise<T>,
  ): Promise<T> {
    if (signal?.aborted === true) return Promise.reject(stopReason(operation, signal));
    return new Promise<T>((resolve, reject) => {
      const state: ClientState = { aborted: false, committing: false, broken: false };
      let client: PgPoolClient | undefined;
      let released = false;
      let settled = false;
      const settle = (fn: () => void): void => {
        if (settled) return;
        settled = true;
        unlisten(signal, onAbort);
        fn();
      };
      const onAbort = (): void => {
        if (state.committing) return;
        state.aborted = true;
        const pid = client === undefined ? undefined : backendPids.get(client);
        // Stops a statement that is waiting (for a lock, say) so its connection and locks are freed now.
        if (pid !== undefined) this.pool.query("SELECT pg_cancel_backend($1)", [pid]).catch(() => undefined);
        settle(() => reject(signal === undefined ? undefined : stopReason(operation, signal)));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      // A connection that drops while checked out reports it as an event too, which nothing else
      // hears here: unheard, node-postgres would throw it out of the process.
      const onError = (error: Error): void => {
        state.broken = true;
        state.lost ??= error;
      };
      void (async () => {
        try {
          await this.#ready(operation);
          if (state.aborted) return;
          client = await checkOut(this.pool, onError);
        } catch (error) {
          settle(() => reject(this.#failure(operation, error)));
          return;
        }
        let started = false;
        const held = client;
        let silent: NodeJS.Timeout | undefined;
        try {
          // From the first statement on, the pid's included: one swallowed by the network is given up too.
          if (this.#replyMs !== undefined) {
            const ms = this.#replyMs;
            silent = setTimeout(() => {
              // A reply that arrived while the process was too busy to read it wins: I/O is read once more first.
              setImmediate(() => {
                if (released) return;
                state.broken = true;
                settle(() =>
                  reject(
                    this.#failure(operation, new NoReplyError(`no reply within ${ms} ms; the connection was closed`)),
                  ),
                );
                // Closing it fails what is still waiting on it, and the pool makes a new one. So it is
                // after an abort, which settled the call already: a statement the cancel did not reach
                // (its reply swallowed) would otherwise keep the connection from the pool for good.
                released = true;
                held.removeListener("error", onError);
                held.release(true);
              });
            }, ms);
            silent.unref();
          }
          if (signal !== undefined && !backendPids.has(client)) {
            const result = await client.query("SELECT pg_backend_pid() AS pid");
            backendPids.set(client, Number((result.rows[0] as { pid?: unknown } | undefined)?.pid));
          }
          if (state.aborted) return;
          started = true;
          const value = await body(client, state);
          settle(() => resolve(value));
        } catch (error) {
          // No SQLSTATE and not ours, or the server ending the session: the connection itself failed.
          state.broken ||= unusable(error);
          settle(() => reject(this.#failure(operation, connectionFailure(error, state.lost))));
        } finally {
          clearTimeout(silent);
          if (!released) {
            released = true;
            client.removeListener("error", onError);
            // A connection left mid-transaction or mid-cancel is closed rather than handed to the next caller.
            client.release(state.broken || (started && state.aborted) ? true : undefined);
          }
        }
      })();
    });
  }
}

interface ClientState {
  aborted: boolean;
  committing: boolean;
  broken: boolean;
  /** What the connection reported when it dropped, if it did. */
  lost?: Error;
}

function normalize(result: { readonly rows: unknown[]; readonly rowCount: number | null }): Rows {
  return { rows: result.rows as Record<string, unknown>[], rowCount: result.rowCount ?? 0 };
}

/**
 * What a statement cut short by `signal` rejects with: its reason, or, when
 * that cannot be read (a getter that throws), a {@link PostgresConfigError}
 * naming the signal, so the statement still settles and nothing is thrown
 * from its abort listener.
 */
function stopReason(operation: string, signal: AbortSignal): unknown {
  return abortReason(
    signal,
    () => new PostgresConfigError(operation, "options.signal aborted, and its reason could not be read"),
  );
}
