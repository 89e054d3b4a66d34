import { askDigest } from "../ask/ask-digest.js";
import { PendingAskSchema } from "../ask/index.js";
import type { AskResolution, AskResolver, PendingAsk, ResolveOptions } from "../ask/index.js";
import { describeError } from "../errors.js";
import { PostgresApprover } from "./ask-inbox.js";
import type { InboxHost, InboxLink, Offered } from "./ask-inbox.js";
import { UUID, askEnding, parseAskRow, parseEndRow } from "./ask-rows.js";
import type { RowEnding } from "./ask-rows.js";
import type { AskEnding } from "../ask/index.js";
import { AnswerBatch, ENDING_COLUMNS, PENDING, lockedInOrder } from "./answers.js";
import { Batch } from "./batch.js";
import { Db, inDoubt, positiveInteger, replyWithin, requireOptions, requirePool, sessionEnded } from "./db.js";
import { abortReason, isAbortSignal, unlisten } from "../abort-signal.js";
import type { Rows } from "./db.js";
import { PostgresAskError, PostgresConfigError, PostgresLeaseError, PostgresRowError } from "./errors.js";
import { WorkerLease } from "./lease.js";
import type { LeaseLoss } from "./lease.js";
import { NotificationListener } from "./listener.js";
import type { PgPool } from "./pg.js";
import { unstorableText } from "./jsonb.js";
import { reap } from "./reaper.js";
import { schemaNames } from "./schema.js";
import type { SchemaNames } from "./schema.js";
import { zodIssuesLine } from "../zod-issues.js";
import { shownText } from "../shown.js";

/** Options for {@link PostgresAskQueue}. */
export interface PostgresAskQueueOptions {
  /**
   * The schema {@link migrate} created.
   * @default "loopctl"
   */
  readonly schema?: string;
  /**
   * How long a worker's lease lasts without a heartbeat (renewed every third
   * of it). When a worker dies, its pending asks are closed as `abandoned`
   * by any live queue, worker or console, each of which reaps every third of
   * its own `leaseMs`: within about 4/3 of this when every queue uses one
   * (answers to them return `false` once the lease lapsed, reaped or not). A
   * statement on the listening connection (its `LISTEN` included) with no
   * reply for this long gives that connection up (it is made anew, and
   * everything read again); one on a pooled connection fails, and its
   * connection is closed.
   * @default 15000
   */
  readonly leaseMs?: number;
  /**
   * How often the asks changed since the last read are read again even
   * without a notification: the safety net under `LISTEN/NOTIFY`, never the
   * main path. When nothing changed it costs one empty index range, however
   * many asks wait.
   * @default 5000
   */
  readonly rereadMs?: number;
  /**
   * How long ended asks are kept before a queue deletes them: at least an
   * hour (3600000), so a worker always reads its answered row before any
   * queue's reaper can delete it (a lower value is a `PostgresConfigError`).
   * @default 86400000 (a day)
   */
  readonly keepEndedMs?: number;
  /**
   * Receives what goes wrong in the background: a dropped notification
   * connection (it reconnects), a failed heartbeat (retried while the lease
   * holds), a lost lease (its parked calls were denied), and for each of those
   * calls whose row an answer reached first, unheard, a `PostgresLeaseError`
   * naming the ask (its console was told the answer landed), a pool whose every
   * connection the queues on it hold for `LISTEN`, a schema a newer loopctl
   * migrated under the queue (`POSTGRES_SCHEMA_TOO_NEW`, found by a
   * heartbeat: the queue closes itself, writing nothing more there), and a
   * `PostgresRowError` for each answer that landed on a row whose ask was
   * changed after its call parked it (the call is denied; the park rejects with it).
   * @default emits a process warning (`name` "LoopctlWarning", `code` "LOOPCTL_POSTGRES_QUEUE")
   */
  readonly onError?: (error: unknown) => void;
}

/**
 * The least `keepEndedMs`: an hour. A worker reads an answered row of its own at once, by its
 * notification; when it cannot, it reads it on `LISTEN`'s reconnect, by its re-read (`rereadMs`), or
 * once its lease surely lapsed (a few `leaseMs`), each at most ten minutes for any queue on the
 * schema. A row a reaper deleted before then would take its answer with it: the call denied, and the
 * console told its answer landed.
 */
const MIN_KEEP_ENDED_MS = 3_600_000;

function keptEnded(value: number | undefined): number {
  const kept = positiveInteger("PostgresAskQueue", "keepEndedMs", value, 86_400_000, 0, 365 * 86_400_000);
  if (kept < MIN_KEEP_ENDED_MS) {
    throw new PostgresConfigError(
      "PostgresAskQueue",
      `keepEndedMs must be at least ${MIN_KEEP_ENDED_MS} (an hour): a row purged sooner may take its answer ` +
        `with it before its worker reads it (the call denied, its console told the answer landed), got ${kept}`,
    );
  }
  return kept;
}

/** The denial reason given to parked calls when their queue closes. */
export const QUEUE_CLOSED_REASON = "ask queue closed";
/** The denial reason given to parked calls whose worker lost its lease. */
export const LEASE_LOST_REASON = "worker lease lost: the ask was abandoned";

const WITHDRAWN_TEXT: Readonly<Record<"expired" | "cancelled" | "closed" | "abandoned", string>> = {
  expired: "the ask was withdrawn: expired",
  cancelled: "the ask was withdrawn: cancelled",
  closed: "the ask was withdrawn: its queue closed",
  abandoned: "the ask was withdrawn: abandoned after its worker's lease lapsed",
};

interface Parked {
  readonly id: string;
  readonly ask: PendingAsk;
  /** `askDigest(ask)`: an answer is the call's only on a row that still holds this ask. */
  readonly digest: string;
  readonly signal: AbortSignal;
  readonly resolve: (resolution: AskResolution) => void;
  readonly reject: (reason: unknown) => void;
  readonly onAbort: () => void;
  /** The lease the row was inserted under, once the insert is sent. */
  workerId: string | undefined;
  /** Its row is in the table. */
  inserted: boolean;
  /**
   * The row's `seq`, once its insert came back: the row this call wrote. A
   * withdrawal names it, so it closes that row only, never one a later call
   * that took the id again wrote after this one's was purged.
   */
  seq: string | undefined;
  /**
   * How many reads of rows had begun when the insert came back: only later
   * ones must find its row, and only later ones can hold it. A row an earlier
   * read brings back is another ask's that had this id (purged since).
   */
  insertedAt: number;
  /** A read begun before the insert came back found its id ended: read it again once the insert is back. */
  readAgain: boolean;
  /** How the wait ended here, when it did before the row was written. */
  ended: "expired" | "cancelled" | "closed" | "abandoned" | undefined;
  /** Its lease was lost: its row is being read for an answer that landed while the lease held. */
  leaseLost: boolean;
}

type Withdrawal = {
  readonly workerId: string;
  readonly reason: "expired" | "cancelled" | "closed" | "abandoned";
} & (
  | {
      /** The `seq` of the row to close: that row alone, not a later one with its id. */
      readonly seq: string;
      readonly unwritten?: undefined;
    }
  | {
      readonly seq?: undefined;
      /**
       * Set when the row's insert got no reply: it may commit later. The row is
       * then written withdrawn if it is not there yet, so the late insert fails
       * on its id instead of leaving a pending ask nobody waits on.
       */
      readonly unwritten: PendingAsk;
    }
);

const RECENT_MS = 60_000;

