/**
 * The parts of node-postgres (`pg`) that loopctl uses, described by shape so
 * that `loopctl/postgres` never loads `pg` itself and its type declarations
 * do not depend on `@types/pg`. A `pg.Pool` is a {@link PgPool}.
 */

/** A query result: the rows and how many rows the statement touched. */
export interface PgResult {
  readonly rows: unknown[];
  readonly rowCount: number | null;
}

/** A statement with a name: node-postgres prepares it once per connection and reuses the plan. */
export interface PgQueryConfig {
  readonly name: string;
  readonly text: string;
  readonly values: unknown[];
}

/** A `LISTEN` notification as node-postgres delivers it. */
export interface PgNotification {
  readonly channel: string;
  readonly payload?: string | undefined;
}

/** A connection checked out of a pool (`pg.PoolClient`). */
export interface PgPoolClient {
  query(text: string, values?: unknown[]): Promise<PgResult>;
  query(config: PgQueryConfig): Promise<PgResult>;
  /** Returns the connection to the pool; with `true` or an error, closes it instead. */
  release(destroy?: Error | boolean): void;
  on(event: "notification", listener: (message: PgNotification) => void): unknown;
  on(event: "error", listener: (error: Error) => void): unknown;
  on(event: "end", listener: () => void): unknown;
  removeListener(event: "error", listener: (error: Error) => void): unknown;
}

/** What `pg.Pool`'s `connect(callback)` hands its callback: an error, or the connection. */
export type PgConnectCallback = (error: Error | undefined, client: PgPoolClient | undefined) => void;

/**
 * A connection pool (`pg.Pool`). loopctl runs its statements through it and
 * holds one connection per {@link PostgresAskQueue} for `LISTEN`.
 *
 * loopctl checks connections out with the callback form of `connect`:
 * node-postgres calls it within the read that completes the connection, so
 * loopctl's error listener is on the connection before anything more the
 * server sent in that read (its end, say) is handled.
 */
export interface PgPool {
  query(text: string, values?: unknown[]): Promise<PgResult>;
  query(config: PgQueryConfig): Promise<PgResult>;
  connect(callback: PgConnectCallback): void;
}
