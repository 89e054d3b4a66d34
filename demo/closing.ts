import { isAbsolute, relative, resolve } from "node:path";
import { visibleLength } from "./layout.js";

/** `word` as a POSIX shell reads it back: bare when that is safe, else in single quotes. */
export function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

/** A word of a command, or an option with its value (kept on one line). */
export type CommandPart = string | readonly [option: string, value: string];

/**
 * A command in `width` columns, to be copied into a shell: on one line after
 * `lead` if it fits, else on the lines under `lead`, continued with
 * backslashes between its parts. (A part wider than a line, a long path,
 * stays whole.)
 */
export function commandLines(lead: string, parts: readonly CommandPart[], width: number): string[] {
  const quoted = parts.map((part) => (typeof part === "string" ? [part] : part).map(shellQuote).join(" "));
  const oneLine = `${lead}${quoted.join(" ")}`;
  if (visibleLength(oneLine) <= width) return [oneLine];
  const indent = " ".repeat(visibleLength(lead) - lead.trimStart().length + 2);
  const lines = [lead.trimEnd()];
  let line = `${indent}${quoted[0] ?? ""}`;
  for (const word of quoted.slice(1)) {
    if (visibleLength(`${line} ${word} \\`) <= width) {
      line += ` ${word}`;
    } else {
      lines.push(`${line} \\`);
      line = `${indent}  ${word}`;
    }
  }
  lines.push(line);
  return lines;
}

/** `path` relative to `cwd` when inside it (shorter to read), else as it is. */
export function displayPath(path: string, cwd: string): string {
  const rel = relative(cwd, path);
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel) && !rel.startsWith("-") ? rel : path;
}

/** Where the demo's grants are, and what the defaults would have been. */
export interface GrantPlace {
  /** The grant store root the demo used. */
  readonly root: string;
  /** The project the grants belong to. */
  readonly project: string;
  /** The folder commands are run from (npm runs scripts at the package root). */
  readonly cwd: string;
  /** The root the CLI and the demo use when given no --root. */
  readonly defaultRoot: string;
  /** The project the demo uses when given neither --project nor --workdir. */
  readonly defaultProject: string;
}

/**
 * The commands that show and forget the demo's grants, as words. They work
 * in a checkout, where no `loopctl` command is installed: `npm run cli`
 * runs the CLI from source. Flags that equal the defaults are left out, and
 * a path inside `cwd` is written relative to it.
 */
export function grantCommands(place: GrantPlace): { list: CommandPart[]; reset: CommandPart[] } {
  const shown = (path: string): string => displayPath(path, place.cwd);
  const project = ["--project", shown(place.project)] as const;
  const root = resolve(place.root) === resolve(place.defaultRoot) ? [] : [["--root", shown(place.root)] as const];
  const cliProject = resolve(place.project) === resolve(place.cwd) ? [] : [project];
  const demoProject = resolve(place.project) === resolve(place.defaultProject) ? [] : [project];
  return {
    list: ["npm", "run", "cli", "--", "grants", "list", ...root, ...cliProject],
    reset: ["npm", "run", "demo", "--", ...root, ...demoProject, "--reset"],
  };
}

/** What `--reset` says it did: how many grants it forgot, in words that fit the count. */
export function forgotLine(count: number): string {
  if (count === 0) return "nothing to forget: no grant was remembered for this project";
  return `forgot ${count} grant${count === 1 ? "" : "s"} of this project`;
}
