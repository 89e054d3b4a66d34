import { nearest } from "../unknown-option.js";
import { shownText } from "../shown.js";

/** `--json takes no value, got "1": write --json, or leave it out`, for a flag written with a value. */
export function takesNoValue(flag: string, value: string): string {
  return `${flag} takes no value, got ${shownText(value)}: write ${flag}, or leave it out`;
}

/**
 * What to say of `rawName`, written where only the flags `flags` (long
 * names, none taking a value) are known: that a flag takes no value, when it
 * is one of them written with one (`--version=1`), else {@link unknownOption}.
 */
export function unknownFlag(rawName: string, flags: readonly string[]): string {
  const equals = rawName.indexOf("=");
  const name = rawName.slice(0, equals);
  if (rawName.startsWith("--") && equals > 2 && flags.includes(name.slice(2)))
    return takesNoValue(name, rawName.slice(equals + 1));
  return unknownOption(rawName, flags);
}

/**
 * `unknown option "--roto"`, with `; did you mean --root?` when one of
 * `options` (long names) is near; a long name written with one dash
 * (`-project`) is matched too.
 */
export function unknownOption(rawName: string, options: readonly string[]): string {
  const word = rawName.startsWith("--")
    ? rawName.slice(2)
    : rawName.startsWith("-") && rawName.length > 2
      ? rawName.slice(1)
      : undefined;
  const meant = word === undefined ? undefined : nearest(word, options);
  return `unknown option ${shownText(rawName)}${meant === undefined ? "" : `; did you mean --${meant}?`}`;
}

/** `unknown command "grants lsit"`, with `; did you mean "grants list"?` when one of `commands` is near. */
export function unknownCommand(prefix: string, word: string, commands: readonly string[]): string {
  const meant = nearest(word, commands);
  const spell = (name: string): string => shownText(prefix === "" ? name : `${prefix} ${name}`);
  return `unknown command ${spell(word)}${meant === undefined ? "" : `; did you mean ${spell(meant)}?`}`;
}
