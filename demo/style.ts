/**
 * Terminal styling for the demo. Colour is on only when the stream is a TTY
 * and NO_COLOR is unset (https://no-color.org: any non-empty value disables it).
 */
export interface Style {
  readonly bold: (text: string) => string;
  readonly dim: (text: string) => string;
  readonly green: (text: string) => string;
  readonly red: (text: string) => string;
  readonly yellow: (text: string) => string;
  readonly cyan: (text: string) => string;
}

const wrap =
  (open: number, close: number) =>
  (text: string): string =>
    `\u001b[${open}m${text}\u001b[${close}m`;

const plain = (text: string): string => text;

/** Whether output to `stream` should be coloured, given the environment `env`. */
export function wantsColor(stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv = process.env): boolean {
  const noColor = env["NO_COLOR"];
  return stream.isTTY === true && (noColor === undefined || noColor === "");
}

/** ANSI styles when `color` is true; identity functions otherwise. */
export function makeStyle(color: boolean): Style {
  if (!color) return { bold: plain, dim: plain, green: plain, red: plain, yellow: plain, cyan: plain };
  return {
    bold: wrap(1, 22),
    dim: wrap(2, 22),
    green: wrap(32, 39),
    red: wrap(31, 39),
    yellow: wrap(33, 39),
    cyan: wrap(36, 39),
  };
}
