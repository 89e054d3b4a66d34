import { stat } from "node:fs/promises";
import { resolve } from "node:path";
import { AuditIoError, AuditPathError } from "../audit/index.js";
import type { AskInbox } from "../ask/index.js";
import { LoopctlError, shownValue } from "../errors.js";
import type { GrantStore } from "../grant/index.js";
import { keyOption } from "./audit.js";
import { ServerConfigError, ServerListenError, auditLogRecords, createApprovalServer } from "../server/index.js";
import { allowedHostNames, checkToken } from "../server/access.js";
import { checkListenHost } from "../server/approval-server.js";
import { DEFAULT_GRANTS_TIMEOUT_MS } from "../server/handler.js";
import { positiveInteger } from "../server/options.js";
import { MAX_TIMER_MS } from "../server/timers.js";
import type { ApprovalServer, ApprovalServerOptions } from "../server/index.js";
import { asksForJson, CliUsageError, EXIT, parseCommandArgs } from "./context.js";
import type { CliContext, ExitCode } from "./context.js";
import { exitCodeOf, hintFor } from "./failure.js";
import { json, printable } from "./format.js";
import { EXIT_CODES } from "./help.js";
import {
  checkSchema,
  closeOrWarn,
  connect,
  nearProjectsWarning,
  openFileStore,
  postgresGrants,
  redacted,
  unexpandedTilde,
} from "./grant-source.js";
import { shownText } from "../shown.js";

const PROJECT_LINES =
  "  --project DIR   the project whose grants to show (default: the current\n" +
  "                  folder; with --database, the project's name there)\n" +
  "  --root DIR      the grant store root (default: $XDG_STATE_HOME/loopctl/grants,\n" +
  "                  else ~/.local/state/loopctl/grants)\n";

/** `loopctl console --help`. */
export const CONSOLE_HELP = `loopctl console: the approval console in your browser.

Usage:
  loopctl console [--port N] [--host H] [--allowed-host H]... [--project DIR]
                  [--root DIR] [--audit FILE] [--audit-key-file F]
                  [--max-connections N]
  loopctl console --database URL [--project NAME] [--schema NAME] [--port N]
                  [--host H] [--allowed-host H]... [--audit FILE]
                  [--audit-key-file F] [--max-connections N]

Serves the console and its HTTP API, and prints a link with a one-time
token to open in a browser. It lists the project's remembered answers
(grants), with their pins, and revokes them; with --audit it shows the latest
decisions of an audit log, each with what the log's checks vouch for it.
Stop it with Ctrl-C (or SIGTERM): exit 0.

Without --database, asks are answered where an approver lives: an agent
serving its own console with createApprovalServer. With --database, the
console serves every pending ask of every worker parked on a
PostgresAskQueue in that database (loopctl/postgres; the schema is the one
migrate() created), and the grants of --project NAME shared there.

Options:
  --port N        the port to listen on (default: a free one)
  --host H        the address to listen on (default: 127.0.0.1); a wildcard
                  (0.0.0.0, ::) needs --allowed-host
  --allowed-host H  a Host header to answer to besides the bound address, as
                  host or host:port (a reverse proxy's name); repeatable.
                  Any other Host is refused (DNS rebinding)
${PROJECT_LINES}  --database URL  serve the asks and grants shared in PostgreSQL
  --schema NAME   with --database: loopctl's schema (default: loopctl)
  --audit FILE    show the latest decisions of this audit log, checking the
                  lines read: their hashes and links (anyone who can write
                  the log can make those)
  --audit-key-file F  with --audit: the log's key, as audit verify's
                  --key-file reads it; each line's MAC and the seal are
                  checked too, so a line written without the key is told
  --max-connections N  how many connections may be open at once, event
                  streams and idle kept-alive ones included; one over is
                  closed unread until held ones close (default: 1000)
  -h, --help      show this help

Environment:
  LOOPCTL_CONSOLE_TOKEN  the token to accept, instead of a random one
                         (at least 16 characters of A-Z a-z 0-9 . _ ~ -)

${EXIT_CODES}`;

