import { EXIT, ISSUES_URL } from "./context.js";
import type { CliContext, ExitCode } from "./context.js";
import { json } from "./format.js";

/** The exit codes, as every command's help ends with them. */
export const EXIT_CODES = `Exit codes:
  0  done
  1  verification failed, or a file or grant id was not found
  2  usage error (unknown command or option, missing or malformed argument);
     with --json, also {"error": "USAGE", "message", "hint"} on stdout
  3  the grant ledger is corrupt (see grants repair) or in a later format
     (upgrade loopctl), or a database row is malformed (see grants reset);
     reported, never rewritten
  4  I/O, lock or database error (unreadable file, output that cannot be
     written, refused path, ledger lock busy, unreachable or unmigrated
     database)
  5  unexpected error (a bug: please report it at
     ${ISSUES_URL})
`;

/**
 * The --project/--root lines, and unless `database` is false the
 * --database/--schema ones, their descriptions starting at column `at`.
 */
function projectOptions(at: number, database = true): string {
  const pad = (flag: string): string => `  ${flag}`.padEnd(at);
  const file =
    `${pad("--project DIR")}the project whose ledger to use (default: this folder)\n` +
    `${pad("--root DIR")}the grant store root (default: $XDG_STATE_HOME/loopctl/\n` +
    `${" ".repeat(at)}grants, else ~/.local/state/loopctl/grants)\n`;
  if (!database) return file;
  return (
    file +
    `${pad("--database URL")}use the grants shared in PostgreSQL instead\n` +
    `${" ".repeat(at)}(loopctl/postgres); --project NAME then names the\n` +
    `${" ".repeat(at)}project there (required)\n` +
    `${pad("--schema NAME")}with --database: the schema migrate() created\n` +
    `${" ".repeat(at)}(default: loopctl)\n`
  );
}

const PROJECT_OPTIONS = projectOptions(17);

