import type * as AskModule from "../../src/ask/index.js";
import type * as GrantModule from "../../src/grant/index.js";
import type * as EngineModule from "../../src/engine/index.js";
import type * as TestingModule from "../../src/testing/index.js";
import type * as ServerModule from "../../src/server/index.js";
import type * as AiSdkModule from "../../src/ai-sdk/index.js";
import type * as PostgresModule from "../../src/postgres/index.js";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { benchSource } from "./build.js";

/** The subpath modules the benchmarks measure, typed by their public surface. */
export interface Modules {
  readonly ask: typeof AskModule;
  readonly grant: typeof GrantModule;
  readonly engine: typeof EngineModule;
  readonly testing: typeof TestingModule;
  readonly server: typeof ServerModule;
  readonly "ai-sdk": typeof AiSdkModule;
  readonly postgres: typeof PostgresModule;
}

export type Loaded<T> = { readonly ok: true; readonly mod: T } | { readonly ok: false; readonly reason: string };

/**
 * Imports module `<name>` (from the bench build, see {@link benchSource}) and checks that every export a benchmark
 * needs is there. A module still being written yields a reason instead of a
 * module, so the benchmark prints "not available" rather than a number.
 */
export async function loadModule<K extends keyof Modules>(
  name: K,
  exports: readonly string[],
): Promise<Loaded<Modules[K]>> {
  let mod: Record<string, unknown>;
  const source = await benchSource();
  const url =
    source.type === "build"
      ? pathToFileURL(join(source.dir, name, "index.js")).href
      : new URL(`../../src/${name}/index.ts`, import.meta.url).href;
  try {
    mod = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    const message = error instanceof Error ? error.message.split("\n")[0] : String(error);
    return { ok: false, reason: `src/${name} failed to load (${message})` };
  }
  const missing = exports.filter((e) => mod[e] === undefined);
  if (missing.length > 0) {
    return { ok: false, reason: `src/${name} does not export ${missing.join(", ")} yet` };
  }
  return { ok: true, mod: mod as unknown as Modules[K] };
}

/** Loads several modules; the first failure wins. */
export async function loadModules<K extends keyof Modules>(wanted: { readonly [P in K]: readonly string[] }): Promise<
  Loaded<Pick<Modules, K>>
> {
  const out: Partial<Pick<Modules, K>> = {};
  for (const name of Object.keys(wanted) as K[]) {
    const loaded = await loadModule(name, wanted[name]);
    if (!loaded.ok) return loaded;
    out[name] = loaded.mod;
  }
  return { ok: true, mod: out as Pick<Modules, K> };
}