const OPTIONS = {
  port: { type: "string" },
  host: { type: "string" },
  "allowed-host": { type: "string", multiple: true },
  project: { type: "string" },
  root: { type: "string" },
  audit: { type: "string" },
  "audit-key-file": { type: "string" },
  database: { type: "string" },
  schema: { type: "string" },
  "max-connections": { type: "string" },
  help: { type: "boolean", short: "h", default: false },
} as const;

type ConsoleValues = ReturnType<typeof parseCommandArgs<typeof OPTIONS>>["values"];

/** Where the console's asks and grants come from, and what to say about them. */
export interface ConsoleSources {
  /** The inbox the console serves, or undefined for a console over grants and records only. */
  readonly inbox: AskInbox | undefined;
  readonly grants: GrantStore | undefined;
  /** Lines for the banner. */
  readonly describe: string;
  /** Where they are, for a warning: the ledger file, or the database and schema. */
  readonly location: string;
  /** Releases what they hold (the queue and its database pool). */
  close(): Promise<void>;
}

/** What the console serves besides its sources, from the command line. */
export interface ConsoleSettings {
  readonly audit: string | undefined;
  /** The audit log's key (`--audit-key-file`), to check its lines' MACs and its seal. */
  readonly auditKey?: Uint8Array | undefined;
  readonly host: string | undefined;
  readonly allowedHosts: readonly string[] | undefined;
  readonly port: number;
  readonly token: string | undefined;
  /** How many connections may be open at once; the server's default (1000) when undefined. */
  readonly maxConnections?: number | undefined;
  /**
   * How long the first read of the grants, before the link, and each of the server's calls to the
   * grant store wait for it (the server's `grantsTimeoutMs`); its default (10 s) when undefined.
   */
  readonly grantsTimeoutMs?: number | undefined;
}

/**
 * What the console serves. From this process alone there are no asks to
 * take (an ApprovalChannel lives in its agent's process): only the project's
 * ledger. With `--database`, the Postgres queue every worker parks on, and
 * the project's grants shared there.
 */
async function openSources(values: ConsoleValues, context: CliContext): Promise<ConsoleSources> {
  if (values.database === undefined) {
    // The grants commands' ledger: the same refusals (--schema needs --database), its warnings one
    // plain line on stderr.
    const store = openFileStore("console", values, context);
    return {
      inbox: undefined,
      grants: store,
      describe: `no ask queue: grants and records only\n  grants  ${printable(store.ledgerPath)}\n`,
      location: store.ledgerPath,
      close: async () => undefined,
    };
  }
  if (values.root !== undefined)
    throw new CliUsageError("console", "--root is for a ledger file; it cannot go with --database");
  // Optional here, but an empty one ("$UNSET") must not pass for a project named so.
  if (values.project === "") {
    throw new CliUsageError("console", "--project needs the NAME of a project; leave it out to serve no grants");
  }
  const { PostgresAskQueue, PostgresConfigError } = await import("../postgres/index.js");
  const { Db, DEFAULT_REPLY_MS } = await import("../postgres/db.js");
  const { schemaNames } = await import("../postgres/schema.js");
  await checkSchema("console", values.schema);
  const pool = await connect("console", values.database, context.env);
  const schema = values.schema === undefined ? {} : { schema: values.schema };
  try {
    const project = values.project;
    // Made before any connection, as the grants commands make theirs: a --project it refuses is a usage error.
    const grants = project === undefined ? undefined : await postgresGrants("console", pool, project, values.schema);
    // Checked before anything is served, so an unmigrated schema or an unreachable server fails
    // the command (exit 4), as it fails the grants commands, instead of a console that shows nothing.
    // Within the queue's own bound on a reply: a server that stops answering once connected fails it too.
    await new Db(pool, schemaNames("console", values.schema), DEFAULT_REPLY_MS).ready("PostgresAskQueue");
    const queue = new PostgresAskQueue(pool, {
      ...schema,
      onError: (error) =>
        context.stderr.write(`loopctl console: ${printable(error instanceof Error ? error.message : String(error))}\n`),
    });
    if (project !== undefined) {
      // Only a hint, as for the grants commands: a mistyped --project would show "no grants".
      const warning = await nearProjectsWarning("console", pool, queue.schema, project).catch(() => undefined);
      if (warning !== undefined) context.stderr.write(`loopctl: warning: ${printable(warning)}\n`);
    }
    const where = `${redacted(values.database)} (schema ${queue.schema})`;
    return {
      inbox: queue.approver(),
      grants,
      describe:
        `the asks of every worker parked on ${printable(where)}\n` +
        (project === undefined ? "" : `  grants  project ${printable(shownText(project))}\n`),
      location: where,
      close: async () => {
        await queue.close();
        await pool.end();
      },
    };
  } catch (error) {
    await pool.end();
    if (error instanceof PostgresConfigError) throw new CliUsageError("console", error.message);
    throw error;
  }
}

