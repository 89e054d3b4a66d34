import { AskResolutionSchema, InvalidAskResolutionError } from "../ask/index.js";
import { unlisten } from "../abort-signal.js";
import { askDigest } from "../ask/ask-digest.js";
import { answerDigest, listenWhileWaiting, waitReason, waitSignal } from "../ask/wait-options.js";
import { takeIterator } from "../ask/take-iterator.js";
import type { AnswerOptions, AskResolution, PendingAsk } from "../ask/index.js";
import { PENDING } from "./answers.js";
import { UUID, askEnding, parseAskRow, parseEndRow } from "./ask-rows.js";
import type { AskEnding, AskInbox } from "../ask/index.js";
import type { Db, Rows } from "./db.js";
import { unstorableText } from "./jsonb.js";
import type { PostgresRowError } from "./errors.js";
import { zodIssuesLine } from "../zod-issues.js";

/**
 * A pending row as offered to an inbox: the ask, or why its row could not be read; `read` numbers
 * the read that found it, in the order reads of pending rows began (see {@link InboxHost.endedRecently}).
 */
export type Offered = { readonly id: string; readonly read: number } & (
  { readonly ask: PendingAsk } | { readonly error: PostgresRowError }
);

/** What an inbox is told by its queue. */
export interface InboxLink {
  /** Pending rows this process read (the inbox skips the ones it already has). */
  offer(rows: readonly Offered[]): void;
  /** An ask ended. */
  end(id: string, ending: AskEnding): void;
  /** An ask's row says it is no longer pending, but not how it ended in a form that can be read. */
  fail(id: string, error: PostgresRowError): void;
  /** Ids whose ending this inbox waits for (buffered and delivered asks, and `ended()` calls). */
  watched(): Iterable<string>;
  /**
   * A read of every pending row, begun after this link was attached, has
   * been offered: the asks pending when the inbox was made are in its buffer
   * or handed out.
   */
  readAll(): void;
  /** The queue closed. */
  close(): void;
}

/** What an inbox needs from its queue. */
export interface InboxHost {
  readonly db: Db;
  /**
   * True when the ask ended a moment ago, after the `read`th read of pending rows began: that read
   * may still show it pending. A read begun after the ending was heard that shows the id pending
   * found another ask under it (the ended one's row purged, the id parked again).
   */
  endedRecently(id: string, read: number): boolean;
  /** Reads how `id` ended as soon as possible (a notification may have been missed). */
  watch(id: string): void;
  /**
   * Lands an answer (`UPDATE … WHERE state = 'pending'`); true when it ended the ask. Given `ask`,
   * only while the row holds that ask.
   */
  answer(id: string, resolution: AskResolution, ask: string | undefined): Promise<boolean>;
  attach(link: InboxLink): void;
  detach(link: InboxLink): void;
}

