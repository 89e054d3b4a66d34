/**
 * The first `max` UTF-16 units of `text`, never ending inside a surrogate
 * pair (one unit fewer then): half a pair would reach records, prompts and
 * databases as U+FFFD, text nobody wrote, or be refused by them.
 */
export function textHead(text: string, max: number): string {
  const head = text.slice(0, max);
  return /[\ud800-\udbff]$/.test(head) ? head.slice(0, -1) : head;
}

/** `text` whole up to `max` UTF-16 units, else its {@link textHead} and how many units were cut. */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  const head = textHead(text, max);
  return `${head}… [${text.length - head.length} characters cut]`;
}
