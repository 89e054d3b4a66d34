import { Grant, GrantConfigError, GrantIdCollisionError, GrantRecordError } from "../grant/index.js";
import type { GrantStore } from "../grant/index.js";
import { requireCoveringQuery } from "../grant/grant-index.js";
import { callSignal, describeRule as describeStoredRule, revokedId, sameRule } from "../grant/store.js";
import {
  DEFAULT_REPLY_MS,
  Db,
  positiveInteger,
  requireOptions,
  requirePool,
  sessionEnded,
  versionQuery,
} from "./db.js";
import type { Rows, Tx } from "./db.js";
import { PostgresConfigError, PostgresRowError } from "./errors.js";
import { grantColumns, parseGrantRow, parseHeadVersion } from "./grant-rows.js";
import { unstorableText } from "./jsonb.js";
import type { GrantRow } from "./grant-rows.js";
import { LiveGrantIndex } from "./live-index.js";
import { shownBare, shownKey } from "../unknown-option.js";
import { escapeHidden, shownText } from "../shown.js";
import { shownValue } from "../errors.js";
import type { PgPool } from "./pg.js";
import { schemaNames } from "./schema.js";
import type { SchemaNames } from "./schema.js";

/** Options for {@link PostgresGrantStore}. */
export interface PostgresGrantStoreOptions {
  /**
   * The project whose grants this store reads and writes: any non-empty
   * string of at most 2048 bytes of UTF-8, e.g. a repository URL or
   * `projectIdentity(dir)`. Every process
   * that names the same project in the same schema shares its grants.
   */
  readonly project: string;
  /**
   * The schema {@link migrate} created.
   * @default "loopctl"
   */
  readonly schema?: string;
  /**
   * How long a statement (or a save's transaction) may go without a reply,
   * in ms, from 300 to 600000. A connection that has none by then is taken
   * for dead (a network that swallows packets answers nothing and closes
   * nothing): the call rejects with PostgresQueryError, the engine denies
   * the call it was deciding, and the connection is closed rather than handed
   * to the next call.
   * @default 15000
   */
  readonly replyMs?: number;
}

/** Options of one {@link PostgresGrantStore} call. */
export interface GrantCallOptions {
  /**
   * Stops the call: its statement is cancelled on the server and the call
   * rejects with the signal's reason, having changed nothing. An abort that
   * comes after the commit was sent is too late: the call then resolves with
   * its outcome. A signal already aborted rejects before anything else is
   * checked; one that cannot be listened to is refused with GrantConfigError.
   */
  readonly signal?: AbortSignal | undefined;
}

/** The columns {@link parseGrantRow} reads, of the grants row aliased `g` (bigints as text: they may pass 2^53). */
const GRANT_COLUMNS =
  "g.id, g.tool, g.verdict, g.args, g.pinned_descriptor, g.created_at_ms::text AS created_at_ms, g.note, g.version::text AS version, g.revoked";

function describeRule(tool: string, verdict: string, args: string | null): string {
  // A malformed row's text is shown as it is stored, but for what would not show as itself (a newline, an escape).
  return `${shownBare(verdict)} ${shownKey(tool)} ${args === null ? "this_tool" : `this_call ${escapeHidden(args)}`}`;
}

/** The longest project name, in bytes of UTF-8, that every index of the grants takes, compressed or not. */
const MAX_PROJECT_BYTES = 2048;

/**
 * A {@link GrantStore} shared by every process that reaches the database:
 * the grants of one project in loopctl's schema (see {@link migrate}), with
 * the semantics of the ledger: ids derived from the rule, a re-grant
 * replaces its entry (and moves it last), pins and notes kept, a different
 * rule whose id collides is refused with GrantIdCollisionError. `GrantPolicy`
 * works on it unchanged.
 *
 * Concurrent saves, revokes and clears from any number of processes lose
 * nothing: each is one transaction that takes the project's next version
 * under the project's row lock. A revoked grant leaves a tombstone row, so
 * every other process's cache learns of the revocation. Tombstones are kept
 * for good and cost storage only: a new store's first read and `clear()`
 * read the live grants alone, through an index of them.
 *
 * Decisions stay flat as the project grows: the store keeps every grant of
 * the project in memory with a lookup index, and each `load()` or
 * `covering()` first asks the database for the rows changed since the version
 * it holds (one indexed statement, empty when nothing changed), so a grant
 * saved or revoked anywhere counts from the next decision on. A change costs
 * reading its row and two map operations, however large the project.
 *
 * Fail closed: a row that is not a grant (a mismatched id, arguments that are
 * not JSON) is a {@link PostgresRowError} naming it, and the store answers
 * nothing until it is repaired; an unreachable server is a
 * {@link PostgresQueryError} naming the project and the schema; the engine
 * denies on either. A read whose session the server ended (SQLSTATE `57P01`,
 * `57P02`, `57P03`, `57P05`: a pooled connection terminated while idle, or
 * ended by the server's `idle_session_timeout`, a restart) is sent once more
 * on another connection, and rejects only if that fails too; so is a write
 * whose transaction's `BEGIN` met such a session (nothing of it ran), never
 * one that began.
 *
 * @example
 * ```ts
 * const store = new PostgresGrantStore(pool, { project: "github.com/acme/shop" });
 * const managers = new LoopManagers().withAskResolver(queue.resolver).withGrantStore(store);
 * ```
 */