/** `loopctl console [--database URL [--schema NAME]] [--port N] [--host H] [--allowed-host H]… [--project …] [--root DIR] [--audit FILE [--audit-key-file F]] [--max-connections N]`. */
export async function consoleCommand(args: readonly string[], context: CliContext): Promise<ExitCode> {
  const { values, positionals } = parseCommandArgs("console", args, OPTIONS);
  if (values.help) {
    const asJson = asksForJson(args);
    context.stdout.write(asJson ? json({ command: "loopctl console", help: CONSOLE_HELP }) : CONSOLE_HELP);
    return EXIT.ok;
  }
  if (positionals.length > 0) throw new CliUsageError("console", `unexpected argument ${shownValue(positionals[0])}`);
  const port = values.port === undefined ? 0 : Number(values.port);
  if (!/^\d{1,5}$/.test(values.port ?? "0") || port > 65_535) {
    throw new CliUsageError("console", `--port must be an integer from 0 to 65535, got ${shownValue(values.port)}`);
  }
  const cap = values["max-connections"];
  const maxConnections = cap === undefined ? undefined : Number(cap);
  // Digits only, as for --port: Number() would take "", " 3", "1e3" and "0x10".
  if (cap !== undefined && (!/^\d+$/.test(cap) || !Number.isSafeInteger(maxConnections) || Number(cap) < 1)) {
    throw new CliUsageError("console", `--max-connections must be an integer of at least 1, got ${shownText(cap)}`);
  }
  if (values.audit === "") throw new CliUsageError("console", "--audit needs the FILE of an audit log");
  const keyFile = values["audit-key-file"];
  if (keyFile === "") throw new CliUsageError("console", "--audit-key-file needs the FILE of a key");
  if (keyFile !== undefined && values.audit === undefined) {
    throw new CliUsageError("console", "--audit-key-file is the key of the --audit log: give --audit FILE too");
  }
  // The server takes "" for every address: an unset "$HOST" must not open the console to the network.
  if (values.host === "") throw new CliUsageError("console", "--host needs an address to listen on (H)");
  const token = context.env["LOOPCTL_CONSOLE_TOKEN"];
  const allowedHosts = values["allowed-host"];
  // Before the audit log, the key file and the sources are opened: a refused one is a usage error
  // said alone, not the error of a file or a database that cannot be reached.
  checkServerOptions({ host: values.host, allowedHosts, token });
  const audit = values.audit === undefined ? undefined : resolve(context.cwd, values.audit);

  // A log not there yet is served as it comes, unless the path starts with a ~ the shell did not
  // expand (--audit=~/x): a log under a folder named ~ here, which its agent never writes.
  if (audit !== undefined && !(await checkAuditLog(audit)) && values.audit?.startsWith("~") === true) {
    context.stderr.write(
      `loopctl: warning: the audit log ${printable(audit)} does not exist: ${unexpandedTilde("--audit")}\n`,
    );
  }
  const auditKey =
    keyFile === undefined ? undefined : await keyOption(keyFile, context.cwd, "--audit-key-file", "console");
  const settings = { audit, auditKey, host: values.host, allowedHosts, port, token, maxConnections };
  return serveConsole(await openSources(values, context), settings, context);
}

/**
 * Serves the console over `source` until `context.signal` aborts (without
 * one, until SIGINT or SIGTERM), then closes `source`. A failure to close it
 * (a database pool that will not end) is one warning line on stderr: the
 * console's own result or error, and so its exit code, stand.
 */
