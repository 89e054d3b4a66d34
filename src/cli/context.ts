import { parseArgs } from "node:util";
import { takesNoValue, unknownOption } from "./suggest.js";

/** Where the CLI writes: `process.stdout`/`process.stderr` or a test's capture. */
export interface CliOutput {
  write(chunk: string): unknown;
}

/** Everything {@link runCli} takes from its process, so that tests can supply their own. */
export interface CliContext {
  readonly stdout: CliOutput;
  readonly stderr: CliOutput;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** The folder relative paths resolve against, and the default `--project`. */
  readonly cwd: string;
  /** Stops reading files; the command then fails with exit code 4. */
  readonly signal?: AbortSignal;
  /**
   * Told when the user stops a command that runs until stopped (`console`,
   * by Ctrl-C or SIGTERM): what it writes after, such as the line saying it
   * stopped, is a courtesy, and output lost then leaves its exit code as it is.
   */
  readonly stopAsked?: () => void;
}

/** Where to report a bug: the project's issue tracker (the package's `bugs.url`). */
export const ISSUES_URL = "https://github.com/loopctl/loopctl/issues";

/**
 * The exit codes, as `loopctl --help` documents them.
 * - 0: done (a log verified, a grant revoked, a list printed)
 * - 1: a negative answer: an audit log failed verification, a file or grant id was not found
 * - 2: usage error (unknown command or option, missing or malformed argument); with `--json`,
 *   also `{"error": "USAGE", "message", "hint"}` on stdout (every other failure is one document
 *   there too: `{"error": <code>, "message", "hint"?}`, `"INTERNAL"` for exit 5)
 * - 3: a grant ledger is corrupt or in a later format (reported, never rewritten)
 * - 4: an I/O or lock error (unreadable file, output that cannot be written, refused path,
 *   ledger lock busy)
 * - 5: an unexpected error (a bug: please report it at {@link ISSUES_URL})
 */
export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  corrupt: 3,
  io: 4,
  internal: 5,
} as const;

/** One of the {@link EXIT} codes. */
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** A command line the CLI cannot act on; reported with exit code 2 and the command's help hint. */
export class CliUsageError extends Error {
  /** The command whose `--help` the message points to, e.g. `"grants list"`. */
  readonly command: string;

  constructor(command: string, message: string) {
    super(message);
    this.name = "CliUsageError";
    this.command = command;
  }
}

/**
 * Whether `argv` asks for JSON: `--json` (or `--json=…`) anywhere before a
 * `--`, whatever else the line holds, so that a line that fails to parse is
 * still answered in JSON. A separate `--json` is never another option's value
 * here (a value starting with a dash is refused unless written `--tool=--json`),
 * so it counts after one too; after `--` it is a positional (a file named `--json`).
 */
export function asksForJson(argv: readonly string[]): boolean {
  for (const arg of argv) {
    if (arg === "--") return false;
    if (arg === "--json" || arg.startsWith("--json=")) return true;
  }
  return false;
}

/**
 * `parseArgs` in strict mode with positionals, its errors turned into
 * {@link CliUsageError}s that name `command`; an unknown option's names the
 * known one it is nearest to, if any, or what `elsewhere` says of it: an
 * option another command takes, by its long name, and the sentence that
 * points there.
 */
export function parseCommandArgs<T extends ParseArgsOptionsConfig>(
  command: string,
  args: readonly string[],
  options: T,
  elsewhere: Readonly<Record<string, string>> = {},
): { values: ParsedValues<T>; positionals: string[] } {
  // A first, lenient pass finds unknown options, so the error can name the one meant.
  const { tokens } = parseArgs({ args: [...args], options, allowPositionals: true, strict: false, tokens: true });
  // Every command's --help takes --json (the help as one JSON document), also one with no --json of its own.
  const helpAsked = Object.hasOwn(options, "help") && tokens.some((t) => t.kind === "option" && t.name === "help");
  const helpJson = new Set<number>();
  const seen = new Set<string>();
  for (const token of tokens) {
    if (token.kind !== "option") continue;
    if (helpAsked && token.name === "json" && !Object.hasOwn(options, "json") && token.rawName === "--json") {
      if (token.value === undefined) {
        helpJson.add(token.index);
        continue;
      }
    }
    if (!Object.hasOwn(options, token.name)) {
      const pointer =
        token.rawName.startsWith("--") && Object.hasOwn(elsewhere, token.name) ? elsewhere[token.name] : undefined;
      if (pointer !== undefined) throw new CliUsageError(command, `unknown option "${token.rawName}"; ${pointer}`);
      throw new CliUsageError(
        command,
        unknownOption(writtenOption(token.rawName, args[token.index]), Object.keys(options)),
      );
    }
    const option = options[token.name] as { type: string; multiple?: boolean };
    if (option.type !== "string") {
      // parseArgs says "Option '--json' does not take an argument": said as every other refusal is.
      if (token.value !== undefined) {
        throw new CliUsageError(command, takesNoValue(token.rawName, token.value));
      }
      continue;
    }
    // parseArgs's own messages for these run over three lines; say it in one, with the way to pass a dash.
    if (token.value === undefined) throw new CliUsageError(command, `--${token.name} needs a value`);
    if (token.inlineValue !== true && token.value.startsWith("-")) {
      throw new CliUsageError(
        command,
        `--${token.name} needs a value; to give one starting with a dash, write --${token.name}=${token.value}`,
      );
    }
    // The last of two would win silently: a script that adds one to a command line it was given
    // would act on another folder, database or tool than the one it was given.
    if (option.multiple !== true && seen.has(token.name)) {
      throw new CliUsageError(command, `--${token.name} given twice; give it once`);
    }
    seen.add(token.name);
  }
  try {
    const kept = args.filter((_, index) => !helpJson.has(index));
    const parsed = parseArgs({ args: kept, options, allowPositionals: true, strict: true });
    return { values: parsed.values, positionals: parsed.positionals };
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code === "string" && code.startsWith("ERR_PARSE_ARGS_")) {
      throw new CliUsageError(command, (error as Error).message);
    }
    throw error;
  }
}

/**
 * The unknown option as the command line wrote it: a long name written with
 * one dash (`-project`) is read by the parser as a group of letters, and
 * would be named by the first unknown one (`-p`), which nobody typed. Such
 * an argument is named whole, up to an `=`.
 */
function writtenOption(rawName: string, written: string | undefined): string {
  if (rawName.startsWith("--") || written === undefined || written.startsWith("--") || written.length <= 2) {
    return rawName;
  }
  const name = written.split("=")[0] as string;
  return name.length > 2 ? name : written;
}

type ParseArgsOptionsConfig = NonNullable<Parameters<typeof parseArgs>[0]>["options"] & object;
type ParsedValues<T extends ParseArgsOptionsConfig> = ReturnType<
  typeof parseArgs<{ options: T; allowPositionals: true; strict: true }>
>["values"];
