import { describeError, LoopctlError, shownValue } from "../errors.js";
import { auditVerify } from "./audit.js";
import { consoleCommand } from "./console.js";
import { asksForJson, CliUsageError, EXIT, ISSUES_URL } from "./context.js";
import type { CliContext, ExitCode } from "./context.js";
import { errorDocument, exitCodeOf, hintFor } from "./failure.js";
import { json, printable } from "./format.js";
import { HELP, printHelp } from "./help.js";
import type { HelpTopic } from "./help.js";
import { GRANTS_COMMANDS } from "./grants.js";
import { unknownCommand, unknownFlag } from "./suggest.js";
import { packageVersion } from "./version.js";
import { shownText } from "../shown.js";

type Command = (args: readonly string[], context: CliContext) => Promise<ExitCode>;

const GROUPS = {
  grants: GRANTS_COMMANDS as Readonly<Record<string, Command>>,
  audit: { verify: auditVerify } as Readonly<Record<string, Command>>,
} as const;

type Group = keyof typeof GROUPS;

const isGroup = (word: string): word is Group => Object.hasOwn(GROUPS, word);

const isHelp = (arg: string | undefined): boolean => arg === "--help" || arg === "-h";
const isVersion = (arg: string | undefined): boolean => arg === "--version" || arg === "-v";

/**
 * Runs `loopctl` with `argv` (the arguments after the program name) and
 * resolves to the exit code. Never rejects: every failure is written to
 * `context.stderr` and mapped to an exit code (see `loopctl --help`). With
 * `--json` among the arguments, every exit prints one JSON document on stdout:
 * the command's result, its help (`{"command", "help"}`), or its error, such
 * as a usage error's `{"error": "USAGE", "message", "hint"}`, even when the
 * line failed to parse.
 */
export async function runCli(argv: readonly string[], context: CliContext): Promise<ExitCode> {
  const asJson = asksForJson(argv);
  // Whether a document is on stdout yet: a command prints its own (its result, or an error with
  // what it knows, such as the ledger); any other error is printed as one when nothing was.
  let printed = false;
  const tracked: CliContext = {
    stdout: {
      write: (chunk: string) => {
        printed = true;
        return context.stdout.write(chunk);
      },
    },
    stderr: context.stderr,
    env: context.env,
    // Read when a command needs it, not before: the bin's current folder may be gone.
    get cwd() {
      return context.cwd;
    },
    ...(context.signal === undefined ? {} : { signal: context.signal }),
    ...(context.stopAsked === undefined ? {} : { stopAsked: context.stopAsked }),
  };
  try {
    return await dispatch(argv, tracked);
  } catch (error) {
    try {
      return report(error, context, asJson && !printed);
    } catch {
      // stderr itself failed (a closed pipe): the exit code is all that is left.
      return EXIT.internal;
    }
  }
}

async function dispatch(argv: readonly string[], context: CliContext): Promise<ExitCode> {
  const [group, sub, ...rest] = argv;
  if (group === undefined) return usageHelp("", context);
  const help = helpAsked("", argv, ["help", "version"]);
  if (help !== undefined) return printHelp("", context, help.asJson);
  // --version (-v) with --json on either side of it, as --help takes it; a flag given twice means
  // what it means once (only an option's value could differ).
  const leading = argv.findIndex((arg) => !isVersion(arg) && arg !== "--json");
  const flags = leading === -1 ? argv : argv.slice(0, leading);
  if (flags.some(isVersion)) {
    if (leading !== -1) throw new CliUsageError("", `unexpected argument ${shownValue(argv[leading])}`);
    const version = packageVersion();
    context.stdout.write(asksForJson(argv) ? json({ version }) : `${version}\n`);
    return EXIT.ok;
  }
  if (group === "console") return consoleCommand(argv.slice(1), context);
  if (!isGroup(group)) {
    throw new CliUsageError(
      "",
      group.startsWith("-")
        ? optionBeforeCommand("", group, argv.slice(1), ["help", "version"])
        : unknownCommand("", group, [...Object.keys(GROUPS), "console"]),
    );
  }
  if (sub === undefined) return usageHelp(group, context);
  const groupHelp = helpAsked(group, argv.slice(1), ["help"]);
  if (groupHelp !== undefined) return printHelp(group, context, groupHelp.asJson);
  const table = GROUPS[group];
  const command = Object.hasOwn(table, sub) ? table[sub] : undefined;
  if (!command) {
    throw new CliUsageError(
      group,
      sub.startsWith("-")
        ? optionBeforeCommand(group, sub, rest, ["help"])
        : unknownCommand(group, sub, Object.keys(table)),
    );
  }
  return command(rest, context);
}

