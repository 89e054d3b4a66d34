import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// Read at run time from the package's own package.json (the nearest one named
// loopctl above this file), so the bundle does not embed the whole manifest.
function readVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
        name?: unknown;
        version?: unknown;
      };
      if (manifest.name === "loopctl" && typeof manifest.version === "string") return manifest.version;
    } catch {
      // no readable manifest here: keep walking up
    }
    const parent = dirname(dir);
    if (parent === dir) return "unknown";
    dir = parent;
  }
}

let cached: string | undefined;

/** The installed package's version (read once, on first use). */
export function packageVersion(): string {
  cached ??= readVersion();
  return cached;
}