/** The help text of each command, keyed by its words. */
export const HELP = {
  "": `loopctl: inspect the approvals an agent remembers, verify its audit log,
serve the approval console.

Usage:
  loopctl grants list     [--project DIR] [--root DIR] [--json]
  loopctl grants revoke   ID [--project DIR] [--root DIR]
  loopctl grants reset    [--tool NAME] [--project DIR] [--root DIR]
  loopctl grants explain  --tool NAME --args JSON [--descriptor JSON]
                          [--project DIR] [--root DIR] [--json]
  loopctl grants repair   [--project DIR] [--root DIR]
  loopctl audit verify    FILE [--anchor SEQ:HASH] [--key-file F] [--json]
  loopctl console         [--port N] [--host H] [--allowed-host H]...
                          [--project DIR] [--root DIR]
                          [--database URL [--schema NAME]] [--audit FILE]
                          [--audit-key-file F] [--max-connections N]
  loopctl --version (-v) [--json]

Every grants command but repair also takes --database URL --project NAME
[--schema NAME]: the grants every worker shares in PostgreSQL
(loopctl/postgres) instead of a ledger file. Every command takes --help
(-h); with --json on either side of it, the help is printed as one JSON
document, {"command", "help"}, as --version prints {"version"}. An option
that takes a value is given once; a flag given twice means it once.

${EXIT_CODES}`,
  grants: `loopctl grants: the approvals remembered for a project.

Usage:
  loopctl grants list     list the grants in the project's ledger
  loopctl grants revoke   remove one grant by id
  loopctl grants reset    remove every grant (or one tool's): back to asking
  loopctl grants explain  show which grant would decide a call, and why
  loopctl grants repair   move a corrupt ledger aside and start afresh

Run 'loopctl grants <command> --help' for its options.

${EXIT_CODES}`,
  "grants list": `loopctl grants list: list the grants in a project's ledger.

Usage:
  loopctl grants list [--project DIR] [--root DIR]
                      [--database URL --project NAME [--schema NAME]] [--json]

Options:
${PROJECT_OPTIONS}  --json         print {"ledger", "grants"} with each grant as its ledger record
                 (on failure {"ledger", "error", "message", "hint"})
  -h, --help     show this help

${EXIT_CODES}`,
  "grants revoke": `loopctl grants revoke: remove one grant by id.

Usage:
  loopctl grants revoke ID [--project DIR] [--root DIR]
                           [--database URL --project NAME [--schema NAME]]

ID is the 16-hex id 'loopctl grants list' shows. An unknown id changes
nothing and exits 1.

Options:
${PROJECT_OPTIONS}  -h, --help     show this help

${EXIT_CODES}`,
  "grants reset": `loopctl grants reset: back to asking.

Usage:
  loopctl grants reset [--tool NAME] [--project DIR] [--root DIR]
                       [--database URL --project NAME [--schema NAME]]

Removes every grant of the project, or with --tool only the grants of that
tool (the name matches exactly; a tool whose name differs only in case or
surrounding spaces keeps its grants, and is named on stderr). The next call
is asked about again.

Options:
  --tool NAME    remove only this tool's grants
${PROJECT_OPTIONS}  -h, --help     show this help

${EXIT_CODES}`,
  "grants explain": `loopctl grants explain: which grant would decide a call, and why.

Usage:
  loopctl grants explain --tool NAME --args JSON [--descriptor JSON]
                         [--project DIR] [--root DIR] [--json]
                         [--database URL --project NAME [--schema NAME]]

The policy: a deny grant covering the call wins over any allow grant, and
stays in force even if the tool changed; else an allow grant covering it
decides, but only while the tool's descriptor matches the grant's pin
(a changed tool is asked about again); else the call is asked about.
Without --descriptor pins cannot be checked, and a decision that hinges on
one is shown as depending on the tool's current descriptor.

Options:
  --tool NAME        the tool's name (exact, case-sensitive)
  --args JSON        the call's arguments as JSON, e.g. '{"path":"/tmp/x"}'
  --descriptor JSON  the tool's descriptor, to check pins:
                     '{"description": "...", "inputSchema": {...}}', with its
                     "title", "annotations" and "outputSchema" if it has them
${projectOptions(21)}  --json             print the explanation as JSON
  -h, --help         show this help

${EXIT_CODES}`,
  "grants repair": `loopctl grants repair: move a corrupt ledger aside.

Usage:
  loopctl grants repair [--project DIR] [--root DIR]

When the project's ledger cannot be read as grants (exit 3 from any other
command), moves it to grants.json.corrupt-<ms>-<hex> beside it, owner-only
and byte for byte, and says where. The next grant saved starts a fresh
ledger; until then every gated call is asked about. A ledger that reads
fine is never touched: that, or no ledger at all, exits 1. Nor is a ledger
in a later format (a newer loopctl's, exit 3): upgrade loopctl to use it.

Grants in PostgreSQL (--database) are rows, not a file: a malformed row is
forgotten with the project's other grants by 'loopctl grants reset', or
revoked alone at the project's next version (docs/postgres.md shows the
statement). Running stores read only rows above the version they hold, so
an edit or a DELETE that keeps the row's version never reaches them.

Options:
${projectOptions(17, false)}  -h, --help     show this help

${EXIT_CODES}`,
  audit: `loopctl audit: the hash-chained audit log of gate decisions.

Usage:
  loopctl audit verify FILE [--anchor SEQ:HASH] [--key-file F] [--json]

Run 'loopctl audit verify --help' for its options.

${EXIT_CODES}`,
  "audit verify": `loopctl audit verify: check that an audit log is intact.

Usage:
  loopctl audit verify FILE [--anchor SEQ:HASH] [--key-file F] [--json]

Detects an edited, removed, reordered or duplicated line, a line with a member
twice and a truncated tail, and names the first line at fault. Whole lines
removed from the end, or a log re-hashed from scratch, show only against an
anchor (the SEQ:HASH the writer reported last, kept apart from the log) or,
for a log written with a key, with that key: every line's MAC and the seal
beside the log (FILE.seal) are then checked.

Options:
  --anchor SEQ:HASH  also check the log against this anchor
  --key-file F       the key the log was written with (its bytes; of a key of
                     text, one trailing newline ignored; the file must be
                     private to its owner)
  --json             print the result as JSON
  -h, --help         show this help

${EXIT_CODES}`,
} as const;

/** A command that has a help text. */
export type HelpTopic = keyof typeof HELP;

/**
 * Prints the help a command was asked for (`--help`, `-h`) on stdout, exit 0:
 * as text, or with `asJson` (a `--json` on the line) as one document,
 * `{"command": "loopctl grants list", "help": <the text>}`, since with
 * `--json` every exit prints exactly one JSON document there.
 */
export function printHelp(topic: HelpTopic, context: CliContext, asJson: boolean): ExitCode {
  const command = topic === "" ? "loopctl" : `loopctl ${topic}`;
  context.stdout.write(asJson ? json({ command, help: HELP[topic] }) : HELP[topic]);
  return EXIT.ok;
}