/** The commands a topic's first word may be: the groups and `console` at the top, else the group's. */
function commandsOf(topic: "" | Group): readonly string[] {
  return topic === "" ? [...Object.keys(GROUPS), "console"] : Object.keys(GROUPS[topic]);
}

/**
 * What to say of `option`, written where `topic`'s command word belongs:
 * when one of its commands follows (before a `--`), that the option goes
 * after it (`"--project" goes after the command: loopctl grants list
 * --project …`), for the option is likely that command's own; else that
 * `topic` knows no such option (`known`: its own).
 */
function optionBeforeCommand(
  topic: "" | Group,
  option: string,
  rest: readonly string[],
  known: readonly string[],
): string {
  const end = rest.indexOf("--");
  const words = end === -1 ? rest : rest.slice(0, end);
  const at = words.findIndex((word) => commandsOf(topic).includes(word));
  const command = words[at];
  if (option === "--" || command === undefined) return unknownFlag(option, known);
  const path = [topic, command].filter((word) => word !== "");
  const next = words[at + 1];
  if (topic === "" && isGroup(command) && next !== undefined && commandsOf(command).includes(next)) path.push(next);
  const name = option.split("=")[0] as string;
  return `${shownText(name)} goes after the command: loopctl ${path.join(" ")} ${name} …`;
}

/**
 * Whether a command group (`loopctl`, `loopctl grants`) is asked for its help,
 * read as a command reads its own: `--help` (`-h`) among the options before
 * the group's first word (and before a `--`), with `--json` on either side of
 * it, anywhere before a `--`, for the help as one JSON document. Any other
 * option before the first word is refused whichever side of `--help` it is on,
 * as a command refuses one; the words from the first on are not read.
 */
function helpAsked(
  topic: HelpTopic,
  words: readonly string[],
  known: readonly string[],
): { asJson: boolean } | undefined {
  const end = words.findIndex((word) => word === "--" || !word.startsWith("-"));
  const options = end === -1 ? words : words.slice(0, end);
  if (!options.some(isHelp)) return undefined;
  // At the top, a --version beside --help is a known option: the help is what is printed.
  const version = (option: string): boolean => topic === "" && (option === "--version" || option === "-v");
  const other = options.find((option) => !isHelp(option) && option !== "--json" && !version(option));
  if (other !== undefined) throw new CliUsageError(topic, unknownFlag(other, [...known, "json"]));
  return { asJson: asksForJson(words) };
}

/** The help given for lack of a command: a usage error, on stderr. Asked for, it is {@link printHelp}. */
function usageHelp(topic: HelpTopic, context: CliContext): ExitCode {
  context.stderr.write(HELP[topic]);
  return EXIT.usage;
}

function report(error: unknown, context: CliContext, asJson: boolean): ExitCode {
  if (error instanceof CliUsageError) {
    const prefix = error.command === "" ? "loopctl" : `loopctl ${error.command}`;
    // A script that passed --json parses stdout: it gets a document there too, not an empty string.
    if (asJson) {
      context.stdout.write(json({ error: "USAGE", message: error.message, hint: `run '${prefix} --help' for usage` }));
    }
    context.stderr.write(`${prefix}: ${printable(error.message)}\n` + `Run '${prefix} --help' for usage.\n`);
    return EXIT.usage;
  }
  if (asJson) context.stdout.write(json(errorDocument(error, context.signal)));
  if (context.signal?.aborted) {
    context.stderr.write(`loopctl: stopped: ${printable(String(context.signal.reason))}\n`);
    return EXIT.io;
  }
  if (error instanceof LoopctlError) {
    context.stderr.write(`loopctl: ${printable(error.message)} [${error.code}]\n`);
    // Every exit 3 says the way out.
    const hint = hintFor(error);
    if (hint !== undefined) context.stderr.write(`loopctl: ${hint}\n`);
    return exitCodeOf(error);
  }
  context.stderr.write(
    `loopctl: unexpected error (a bug: please report it at ${ISSUES_URL}): ${printable(describeError(error))}\n`,
  );
  return EXIT.internal;
}