export async function serveConsole(
  source: ConsoleSources,
  settings: ConsoleSettings,
  context: CliContext,
): Promise<ExitCode> {
  const { audit, auditKey, host, allowedHosts, port, token, maxConnections } = settings;
  try {
    const grantsTimeoutMs = positiveInteger(
      "grantsTimeoutMs",
      settings.grantsTimeoutMs,
      DEFAULT_GRANTS_TIMEOUT_MS,
      MAX_TIMER_MS,
    );
    // Served first: a server option it refuses is a usage error said alone, not after a warning
    // that the console serves on, nor after the grants had up to grantsTimeoutMs to answer.
    const server = await serve({
      ...(source.inbox === undefined ? {} : { approver: source.inbox }),
      ...(source.grants === undefined ? {} : { grants: source.grants }),
      ...(audit === undefined
        ? {}
        : { records: auditLogRecords(audit, auditKey === undefined ? {} : { key: auditKey }) }),
      ...(host === undefined ? {} : { host }),
      ...(allowedHosts === undefined ? {} : { allowedHosts }),
      port,
      ...(token === undefined ? {} : { token }),
      ...(maxConnections === undefined ? {} : { maxConnections }),
      grantsTimeoutMs,
      onError: (error) =>
        context.stderr.write(`loopctl console: ${printable(error instanceof Error ? error.message : String(error))}\n`),
    });
    // From here on the server listens: whatever fails (a stdout or stderr whose write throws) closes
    // it before the error goes on, or the port would stay open, and the process never end.
    let stop: ReturnType<typeof stopped> | undefined;
    try {
      if (source.grants !== undefined)
        await warnUnreadableGrants(source.grants, source.location, grantsTimeoutMs, context);
      // Listened for before the link is printed: a Ctrl-C as soon as it shows is a stop like any
      // other, not the signal's default end of the process.
      stop = stopped(context.signal);
      context.stdout.write(
        `loopctl console: ${source.describe}` +
          (audit === undefined
            ? ""
            : `  audit   ${printable(audit)}` +
              (auditKey === undefined
                ? " (hash chain checked; no line authenticated without --audit-key-file)\n"
                : " (each line's mac and the seal checked with the key)\n")) +
          `open ${server.consoleUrl}\n` +
          "(Ctrl-C stops it)\n",
      );
      await stop.done;
      context.stopAsked?.();
    } finally {
      stop?.cancel();
      await server.close();
    }
    context.stdout.write("loopctl console: stopped\n");
    return EXIT.ok;
  } finally {
    await closeOrWarn(source, context);
  }
}

/**
 * Says once, before the link, what `grants list` would refuse the grants
 * for (a corrupt ledger, one of a later format, a malformed row) with the
 * same way out. Not a refusal: asks must still be answerable, and each
 * request for the grants says it again. Any other failure is left to those
 * requests. A store that has not answered within `timeoutMs` (a ledger on a
 * hung mount, a database that swallows packets) is left to them too, its
 * load aborted: it must not hold the link, and the asks, back for as long
 * as it stays silent.
 */
async function warnUnreadableGrants(
  grants: GrantStore,
  location: string,
  timeoutMs: number,
  context: CliContext,
): Promise<void> {
  const controller = new AbortController();
  const stop = (): void => controller.abort(context.signal?.reason);
  if (context.signal?.aborted === true) stop();
  else context.signal?.addEventListener("abort", stop, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), timeoutMs)));
  try {
    // A store's load that throws rather than rejects is a failure like any other.
    const loaded = (async () => {
      await grants.load({ signal: controller.signal });
      return "read" as const;
    })();
    if ((await Promise.race([loaded, late])) === "read") return;
    controller.abort(new DOMException(`the grant store did not answer within ${timeoutMs} ms`, "TimeoutError"));
    context.stderr.write(
      `loopctl: warning: the grants in ${printable(location)} could not be read within ${timeoutMs / 1000} s; ` +
        `the console serves asks meanwhile, and a request for the grants waits ${timeoutMs / 1000} s at most\n`,
    );
  } catch (error) {
    if (!(error instanceof LoopctlError) || exitCodeOf(error) !== EXIT.corrupt) return;
    context.stderr.write(`loopctl: warning: ${printable(error.message)} [${error.code}]\n`);
    const hint = hintFor(error);
    context.stderr.write(
      `loopctl: ${hint === undefined ? "" : `${hint}; `}the console serves asks meanwhile, and its grants fail until then\n`,
    );
  } finally {
    clearTimeout(timer);
    context.signal?.removeEventListener("abort", stop);
  }
}

