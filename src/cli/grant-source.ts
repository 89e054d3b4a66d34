import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { FileGrantStore } from "../grant/index.js";
import type { GrantStore } from "../grant/index.js";
import type { PgPool, PostgresGrantStore } from "../postgres/index.js";
import { describeError, LoopctlError } from "../errors.js";
import { CliUsageError } from "./context.js";
import { printable } from "./format.js";
import type { CliContext } from "./context.js";
import { shownText } from "../shown.js";
import { MAX_TIMER_MS } from "../server/timers.js";

/** The options that say where a command's grants live. */
export const STORE_OPTIONS = {
  project: { type: "string" },
  root: { type: "string" },
  database: { type: "string" },
  schema: { type: "string" },
  help: { type: "boolean", short: "h", default: false },
} as const;

/** A grant store opened for one command. */
export interface OpenedStore {
  readonly store: GrantStore;
  /** Where the grants live, for people: the ledger file, or the database, schema and project. */
  readonly location: string;
  /** Releases what the store holds (a database pool). */
  close(): Promise<void>;
  /**
   * With `--database`: a warning when the project never held a grant in the
   * schema while projects whose names differ from it only in case or
   * surrounding spaces did (a mistyped `--project` reads as "no grants").
   */
  nearProjectsWarning?(): Promise<string | undefined>;
}

/**
 * Closes what a command opened (a database pool), its work done or failed. A
 * failure to close is one warning line on stderr naming `opened.location`:
 * the command's own result or error, and so its exit code, stand.
 */
export async function closeOrWarn(
  opened: { readonly location: string; close(): Promise<void> },
  context: CliContext,
): Promise<void> {
  try {
    await opened.close();
  } catch (error) {
    context.stderr.write(
      `loopctl: warning: could not close ${printable(opened.location)}: ${printable(describeError(error))}\n`,
    );
  }
}

/** The spaces a project name may carry around it by mistake (PostgreSQL's `btrim` set). */
const SURROUNDING_SPACES = " \t\n\r\f\v";

interface StoreValues {
  readonly project?: string | undefined;
  readonly root?: string | undefined;
  readonly database?: string | undefined;
  readonly schema?: string | undefined;
}

/** Query parameters node-postgres takes a secret from (`?password=`, `?sslpassword=`). */
const SECRET_PARAM = /password/i;

/** Stands for the empty host of a URL with a user before it while it is parsed (see {@link parseUrl}). */
const EMPTY_HOST = "loopctl-empty-host";

/**
 * `url` parsed as node-postgres parses it: also one with a user before an
 * empty host, which a URL parser refuses and node-postgres reads with a
 * stand-in host (`postgres://me@/db?host=/var/run/postgresql`, libpq's form
 * for a Unix socket, or `socket://me@/var/run/postgresql?db=db`); `empty`
 * says so. `undefined` when it cannot be parsed either way.
 */
function parseUrl(url: string): { readonly parsed: URL; readonly empty: boolean } | undefined {
  for (const [text, empty] of [
    [url, false],
    [url.replace("@/", `@${EMPTY_HOST}/`), true],
  ] as const) {
    try {
      return { parsed: new URL(text), empty };
    } catch {
      // not a URL as it is: try the stand-in host, as node-postgres does
    }
  }
  return undefined;
}

/** The URL without its passwords (in the userinfo or the query), for output. */
export function redacted(url: string): string {
  const read = parseUrl(url);
  if (read === undefined) return "<the --database URL>";
  const { parsed, empty } = read;
  if (parsed.password !== "") parsed.password = "***";
  for (const name of [...parsed.searchParams.keys()]) {
    if (SECRET_PARAM.test(name)) parsed.searchParams.set(name, "***");
  }
  const text = parsed.toString();
  return empty ? text.replace(`@${EMPTY_HOST}/`, "@/") : text;
}

