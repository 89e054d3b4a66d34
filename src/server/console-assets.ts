import { readFile } from "node:fs/promises";

/** One file of the console. */
export interface ConsoleAsset {
  readonly type: string;
  readonly body: Buffer;
}

/** The console's files, by the path they are served at. */
export const CONSOLE_FILES: Readonly<Record<string, { readonly file: string; readonly type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/console.js": { file: "console.js", type: "text/javascript; charset=utf-8" },
  "/console.css": { file: "console.css", type: "text/css; charset=utf-8" },
};

/**
 * Where the console's files are, from the file this code runs in: beside it
 * in the sources (`src/server/console/`) and in `dist/server/`; under
 * `server/` from a file at the top of `dist/` (the CLI bundle, and the
 * shared chunk the CommonJS build computes `import.meta.url` in).
 */
const CANDIDATES = ["./console/", "./server/console/"];

let loading: Promise<ReadonlyMap<string, ConsoleAsset>> | undefined;

/** Reads the console's files once per process. */
export function consoleAssets(): Promise<ReadonlyMap<string, ConsoleAsset>> {
  loading ??= load().catch((error: unknown) => {
    loading = undefined;
    throw error;
  });
  return loading;
}

async function load(): Promise<ReadonlyMap<string, ConsoleAsset>> {
  const tried: string[] = [];
  for (const candidate of CANDIDATES) {
    const dir = new URL(candidate, import.meta.url);
    try {
      const entries = await Promise.all(
        Object.entries(CONSOLE_FILES).map(async ([path, { file, type }]) => {
          const body = await readFile(new URL(file, dir));
          return [path, { type, body }] as const;
        }),
      );
      return new Map(entries);
    } catch {
      tried.push(dir.pathname);
    }
  }
  throw new Error(`the console's files are missing (looked in ${tried.join(", ")})`);
}
