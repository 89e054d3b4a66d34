import { setMaxListeners } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { AskEndingSchema, PendingAskSchema } from "../ask/types.js";
import type { AskEnding, AskInbox, AskResolution, PendingAsk } from "../ask/types.js";
import { askDigest } from "../ask/ask-digest.js";
import { zodIssuesLine } from "../zod-issues.js";
import { ServerConfigError } from "./errors.js";

/** An ask the board holds, with when it arrived (epoch ms). */
export interface BoardEntry {
  readonly ask: PendingAsk;
  readonly receivedAtMs: number;
}

/** What the board tells its subscribers. */
export type BoardEvent =
  | { readonly type: "ask"; readonly entry: BoardEntry }
  | { readonly type: "settled"; readonly id: string; readonly ending: AskEnding };

/** How an answer sent through the board went. */
export type AnswerOutcome =
  | { readonly type: "delivered" }
  | { readonly type: "ended"; readonly ending: AskEnding | undefined }
  | { readonly type: "changed"; readonly entry: BoardEntry }
  | { readonly type: "unknown" };

/** How the board's link to its inbox is doing, for `/healthz`. */
export type InboxHealth = "ok" | "catching_up" | "failing" | "closed";

/** How many ended ask ids the board remembers, to answer 409 rather than 404 for them. */
const REMEMBERED_ENDINGS = 1024;
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 10_000;
/** What the board shows for an ending it cannot read: the ask ended, how is not known. */
const UNREADABLE_ENDING: AskEnding = Object.freeze({ type: "withdrawn", reason: "unknown" });

/**
 * The approval server's view of an {@link AskInbox}: it takes every ask the
 * inbox hands out, watches each until it ends, and tells subscribers (the
 * event streams) as asks arrive and settle. It never answers or closes the
 * inbox by itself: the inbox's owner stays the owner of its asks.
 */
export class AskBoard {
  readonly #inbox: AskInbox;
  readonly #now: () => number;
  readonly #onError: (error: unknown) => void;
  readonly #pending = new Map<string, BoardEntry>();
  readonly #ended = new Map<string, AskEnding>();
  readonly #listeners = new Set<(event: BoardEvent) => void>();
  readonly #stop = new AbortController();
  readonly #tasks = new Set<Promise<void>>();
  #health: Exclude<InboxHealth, "catching_up"> = "ok";
  #caughtUp = false;
  readonly #onCaughtUp = new Set<() => void>();

  constructor(inbox: AskInbox, now: () => number, onError: (error: unknown) => void) {
    this.#inbox = inbox;
    this.#now = now;
    this.#onError = onError;
    // One listener per watched ask: many asks at once are normal, not a leak.
    setMaxListeners(0, this.#stop.signal);
    this.#track(this.#pump());
    this.#track(this.#catchUp());
  }

  /**
   * `catching_up` while `next()` works but the board has not yet caught up
   * ({@link AskBoard.caughtUp}): a failing or closed inbox says more, and a
   * closed one has handed out all it held.
   */
  get health(): InboxHealth {
    return this.#health === "ok" && !this.#caughtUp ? "catching_up" : this.#health;
  }

  /**
   * Whether the board holds every ask that was pending in the inbox when it
   * started ({@link AskInbox.caughtUp}): until then {@link AskBoard.list} may
   * miss some.
   */
  get caughtUp(): boolean {
    return this.#caughtUp;
  }

  /**
   * Resolves true once the board has caught up, or false if `timeoutMs`
   * passes (or the board closes) first.
   */
  whenCaughtUp(timeoutMs: number): Promise<boolean> {
    if (this.#caughtUp) return Promise.resolve(true);
    if (this.#stop.signal.aborted) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const done = (caught: boolean): void => {
        clearTimeout(timer);
        this.#onCaughtUp.delete(onCaughtUp);
        this.#stop.signal.removeEventListener("abort", onClose);
        resolve(caught);
      };
      const onCaughtUp = (): void => done(true);
      const onClose = (): void => done(false);
      // Unref'd: a request waiting here keeps the process alive through its connection.
      const timer = setTimeout(() => done(false), timeoutMs);
      timer.unref();
      this.#onCaughtUp.add(onCaughtUp);
      this.#stop.signal.addEventListener("abort", onClose, { once: true });
    });
  }

