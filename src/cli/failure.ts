import { describeError, LoopctlError } from "../errors.js";
import { EXIT, ISSUES_URL } from "./context.js";
import type { ExitCode } from "./context.js";

/** The codes of grants that cannot be read as grants: a corrupt ledger, one of a later format, a malformed row. */
const UNREADABLE_GRANTS = new Set(["LEDGER_CORRUPT", "LEDGER_UNKNOWN_FORMAT", "POSTGRES_ROW_MALFORMED"]);

/** The exit code of a typed error: 3 for grants that cannot be read as grants, else 4. */
export function exitCodeOf(error: LoopctlError): ExitCode {
  return UNREADABLE_GRANTS.has(error.code) ? EXIT.corrupt : EXIT.io;
}

/**
 * The way out of an exit 3, or of a schema not migrated, for people: a corrupt ledger file is moved aside
 * by `grants repair`; one of a later format is read by upgrading loopctl; a malformed row in PostgreSQL is not a file. An asks row
 * is fixed or deleted in the database. A grants row is forgotten with the rest
 * of the project's grants by `grants reset`, or revoked alone at the project's
 * next version: running stores read only the rows above the version they
 * hold, so an edit or a DELETE that keeps the row's version never reaches
 * them. `undefined` for other errors.
 */
export function hintFor(error: LoopctlError): string | undefined {
  if (error.code === "LEDGER_CORRUPT") {
    return (
      "run 'loopctl grants repair' with the same --project and --root to move it aside " +
      "(its bytes kept) and start a fresh ledger"
    );
  }
  // Its grants are sound to the loopctl that wrote it: moving it aside would lose them.
  if (error.code === "LEDGER_UNKNOWN_FORMAT") {
    return (
      "the ledger is left as it is: upgrade loopctl ('loopctl --version' shows this one) to use its grants; " +
      "'loopctl grants repair' never moves a ledger of a later format aside"
    );
  }
  // A console or a grants command pointed at the wrong schema would otherwise be told to migrate it.
  if (error.code === "POSTGRES_NOT_MIGRATED") {
    return (
      "the CLI creates no tables: pass the --schema your workers migrated (without --schema: loopctl), " +
      "or create this one with migrate(pool, { schema }) from loopctl/postgres"
    );
  }
  if (error.code !== "POSTGRES_ROW_MALFORMED") return undefined;
  const table = (error as { table?: unknown }).table;
  const grants = typeof table === "string" && /\.grants\b/.test(table);
  return (
    "nothing was changed and the row is left as it is: " +
    (grants
      ? "forget every grant of the project with 'loopctl grants reset' and the same --database, --schema " +
        "and --project (its rows are kept, marked revoked), or revoke that row alone at the project's next " +
        "version (docs/postgres.md shows the statement); an edit or a DELETE by hand that keeps the row's " +
        "version goes unseen by the stores already running"
      : "fix or delete that row in the database")
  );
}

/**
 * What `--json` prints on stdout for an error the command did not answer
 * itself, so a script always has one document to parse: `{"error", "message",
 * "hint"?}`, as a usage error's. `error` is the typed error's code, `"STOPPED"`
 * when `signal` stopped the command, `"INTERNAL"` for an unexpected error (a
 * bug, exit 5). A command adds what it knows in front (`ledger`, or `ok` and
 * `file`). Usage errors are not passed here: they have their own hint.
 */
export function errorDocument(
  error: unknown,
  signal: AbortSignal | undefined,
): { error: string; message: string; hint?: string } {
  if (signal?.aborted) return { error: "STOPPED", message: `stopped: ${String(signal.reason)}` };
  if (error instanceof LoopctlError) {
    const hint = hintFor(error);
    return { error: error.code, message: error.message, ...(hint === undefined ? {} : { hint }) };
  }
  return { error: "INTERNAL", message: describeError(error), hint: `a bug: please report it at ${ISSUES_URL}` };
}