export class PostgresGrantStore implements GrantStore {
  /** The project whose grants this store holds. */
  readonly project: string;
  /** The schema it reads and writes. */
  readonly schema: string;
  readonly #db: Db;
  readonly #names: SchemaNames;
  readonly #table: string;
  /** The project's live grants, oldest change first, as of {@link #version}. */
  #index = new LiveGrantIndex();
  #version = 0;
  /**
   * The id of a row that had version {@link #version} when it was read: its
   * version can only have grown since, unless the database went back in time.
   */
  #witness: string | undefined;
  /** Counts the times the grants held were dropped, so a read begun before cannot apply its rows after. */
  #generation = 0;

  /**
   * @throws {PostgresConfigError} for a missing project, one holding text
   *   PostgreSQL cannot store (U+0000, a lone surrogate) or longer than 2048
   *   bytes of UTF-8, a bad schema name,
   *   a `replyMs` out of range or something that is not a node-postgres pool.
   */
  constructor(pool: PgPool, options: PostgresGrantStoreOptions) {
    requirePool("PostgresGrantStore", pool);
    const given: Partial<PostgresGrantStoreOptions> = requireOptions("PostgresGrantStore", options, [
      "project",
      "schema",
      "replyMs",
    ]);
    const project = given.project;
    if (typeof project !== "string" || project === "") {
      throw new PostgresConfigError("PostgresGrantStore", "options.project must be a non-empty string");
    }
    // A lone surrogate would be stored as U+FFFD: two such projects would share one project's grants.
    const unstorable = unstorableText(project, "options.project");
    if (unstorable !== undefined) throw new PostgresConfigError("PostgresGrantStore", unstorable);
    // A key of the grants' indexes: past about 2.7 KB that does not compress, PostgreSQL refuses every save.
    const bytes = Buffer.byteLength(project);
    if (bytes > MAX_PROJECT_BYTES)
      throw new PostgresConfigError(
        "PostgresGrantStore",
        `options.project is ${bytes} bytes of UTF-8; at most ${MAX_PROJECT_BYTES} (it is a key of the grants' indexes)`,
      );
    this.#names = schemaNames("PostgresGrantStore", given.schema);
    this.project = project;
    this.schema = this.#names.name;
    const replyMs = positiveInteger("PostgresGrantStore", "replyMs", given.replyMs, DEFAULT_REPLY_MS, 300, 600_000);
    this.#db = new Db(pool, this.#names, replyMs, `project ${shownText(project)} in schema ${this.#names.quoted}`);
    this.#table = this.#names.table("grants");
  }