/** The schemes node-postgres reads a connection string of. */
const SCHEMES = new Set(["postgres:", "postgresql:", "socket:"]);

/**
 * Refuses a `--database` that cannot name a server, naming the option: an
 * empty one, or one that is not a PostgreSQL URL (which node-postgres would
 * otherwise take apart into some host name to look up).
 */
function checkUrl(command: string, url: string): void {
  if (url === "") throw new CliUsageError(command, "--database needs a URL: postgres://USER@HOST:PORT/DATABASE");
  const scheme = parseUrl(url)?.parsed.protocol;
  if (scheme === undefined) {
    throw new CliUsageError(command, "--database: not a PostgreSQL URL (postgres://USER@HOST:PORT/DATABASE)");
  }
  if (!SCHEMES.has(scheme)) {
    throw new CliUsageError(
      command,
      `--database: ${shownText(scheme)} is not a PostgreSQL URL scheme (postgres://, postgresql:// or socket:)`,
    );
  }
}

/** What to say of a path option starting with a `~`: a shell expands it in `--root ~/x`, not in `--root=~/x`. */
export const unexpandedTilde = (option: string): string =>
  `the shell leaves a ~ after = as it is (${option}=~/…); write ${option} ~/… or $HOME/…`;

/**
 * The ledger file `--project DIR`/`--root DIR` (or their defaults) name; its
 * warnings are one plain line each. A `--schema` (which needs `--database`)
 * is a usage error.
 */
export function openFileStore(command: string, values: StoreValues, context: CliContext): FileGrantStore {
  // A --schema meant for a database would otherwise be dropped, and the ledger file acted on instead.
  if (values.schema !== undefined) throw new CliUsageError(command, "--schema needs --database");
  // An empty --project ("$UNSET") would otherwise resolve to the current folder: another project's grants.
  if (values.project === "") throw new CliUsageError(command, "--project needs a folder (DIR)");
  // So would an empty --root: a grant root laid out wherever the command happens to run.
  if (values.root === "") throw new CliUsageError(command, "--root needs a folder (DIR)");
  const root = resolve(context.cwd, values.root ?? FileGrantStore.defaultRoot(context.env));
  const project = resolve(context.cwd, values.project ?? ".");
  // A root not made yet is not said (no grant saved there so far), unless it starts with a ~ the
  // shell did not expand (--root=~/x): a folder named ~ here, where every command finds no grants.
  if (values.root !== undefined && values.root.startsWith("~") && !existsSync(root)) {
    context.stderr.write(
      `loopctl: warning: the grant root ${printable(root)} does not exist: ${unexpandedTilde("--root")}\n`,
    );
  }
  // Not refused: the grants of a project whose folder was deleted (or not made yet) are still its own.
  // But a mistyped --project would read as "no grants" and reset as "removed 0", as if all were well.
  let found;
  try {
    found = statSync(project, { throwIfNoEntry: false });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // A path through a file: no folder there, as with ENOENT.
    if (code !== "ENOTDIR") throw unreadableProject(project, code, error);
    found = undefined;
  }
  if (found === undefined) {
    const tilde = values.project?.startsWith("~") === true ? `; ${unexpandedTilde("--project")}` : "";
    context.stderr.write(
      `loopctl: warning: the project folder ${printable(project)} does not exist; these are the grants kept under that path${tilde}\n`,
    );
  } else if (!found.isDirectory()) {
    // Such as the ledger itself, named where its project's folder goes.
    context.stderr.write(
      `loopctl: warning: the project folder ${printable(project)} is a file, not a folder; these are the grants kept under that path\n`,
    );
  }
  return new FileGrantStore(root, project, {
    onWarning: (warning) => context.stderr.write(`loopctl: warning: ${printable(warning.message)}\n`),
    onLockWait: (wait) => context.stderr.write(`loopctl: ${printable(wait.message)}\n`),
  });
}

