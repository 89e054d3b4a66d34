import { checkOut, replyWithin } from "./db.js";
import type { PgPool, PgPoolClient } from "./pg.js";

/** What a {@link NotificationListener} reports to its owner. */
export interface ListenerEvents {
  /** A notification on the channel (its payload, untrusted). */
  notify(payload: string): void;
  /** `LISTEN` is in place, after the first connect or a reconnect: read again what may have been missed. */
  listening(): void;
  /** The connection failed or dropped; a reconnect is already scheduled. */
  error(error: unknown): void;
}

const FIRST_RETRY_MS = 50;
const MAX_RETRY_MS = 2_000;

/**
 * One connection, held out of the pool, that `LISTEN`s on a channel. When it
 * drops (a network failure, a restarted server, `pg_terminate_backend`) it
 * reconnects with a growing pause and reports `listening()` again, so its
 * owner re-reads whatever it may have missed meanwhile. A `LISTEN` with no
 * reply within `replyMs` counts as a drop: a network that swallows packets
 * answers nothing and closes nothing.
 */
export class NotificationListener {
  readonly #pool: PgPool;
  readonly #channel: string;
  readonly #replyMs: number;
  readonly #events: ListenerEvents;
  #client: PgPoolClient | undefined;
  #state: "idle" | "connecting" | "listening" | "closed" = "idle";
  #retryMs = FIRST_RETRY_MS;
  #retry: NodeJS.Timeout | undefined;

  constructor(pool: PgPool, channel: string, replyMs: number, events: ListenerEvents) {
    this.#pool = pool;
    this.#channel = channel;
    this.#replyMs = replyMs;
    this.#events = events;
  }

  /** True while `LISTEN` is in place. */
  get listening(): boolean {
    return this.#state === "listening";
  }

  /**
   * The listening connection, for a statement that must not wait in the
   * pool's line behind a burst of work (the lease heartbeat); undefined
   * while not listening.
   */
  get connection(): PgPoolClient | undefined {
    return this.#state === "listening" ? this.#client : undefined;
  }

  /** Connects, unless already connected or connecting. */
  start(): void {
    if (this.#state === "idle" && this.#retry === undefined) void this.#connect();
  }

  /**
   * Gives up `client` when it is still the listening connection (a statement
   * sent on it had no reply: the network may be swallowing everything), and
   * connects again as after a drop. Its statements in flight fail.
   */
  drop(client: PgPoolClient, error: Error): void {
    this.#lost(client, error);
  }

  /** Disconnects for good. */
  close(): void {
    this.#state = "closed";
    clearTimeout(this.#retry);
    this.#retry = undefined;
    const client = this.#client;
    this.#client = undefined;
    // Closed, not returned: a pooled connection must not go on listening for the next borrower.
    if (client !== undefined) release(client, true);
  }

  async #connect(): Promise<void> {
    this.#state = "connecting";
    let client: PgPoolClient | undefined;
    // An error heard before the connection is handed over here (in the read that opened it)
    // leaves it unusable: the LISTEN below then fails, and that failure gives it up, reporting this.
    let early: Error | undefined;
    try {
      client = await checkOut(this.#pool, (error) => {
        if (client !== undefined) this.#lost(client, error);
        else early ??= error;
      });
      if (this.#closed()) {
        release(client, true);
        return;
      }
      const mine = client;
      this.#client = mine;
      mine.on("notification", (message) => {
        if (this.#client === mine && message.channel === this.#channel) this.#events.notify(message.payload ?? "");
      });
      mine.on("end", () => this.#lost(mine, new Error(`the connection listening on ${this.#channel} ended`)));
      await this.#listen(mine);
      if (this.#client !== mine) return;
      this.#state = "listening";
      this.#retryMs = FIRST_RETRY_MS;
      this.#events.listening();
    } catch (error) {
      if (client === undefined) this.#scheduleRetry(error);
      else this.#lost(client, early ?? error);
    }
  }

  /**
   * Sends `LISTEN` on `client`. With no reply within `replyMs` it rejects,
   * and the caller gives the connection up: left waiting, the owner would
   * hear nothing but its slow re-reads for as long as the connection stays
   * open.
   */
  async #listen(client: PgPoolClient): Promise<void> {
    // The channel is made of [a-z0-9_.] (see schemaNames), so quoting it is enough.
    await replyWithin(
      client.query(`LISTEN "${this.#channel}"`),
      this.#replyMs,
      () => new Error(`no reply to LISTEN within ${this.#replyMs} ms on ${this.#channel}`),
    );
  }

  // A method, so that a check made after an await is not narrowed by one made before it.
  #closed(): boolean {
    return this.#state === "closed";
  }

  #lost(client: PgPoolClient, error: unknown): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    release(client, true);
    if (this.#state === "closed") return;
    this.#scheduleRetry(error);
  }

  #scheduleRetry(error: unknown): void {
    if (this.#state === "closed") return;
    this.#state = "idle";
    this.#events.error(error);
    const wait = this.#retryMs;
    this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      if (this.#state === "idle") void this.#connect();
    }, wait);
    this.#retry.unref();
  }
}

function release(client: PgPoolClient, destroy: boolean): void {
  try {
    client.release(destroy);
  } catch {
    // Already released (an error and an end both reported the same loss).
  }
}