  /** The asks waiting for an answer, in arrival order. */
  list(): BoardEntry[] {
    return [...this.#pending.values()];
  }

  subscribe(listener: (event: BoardEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /**
   * Passes an answer to the inbox. `delivered` only when the inbox says it
   * reached a waiting call; `ended` for an ask this board saw end (or saw
   * and the inbox no longer holds); `unknown` otherwise. Given `madeFor`, the
   * {@link askDigest} of the ask the answer was made for, the inbox is asked
   * only while this board holds that very ask: it is `changed` when the ask
   * pending under that id is another one, and `ended` or `unknown` when the
   * board holds none (the inbox may hold another call under that id that it
   * has not handed out). `madeFor` goes on to the inbox as `askDigest`, so
   * an inbox that holds another call under the id by now, though the board
   * has not heard the first one end, refuses it too.
   * @throws whatever the inbox's `resolve` throws (a lost database, say).
   */
  async answer(id: string, resolution: AskResolution, madeFor?: string): Promise<AnswerOutcome> {
    const entry = this.#pending.get(id);
    if (madeFor !== undefined) {
      if (entry === undefined) {
        return this.#ended.has(id) ? { type: "ended", ending: this.#ended.get(id) } : { type: "unknown" };
      }
      if (askDigest(entry.ask) !== madeFor) return { type: "changed", entry };
    }
    const delivered = await (madeFor === undefined
      ? this.#inbox.resolve(id, resolution)
      : this.#inbox.resolve(id, resolution, { askDigest: madeFor }));
    if (delivered === true) {
      // Only the entry the answer was sent to: while an inbox's reply was on its way, that call may
      // have ended and another taken its id, and the board would hide a call still waiting. Any
      // other is left to its watch, which sees it end.
      if (entry !== undefined) this.#settle(entry, { type: "answered", verdict: resolution.type });
      return { type: "delivered" };
    }
    if (this.#pending.has(id) || this.#ended.has(id)) return { type: "ended", ending: this.#ended.get(id) };
    return { type: "unknown" };
  }

  /** The entry for a pending ask, if the board holds it. */
  get(id: string): BoardEntry | undefined {
    return this.#pending.get(id);
  }

  /** How the ask ended, if the board saw it end recently. */
  ending(id: string): AskEnding | undefined {
    return this.#ended.get(id);
  }

  /**
   * Stops taking asks and watching them, and drops its subscribers. The asks
   * it holds stay with the inbox, unanswered.
   */
  async close(): Promise<void> {
    this.#stop.abort(new Error("approval server closed"));
    this.#listeners.clear();
    while (this.#tasks.size > 0) await Promise.all([...this.#tasks]);
  }

  /**
   * Waits for the inbox's `caughtUp()`, if it has one (retried like `next()`
   * when it fails), and then for nothing: an inbox without it holds nothing
   * it has not handed out.
   */
  async #catchUp(): Promise<void> {
    const signal = this.#stop.signal;
    for (let failures = 0; !signal.aborted && !this.#caughtUp;) {
      try {
        if (typeof this.#inbox.caughtUp === "function") {
          await this.#unlessClosed(Promise.resolve(this.#inbox.caughtUp({ signal })));
        }
        this.#markCaughtUp();
        return;
      } catch (error) {
        if (signal.aborted) return;
        this.#onError(error);
        if (!(await this.#pause(failures++))) return;
      }
    }
  }

  #markCaughtUp(): void {
    if (this.#caughtUp) return;
    this.#caughtUp = true;
    for (const listener of [...this.#onCaughtUp]) listener();
  }

  async #pump(): Promise<void> {
    const signal = this.#stop.signal;
    for (let failures = 0; !signal.aborted;) {
      let ask: PendingAsk | undefined;
      try {
        ask = await this.#unlessClosed(this.#inbox.next({ signal }));
      } catch (error) {
        if (signal.aborted) return;
        this.#health = "failing";
        this.#onError(error);
        if (!(await this.#pause(failures++))) return;
        continue;
      }
      failures = 0;
      this.#health = "ok";
      if (ask === undefined) {
        this.#health = "closed";
        // Closed, it hands out nothing more: what the board holds is all there is.
        this.#markCaughtUp();
        return;
      }
      this.#add(ask);
    }
  }

  #add(value: PendingAsk): void {
    let parsed: ReturnType<typeof PendingAskSchema.safeParse>;
    try {
      parsed = PendingAskSchema.safeParse(value);
    } catch (error) {
      // safeParse reads the value, and a getter or a proxy's trap may throw: thrown out of the pump, it
      // would stop the board taking asks, and reject where nothing catches it.
      this.#onError(
        new ServerConfigError("approver", "next() handed out something that cannot be read", { cause: error }),
      );
      return;
    }
    if (!parsed.success) {
      this.#onError(
        new ServerConfigError(
          "approver",
          `next() handed out something that is not a PendingAsk: ${zodIssuesLine(parsed.error)}`,
        ),
      );
      return;
    }
    const ask: PendingAsk = parsed.data;
    const held = this.#pending.get(ask.id);
    if (held !== undefined) {
      if (askDigest(held.ask) === askDigest(ask)) return;
      // An inbox holds one call per id: the one the board shows has ended, though its ended() has
      // not said so yet. Shown on, an answer made for it would pass as made for this one.
      this.#settle(held, UNREADABLE_ENDING);
    }
    const entry: BoardEntry = { ask, receivedAtMs: this.#now() };
    // An id that ended can come back with another call behind it: it is pending again, not ended.
    this.#ended.delete(ask.id);
    this.#pending.set(ask.id, entry);
    this.#emit({ type: "ask", entry });
    this.#track(this.#watch(entry));
  }

  async #watch(entry: BoardEntry): Promise<void> {
    const id = entry.ask.id;
    const signal = this.#stop.signal;
    for (let failures = 0; !signal.aborted;) {
      try {
        const ending: unknown = await this.#unlessClosed(this.#inbox.ended(id, { signal }));
        this.#settle(entry, this.#readEnding(id, ending));
        return;
      } catch (error) {
        if (signal.aborted) return;
        this.#onError(error);
        if (!(await this.#pause(failures++))) return;
      }
    }
  }

  /**
   * The inbox's word that an ask ended, as the board passes it on. The inbox
   * may be anyone's code: something that is not exactly an {@link AskEnding}
   * (junk fields, a getter that throws) is reported and still ends the ask,
   * as ended for a reason not known, never as an answer, and never sent on
   * as it came.
   */
  #readEnding(id: string, value: unknown): AskEnding {
    let problem: string;
    let cause: unknown;
    try {
      const parsed = AskEndingSchema.safeParse(value);
      if (parsed.success) return parsed.data;
      problem = parsed.error.issues
        .map((issue) => `${issue.path.length === 0 ? "the value" : issue.path.map(String).join(".")}: ${issue.message}`)
        .join("; ");
    } catch (error) {
      problem = "reading it threw";
      cause = error;
    }
    this.#onError(
      new ServerConfigError(
        "approver",
        `ended("${id}") gave something that is not an AskEnding (${problem}); ` +
          "the ask is shown as ended for a reason not known",
        cause === undefined ? undefined : { cause },
      ),
    );
    return UNREADABLE_ENDING;
  }

  /** Takes `entry` off the board, if it is still the one shown under its id: another call may hold the id now. */
  #settle(entry: BoardEntry, ending: AskEnding): void {
    const id = entry.ask.id;
    if (this.#pending.get(id) !== entry) return;
    this.#pending.delete(id);
    this.#ended.set(id, ending);
    if (this.#ended.size > REMEMBERED_ENDINGS) {
      const oldest = this.#ended.keys().next();
      if (oldest.done !== true) this.#ended.delete(oldest.value);
    }
    this.#emit({ type: "settled", id, ending });
  }

  #emit(event: BoardEvent): void {
    for (const listener of this.#listeners) {
      try {
        listener(event);
      } catch (error) {
        this.#onError(error);
      }
    }
  }

  /**
   * Waits for `work` unless the board closes first, so an inbox that ignores
   * the signal cannot hold `close()` up. An ask such an inbox hands out after
   * that stays with the inbox, like every ask the board had taken.
   */
  #unlessClosed<T>(work: Promise<T>): Promise<T> {
    const signal = this.#stop.signal;
    return new Promise<T>((resolve, reject) => {
      const onAbort = (): void => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      Promise.resolve(work).then(
        (value) => {
          signal.removeEventListener("abort", onAbort);
          resolve(value);
        },
        (error: unknown) => {
          signal.removeEventListener("abort", onAbort);
          reject(error);
        },
      );
    });
  }

  /** Backs off before a retry; false once the board is closed. */
  async #pause(failures: number): Promise<boolean> {
    try {
      await sleep(Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** failures), undefined, { signal: this.#stop.signal });
      return true;
    } catch {
      return false;
    }
  }

  #track(task: Promise<void>): void {
    this.#tasks.add(task);
    void task.finally(() => this.#tasks.delete(task));
  }
}
