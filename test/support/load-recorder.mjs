// Loaded with --import: appends the URL of every module the process resolves
// through the ESM loader to the file named by LOOPCTL_LOAD_LOG, and at exit
// the CommonJS modules in require.cache.
import { appendFileSync } from "node:fs";
import { createRequire, register } from "node:module";

const log = process.env.LOOPCTL_LOAD_LOG;
register("./load-recorder-hooks.mjs", import.meta.url);
process.on("exit", () => {
  const cache = createRequire(import.meta.url).cache;
  appendFileSync(
    log,
    Object.keys(cache)
      .map((path) => `${path}\n`)
      .join(""),
  );
});
