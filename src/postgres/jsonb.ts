/** U+0000, or a UTF-16 surrogate that is not half of a pair. */
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/u;

/**
 * Where `value` holds text PostgreSQL cannot store: U+0000 (`jsonb` refuses
 * it with SQLSTATE 22P05, `text` with 22021) or a lone surrogate (`jsonb`
 * refuses it with 22P02; on its way to a `text` column the driver's UTF-8
 * encoding silently turns it into U+FFFD, so what is stored is not what was
 * given). A row holding one cannot be written as given, and one such value in
 * a batched statement would fail the whole batch, so it is refused alone,
 * before the batch. Returns a description naming the field (e.g. `prompt
 * holds U+0000`), or undefined when every string can be stored.
 */
export function unstorableText(value: unknown, path = ""): string | undefined {
  if (typeof value === "string") {
    const found = UNSTORABLE.exec(value);
    if (found === null) return undefined;
    const what =
      found[0] === "\u0000" ? "U+0000" : `a lone surrogate (U+${found[0].charCodeAt(0).toString(16).toUpperCase()})`;
    return `${path === "" ? "the value" : path} holds ${what}, which PostgreSQL cannot store`;
  }
  if (typeof value !== "object" || value === null) return undefined;
  for (const [key, item] of Object.entries(value)) {
    const name = path === "" ? key : `${path}.${key}`;
    const found = unstorableText(key, name) ?? unstorableText(item, name);
    if (found !== undefined) return found;
  }
  return undefined;
}
