/**
 * Edit distance between `a` and `b` where swapping two neighbours counts as
 * one edit (optimal string alignment): `lsit` is one edit from `list`.
 */
function distance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const above = rows[i - 1] as number[];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min((above[j] as number) + 1, (row[j - 1] as number) + 1, (above[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, ((rows[i - 2] as number[])[j - 2] as number) + 1);
      }
      row.push(best);
    }
    rows.push(row);
  }
  return (rows[a.length] as number[])[b.length] as number;
}

/**
 * The one of `candidates` that `word` most likely misspells: the only one it
 * is a prefix of, or the nearest within an edit per three characters (at
 * least one). `undefined` when none is near enough to name.
 */
export function nearest(word: string, candidates: readonly string[]): string | undefined {
  if (word === "") return undefined;
  const extending = candidates.filter((c) => c.startsWith(word));
  if (extending.length === 1) return extending[0];
  const allowed = Math.max(1, Math.floor(word.length / 3));
  let best: string | undefined;
  let bestDistance = allowed + 1;
  for (const candidate of candidates) {
    const d = distance(word, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best;
}

/** `--json takes no value, got "1": write --json, or leave it out`, for a flag written with a value. */
export function takesNoValue(flag: string, value: string): string {
  return `${flag} takes no value, got ${JSON.stringify(value)}: write ${flag}, or leave it out`;
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
  return `unknown option ${JSON.stringify(rawName)}${meant === undefined ? "" : `; did you mean --${meant}?`}`;
}

/** `unknown command "grants lsit"`, with `; did you mean "grants list"?` when one of `commands` is near. */
export function unknownCommand(prefix: string, word: string, commands: readonly string[]): string {
  const meant = nearest(word, commands);
  const spell = (name: string): string => JSON.stringify(prefix === "" ? name : `${prefix} ${name}`);
  return `unknown command ${spell(word)}${meant === undefined ? "" : `; did you mean ${spell(meant)}?`}`;
}