interface Taker {
  readonly resolve: (ask: PendingAsk | undefined) => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

interface Waiter {
  readonly resolve: (ending: AskEnding) => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

const CLOSED: AskEnding = Object.freeze({ type: "withdrawn", reason: "closed" });
const UNKNOWN: AskEnding = Object.freeze({ type: "withdrawn", reason: "unknown" });

/**
 * A console's view of a {@link PostgresAskQueue}: every pending ask of every
 * worker, answered by id. Obtain one from `queue.approver()`; any number of
 * them, in any number of processes, see the same asks, and the database lets
 * exactly one answer end each.
 *
 * - `next()` delivers each pending ask once per inbox, oldest first; an ask
 *   that ended (answered anywhere, expired, cancelled, abandoned) is dropped
 *   from what is still to be delivered and never delivered again. A pending
 *   row that cannot be read rejects one `next()` with a
 *   {@link PostgresRowError} naming it; the following call goes on.
 * - `resolve()` is `UPDATE … WHERE state = 'pending'` on a row whose
 *   worker's lease still holds: `true` only when this answer ended the ask.
 *   A late, duplicate, unknown or abandoned ask gives `false`. Given
 *   `options.askDigest`, the row must hold the ask with that digest: a row
 *   of another call under the id (the ended one's row purged, the id parked
 *   again) gives `false`.
 * - `ended()` resolves with how an ask ended, at once when it already has
 *   (or was never parked: `{ withdrawn, "unknown" }`).
 *
 * @example
 * ```ts
 * const inbox = queue.approver();
 * for (let ask = await inbox.next(); ask !== undefined; ask = await inbox.next()) {
 *   const ok = await inbox.resolve(ask.id, { type: "approve", remember: "this_call" });
 *   if (!ok) console.log(`${ask.id} ended before the answer:`, await inbox.ended(ask.id));
 * }
 * ```
 */
export class PostgresApprover implements AskInbox, AsyncIterable<PendingAsk> {
  readonly #host: InboxHost;
  readonly #link: InboxLink;
  /** Pending asks not yet delivered, oldest first. */
  readonly #ready = new Map<string, Offered>();
  /** Asks delivered (an unreadable one as its error) and not known to have ended. */
  readonly #delivered = new Set<string>();
  readonly #takers: Taker[] = [];
  readonly #waiters = new Map<string, Set<Waiter>>();
  /**
   * The asks the first full read left buffered, until `next()` hands them out
   * or they end; undefined until that read is offered.
   */
  #backlog: Set<string> | undefined;
  /** An ask was handed out and `next()` has not been called since: its consumer may not hold it yet. */
  #handedOut = false;
  #caughtUp = false;
  readonly #catchingUp = new Set<{
    resolve: () => void;
    reject: (reason: unknown) => void;
    onAbort: () => void;
    signal: AbortSignal | undefined;
  }>();
  #closed = false;

  /** @internal Use `queue.approver()`. */
  constructor(host: InboxHost) {
    this.#host = host;
    this.#link = {
      offer: (rows) => this.#offer(rows),
      end: (id, ending) => this.#end(id, ending),
      fail: (id, error) => {
        // Not pending any more: never delivered again, and its ended() calls get the row's error.
        this.#ready.delete(id);
        this.#delivered.delete(id);
        this.#fail(id, error);
        this.#checkCaughtUp();
      },
      // Buffered asks too: one that ended while no notification could reach this process is dropped, not delivered.
      watched: () => [...this.#ready.keys(), ...this.#delivered, ...this.#waiters.keys()],
      readAll: () => {
        if (this.#closed || this.#backlog !== undefined) return;
        this.#backlog = new Set(this.#ready.keys());
        this.#checkCaughtUp();
      },
      close: () => this.#shut(),
    };
    host.attach(this.#link);
  }

  /** True once closed (by {@link PostgresApprover.close} or by its queue). */
  get closed(): boolean {
    return this.#closed;
  }

  /** Pending asks read but not yet delivered by `next()`. */
  get buffered(): number {
    return this.#ready.size;
  }

  /**
   * See {@link AskInbox.next}.
   *
   * Rejects (never throws) with an {@link InvalidApproverOptionsError} if
   * `options` is not an object (or holds a key other than `signal`) or
   * `options.signal` is not an `AbortSignal`, or cannot be listened to when the call has to wait (its
   * `addEventListener` throws); nothing then waits and no ask is taken.
   */
  next(options?: { signal?: AbortSignal }): Promise<PendingAsk | undefined> {
    let signal: AbortSignal | undefined;
    try {
      signal = waitSignal("next", options);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.#closed) return Promise.resolve(undefined);
    if (signal?.aborted === true) return Promise.reject(waitReason("next", signal));
    // Called again: the consumer took what was handed out before.
    this.#handedOut = false;
    this.#checkCaughtUp();
    const taken = this.#take();
    if (taken !== undefined) return "error" in taken ? Promise.reject(taken.error) : Promise.resolve(taken.ask);
    return new Promise<PendingAsk | undefined>((resolve, reject) => {
      const taker: Taker = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          const at = this.#takers.indexOf(taker);
          if (at >= 0) this.#takers.splice(at, 1);
          reject(waitReason("next", signal));
        },
      };
      // Listen before joining the line: if listening throws, the call rejects and no taker is left behind.
      try {
        listenWhileWaiting("next", signal, taker.onAbort);
      } catch (error) {
        reject(error);
        return;
      }
      this.#takers.push(taker);
    });
  }

  /**
   * See {@link AskInbox.caughtUp}: resolves once a read of every pending row,
   * begun after this inbox was made, has come back and `next()` has handed
   * out each ask it found still pending, and has been called again since.
   * Until `LISTEN` is in place and that read succeeds (it is tried again
   * every `rereadMs`), it waits. Resolves at once once closed.
   *
   * Rejects with the signal's reason if it aborts first; with an
   * {@link InvalidApproverOptionsError} if `options` is not an object (or
   * holds a key other than `signal`) or `options.signal` is not an
   * `AbortSignal`, or cannot be listened to when the call has to wait.
   */
  caughtUp(options?: { signal?: AbortSignal }): Promise<void> {
    let signal: AbortSignal | undefined;
    try {
      signal = waitSignal("caughtUp", options);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.#closed || this.#caughtUp) return Promise.resolve();
    if (signal?.aborted === true) return Promise.reject(waitReason("caughtUp", signal));
    return new Promise<void>((resolve, reject) => {
      const wait = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.#catchingUp.delete(wait);
          reject(waitReason("caughtUp", signal));
        },
      };
      try {
        listenWhileWaiting("caughtUp", signal, wait.onAbort);
      } catch (error) {
        reject(error);
        return;
      }
      this.#catchingUp.add(wait);
    });
  }