  /**
   * Every grant of the project, oldest change first.
   *
   * @throws {PostgresRowError} when a row of the project is malformed.
   * @throws {PostgresQueryError} when the database cannot be read.
   */
  async load(options: GrantCallOptions = {}): Promise<Grant[]> {
    const operation = "PostgresGrantStore.load";
    await this.#refresh(operation, callSignal(operation, options));
    return [...this.#index.grants];
  }

  /**
   * The grants covering a call of `tool` whose canonical args text is
   * `canonicalArgs` (see `GrantStore.covering`), current as of this call:
   * what `GrantPolicy` decides from, without reading the whole project.
   *
   * @throws {GrantConfigError} naming `tool` when it is not a non-empty
   *   string, or `canonicalArgs` when it is not `canonicalJson(args)`.
   */
  async covering(tool: string, canonicalArgs: string, options: GrantCallOptions = {}): Promise<readonly Grant[]> {
    const operation = "PostgresGrantStore.covering";
    const signal = callSignal(operation, options);
    requireCoveringQuery(operation, tool, canonicalArgs);
    await this.#refresh(operation, signal);
    return this.#index.covering(tool, canonicalArgs);
  }

  /**
   * Stores `grant`, replacing the grant with its id (which then counts as
   * the newest); resolves to it.
   *
   * @throws {GrantIdCollisionError} when the id belongs to a different rule (nothing is written).
   * @throws {GrantRecordError} when `grant` is not a Grant, or its tool, pin
   *   or note holds text PostgreSQL cannot store (U+0000, a lone surrogate);
   *   nothing is written.
   */
  async save(grant: Grant, options: GrantCallOptions = {}): Promise<Grant> {
    const operation = "PostgresGrantStore.save";
    const signal = callSignal(operation, options);
    if (!(grant instanceof Grant)) {
      throw new GrantRecordError(
        `PostgresGrantStore.save: expected a Grant, got ${grant === null ? "null" : typeof grant}`,
      );
    }
    // Arguments are stored as canonical JSON text, whose escapes can carry any string; these are stored as they are.
    const { tool, pinnedDescriptor, note } = grant;
    const unstorable = unstorableText({ tool, pinnedDescriptor, note });
    if (unstorable !== undefined)
      throw new GrantRecordError(`PostgresGrantStore.save: grant ${grant.id}: ${unstorable}`);
    await this.#db.transaction(operation, signal, async (tx) => {
      const saved = await this.#bumped(
        tx,
        `INSERT INTO ${this.#table} AS g (project, id, tool, verdict, args, pinned_descriptor, created_at_ms, note, version)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, bump.version FROM bump
         ON CONFLICT (project, id) DO UPDATE SET
           pinned_descriptor = EXCLUDED.pinned_descriptor, created_at_ms = EXCLUDED.created_at_ms,
           note = EXCLUDED.note, version = EXCLUDED.version, revoked = false,
           tool = EXCLUDED.tool, verdict = EXCLUDED.verdict, args = EXCLUDED.args
         WHERE g.revoked OR (g.tool = EXCLUDED.tool AND g.verdict = EXCLUDED.verdict AND g.args IS NOT DISTINCT FROM EXCLUDED.args)
         RETURNING g.id`,
        [grant.id, ...grantColumns(grant)],
      );
      if (saved.rowCount === 1) return;
      // The id is held by a live row whose tool, verdict or arguments' text differ from the grant's.
      const stored = await tx.query(
        `SELECT ${GRANT_COLUMNS} FROM ${this.#table} AS g WHERE g.project = $1 AND g.id = $2`,
        [this.project, grant.id],
      );
      const raw = stored.rows[0];
      const held = raw === undefined ? undefined : this.#grantOrUndefined(raw);
      if (held !== undefined && sameRule(held, grant)) {
        // The same rule, its arguments written as other JSON text (by hand, by SQL): a re-grant, which
        // replaces the row in canonical form, at the version the statement above took.
        await tx.query(
          `UPDATE ${this.#table} SET tool = $3, verdict = $4, args = $5, pinned_descriptor = $6, created_at_ms = $7,
             note = $8, revoked = false,
             version = (SELECT version FROM ${this.#names.table("grant_projects")} WHERE project = $1)
           WHERE project = $1 AND id = $2`,
          [this.project, grant.id, ...grantColumns(grant)],
        );
        return;
      }
      // A different rule: refuse, and name both.
      throw new GrantIdCollisionError(
        grant.id,
        held !== undefined
          ? describeStoredRule(held)
          : raw === undefined
            ? "another rule"
            : describeRule(String(raw["tool"]), String(raw["verdict"]), raw["args"] as string | null),
        describeRule(grant.tool, grant.verdict, grant.canonicalArgs),
      );
    });
    return grant;
  }

  /** Removes the grant with `id`; resolves to it, or `undefined` (changing nothing) when none is stored. */
  async revoke(id: string, options: GrantCallOptions = {}): Promise<Grant | undefined> {
    const operation = "PostgresGrantStore.revoke";
    const signal = callSignal(operation, options);
    // An id PostgreSQL cannot store (U+0000, a lone surrogate) names no stored grant.
    if (unstorableText(revokedId(operation, id)) !== undefined) return undefined;
    return this.#db.transaction(operation, signal, async (tx) => {
      const revoked = await this.#bumped(
        tx,
        `UPDATE ${this.#table} AS g SET revoked = true, version = bump.version FROM bump
         WHERE g.project = $1 AND g.id = $2 AND NOT g.revoked
         RETURNING ${GRANT_COLUMNS}`,
        [id],
      );
      const raw = revoked.rows[0];
      if (raw === undefined) {
        tx.abandon();
        return undefined;
      }
      return this.#parse({ ...raw, revoked: false }).grant;
    });
  }

  /**
   * Removes every grant of `tool` (matched exactly) in one transaction, at
   * one new version of the project; resolves to them, oldest change first,
   * or to an empty array (changing nothing) when there are none. A save of
   * that tool committed by another process before this call takes the
   * project's lock is removed with them; one that waited for the lock comes
   * after, and stays.
   *
   * @throws {GrantConfigError} naming `tool` when it is not a non-empty string.
   * @throws {PostgresRowError} naming the row, removing nothing, when a row of
   *   the project is malformed, as `load()` does: a ledger file that cannot be
   *   read is not changed either.
   */
  async revokeTool(tool: string, options: GrantCallOptions = {}): Promise<Grant[]> {
    const operation = "PostgresGrantStore.revokeTool";
    const signal = callSignal(operation, options);
    if (typeof tool !== "string" || tool === "") {
      throw new GrantConfigError(operation, "tool", `must be a non-empty string, got ${shownValue(tool)}`);
    }
    // A tool name PostgreSQL cannot store (U+0000, a lone surrogate) names no stored grant.
    if (unstorableText(tool) !== undefined) return [];
    await this.#refresh(operation, signal);
    return this.#db.transaction(operation, signal, async (tx) => {
      // The lock first ({@link #bumped} says why); the statement after it holds every change committed before it.
      const version = await this.#lockedVersion(tx);
      const revoked = await tx.query(
        `WITH gone AS (
           UPDATE ${this.#table} AS g SET revoked = true, version = $2
           FROM ${this.#table} AS old
           WHERE old.project = $1 AND old.tool = $3 AND NOT old.revoked AND g.project = $1 AND g.id = old.id
           RETURNING ${GRANT_COLUMNS}, old.version AS old_version
         ) SELECT * FROM gone ORDER BY old_version`,
        [this.project, version, tool],
      );
      if (revoked.rowCount === 0) {
        tx.abandon();
        return [];
      }
      return revoked.rows.flatMap((raw) => this.#parse({ ...raw, revoked: false }).grant ?? []);
    });
  }

  /** Removes every grant of the project; resolves to how many there were. */
  async clear(options: GrantCallOptions = {}): Promise<number> {
    const operation = "PostgresGrantStore.clear";
    return this.#db.transaction(operation, callSignal(operation, options), async (tx) => {
      const cleared = await this.#bumped(
        tx,
        `UPDATE ${this.#table} AS g SET revoked = true, version = bump.version FROM bump
         WHERE g.project = $1 AND NOT g.revoked`,
        [],
      );
      if (cleared.rowCount === 0) tx.abandon();
      return cleared.rowCount;
    });
  }

  /**
   * Runs `statement` with the project's next version as `bump` (`bump.version`). The version,
   * and with it the project's row lock, held to COMMIT, is taken first, in a statement of its own:
   * a statement sent after it reads every change committed before the lock was granted, where one
   * that also waited for the lock would read the rows as they were before the wait, and miss a
   * grant saved meanwhile. The lock is what makes versions commit in order. `$1` is the project,
   * further parameters follow.
   */
  async #bumped(tx: Tx, statement: string, values: unknown[]): Promise<Rows> {
    const version = await this.#lockedVersion(tx);
    return tx.query(`WITH bump AS (SELECT $${values.length + 2}::bigint AS version) ${statement}`, [
      this.project,
      ...values,
      version,
    ]);
  }

  /** Takes the project's next version, and with it the project's row lock; resolves to the version as text. */
  async #lockedVersion(tx: Tx): Promise<string> {
    const bumped = await tx.query(
      `INSERT INTO ${this.#names.table("grant_projects")} AS p (project, version) VALUES ($1, 1)
       ON CONFLICT (project) DO UPDATE SET version = p.version + 1
       RETURNING version::text AS version`,
      [this.project],
    );
    return String(bumped.rows[0]?.["version"]);
  }

  /**
   * Brings the in-memory grants up to the database's current version: the
   * head version and the rows changed above the one held, read in one
   * statement (one snapshot). Malformed rows throw before anything is applied.
   *
   * Holding nothing, it reads the live grants alone (through `grants_live`)
   * and builds the index afresh: a tombstone only ever removes a grant held,
   * and the project may keep far more of them than it has grants.
   *
   * Versions only grow, and a row's version with them. A head below the
   * version held, or a row read at that version now below it or gone, means
   * the database went back in time (the schema dropped and migrated again, a
   * restore, a failover that lost commits): the versions it hands out again
   * would name changes already counted, and a revocation made then would
   * never be read. The grants held are dropped and read again from scratch.
   */
  async #refresh(operation: string, signal: AbortSignal | undefined): Promise<void> {
    const headOf = `(SELECT coalesce((SELECT version FROM ${this.#names.table("grant_projects")} WHERE project = $1), 0) AS version,
      (${versionQuery(this.#names)}) AS schema_version) AS head`;
    // A read changes nothing: one whose session the server ended (a pooled connection terminated
    // while idle, say) is sent once more on another connection. Not one that could not connect or
    // lost its connection otherwise: against a server that is down, that would double the wait
    // before the call is denied.
    for (;;) {
      const generation = this.#generation;
      const from = this.#version;
      const witness = this.#witness ?? null;
      const result =
        from === 0
          ? await this.#db.read(
              operation,
              // The witness is any row at the head version, a tombstone as likely as not.
              `SELECT head.version::text AS head, head.schema_version, true AS held,
                 (SELECT w.id FROM ${this.#table} AS w WHERE w.project = $1 AND w.version = head.version LIMIT 1) AS witness,
                 ${GRANT_COLUMNS}
               FROM ${headOf}
               LEFT JOIN ${this.#table} AS g ON g.project = $1 AND NOT g.revoked
               ORDER BY g.version`,
              [this.project],
              signal,
              sessionEnded,
            )
          : await this.#db.read(
              operation,
              `SELECT head.version::text AS head, head.schema_version, held.held, ${GRANT_COLUMNS}
               FROM ${headOf}
               CROSS JOIN (SELECT $3::text IS NULL OR EXISTS (
                 SELECT 1 FROM ${this.#table} WHERE project = $1 AND id = $3 AND version >= $2) AS held) AS held
               LEFT JOIN ${this.#table} AS g ON g.project = $1 AND g.version > $2
               ORDER BY g.version`,
              [this.project, from, witness],
              signal,
              sessionEnded,
            );
      // Dropped while this read was in flight: its rows are relative to grants no longer held.
      if (generation !== this.#generation) continue;
      const first = result.rows[0];
      // Read in the same snapshot as the grants: none read from a schema a newer loopctl migrated is used.
      this.#db.sawVersion(operation, Number(first?.["schema_version"] ?? 0));
      const head = parseHeadVersion(`${this.#names.name}.grant_projects`, this.project, first?.["head"] ?? null);
      if (head < from || first?.["held"] !== true) {
        this.#index = new LiveGrantIndex();
        this.#version = 0;
        this.#witness = undefined;
        this.#generation++;
        continue;
      }
      const changed: GrantRow[] = [];
      for (const raw of result.rows) {
        if (raw["id"] !== null) changed.push(this.#parse(raw));
      }
      // A grant's version is taken from its project's row in the transaction that writes it: a live
      // grant above it means that row was deleted (or restored) apart from the grants. Read at the
      // head, the project would show no grant at all, a deny among them, or lose it at the next save.
      const ahead = changed.findLast((row) => row.grant !== undefined && row.version > head);
      if (ahead !== undefined) {
        throw new PostgresRowError(
          `${this.#names.name}.grants (project ${shownText(this.project)})`,
          ahead.id,
          `its version ${ahead.version} is above the project's version ${head} in ${this.#names.name}.grant_projects ` +
            "(its row deleted or restored apart from the grants); reset the project to repair it",
        );
      }
      // A concurrent refresh may have got further while this one was in flight.
      if (head <= this.#version) return;
      if (from === 0) {
        // A whole snapshot: it replaces what a concurrent refresh may have got to, which it cannot revoke from.
        const index = new LiveGrantIndex();
        for (const row of changed) if (row.grant !== undefined) index.put(row.grant);
        this.#index = index;
        const id = first?.["witness"];
        this.#witness = typeof id === "string" ? id : undefined;
      } else {
        for (const row of changed) {
          if (row.version <= this.#version) continue;
          if (row.grant === undefined) this.#index.remove(row.id);
          else this.#index.put(row.grant);
        }
        this.#witness = changed.findLast((row) => row.version === head)?.id;
      }
      this.#version = head;
      return;
    }
  }

  /** The grant of a live row, or `undefined` when the row is not one. */
  #grantOrUndefined(raw: Record<string, unknown>): Grant | undefined {
    try {
      return this.#parse({ ...raw, revoked: false }).grant;
    } catch (error) {
      if (error instanceof PostgresRowError) return undefined;
      throw error;
    }
  }

  #parse(raw: Record<string, unknown>): GrantRow {
    return parseGrantRow(`${this.#names.name}.grants (project ${shownText(this.project)})`, raw);
  }
}
