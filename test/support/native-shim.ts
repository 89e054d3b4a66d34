import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll } from "vitest";
import { bundleBuilds, type Builds, type GrantBuilds } from "./reliability-bundle.js";

/** What {@link useShim} sets up; its fields are filled in before the describe's tests run. */
export interface Shim<B extends Builds = Builds> {
  /** A scratch folder of the describe's own, removed after it. */
  dir: string;
  /** The bundled module for a child process to import. */
  builds: B;
  /** The built shim to give a child as LD_PRELOAD, or undefined when it cannot be built here. */
  shim: string | undefined;
  /** Why there is no shim, for the test's precondition. */
  why: string;
}

/** What {@link useGrantShim} sets up. */
export type GrantShim = Shim<GrantBuilds>;

/**
 * Builds the C shim `test/support/native/<name>.c` (loaded with LD_PRELOAD by
 * a child process) and bundles the grant module, once for the enclosing
 * describe; the scratch folder goes after it.
 */
export function useGrantShim(name: string): GrantShim {
  return useShim(name, "grant");
}

/** {@link useGrantShim}, bundling `loopctl/<subpath>`. */
export function useShim(name: string, subpath: "audit" | "grant"): Shim {
  const setup = { why: "" } as Shim;
  beforeAll(async () => {
    setup.dir = mkdtempSync(join(tmpdir(), `loopctl-${name}-`));
    setup.builds = await bundleBuilds(subpath);
    const source = fileURLToPath(new URL(`./native/${name}.c`, import.meta.url));
    const out = join(setup.dir, `${name}.so`);
    const cc = spawnSync("cc", ["-shared", "-fPIC", "-o", out, source, "-ldl"], { encoding: "utf8" });
    if (cc.status === 0 && process.platform === "linux") setup.shim = out;
    else setup.why = `cannot build the LD_PRELOAD shim on ${process.platform} (${cc.error?.message ?? cc.stderr})`;
  }, 60_000);
  afterAll(() => {
    setup.builds?.dispose();
    if (setup.dir !== undefined) rmSync(setup.dir, { recursive: true, force: true });
  });
  return setup;
}