/**
 * A project folder that cannot be looked at (a folder above it this user may
 * not search: EACCES): not one that does not exist. Its real path cannot be
 * resolved either, so the ledger named for it may not be the one its agent
 * uses: an I/O error (exit 4), not a warning beside some other grants.
 */
function unreadableProject(project: string, code: string | undefined, cause: unknown): LoopctlError {
  return new LoopctlError(
    "PROJECT_UNREADABLE",
    `the project folder ${project} cannot be read (${code ?? "error"}), so which grants are its own cannot be ` +
      "told; run loopctl as a user who can read it, or change the permissions of the folders on its path",
    { cause },
  );
}

/**
 * The store the options name: the project's ledger file (`--project DIR`,
 * `--root DIR`), or with `--database URL` the project's grants in PostgreSQL
 * (`--project NAME`, required; `--schema NAME`). `pg` is loaded only then.
 */
export async function openStore(command: string, values: StoreValues, context: CliContext): Promise<OpenedStore> {
  if (values.database === undefined) {
    const store = openFileStore(command, values, context);
    return { store, location: store.ledgerPath, close: () => Promise.resolve() };
  }
  if (values.root !== undefined)
    throw new CliUsageError(command, "--root is for a ledger file; it cannot go with --database");
  if (values.project === undefined || values.project === "") {
    throw new CliUsageError(command, "--database needs --project NAME: the project whose grants to use");
  }
  await checkSchema(command, values.schema);
  const { PostgresConfigError } = await import("../postgres/index.js");
  const pool = await connect(command, values.database, context.env);
  const project = values.project;
  try {
    const store = await postgresGrants(command, pool, project, values.schema);
    return {
      store,
      location: `${redacted(values.database)} (schema ${store.schema}, project ${shownText(project)})`,
      close: () => pool.end(),
      nearProjectsWarning: () => nearProjectsWarning(command, pool, store.schema, project),
    };
  } catch (error) {
    await pool.end();
    if (error instanceof PostgresConfigError) throw new CliUsageError(command, error.message);
    throw error;
  }
}

/**
 * The grants of `project` in PostgreSQL over `pool`, made before any
 * connection: a `--project` the store refuses (longer than 2048 bytes of
 * UTF-8) is a usage error naming `--project`, not the class it is passed on to.
 */
export async function postgresGrants(
  command: string,
  pool: PgPool,
  project: string,
  schema: string | undefined,
): Promise<PostgresGrantStore> {
  const { PostgresGrantStore, PostgresConfigError } = await import("../postgres/index.js");
  try {
    return new PostgresGrantStore(pool, { project, ...(schema === undefined ? {} : { schema }) });
  } catch (error) {
    if (error instanceof PostgresConfigError) {
      throw new CliUsageError(command, error.message.replace(/^PostgresGrantStore: options\.project\b/, "--project"));
    }
    throw error;
  }
}

/**
 * A warning when `project` never held a grant in `schema` while projects
 * whose names differ from it only in case or surrounding spaces did (a
 * mistyped `--project` reads as "no grants"), naming up to five of them.
 */
export async function nearProjectsWarning(
  command: string,
  pool: PgPool,
  schema: string,
  project: string,
): Promise<string | undefined> {
  const { schemaNames } = await import("../postgres/schema.js");
  const { Db, DEFAULT_REPLY_MS } = await import("../postgres/db.js");
  const names = schemaNames(command, schema);
  const projects = names.table("grant_projects");
  // Every project that ever held a grant has a row here (kept when its grants are revoked). Bounded
  // as the stores' statements are: a connection that stops answering must not hang the command.
  const { rows } = await new Db(pool, names, DEFAULT_REPLY_MS).query(
    command,
    `SELECT p.project FROM ${projects} AS p
     WHERE NOT EXISTS (SELECT 1 FROM ${projects} WHERE project = $1)
       AND lower(btrim(p.project, $2)) = lower(btrim($1, $2))
     ORDER BY p.project COLLATE "C" LIMIT 5`,
    [project, SURROUNDING_SPACES],
  );
  const near = rows.map((row) => String(row["project"]));
  if (near.length === 0) return undefined;
  return (
    `project ${shownText(project)} never held a grant in schema ${schema}; the name matches exactly, ` +
    `and ${near.map((name) => shownText(name)).join(", ")} (differing in case or surrounding spaces) ` +
    (near.length === 1 ? "is another project, left as it is" : "are other projects, left as they are")
  );
}