/** How many started queues hold a LISTEN connection of each pool. */
const listeners = new WeakMap<PgPool, number>();

/** `pool.end()` was called (node-postgres's `ending`): the pool takes no statement any more. */
function poolEnding(pool: PgPool): boolean {
  return (pool as { readonly ending?: unknown }).ending === true;
}

/** The pool's connection limit, when it says (`pg.Pool` keeps it as `options.max`). */
function poolMax(pool: PgPool): number | undefined {
  const max = (pool as { options?: { max?: unknown } }).options?.max;
  return typeof max === "number" && Number.isFinite(max) && max > 0 ? max : undefined;
}

function isDuplicate(error: unknown): boolean {
  return (error as { cause?: { code?: unknown } } | null)?.cause?.code === "23505";
}

function emitWarning(error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  process.emitWarning(message, { type: "LoopctlWarning", code: "LOOPCTL_POSTGRES_QUEUE" });
}

/**
 * What a park on `signal` rejects with once it aborted: its reason, or, when
 * that cannot be read (a getter that throws), a {@link PostgresAskError}
 * naming the signal, so the park still settles and nothing is thrown from
 * its abort listener.
 */
function parkReason(askId: string, signal: AbortSignal): unknown {
  return abortReason(
    signal,
    (cause) =>
      new PostgresAskError("POSTGRES_ASK_INVALID", askId, "options.signal aborted, and its reason could not be read", {
        cause,
      }),
  );
}

/**
 * expired for a deadline (a `TimeoutError`, or the error the engine's park aborts ask `askId`'s
 * signal with when it expires: `ask <id> expired`), cancelled for anything else that stopped the
 * wait: a cancel whose own text says "expired" (a session's) is a cancel.
 */
function withdrawReason(askId: string, reason: unknown): "expired" | "cancelled" {
  const named = reason as { name?: unknown; message?: unknown } | null;
  if (typeof named === "object" && named !== null) {
    if (named.name === "TimeoutError") return "expired";
    if (named.message === `ask ${askId} expired`) return "expired";
  }
  return "cancelled";
}

/**
 * Asks as rows of one PostgreSQL table, shared by every worker and every
 * approval console that reaches the database.
 *
 * - Workers hand {@link PostgresAskQueue.resolver} to the engine
 *   (`withAskResolver`). Each ask becomes a pending row and the call waits
 *   for the row to end. The engine keeps the deadline and the cancel: when its
 *   signal aborts, the resolver rejects at once and the row is closed as
 *   `expired` or `cancelled`, so a late answer changes nothing and returns
 *   `false`. An answer carrying `remember` is handed to the engine whole, so
 *   the worker's engine saves the grant.
 * - Consoles take {@link PostgresAskQueue.approver}: every pending ask, an
 *   answer by `UPDATE … WHERE state = 'pending'` (single use is the
 *   database's), and each ask's ending.
 * - `LISTEN/NOTIFY` wakes both sides at once; a slow re-read (`rereadMs`) is
 *   only the safety net. A dropped notification connection reconnects and
 *   re-reads, so no parked call and no console misses an ending.
 * - Each worker holds a lease, renewed by heartbeat. A worker that dies has
 *   its pending asks closed as `abandoned` once its lease lapses, by any live
 *   queue; an answer to such an ask returns `false`. A worker that cannot
 *   renew its lease (the database is unreachable) keeps its calls parked only
 *   while the lease surely holds, then denies them.
 * - Fail closed: a failed insert or an unreadable answer rejects (the engine
 *   denies), a closed queue denies, nothing is ever turned into an approval.
 *
 * One connection per queue is held for `LISTEN`; the rest go through the
 * pool as needed, so give the pool more connections than the queues on it (a
 * pool of one is refused; queues that hold all of a pool's connections are
 * reported to `onError`). Close the queue before ending the pool.
 *
 * @example
 * ```ts
 * const queue = new PostgresAskQueue(pool);
 * // a worker
 * const managers = new LoopManagers().withHook(askEveryWrite).withAskResolver(queue.resolver).withAskTimeout(600_000);
 * // a console, on any machine
 * const inbox = queue.approver();
 * for await (const ask of inbox) await inbox.resolve(ask.id, { type: "approve" });
 * ```
 */
export class PostgresAskQueue {
  /** The {@link AskResolver} to give the engine: parks each ask as a row until it is answered or withdrawn. */
  readonly resolver: AskResolver;
  /** The schema this queue works in. */
  readonly schema: string;
  readonly #pool: PgPool;
  readonly #db: Db;
  readonly #names: SchemaNames;
  readonly #table: string;
  readonly #leaseMs: number;
  readonly #rereadMs: number;
  readonly #keepEndedMs: number;
  readonly #onError: (error: unknown) => void;
  readonly #lease: WorkerLease;
  readonly #listener: NotificationListener;
  readonly #parked = new Map<string, Parked>();
  readonly #links = new Set<InboxLink>();
  readonly #withdrawals = new Map<string, Withdrawal>();
  /**
   * Ids that ended lately, with when, and how many reads of pending rows had begun then: a read
   * begun before the ending may still show them pending.
   */
  readonly #recent = new Map<string, { readonly at: number; readonly reads: number }>();
  /** Reads of pending rows (those that offer asks to the inboxes) begun so far. */
  #pendingReads = 0;
  /**
   * Ids this process is answering now, with how many of its answers are in
   * flight, and whether an ending was heard meanwhile: the answer's own
   * reply says how the ask ended, so its notification (which can arrive
   * first) needs no read unless the answer did not land.
   */
  readonly #answering = new Map<string, { inFlight: number; heard: boolean }>();
  readonly #endings: Batch<string>;
  readonly #arrivals: Batch<string>;
  readonly #withdraw: Batch<string>;
  readonly #inserts: Batch<string>;
  readonly #rereads: Batch<"changes">;
  /** Ids whose insert is in flight: a pending row of this worker not parked here is not a stray while its insert is out. */
  readonly #writing = new Set<string>();
  /**
   * The `xmin` of the snapshot of the last re-read that finished: every change
   * it could not see was made by a transaction at or above it. Undefined
   * until a re-read has read everything watched (again after `LISTEN`
   * reconnects, and when nothing is watched).
   */
  #mark: string | undefined;
  /** How many times `LISTEN` took hold: a re-read begun before the latest sets no mark. */
  #listens = 0;
  /** Asks whose lease is taken, waiting for the next insert batch. */
  readonly #toInsert = new Map<string, Parked>();
  readonly #host: InboxHost;
  readonly #answers: AnswerBatch;
  #heartbeat: NodeJS.Timeout | undefined;
  /** The heartbeat in flight, if one is. */
  #beating: Promise<void> = Promise.resolve();
  /** The lease renewal in flight, if one is: never two at once. */
  #renewal: Promise<void> | undefined;
  /** The heartbeat's chores (withdrawals, the reaper) in flight, if they are: never two rounds at once. */
  #chores: Promise<void> | undefined;
  #rereadTimer: NodeJS.Timeout | undefined;
  #closing: Promise<void> | undefined;
  #started = false;
  /** Reads of rows begun so far: see {@link Parked.insertedAt}. */
  #endingReads = 0;

