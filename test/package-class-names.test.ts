import { mkdirSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "tsup";
import type { Options } from "tsup";
import { describe, expect, it } from "vitest";
import config from "../tsup.config.js";

const repo = fileURLToPath(new URL("..", import.meta.url));

/** Each exported class or function whose `name` is not the name it is exported as. */
const misnamed = (module: Record<string, unknown>): string[] =>
  Object.entries(module)
    .filter(([name, value]) => typeof value === "function" && value.name !== name)
    .map(([name, value]) => `${name} is named ${(value as { name: string }).name}`);

// What the package ships is tsup's bundle, which renames a class that names itself in its own body
// (`var Grant = class _Grant`): a grant would log as `_Grant {…}`. esbuild's keepNames would undo it
// at a cost on every closure the engine makes per call, so no class in src names itself in its body.
describe("the built package (tsup.config.ts)", () => {
  it("keeps each class's own name, in the ES module and the CommonJS build", async () => {
    const [library] = config as Options[];
    // Under node_modules so that the build's imports of its dependencies resolve, as in an application.
    const cache = join(repo, "node_modules", ".cache");
    mkdirSync(cache, { recursive: true });
    const dir = await mkdtemp(join(cache, "loopctl-tsup-"));
    try {
      await build({
        ...library,
        // tsup otherwise reads tsup.config.ts itself and runs each of its builds with these options too.
        config: false,
        outDir: dir,
        dts: false,
        sourcemap: false,
        silent: true,
        onSuccess: () => Promise.resolve(), // the console's files: not needed here
      });
      const entries = Object.keys(library?.entry as Record<string, string>);
      expect(entries).toContain("grant/index");
      const require = createRequire(import.meta.url);
      const problems: string[] = [];
      for (const entry of entries) {
        const esm = (await import(pathToFileURL(join(dir, `${entry}.js`)).href)) as Record<string, unknown>;
        const cjs = require(join(dir, `${entry}.cjs`)) as Record<string, unknown>;
        problems.push(
          ...misnamed(esm).map((p) => `${entry}.js: ${p}`),
          ...misnamed(cjs).map((p) => `${entry}.cjs: ${p}`),
        );
      }
      const { Grant } = (await import(pathToFileURL(join(dir, "grant/index.js")).href)) as Record<string, unknown>;
      expect(typeof Grant).toBe("function");
      expect(problems).toEqual([]);
      // The classes no entry exports (each call's Cancel, say) show in a debugger and a log too.
      const renamed: string[] = [];
      for (const file of await readdir(dir, { recursive: true })) {
        if (!/\.c?js$/.test(file)) continue;
        const text = await readFile(join(dir, file), "utf8");
        for (const match of text.matchAll(/\bclass (_\w+)/g)) renamed.push(`${file}: ${match[1]}`);
      }
      expect(renamed).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
