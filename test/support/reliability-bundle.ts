// Bundles a child-process entry point once (esbuild, which tsup brings) so each
// child starts in tens of milliseconds instead of loading tsx: the fault matrix
// and the crash tests start hundreds of children.
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type BuildOptions } from "esbuild";

export interface Bundle {
  /** The bundled script: run it with `node <path> …`. */
  readonly path: string;
  dispose(): void;
}

/** Bundles `test/support/<entry>` into a private temporary folder. */
export async function bundleChild(entry: string): Promise<Bundle> {
  const dir = mkdtempSync(join(tmpdir(), "loopctl-child-"));
  const path = join(dir, `${basename(entry, ".ts")}.mjs`);
  await bundleTo(fileURLToPath(new URL(`./${entry}`, import.meta.url)), path);
  return { path, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Bundles the loopctl bin (`src/cli/main.ts`) into a private temporary folder laid out as the package
 * ships it: the bin at `dist/cli.js`, the console's files in `dist/server/console/`, and a copy of the
 * package's package.json at the top, the manifest `loopctl --version` finds by walking up from the bin.
 */
export async function bundleCli(): Promise<Bundle> {
  const dir = mkdtempSync(join(tmpdir(), "loopctl-cli-"));
  const path = join(dir, "dist", "cli.js");
  const repo = (file: string): string => fileURLToPath(new URL(`../../${file}`, import.meta.url));
  await bundleTo(repo("src/cli/main.ts"), path);
  cpSync(repo("src/server/console"), join(dir, "dist", "server", "console"), { recursive: true });
  copyFileSync(repo("package.json"), join(dir, "package.json"));
  return { path, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

async function bundleTo(source: string, path: string): Promise<void> {
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
}

/** A subpath of `src` built twice, as the package ships it: an ES module and a CommonJS module. */
export interface Builds {
  readonly esm: string;
  readonly cjs: string;
  dispose(): void;
}

/** `src/grant` built twice (see {@link bundleBuilds}). */
export type GrantBuilds = Builds;

/**
 * Builds `loopctl/<subpath>` as ESM and as CommonJS into a private temporary
 * folder: loading both in one process gives two copies of every module, as an
 * application gets when one dependency imports the package and another
 * requires it.
 */
export async function bundleBuilds(subpath: "audit" | "grant" | "mcp"): Promise<Builds> {
  // Under node_modules so that the builds' imports of their dependencies resolve, as in an application.
  const cache = fileURLToPath(new URL("../../node_modules/.cache", import.meta.url));
  mkdirSync(cache, { recursive: true });
  const dir = mkdtempSync(join(cache, "loopctl-builds-"));
  const source = fileURLToPath(new URL(`../../src/${subpath}/index.ts`, import.meta.url));
  const common: BuildOptions = {
    entryPoints: [source],
    bundle: true,
    packages: "external",
    platform: "node",
    target: "node20",
    logLevel: "silent",
  };
  const esm = join(dir, `${subpath}.mjs`);
  const cjs = join(dir, `${subpath}.cjs`);
  await Promise.all([
    build({ ...common, format: "esm", outfile: esm }),
    build({ ...common, format: "cjs", outfile: cjs }),
  ]);
  return { esm, cjs, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

/** `loopctl/grant` built as ESM and as CommonJS (see {@link bundleBuilds}). */
export function bundleGrantBuilds(): Promise<GrantBuilds> {
  return bundleBuilds("grant");
}