  /**
   * @throws {PostgresConfigError} for a bad schema name, an option out of
   *   range, options that are not an object, something that is not a
   *   node-postgres pool, or a pool of one connection (`options.max`).
   */
  constructor(pool: PgPool, given?: PostgresAskQueueOptions) {
    requirePool("PostgresAskQueue", pool);
    const options: PostgresAskQueueOptions = requireOptions("PostgresAskQueue", given, [
      "schema",
      "leaseMs",
      "rereadMs",
      "keepEndedMs",
      "onError",
    ]);
    const max = poolMax(pool);
    if (max !== undefined && max < 2) {
      throw new PostgresConfigError(
        "PostgresAskQueue",
        `the pool allows ${max} connection (options.max), which LISTEN would hold, leaving none for statements; give it at least 2`,
      );
    }
    this.#pool = pool;
    this.#names = schemaNames("PostgresAskQueue", options.schema);
    this.schema = this.#names.name;
    this.#leaseMs = positiveInteger("PostgresAskQueue", "leaseMs", options.leaseMs, 15_000, 300, 600_000);
    // A pooled connection that swallows a statement (an insert, say) must not hold up the ones after it.
    this.#db = new Db(pool, this.#names, this.#leaseMs, `schema ${this.#names.quoted}`);
    this.#table = this.#names.table("asks");
    this.#rereadMs = positiveInteger("PostgresAskQueue", "rereadMs", options.rereadMs, 5_000, 50, 600_000);
    this.#keepEndedMs = keptEnded(options.keepEndedMs);
    if (options.onError !== undefined && typeof options.onError !== "function") {
      throw new PostgresConfigError("PostgresAskQueue", "onError must be a function");
    }
    const onError = options.onError ?? emitWarning;
    this.#onError = (error) => {
      try {
        onError(error);
      } catch (thrown) {
        emitWarning(thrown);
      }
    };
    this.#listener = new NotificationListener(pool, this.#names.channel, this.#leaseMs, {
      notify: (payload) => this.#notified(payload),
      listening: () => this.#resync(),
      error: (error) => this.#onError(this.#db.failure(`PostgresAskQueue: listening on ${this.#names.channel}`, error)),
    });
    this.#lease = new WorkerLease(this.#db, this.#leaseMs, {
      lost: (id, why) => void this.#leaseLost(id, why),
      direct: () => this.#listener.connection,
      broken: (client, error) => this.#listener.drop(client, error),
    });
    this.#endings = new Batch((ids) => this.#readEndings(ids), this.#onError);
    this.#arrivals = new Batch((ids) => this.#readPending(ids), this.#onError);
    this.#withdraw = new Batch((ids) => this.#writeWithdrawals(ids), this.#onError);
    this.#inserts = new Batch((ids) => this.#writeAsks(ids), this.#onError);
    this.#rereads = new Batch(() => this.#reread(), this.#onError);
    this.#answers = new AnswerBatch(
      this.#db,
      () => {
        const read = ++this.#endingReads;
        return (row) => this.#ended(row, read);
      },
      () => this.#lease.ids,
    );
    this.#host = {
      db: this.#db,
      endedRecently: (id, read) => {
        const ended = this.#recent.get(id);
        return ended !== undefined && read <= ended.reads;
      },
      watch: (id) => this.#endings.add(id),
      answer: (id, resolution, ask) => this.#answer(id, resolution, ask),
      attach: (link) => this.#links.add(link),
      detach: (link) => this.#links.delete(link),
    };
    this.resolver = { resolve: (ask, options) => this.#park(ask, options) };
  }

  /** Calls parked on this queue's resolver, awaiting their answer. */
  get parked(): number {
    return this.#parked.size;
  }

  /** True once {@link PostgresAskQueue.close} was called. */
  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /** The id of the worker lease this queue holds now, if it holds one (taken with its first ask). */
  get workerId(): string | undefined {
    return this.#lease.id;
  }

  /**
   * A new inbox for a console: every pending ask of every worker (see
   * {@link PostgresApprover}). It lives until it or this queue is closed.
   */
  approver(): PostgresApprover {
    const inbox = new PostgresApprover(this.#host);
    if (this.#closing !== undefined) {
      inbox.close();
      return inbox;
    }
    this.#start();
    // Asks parked before LISTEN took hold are found here; later ones are notified.
    if (this.#listener.listening) this.#arrivals.add("*");
    return inbox;
  }

  /**
   * Closes the queue: every call still parked is denied
   * ({@link QUEUE_CLOSED_REASON}) and its row closed as `closed` (a call
   * whose answer reached its row first, which its console was told landed,
   * gets that answer instead; so does one whose row was still being written,
   * once its insert's reply is in), every inbox is closed, the lease is given up
   * and the connections are released. A call whose row cannot be closed (the
   * database is unreachable, the pool ended) is denied once its lease has
   * surely lapsed on the database, when no answer can land on it any more.
   * Resolves once that is done and every statement the queue had in flight
   * has finished, so the pool may be ended right after (failures go to
   * `onError`). Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#shutDown();
    return this.#closing;
  }

  /** Same as {@link PostgresAskQueue.close}; lets `await using queue = …` close it. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #start(): void {
    if (this.#started) return;
    this.#started = true;
    const holding = (listeners.get(this.#pool) ?? 0) + 1;
    listeners.set(this.#pool, holding);
    const max = poolMax(this.#pool);
    if (max !== undefined && holding >= max) {
      // Statements would wait for a connection until a queue closes: say so rather than hang quietly.
      const error = new PostgresConfigError(
        "PostgresAskQueue",
        `${holding} queues on one pool of ${max} connections (options.max) hold ${holding} of them for LISTEN, ` +
          "leaving none for their statements, which wait until a queue closes; give the pool more connections than queues",
      );
      queueMicrotask(() => this.#onError(error));
    }
    this.#listener.start();
    this.#heartbeat = setInterval(() => this.#beat(), Math.max(1, Math.floor(this.#leaseMs / 3)));
    this.#heartbeat.unref();
    this.#rereadTimer = setInterval(() => this.#rereads.add("changes"), this.#rereadMs);
    this.#rereadTimer.unref();
  }

  #park(ask: PendingAsk, options: ResolveOptions): Promise<AskResolution> {
    let signal: unknown;
    let parsed: ReturnType<typeof PendingAskSchema.safeParse>;
    try {
      signal = (options as ResolveOptions | undefined)?.signal;
      parsed = PendingAskSchema.safeParse(ask);
    } catch (error) {
      return Promise.reject(
        new PostgresAskError(
          "POSTGRES_ASK_INVALID",
          undefined,
          `the ask or its options could not be read (${describeError(error)})`,
        ),
      );
    }
    if (!parsed.success) {
      const id = typeof (ask as { id?: unknown } | null)?.id === "string" ? (ask as { id: string }).id : undefined;
      return Promise.reject(
        new PostgresAskError("POSTGRES_ASK_INVALID", id, `not a pending ask: ${zodIssuesLine(parsed.error)}`),
      );
    }
    const pending = parsed.data;
    const unstorable = unstorableText(pending);
    if (unstorable !== undefined) {
      return Promise.reject(new PostgresAskError("POSTGRES_ASK_INVALID", pending.id, unstorable));
    }
    if (!isAbortSignal(signal)) {
      return Promise.reject(
        new PostgresAskError("POSTGRES_ASK_INVALID", pending.id, "options.signal must be an AbortSignal"),
      );
    }
    // A cancel that fired before the park wins: the ask is never written.
    if (signal.aborted) return Promise.reject(parkReason(pending.id, signal));
    if (this.#closing !== undefined) return Promise.resolve({ type: "deny", reason: QUEUE_CLOSED_REASON });
    const id = pending.id.toLowerCase();
    if (this.#parked.has(id)) {
      return Promise.reject(
        new PostgresAskError("POSTGRES_ASK_DUPLICATE", pending.id, "is already parked on this queue"),
      );
    }
    this.#start();
    return new Promise<AskResolution>((resolve, reject) => {
      const entry: Parked = {
        id,
        ask: pending,
        digest: askDigest(pending),
        signal,
        resolve,
        reject,
        onAbort: () => this.#stopWaiting(entry, withdrawReason(pending.id, parkReason(pending.id, signal))),
        workerId: undefined,
        inserted: false,
        seq: undefined,
        insertedAt: Number.POSITIVE_INFINITY,
        readAgain: false,
        ended: undefined,
        leaseLost: false,
      };
      // Listen before registering: if listening throws, the park rejects and nothing is left parked.
      try {
        signal.addEventListener("abort", entry.onAbort, { once: true });
      } catch (error) {
        reject(
          new PostgresAskError("POSTGRES_ASK_INVALID", pending.id, "options.signal cannot be listened to", {
            cause: error,
          }),
        );
        return;
      }
      this.#parked.set(id, entry);
      void this.#insert(entry);
    });
  }

  /** Takes the lease the ask will be written under, then queues the row for the next insert batch. */
  async #insert(entry: Parked): Promise<void> {
    try {
      entry.workerId = await this.#lease.acquire();
    } catch (error) {
      this.#settle(entry, () => entry.reject(error));
      return;
    }
    if (entry.ended !== undefined) return;
    this.#toInsert.set(entry.id, entry);
    this.#inserts.add(entry.id);
  }

  /**
   * Writes the rows of the asks parked since the last batch in one
   * statement: a burst of parks costs one commit, not one each.
   */
  async #writeAsks(ids: string[]): Promise<void> {
    // Closed: every call here is settled, and the pool may be ending.
    if (this.#closing !== undefined) return;
    const entries = ids.flatMap((id) => {
      const entry = this.#toInsert.get(id);
      this.#toInsert.delete(id);
      // An ask whose wait ended before its row was written is never written.
      return entry !== undefined && entry.ended === undefined && entry.workerId !== undefined ? [entry] : [];
    });
    if (entries.length === 0) return;
    for (const entry of entries) this.#writing.add(entry.id);
    const insert = (): Promise<Rows> =>
      this.#db.query(
        "PostgresAskQueue.resolver: parking asks",
        `INSERT INTO ${this.#table} (id, worker_id, ask) SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[])
         RETURNING id::text AS id, seq::text AS seq`,
        [entries.map((e) => e.id), entries.map((e) => e.workerId), entries.map((e) => JSON.stringify(e.ask))],
      );
    let written: Rows;
    try {
      // A pooled connection the server ended (pg_terminate_backend, idle_session_timeout) did not
      // commit the insert, or did so visibly before the error (see sessionEnded): it is sent once more
      // on another. Should that one fail on an id, the first may have landed: it fails as the first
      // did, in doubt, so the rows are written withdrawn.
      written = await insert().catch((first: unknown) => {
        if (!sessionEnded(first)) throw first;
        return insert().catch((second: unknown) => {
          throw isDuplicate(second) ? first : second;
        });
      });
    } catch (error) {
      if (isDuplicate(error) && entries.length > 1) {
        // One id is taken: write them one by one, so only its ask fails.
        await Promise.all(entries.map((entry) => this.#writeAsks(this.#requeue(entry))));
        return;
      }
      for (const entry of entries) this.#insertFailed(entry, error);
      return;
    } finally {
      for (const entry of entries) this.#writing.delete(entry.id);
    }
    const seqs = new Map(written.rows.map((raw) => [String(raw["id"]), String(raw["seq"])]));
    for (const entry of entries) {
      entry.inserted = true;
      entry.seq = seqs.get(entry.id);
      entry.insertedAt = this.#endingReads;
      if (entry.readAgain) this.#endings.add(entry.id);
      if (entry.ended !== undefined && entry.workerId !== undefined && entry.seq !== undefined) {
        this.#queueWithdrawal(entry.id, { workerId: entry.workerId, reason: entry.ended, seq: entry.seq });
      }
    }
  }

  #requeue(entry: Parked): string[] {
    this.#toInsert.set(entry.id, entry);
    return [entry.id];
  }

  #insertFailed(entry: Parked, error: unknown): void {
    const duplicate = isDuplicate(error);
    if (!duplicate && entry.workerId !== undefined && inDoubt(error)) {
      // The insert may commit after all, even after this: make sure its row cannot be answered.
      this.#queueWithdrawal(entry.id, {
        workerId: entry.workerId,
        reason: entry.ended ?? "closed",
        unwritten: entry.ask,
      });
    }
    this.#settle(entry, () =>
      entry.reject(
        duplicate ? new PostgresAskError("POSTGRES_ASK_DUPLICATE", entry.ask.id, "is already in the queue") : error,
      ),
    );
  }

  /** The engine stopped waiting (deadline or cancel): reject now, close the row behind. */
  #stopWaiting(entry: Parked, reason: "expired" | "cancelled" | "closed"): void {
    if (this.#parked.get(entry.id) !== entry) return;
    entry.ended = reason;
    if (entry.inserted && entry.workerId !== undefined && entry.seq !== undefined)
      this.#queueWithdrawal(entry.id, { workerId: entry.workerId, reason, seq: entry.seq });
    this.#settle(entry, () =>
      reason === "closed"
        ? entry.resolve({ type: "deny", reason: QUEUE_CLOSED_REASON })
        : entry.reject(parkReason(entry.ask.id, entry.signal)),
    );
  }

  /** Ends a parked call exactly once. */
  #settle(entry: Parked, settle: () => void): void {
    if (this.#parked.get(entry.id) !== entry) return;
    this.#parked.delete(entry.id);
    entry.ended ??= "closed";
    unlisten(entry.signal, entry.onAbort);
    settle();
  }

  #queueWithdrawal(id: string, withdrawal: Withdrawal): void {
    this.#withdrawals.set(id, withdrawal);
    this.#withdraw.add(id);
  }

  async #writeWithdrawals(ids: string[]): Promise<void> {
    // A newer loopctl migrated the schema: this one writes nothing there (the queue is closing).
    if (this.#db.tooNew) return;
    const batch = ids.flatMap((id) => {
      const w = this.#withdrawals.get(id);
      return w === undefined ? [] : [{ id, w }];
    });
    const unwritten = batch.filter((b) => b.w.unwritten !== undefined);
    const written = batch.filter((b) => b.w.unwritten === undefined);
    await Promise.all([this.#withdrawRows(written), this.#withdrawUnwritten(unwritten)]);
  }

  async #withdrawRows(batch: readonly { id: string; w: Withdrawal }[]): Promise<void> {
    if (batch.length === 0) return;
    // Sent once more on a connection the server ended (see Db.settle): left for the next heartbeat, a row
    // whose call was given up would take an answer meanwhile, its console told true.
    const closed = await this.#db.settle(
      "PostgresAskQueue: closing withdrawn asks",
      // Its rows locked in the order of their ids first (see lockedInOrder): it cannot deadlock with answers.
      // Each closes the row its call wrote (its seq): a later call that took the id again under the same
      // lease, once that row was purged, has a row of its own, which this must leave pending.
      `${lockedInOrder(this.#table)}
       UPDATE ${this.#table} AS a SET state = 'withdrawn', reason = v.reason, ended_at = now()
       FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[]) AS v(id, worker_id, reason, seq), locked AS l
       WHERE a.id = ANY($1::uuid[]) AND a.id = v.id AND a.id = l.id AND a.worker_id = v.worker_id
         AND a.seq = v.seq AND ${PENDING}
       RETURNING a.id::text AS id`,
      [
        batch.map((b) => b.id),
        batch.map((b) => b.w.workerId),
        batch.map((b) => b.w.reason),
        batch.map((b) => b.w.seq ?? null),
      ],
    );
    // Written (or the ask already ended some other way): nothing left to retry.
    for (const { id, w } of batch) if (this.#withdrawals.get(id) === w) this.#withdrawals.delete(id);
    const written = new Set(closed.rows.map((raw) => String(raw["id"])));
    const abandoned = batch.filter((b) => b.w.reason === "abandoned" && !written.has(b.id));
    if (abandoned.length > 0) await this.#answeredUnheard(abandoned);
  }

  /**
   * Says which of the calls denied for a lost lease had an answer land on their row first, while
   * the lease still held on the database and the worker could not hear it: its console was told
   * the answer landed, but the call did not run.
   */
  async #answeredUnheard(batch: readonly { id: string; w: Withdrawal }[]): Promise<void> {
    // A read: sent once more on another connection when the first was lost (one the server ended, say).
    const found = await this.#db.read(
      "PostgresAskQueue: reading the answers of calls denied for a lost lease",
      `SELECT a.id::text AS id, a.worker_id::text AS worker_id, a.resolution->>'type' AS verdict
       FROM ${this.#table} AS a WHERE a.id = ANY($1::uuid[]) AND a.state = 'answered'`,
      [batch.map((b) => b.id)],
    );
    for (const raw of found.rows) {
      const id = String(raw["id"]);
      const workerId = String(raw["worker_id"]);
      if (!batch.some((b) => b.id === id && b.w.workerId === workerId)) continue;
      this.#onError(
        new PostgresLeaseError(
          workerId,
          `was lost after ask ${id} was answered (${String(raw["verdict"])}) on the database, which this worker ` +
            "did not hear in time: its console was told the answer landed",
        ),
      );
    }
  }

  /**
   * Withdraws the rows of inserts that got no reply, writing each one
   * withdrawn if it is not there yet: an insert still on its way then fails
   * on the id, and one that committed is closed.
   */
  async #withdrawUnwritten(batch: readonly { id: string; w: Withdrawal }[]): Promise<void> {
    if (batch.length === 0) return;
    await this.#db.settle(
      "PostgresAskQueue: closing asks whose insert got no reply",
      `INSERT INTO ${this.#table} AS a (id, worker_id, ask, state, reason, ended_at)
       SELECT v.id, v.worker_id, v.ask, 'withdrawn', v.reason, now()
       FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::text[]) AS v(id, worker_id, ask, reason)
       ORDER BY v.id
       ON CONFLICT (id) DO UPDATE SET state = 'withdrawn', reason = excluded.reason, ended_at = now()
       WHERE a.worker_id = excluded.worker_id AND ${PENDING}`,
      [
        batch.map((b) => b.id),
        batch.map((b) => b.w.workerId),
        batch.map((b) => JSON.stringify(b.w.unwritten)),
        batch.map((b) => b.w.reason),
      ],
    );
    for (const { id, w } of batch) if (this.#withdrawals.get(id) === w) this.#withdrawals.delete(id);
  }

  #notified(payload: string): void {
    if (this.#closing !== undefined) return;
    const space = payload.indexOf(" ");
    const kind = payload.slice(0, space);
    const id = payload.slice(space + 1);
    if (!UUID.test(id)) return;
    if (kind === "new") {
      if (this.#links.size > 0) this.#arrivals.add(id.toLowerCase());
    } else if (kind === "end") {
      const key = id.toLowerCase();
      // Being answered here: the answer's reply tells how it ended, or the read follows it.
      const answering = this.#answering.get(key);
      if (answering !== undefined) answering.heard = true;
      else this.#heardEnding(key);
    }
  }

  /** `id` ended, a notification says (or said while this process answered it): read its row, if anyone here waits on it. */
  #heardEnding(id: string): void {
    if (this.#closing !== undefined) return;
    // A parked ask may be answered before its insert's reply arrives here: read it whatever the flag says.
    // Parked here, it has not ended for this call, though an earlier ask with its id did (purged since).
    // Only the inboxes know an ask that ended here already (this process answered it): nothing more to learn.
    if (this.#parked.has(id) || (this.#links.size > 0 && !this.#recent.has(id))) this.#endings.add(id);
  }

  /**
   * Lands one answer of this process's inboxes. A notification that `id`
   * ended, heard while the answer is in flight, is read only once the answer
   * is known not to have ended the ask (another answer or a withdrawal won,
   * or the statement failed): when it did, its returned row was the news.
   */
  async #answer(id: string, resolution: AskResolution, ask: string | undefined): Promise<boolean> {
    const answering = this.#answering.get(id) ?? { inFlight: 0, heard: false };
    answering.inFlight += 1;
    this.#answering.set(id, answering);
    try {
      return await this.#answers.land(id, resolution, ask);
    } finally {
      answering.inFlight -= 1;
      if (answering.inFlight === 0) {
        this.#answering.delete(id);
        if (answering.heard) this.#heardEnding(id);
      }
    }
  }

  /**
   * Reads the rows of `ids` and settles what ended: parked calls, inboxes'
   * buffers and `ended()` waiters. A row that cannot be read rejects the
   * calls that wait on it; it never becomes an answer.
   */
  async #readEndings(ids: string[]): Promise<void> {
    if (this.#closing !== undefined) return;
    const read = ++this.#endingReads;
    let found: Rows;
    try {
      // Over the connection that brought the notification: no wait for one from the pool.
      found = await this.#onListener(
        "PostgresAskQueue: reading endings",
        `SELECT ${ENDING_COLUMNS} FROM ${this.#table} AS a WHERE a.id = ANY($1::uuid[])`,
        [ids],
      );
    } catch (error) {
      // Cut short by close(), which settled everything this read could have.
      if (this.#closing !== undefined) return;
      throw error;
    }
    const seen = new Set<string>();
    for (const raw of found.rows) {
      seen.add(String(raw["id"]));
      this.#ended(raw, read);
    }
    for (const id of ids) {
      if (seen.has(id)) continue;
      const parked = this.#parked.get(id);
      // A read that began before the insert came back may not see the row yet; only a later one proves it gone.
      // It tells the inboxes nothing either: one may have been handed the row since, read by a later read.
      if (parked !== undefined && parked.insertedAt >= read) continue;
      if (parked !== undefined) {
        this.#settle(parked, () =>
          parked.reject(new PostgresRowError(`${this.#names.name}.asks`, id, "the row of this parked ask is gone")),
        );
      }
      // Not remembered as ended: a row not written yet (its insert in flight) is missing too.
      for (const link of this.#links) link.end(id, { type: "withdrawn", reason: "unknown" });
    }
  }

  /**
   * One statement over the listening connection, or over the pool while
   * there is none. With no reply within `leaseMs` the connection is taken for
   * dead (a network that swallows packets answers nothing and closes
   * nothing): it is dropped and made anew, and `LISTEN` in place again
   * re-reads everything, this read included. The lease's statements have
   * the same rule; this one covers a console, which holds no lease.
   */
  async #onListener(operation: string, sql: string, values: unknown[]): Promise<Rows> {
    const client = this.#listener.connection;
    // Reads all: sent once more on another connection when the first was lost (one the server ended, say).
    if (client === undefined) return this.#db.read(operation, sql, values);
    return replyWithin(this.#db.queryOn(client, operation, sql, values), this.#leaseMs, () => {
      const error = new Error(
        `no reply within ${this.#leaseMs} ms on the connection listening on ${this.#names.channel}`,
      );
      this.#listener.drop(client, error);
      return this.#db.failure(operation, error);
    });
  }

  /**
   * Settles what a row of the asks table says ended (`ENDING_COLUMNS`),
   * read back or returned by the answer that ended it: the call parked on its
   * row here, and every inbox of this process.
   */
  #ended(raw: Record<string, unknown>, read: number): void {
    const id = String(raw["id"]);
    let row: RowEnding;
    try {
      row = parseEndRow(`${this.#names.name}.asks`, raw);
    } catch (error) {
      this.#failRow(id, raw["worker_id"], read, error);
      for (const link of this.#links) link.fail(id, error as PostgresRowError);
      return;
    }
    if (row.type === "pending") return;
    const parked = this.#holder(id, raw["worker_id"], read);
    const changed = parked !== undefined && row.type === "answered" ? this.#askChanged(parked, raw) : undefined;
    if (parked !== undefined && changed !== undefined) {
      // The answer was made for what the row shows, not for the call parked here: it is never the call's.
      this.#settle(parked, () => parked.reject(changed));
      this.#onError(changed);
    } else if (parked !== undefined) {
      this.#settle(parked, () =>
        row.type === "answered"
          ? parked.resolve(row.resolution)
          : parked.resolve({
              type: "deny",
              // Closed with its lost lease, by the renewal that found it lapsed or by a reaper.
              reason: parked.leaseLost && row.reason === "abandoned" ? LEASE_LOST_REASON : WITHDRAWN_TEXT[row.reason],
            }),
      );
    }
    this.#dispatch(id, askEnding(row));
  }

  /**
   * Why the answered row `raw` (its `answered_ask`, see {@link ENDING_COLUMNS}) no longer holds the
   * ask `parked` wrote there, if it does not: changed by hand, its console approved what it showed,
   * not the call parked here.
   */
  #askChanged(parked: Parked, raw: Record<string, unknown>): PostgresRowError | undefined {
    const table = `${this.#names.name}.asks`;
    const answer = `its answer (${String((raw["resolution"] as { type?: unknown } | null)?.type)}) is not the call's`;
    let held: PendingAsk;
    try {
      held = parseAskRow(table, { id: raw["id"], ask: raw["answered_ask"] });
    } catch (error) {
      return new PostgresRowError(
        table,
        parked.id,
        `its ask was changed after it was written into one that is not a pending ask (see cause), not the ask its call parked; ${answer}`,
        { cause: error },
      );
    }
    const digest = askDigest(held);
    if (digest === parked.digest) return undefined;
    return new PostgresRowError(
      table,
      parked.id,
      `its ask was changed after it was written (tool ${shownText(held.tool)}, askDigest ${digest}), ` +
        `not the ask its call parked (tool ${shownText(parked.ask.tool)}, askDigest ${parked.digest}); ${answer}`,
    );
  }

  #failRow(id: string, workerId: unknown, read: number, error: unknown): void {
    const parked = this.#holder(id, workerId, read);
    if (parked !== undefined) this.#settle(parked, () => parked.reject(error));
  }

  /**
   * The call parked here whose row a read (begun as the `read`th) brought
   * back as `id` of `workerId`: only the row this worker wrote (another
   * worker's row with the same id is never its answer), and only one written
   * before that read began. A read begun earlier may hold an earlier ask's
   * row with this id (purged since), never the answer of the call that took
   * the id again, or this call's, answered before its insert's reply came:
   * its row is read again once the insert is known written. Another worker's
   * row read after that means the call's own row is gone (or was moved by
   * hand): nothing will ever end it, so it is rejected.
   */
  #holder(id: string, workerId: unknown, read: number): Parked | undefined {
    const parked = this.#parked.get(id);
    if (parked === undefined || parked.workerId === undefined) return undefined;
    if (parked.workerId !== workerId) {
      if (parked.insertedAt < read) this.#rowNotItsOwn(parked, workerId);
      return undefined;
    }
    if (parked.insertedAt < read) return parked;
    if (parked.inserted) this.#endings.add(id);
    else parked.readAgain = true;
    return undefined;
  }

  /** Rejects `parked`, whose row is gone (`workerId` null) or now names another worker: no answer of it can reach the call. */
  #rowNotItsOwn(parked: Parked, workerId: unknown): void {
    const problem =
      typeof workerId === "string"
        ? `the row of this parked ask names another worker (${workerId}), not the lease it was parked under (${String(parked.workerId)})`
        : "the row of this parked ask is gone";
    this.#settle(parked, () => parked.reject(new PostgresRowError(`${this.#names.name}.asks`, parked.id, problem)));
  }

  /** Tells every inbox of this process that `id` ended. */
  #dispatch(id: string, ending: AskEnding): void {
    // Deleted first so the map stays in time order, which the pruning relies on.
    this.#recent.delete(id);
    this.#recent.set(id, { at: performance.now(), reads: this.#pendingReads });
    for (const link of this.#links) link.end(id, ending);
  }

  /**
   * Reads pending rows (`"*"`: all of them) and offers them to every inbox;
   * a read of all of them then tells each inbox attached before it began
   * that it has read everything pending.
   */
  async #readPending(ids: string[]): Promise<void> {
    if (this.#closing !== undefined) return;
    if (this.#links.size === 0) return;
    const all = ids.includes("*");
    // Taken before the statement is sent: its snapshot holds every row pending when these attached.
    const attached = all ? [...this.#links] : [];
    const read = ++this.#pendingReads;
    // A read: sent once more on another connection when the first was lost (one the server ended, say).
    const found = await this.#db.read(
      "PostgresAskQueue: reading pending asks",
      all
        ? `SELECT id::text AS id, ask FROM ${this.#table} WHERE state = 'pending' ORDER BY seq`
        : `SELECT a.id::text AS id, a.ask FROM ${this.#table} AS a WHERE a.id = ANY($1::uuid[]) AND ${PENDING} ORDER BY a.seq`,
      all ? [] : [ids],
    );
    this.#offer(found.rows.map((raw) => this.#offered(raw, read)));
    for (const link of attached) if (this.#links.has(link)) link.readAll();
  }

  /** The pending row `raw`, found by the `read`th read of pending rows, as offered to the inboxes. */
  #offered(raw: Record<string, unknown>, read: number): Offered {
    const id = String(raw["id"]);
    try {
      return { id, read, ask: parseAskRow(`${this.#names.name}.asks`, raw) };
    } catch (error) {
      return { id, read, error: error as PostgresRowError };
    }
  }

  #offer(offered: readonly Offered[]): void {
    if (offered.length === 0) return;
    for (const link of this.#links) link.offer(offered);
  }

  /**
   * `LISTEN` took hold (again): whatever a missed notification could have
   * hidden is read again, in full: how every watched ask ended, and every
   * pending ask for the inboxes.
   */
  #resync(): void {
    if (this.#closing !== undefined) return;
    this.#listens += 1;
    this.#mark = undefined;
    this.#rereads.add("changes");
  }

  /**
   * The safety net under `LISTEN/NOTIFY`, every `rereadMs` and when `LISTEN`
   * (re)connects. The first time (and after a reconnect) it reads everything
   * watched; after that only the rows a transaction changed that the
   * previous re-read could not see ({@link PostgresAskQueue.#mark}), so a
   * queue where nothing happened reads no row, however many asks wait. A
   * re-read that fails sets no mark: the next one reads from the same point.
   */
  async #reread(): Promise<void> {
    if (this.#closing !== undefined) return;
    const old = performance.now() - Math.max(RECENT_MS, 3 * this.#rereadMs);
    for (const [id, { at }] of this.#recent) {
      if (at >= old) break;
      this.#recent.delete(id);
    }
    const lease = this.#lease.id;
    const consoles = this.#links.size > 0;
    if (!consoles && lease === undefined && this.#parked.size === 0) {
      this.#mark = undefined;
      return;
    }
    const listens = this.#listens;
    const since = this.#mark;
    // Taken before the rows are read: anything the reads below miss was written by a transaction at or above it.
    const marked = await this.#onListener(
      "PostgresAskQueue: re-reading asks",
      "SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS mark",
      [],
    );
    const mark = marked.rows[0]?.["mark"];
    if (since === undefined) {
      const watched = new Set(this.#parked.keys());
      for (const link of this.#links) for (const id of link.watched()) watched.add(id);
      await Promise.all([
        watched.size > 0 ? this.#readEndings([...watched]) : undefined,
        consoles ? this.#readPending(["*"]) : undefined,
      ]);
    } else {
      await Promise.all([this.#readChanges(since, lease, consoles), this.#readGone()]);
    }
    if (this.#listens === listens && this.#closing === undefined && typeof mark === "string") this.#mark = mark;
  }

  /**
   * Reads the rows changed since `since` (an `xmin`, see
   * {@link PostgresAskQueue.#mark}): every inbox's (or, with none, only this
   * worker's). Endings settle what waits on them, pending asks are offered to
   * the inboxes, and a pending row of this worker that no call here waits on
   * any more (its insert committed after it was given up) is withdrawn.
   */
  async #readChanges(since: string, lease: string | undefined, consoles: boolean): Promise<void> {
    const read = ++this.#endingReads;
    const pendingRead = ++this.#pendingReads;
    const found = await this.#onListener(
      "PostgresAskQueue: reading changed asks",
      consoles
        ? `SELECT ${ENDING_COLUMNS}, a.seq::text AS seq, CASE WHEN ${PENDING} THEN a.ask END AS ask FROM ${this.#table} AS a
           WHERE a.changed_xid >= $1::xid8 ORDER BY a.seq`
        : `SELECT ${ENDING_COLUMNS}, a.seq::text AS seq FROM ${this.#table} AS a
           WHERE a.changed_xid >= $1::xid8 AND a.worker_id = $2::uuid`,
      consoles ? [since] : [since, lease],
    );
    const offered: Offered[] = [];
    for (const raw of found.rows) {
      if (raw["state"] !== "pending") {
        this.#ended(raw, read);
        continue;
      }
      const id = String(raw["id"]);
      if (lease !== undefined && raw["worker_id"] === lease && this.#stray(id)) {
        this.#queueWithdrawal(id, { workerId: lease, reason: "closed", seq: String(raw["seq"]) });
        continue;
      }
      if (consoles) offered.push(this.#offered(raw, pendingRead));
    }
    this.#offer(offered);
  }

  /**
   * Finds the parked calls whose row is gone (deleted by hand, say), which no
   * change can show: a deleted row has no `changed_xid`; and those whose row
   * now names another worker (moved by hand, or this one's row purged and its
   * id parked again elsewhere), which the changes of this worker's lease do
   * not show. The reply names only those rows, so a queue whose rows are all
   * there reads none; the lookups are one per call parked here, the work this
   * process holds.
   */
  async #readGone(): Promise<void> {
    const read = ++this.#endingReads;
    const asked = new Map([...this.#parked].filter(([, p]) => p.insertedAt < read && p.workerId !== undefined));
    if (asked.size === 0) return;
    const found = await this.#onListener(
      "PostgresAskQueue: reading parked asks' rows",
      `SELECT p.id::text AS id, a.worker_id::text AS worker_id FROM unnest($1::uuid[], $2::uuid[]) AS p(id, worker_id)
       LEFT JOIN ${this.#table} AS a ON a.id = p.id
       WHERE a.id IS NULL OR a.worker_id <> p.worker_id`,
      [[...asked.keys()], [...asked.values()].map((p) => p.workerId)],
    );
    for (const raw of found.rows) {
      const id = String(raw["id"]);
      const parked = asked.get(id);
      // Still the call this read asked about: one that took its id since may have no row yet.
      if (parked === undefined || this.#parked.get(id) !== parked) continue;
      this.#rowNotItsOwn(parked, raw["worker_id"]);
    }
  }

  /** A pending row of this worker's lease that no call here waits on, nor will. */
  #stray(id: string): boolean {
    return !this.#parked.has(id) && !this.#writing.has(id) && !this.#withdrawals.has(id);
  }

  /**
   * The heartbeat: renew the lease, then retry withdrawals, close the asks of
   * lapsed leases and purge old rows. A renewal still in flight is joined, not
   * sent again (it settles by the time the lease would run out), and a round
   * of chores still running skips this one: a database that stops answering
   * never gathers a pile of statements. Losing the lease when it runs out is
   * the lease's own timer's work, not the heartbeat's.
   */
  #beat(): void {
    if (this.#closing !== undefined || this.#closedWithPool()) return;
    const renewed = (this.#renewal ??= this.#lease
      .renew()
      .catch((error: unknown) => {
        // Cut short by close(), which gives the lease up anyway.
        if (this.#closing === undefined) this.#onError(error);
      })
      .finally(() => {
        this.#renewal = undefined;
      }));
    this.#chores ??= (async () => {
      await renewed;
      if (this.#closing !== undefined) return;
      for (const id of this.#withdrawals.keys()) this.#withdraw.add(id);
      await reap(this.#db, this.#keepEndedMs).catch((error: unknown) => {
        this.#onError(error);
        // The reaper's transaction reads the schema's version first: a newer loopctl migrated it under this queue.
        if (this.#db.tooNew) void this.close();
      });
    })().finally(() => {
      this.#chores = undefined;
    });
    this.#beating = Promise.all([renewed, this.#chores]).then(() => undefined);
  }

  /**
   * The pool was ended under the open queue (`pool.end()` before
   * `close()`): no statement can run again, and `pool.end()` waits for the
   * connection the queue holds for `LISTEN`. The queue closes itself, once,
   * and says so: its parked calls are denied, its inboxes end, and that
   * connection goes back, so `pool.end()` finishes.
   */
  #closedWithPool(): boolean {
    if (!poolEnding(this.#pool)) return false;
    this.#onError(
      new PostgresConfigError(
        "PostgresAskQueue",
        "its pool was ended while the queue was open; the queue closed itself (close queues before ending their pool)",
      ),
    );
    void this.close();
    return true;
  }

  /**
   * Reads the rows of `entries` (calls parked here) and settles each whose row ended as the row
   * says: an answer that landed is the call's. A row still pending, or gone, leaves its call parked.
   */
  async #settleByRows(operation: string, entries: readonly Parked[]): Promise<void> {
    if (entries.length === 0) return;
    const read = ++this.#endingReads;
    const found = await this.#db.read(
      operation,
      `SELECT ${ENDING_COLUMNS} FROM ${this.#table} AS a WHERE a.id = ANY($1::uuid[])`,
      [entries.map((e) => e.id)],
    );
    for (const raw of found.rows) this.#ended(raw, read);
  }

  /**
   * The lease `workerId` is lost, and surely lapsed on the database: no answer can land on its
   * asks any more. Those answered while it held (the worker stalled, say, and heard nothing) are
   * the calls' own, read first; the other calls (their rows withdrawn as abandoned, still pending,
   * or not read within `leaseMs`) are denied ({@link LEASE_LOST_REASON}) and their rows closed as abandoned.
   */
  async #leaseLost(workerId: string, why: LeaseLoss): Promise<void> {
    if (this.#closing !== undefined) {
      // Run out while close() waited for its statements: no answer can land now, and close() gives the lease up.
      for (const entry of [...this.#parked.values()])
        if (entry.workerId === workerId) this.#stopWaiting(entry, "closed");
      return;
    }
    this.#onError(
      new PostgresLeaseError(
        workerId,
        why === "lapsed" ? "lapsed and its asks were closed" : "could not be renewed in time",
      ),
    );
    for (const entry of this.#parked.values()) if (entry.workerId === workerId) entry.leaseLost = true;
    const held = (): Parked[] =>
      [...this.#parked.values()].filter((entry) => entry.workerId === workerId && entry.inserted);
    if (!poolEnding(this.#pool) && !this.#db.tooNew) {
      const operation = "PostgresAskQueue: reading the endings of a lost lease's asks";
      try {
        // Bounded: a pool whose every connection hangs must not keep the calls parked (fail closed).
        await replyWithin(this.#settleByRows(operation, held()), this.#leaseMs, () =>
          this.#db.failure(operation, new Error(`no reply within ${this.#leaseMs} ms`)),
        );
      } catch (error) {
        this.#onError(error);
      }
    }
    // Closed meanwhile: close() settled every call.
    if (this.#closing !== undefined) return;
    for (const entry of [...this.#parked.values()]) {
      if (entry.workerId !== workerId) continue;
      // Denied here, so closed there too (retried on each heartbeat): no answer may land on it and say true.
      if (entry.inserted && entry.seq !== undefined)
        this.#queueWithdrawal(entry.id, { workerId, reason: "abandoned", seq: entry.seq });
      entry.ended = "abandoned";
      this.#settle(entry, () => entry.resolve({ type: "deny", reason: LEASE_LOST_REASON }));
    }
  }

  /**
   * Closes the rows of the calls parked at `close()` and settles each call
   * as its row ended: denied ({@link QUEUE_CLOSED_REASON}) when this closed
   * it, else as the row says (an answer that landed first is the call's, so
   * a console is never told `true` for a call that was denied). A call still
   * parked when that cannot be learnt (the database failed) is denied once
   * its lease has surely lapsed on the database: from then on no answer can land.
   */
  async #closeRows(entries: readonly Parked[]): Promise<void> {
    const parked = (): Parked[] => entries.filter((entry) => this.#parked.get(entry.id) === entry);
    try {
      if (entries.length > 0 && !poolEnding(this.#pool) && !this.#db.tooNew) {
        // Sent once more on a connection the server ended (see Db.settle): left failed, the rows would stay
        // answerable until the lease lapsed, and an answer landing meanwhile be told true for a call denied
        // all the same. A row the first statement closed after all is read below, and says so.
        const closed = await this.#db.settle(
          "PostgresAskQueue.close: closing parked asks",
          // Its rows locked in the order of their ids first (see lockedInOrder): it cannot deadlock with answers.
          `${lockedInOrder(this.#table)}
           UPDATE ${this.#table} AS a SET state = 'withdrawn', reason = 'closed', ended_at = now()
           FROM unnest($1::uuid[], $2::uuid[]) AS v(id, worker_id), locked AS l
           WHERE a.id = ANY($1::uuid[]) AND a.id = v.id AND a.id = l.id AND a.worker_id = v.worker_id AND ${PENDING}
           RETURNING a.id::text AS id`,
          [entries.map((e) => e.id), entries.map((e) => e.workerId)],
        );
        const ids = new Set(closed.rows.map((raw) => String(raw["id"])));
        for (const entry of parked()) {
          if (ids.has(entry.id))
            this.#settle(entry, () => entry.resolve({ type: "deny", reason: QUEUE_CLOSED_REASON }));
        }
        // The others ended before this could close them: their rows say how.
        await this.#settleByRows("PostgresAskQueue.close: reading endings", parked());
      }
    } catch (error) {
      this.#onError(error);
    }
    // What became of these rows is unknown (the database failed, or was not asked): an answer may
    // land on them while their lease holds there, so they are denied once it has surely lapsed.
    const unknown = parked();
    if (unknown.length > 0) {
      const lapsesBy = Math.max(...unknown.map((entry) => this.#lease.lapsesBy(entry.workerId)));
      while (performance.now() < lapsesBy && parked().length > 0) {
        await new Promise((done) => setTimeout(done, Math.ceil(lapsesBy - performance.now())));
      }
    }
    for (const entry of parked()) this.#stopWaiting(entry, "closed");
  }

  async #shutDown(): Promise<void> {
    clearInterval(this.#heartbeat);
    clearInterval(this.#rereadTimer);
    for (const link of [...this.#links]) link.close();
    this.#links.clear();
    // A call whose row is written is settled by the row, below: an answer may be landing on it now,
    // and the database says which came first. So is one whose row is being written: the row may be in
    // the table already, where a console can answer it before this hears of it. The others are denied
    // now (their rows are never written).
    const written: Parked[] = [];
    const writing: Parked[] = [];
    for (const entry of [...this.#parked.values()]) {
      if (entry.inserted && entry.workerId !== undefined) written.push(entry);
      else if (this.#writing.has(entry.id)) writing.push(entry);
      else this.#stopWaiting(entry, "closed");
    }
    // The LISTEN connection goes first: on a pool it leaves short, the statements awaited below may be
    // waiting for it. What ran on it (an endings read, a lease statement) is cut short, and moot:
    // the calls it served are settled below, and the inboxes are closed.
    this.#listener.close();
    if (this.#started) {
      listeners.set(this.#pool, (listeners.get(this.#pool) ?? 1) - 1);
      if (writing.length > 0) {
        // Their inserts' replies first: a row that went in joins the written ones (one that failed
        // settled its call, and one whose reply is lost had its row queued to be closed).
        await this.#inserts.idle();
        for (const entry of writing) if (entry.inserted && this.#parked.get(entry.id) === entry) written.push(entry);
      }
      await this.#closeRows(written);
      // What is in flight finishes first (nothing new starts once closing): no statement of this
      // queue runs after close() resolves, and an insert that lands now still has its row closed.
      await Promise.all([
        this.#beating,
        this.#inserts.idle(),
        this.#endings.idle(),
        this.#arrivals.idle(),
        this.#rereads.idle(),
        this.#answers.idle(),
      ]);
      await this.#withdraw.idle();
      // Nothing more can be written through an ended pool, nor into a schema a newer loopctl migrated:
      // rows left pending are closed as abandoned once the lease lapses.
      if (poolEnding(this.#pool) || this.#db.tooNew) return;
      try {
        await this.#writeWithdrawals([...this.#withdrawals.keys()]);
      } catch (error) {
        this.#onError(error);
      }
      // With the lease gone, anything still pending of this worker is closed as abandoned with it.
      await this.#lease.release().catch(this.#onError);
    }
  }
}