  /**
   * See {@link AskInbox.resolve}. Resolves `false` once the inbox is closed
   * (by itself or by its queue), also when it closes while an answer given
   * with `options.askDigest` still reads the row: that answer is never sent.
   * Given `options.askDigest`, also `false` when the pending row under
   * `askId` holds another ask (or one that cannot be read).
   *
   * @throws {InvalidAskResolutionError} (as a rejection) when `resolution` is
   *   not an {@link AskResolution}, or its `reason` holds text PostgreSQL's
   *   `jsonb` cannot store (U+0000, a lone surrogate); nothing is written.
   * @throws {InvalidApproverOptionsError} (as a rejection) when `options` is
   *   not an object (or holds a key other than `askDigest`) or
   *   `options.askDigest` is not 64 lowercase hex digits.
   * @throws {PostgresQueryError} (as a rejection) when the database cannot be
   *   reached: the answer may not have landed, so check `ended()`. An answer
   *   whose connection the server was ending (`57P01`, `57P02`, `57P03`,
   *   `57P05`) is sent once more on another first, and rejects only when the
   *   ask was answered exactly so, by it or by another console's identical
   *   answer.
   */
  async resolve(askId: string, resolution: AskResolution, options?: AnswerOptions): Promise<boolean> {
    const answer = parseAnswer(askId, resolution);
    const madeFor = answerDigest(options);
    if (this.#closed || typeof askId !== "string" || !UUID.test(askId)) return false;
    const id = askId.toLowerCase();
    if (madeFor === undefined) return this.#host.answer(id, answer, undefined);
    const pending = await this.#pendingAsk(id);
    // Closed while the row was read: close() has resolved, and no answer of this inbox lands after it.
    if (this.#closed || pending === undefined || askDigest(pending.ask) !== madeFor) return false;
    // The row must still hold this ask when the answer lands: read and write are two statements.
    return this.#host.answer(id, answer, pending.stored);
  }

  /**
   * See {@link AskInbox.ended}. Rejects with the signal's reason if it aborts first.
   *
   * Rejects with an {@link InvalidApproverOptionsError} if `options` is not an
   * object or `options.signal` is not an `AbortSignal`, or cannot be listened
   * to when the call has to wait (its `addEventListener` throws); nothing
   * then waits.
   *
   * Rejects with a `PostgresQueryError` when its read of the row
   * fails (sent again once after a lost connection); that call alone: the
   * other `ended()` calls on the ask wait on.
   */
  async ended(askId: string, options?: { signal?: AbortSignal }): Promise<AskEnding> {
    const signal = waitSignal("ended", options);
    if (this.#closed) return CLOSED;
    if (signal?.aborted === true) throw waitReason("ended", signal);
    if (typeof askId !== "string" || !UUID.test(askId)) return UNKNOWN;
    const id = askId.toLowerCase();
    // Waiting before reading: an ending that lands while the row is read still reaches the waiter.
    let settle: Pick<Waiter, "resolve" | "reject"> | undefined;
    const ending = new Promise<AskEnding>((resolve, reject) => (settle = { resolve, reject }));
    // Another read may settle it while this call's own read is still out: that early rejection is
    // the caller's once `ending` is returned, not one nobody handled.
    ending.catch(() => undefined);
    const { resolve, reject } = settle!;
    const waiter: Waiter = {
      resolve,
      reject,
      signal,
      onAbort: () => {
        this.#unwait(id, waiter);
        reject(waitReason("ended", signal));
      },
    };
    // Listen before registering: if listening throws, the call rejects and no waiter is left behind.
    listenWhileWaiting("ended", signal, waiter.onAbort);
    let set = this.#waiters.get(id);
    if (set === undefined) this.#waiters.set(id, (set = new Set()));
    set.add(waiter);
    const names = this.#host.db.names;
    let found: Rows;
    try {
      found = await this.#host.db.read(
        "PostgresApprover.ended",
        `SELECT id::text AS id, state, resolution, reason FROM ${names.table("asks")} WHERE id = $1`,
        [id],
        signal,
      );
    } catch (error) {
      // This call's read failed (or its own signal cut it short, and its waiter has rejected already):
      // it alone rejects. The others on this id wait on: their own reads found the ask pending.
      if (!signal?.aborted) {
        this.#unwait(id, waiter);
        unlisten(signal, waiter.onAbort);
        reject(error);
      }
      return ending;
    }
    const raw = found.rows[0];
    try {
      if (raw === undefined) this.#end(id, UNKNOWN);
      else {
        const row = parseEndRow(`${names.name}.asks`, raw);
        if (row.type === "pending") this.#host.watch(id);
        else this.#end(id, askEnding(row));
      }
    } catch (error) {
      // The row cannot be read: every call waiting on it hears so.
      this.#fail(id, error);
    }
    return ending;
  }

  /**
   * Stops this inbox: a waiting `next()` resolves `undefined`, a waiting
   * `ended()` resolves `{ type: "withdrawn", reason: "closed" }`. The asks
   * stay pending for other consoles. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    this.#host.detach(this.#link);
    this.#shut();
  }

  /**
   * The ask of the pending row `id`, and the row's `jsonb` as its text (what the answer's
   * statement compares, so that fields a parse drops or numbers it rounds still match);
   * undefined when there is none or it cannot be read.
   */
  async #pendingAsk(id: string): Promise<{ ask: PendingAsk; stored: string } | undefined> {
    const names = this.#host.db.names;
    // A read, sent again after a lost connection as ended()'s is: a pooled connection the server ended
    // while idle (idle_session_timeout, pg_terminate_backend) must not fail the answer it precedes.
    const found = await this.#host.db.read(
      "PostgresApprover.resolve",
      `SELECT a.id::text AS id, a.ask, a.ask::text AS stored FROM ${names.table("asks")} AS a
       WHERE a.id = $1 AND ${PENDING}`,
      [id],
    );
    const raw = found.rows[0];
    if (raw === undefined || typeof raw["stored"] !== "string") return undefined;
    try {
      return { ask: parseAskRow(`${names.name}.asks`, raw), stored: raw["stored"] };
    } catch {
      // Unreadable, it is no ask anyone was shown: the answer is refused, as one for another ask.
      return undefined;
    }
  }

