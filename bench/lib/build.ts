import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The modules are measured as users get them: built by tsup, not transpiled on the fly. */
export type Source = { readonly type: "build"; readonly dir: string } | { readonly type: "src"; readonly why: string };

const ENTRIES = ["ask", "grant", "engine", "testing", "server", "ai-sdk", "postgres"] as const;
const ROOT = fileURLToPath(new URL("../..", import.meta.url));

let pending: Promise<Source> | undefined;

/**
 * Builds src/{ask,grant,engine,testing,server,ai-sdk,postgres} with tsup into a temp folder under
 * node_modules/.cache, with the
 * package's own settings (ESM, node20, splitting, tree shaking:
 * those of tsup.config.ts), once per process: what users run, bundled as
 * published, not each file as tsx transpiles it. The child processes reuse the folder through
 * LOOPCTL_BENCH_BUILD_DIR. LOOPCTL_BENCH_SOURCE=src measures src through tsx
 * instead; a failed build (a module mid-edit) falls back to it, and says so.
 */
export function benchSource(): Promise<Source> {
  pending ??= resolveSource();
  return pending;
}

async function resolveSource(): Promise<Source> {
  const inherited = process.env["LOOPCTL_BENCH_BUILD_DIR"];
  if (inherited !== undefined && inherited !== "") return { type: "build", dir: inherited };
  if (process.env["LOOPCTL_BENCH_SOURCE"] === "src") return { type: "src", why: "LOOPCTL_BENCH_SOURCE=src" };
  // Under node_modules/.cache so the build's bare imports (zod, write-file-atomic) resolve, and git never sees it.
  const cache = join(ROOT, "node_modules", ".cache", "loopctl-bench");
  mkdirSync(cache, { recursive: true });
  const dir = mkdtempSync(join(cache, "build-"));
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  try {
    const { build } = await import("tsup");
    const cwd = process.cwd();
    process.chdir(ROOT);
    try {
      await build({
        config: false,
        entry: Object.fromEntries(ENTRIES.map((e) => [`${e}/index`, `src/${e}/index.ts`])),
        format: ["esm"],
        target: "node20",
        splitting: true,
        treeshake: true,
        dts: false,
        sourcemap: false,
        clean: true,
        silent: true,
        outDir: dir,
      });
    } finally {
      process.chdir(cwd);
    }
    process.env["LOOPCTL_BENCH_BUILD_DIR"] = dir;
    return { type: "build", dir };
  } catch (error) {
    const message = error instanceof Error ? error.message.split("\n")[0] : String(error);
    return { type: "src", why: `the tsup build failed (${message})` };
  }
}

export function describeSource(source: Source): string {
  return source.type === "build" ? "tsup build of src (ESM, node20), as published" : `src through tsx: ${source.why}`;
}