/**
 * Refuses a `--schema` that is not a schema name loopctl takes, as a usage
 * error naming the option (not the class or command it is passed on to),
 * before any connection is made.
 */
export async function checkSchema(command: string, schema: string | undefined): Promise<void> {
  if (schema === undefined) return;
  const { schemaNames } = await import("../postgres/schema.js");
  try {
    schemaNames("--schema", schema);
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code === "POSTGRES_CONFIG") {
      throw new CliUsageError(command, (error as Error).message);
    }
    throw error;
  }
}

/** How long a command waits for the server to answer a connection, in seconds, unless PGCONNECT_TIMEOUT says. */
const CONNECT_TIMEOUT_S = 10;

/**
 * The connection timeout in milliseconds: `PGCONNECT_TIMEOUT` seconds, or
 * the default when it is unset, empty, zero or less (libpq's "wait
 * indefinitely", which would let a silent server hang the command). Never 0,
 * which node-postgres reads as no timeout (`0.0001` rounds to it), nor more
 * than a timer holds (beyond, Node fires it at once). One that is not a
 * number (`10s`) is a usage error naming it, not the default taken silently.
 */
function connectTimeoutMs(command: string, env: Readonly<Record<string, string | undefined>>): number {
  const text = env["PGCONNECT_TIMEOUT"];
  if (text === undefined || text.trim() === "") return CONNECT_TIMEOUT_S * 1000;
  const seconds = Number(text);
  if (!Number.isFinite(seconds)) {
    throw new CliUsageError(command, `PGCONNECT_TIMEOUT must be a number of seconds, got ${shownText(text)}`);
  }
  if (seconds <= 0) return CONNECT_TIMEOUT_S * 1000;
  return Math.min(MAX_TIMER_MS, Math.max(1, Math.round(seconds * 1000)));
}

/**
 * A pool for `--database URL`, with `pg` loaded only now; errors of idle
 * connections are left to the next statement. An empty `url`, or one that is
 * not a PostgreSQL URL, is a usage error naming `--database`. A server that accepts the
 * connection and never answers (a black-holed host) fails the command after
 * `PGCONNECT_TIMEOUT` seconds (default 10) instead of hanging it (see
 * {@link connectTimeoutMs}).
 */
export async function connect(
  command: string,
  url: string,
  env: Readonly<Record<string, string | undefined>> = {},
): Promise<PgPool & { end(): Promise<void> }> {
  checkUrl(command, url);
  const pg = await loadPg();
  if (pg === undefined) {
    const { PostgresConfigError } = await import("../postgres/index.js");
    throw new PostgresConfigError(command, "--database needs the pg package (npm install pg)");
  }
  const pool = new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: connectTimeoutMs(command, env) });
  // A dropped idle connection must not end the command with a stack trace; the next statement reports it.
  pool.on("error", () => undefined);
  return pool;
}

interface PgModule {
  readonly Pool: new (config: { connectionString: string; max: number; connectionTimeoutMillis: number }) => PgPool & {
    on(event: "error", listener: (error: Error) => void): unknown;
    end(): Promise<void>;
  };
}

async function loadPg(): Promise<PgModule | undefined> {
  try {
    const loaded = (await import("pg")) as { default?: PgModule } & Partial<PgModule>;
    return loaded.default ?? (loaded as PgModule);
  } catch {
    return undefined;
  }
}