  /**
   * Yields asks as {@link PostgresApprover.next} delivers them, until the
   * inbox closes. Stopping the iterator (`return()`, as `break` does, or
   * `throw()`) ends it at once, even while it waits for an ask, and takes no
   * ask: the next `next()` gets it.
   */
  [Symbol.asyncIterator](): AsyncGenerator<PendingAsk, void, undefined> {
    return takeIterator((signal) => this.next({ signal }));
  }

  #take(): Offered | undefined {
    for (const [id, offered] of this.#ready) {
      this.#ready.delete(id);
      if (this.#host.endedRecently(id, offered.read)) continue;
      // An unreadable row too: its error is delivered once, not again at every re-read that finds it pending.
      this.#delivered.add(id);
      this.#handedOut = true;
      return offered;
    }
    return undefined;
  }

  #offer(rows: readonly Offered[]): void {
    if (this.#closed) return;
    for (const row of rows) {
      if (this.#ready.has(row.id) || this.#delivered.has(row.id) || this.#host.endedRecently(row.id, row.read))
        continue;
      this.#ready.set(row.id, row);
    }
    while (this.#takers.length > 0 && this.#ready.size > 0) {
      const taker = this.#takers.shift();
      if (taker === undefined) break;
      unlisten(taker.signal, taker.onAbort);
      const taken = this.#take();
      if (taken === undefined) {
        this.#takers.unshift(taker);
        break;
      }
      if ("error" in taken) taker.reject(taken.error);
      else taker.resolve(taken.ask);
    }
  }

  #end(id: string, ending: AskEnding): void {
    this.#ready.delete(id);
    this.#delivered.delete(id);
    this.#settleWaiters(id, (waiter) => waiter.resolve(ending));
    this.#checkCaughtUp();
  }