/**
 * Refuses an `--audit` that exists and is not a regular file (exit 4, as
 * `audit verify` refuses it): a folder would fail every request for records,
 * and a FIFO would hang each one until a writer came. A log not there yet is
 * fine: its agent may not have written it. Resolves to whether it exists.
 */
async function checkAuditLog(file: string): Promise<boolean> {
  const found = await stat(file).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return undefined;
    throw new AuditIoError(file, `audit log ${file}: cannot read (${error.code ?? error.message})`, { cause: error });
  });
  if (found !== undefined && !found.isFile()) {
    throw new AuditPathError(file, `audit log ${file} is not a regular file`);
  }
  return found !== undefined;
}

/** Where a server option the console passes on comes from on its command line. */
const SOURCE_OF: Readonly<Record<string, string>> = {
  allowedHosts: "--allowed-host",
  host: "--host",
  maxConnections: "--max-connections",
  port: "--port",
  token: "LOOPCTL_CONSOLE_TOKEN",
};

/**
 * `createApprovalServer`, its refusals of what the command line gave turned
 * into usage errors (exit 2) naming the flag: an unusable option, or a
 * `--host` that names no address of this machine.
 */
async function serve(options: ApprovalServerOptions): Promise<ApprovalServer> {
  try {
    return await createApprovalServer(options);
  } catch (error) {
    throw usageErrorOf(error, options);
  }
}

/**
 * The server's own checks of the token, the `--allowed-host` names and a
 * `--host` that spells every address, none of which needs I/O: made before
 * any file or the sources are opened, so with `--database` a refused one is a
 * usage error (exit 2) said before any connection, not the error of a
 * database that cannot be reached. The server checks them again, with the rest.
 */
function checkServerOptions(options: Pick<ConsoleSettings, "host" | "allowedHosts" | "token">): void {
  try {
    if (options.token !== undefined) checkToken(options.token);
    if (options.allowedHosts !== undefined) allowedHostNames(options.allowedHosts);
    if (options.host !== undefined) checkListenHost(options.host, options.allowedHosts ?? []);
  } catch (error) {
    throw usageErrorOf(error, options);
  }
}

/** What the server refused of `options`, as a usage error naming the flag; any other error as it is. */
function usageErrorOf(
  error: unknown,
  options: { readonly host?: string | undefined; readonly allowedHosts?: readonly string[] | undefined },
): unknown {
  if (error instanceof ServerConfigError) {
    const flag = SOURCE_OF[error.option] ?? error.option;
    const detail = error.message.slice(error.message.indexOf(": ") + 2);
    if (error.option === "allowedHosts" && options.allowedHosts === undefined) {
      return new CliUsageError(
        "console",
        `--host ${options.host ?? ""} needs --allowed-host H: the names clients use to reach it`,
      );
    }
    return new CliUsageError("console", `${flag}: ${detail}`);
  }
  const code = error instanceof ServerListenError ? (error.cause as { code?: unknown } | undefined)?.code : undefined;
  if (code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EADDRNOTAVAIL") {
    return new CliUsageError(
      "console",
      `--host ${options.host ?? ""}: not an address of this machine to listen on (${code})`,
    );
  }
  return error;
}

/**
 * `done` resolves when `signal` aborts, or without one on SIGINT or SIGTERM:
 * a server's normal end. `cancel` removes the listeners: a console that ends
 * otherwise must not leave a Ctrl-C handled by nothing.
 */
function stopped(signal: AbortSignal | undefined): { readonly done: Promise<void>; cancel(): void } {
  let cancel = (): void => undefined;
  const done = new Promise<void>((resolve) => {
    const stop = (): void => {
      cancel();
      resolve();
    };
    if (signal !== undefined) {
      if (signal.aborted) return resolve();
      signal.addEventListener("abort", stop, { once: true });
      cancel = () => signal.removeEventListener("abort", stop);
      return;
    }
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
    cancel = () => {
      process.removeListener("SIGINT", stop);
      process.removeListener("SIGTERM", stop);
    };
  });
  return { done, cancel };
}
