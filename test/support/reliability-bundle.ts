// Bundles a child-process entry point once (esbuild, which tsup brings) so each
// child starts in tens of milliseconds instead of loading tsx: the fault matrix
// and the crash tests start hundreds of children.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

export interface Bundle {
  /** The bundled script: run it with `node <path> …`. */
  readonly path: string;
  dispose(): void;
}

/** Bundles `test/support/<entry>` into a private temporary folder. */
export async function bundleChild(entry: string): Promise<Bundle> {
  const dir = mkdtempSync(join(tmpdir(), "loopctl-child-"));
  const source = fileURLToPath(new URL(`./${entry}`, import.meta.url));
  const path = join(dir, `${basename(entry, ".ts")}.mjs`);
  await build({
    entryPoints: [source],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outfile: path,
    logLevel: "silent",
    // Bundled CommonJS dependencies may use require() and __filename; give ESM both.
    banner: {
      js: [
        'import { createRequire as __loopctlRequire } from "node:module";',
        'import { fileURLToPath as __loopctlPath } from "node:url";',
        "const require = __loopctlRequire(import.meta.url);",
        "const __filename = __loopctlPath(import.meta.url);",
      ].join(" "),
    },
  });
  return { path, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}