  /** Settles the `caughtUp()` calls once the first full read's asks are all handed out and taken. */
  #checkCaughtUp(): void {
    const backlog = this.#backlog;
    if (this.#caughtUp || backlog === undefined) return;
    // In the order they were read, which is the order next() hands them out in: those up to the first
    // still buffered are gone (handed out or ended), and each is looked at once, not at every next().
    for (const id of backlog) {
      if (this.#ready.has(id)) break;
      backlog.delete(id);
    }
    if (backlog.size > 0 || this.#handedOut) return;
    this.#caughtUp = true;
    this.#settleCatchingUp();
  }

  #settleCatchingUp(): void {
    for (const wait of this.#catchingUp) {
      unlisten(wait.signal, wait.onAbort);
      wait.resolve();
    }
    this.#catchingUp.clear();
  }

  #fail(id: string, error: unknown): void {
    this.#settleWaiters(id, (waiter) => waiter.reject(error));
  }

  #settleWaiters(id: string, settle: (waiter: Waiter) => void): void {
    const set = this.#waiters.get(id);
    if (set === undefined) return;
    this.#waiters.delete(id);
    for (const waiter of set) {
      unlisten(waiter.signal, waiter.onAbort);
      settle(waiter);
    }
  }

  #unwait(id: string, waiter: Waiter): void {
    const set = this.#waiters.get(id);
    set?.delete(waiter);
    if (set?.size === 0) this.#waiters.delete(id);
  }

  #shut(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#ready.clear();
    this.#delivered.clear();
    for (const taker of this.#takers.splice(0)) {
      unlisten(taker.signal, taker.onAbort);
      taker.resolve(undefined);
    }
    for (const id of [...this.#waiters.keys()]) this.#end(id, CLOSED);
    // Nothing more will be handed out.
    this.#settleCatchingUp();
  }
}

/** Validates an answer and rebuilds it without unknown fields, so only a resolution is ever stored. */
function parseAnswer(askId: string, resolution: unknown): AskResolution {
  let parsed: ReturnType<typeof AskResolutionSchema.safeParse>;
  try {
    parsed = AskResolutionSchema.safeParse(resolution);
  } catch (error) {
    throw new InvalidAskResolutionError(askId, "the resolution could not be read", { cause: error });
  }
  if (!parsed.success) throw new InvalidAskResolutionError(askId, zodIssuesLine(parsed.error), { cause: parsed.error });
  const { type, remember } = parsed.data;
  const keep = remember === undefined ? {} : { remember };
  if (type === "approve") return { type, ...keep };
  const reason = parsed.data.reason;
  const answer: AskResolution = { type, ...(reason === undefined ? {} : { reason }), ...keep };
  // Refused here, alone: in the answers' batched statement it would fail every answer given with it.
  const unstorable = unstorableText(answer);
  if (unstorable !== undefined) throw new InvalidAskResolutionError(askId, unstorable);
  return answer;
}
