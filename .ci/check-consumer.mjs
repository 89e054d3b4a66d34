// Installs the packed tarball into a fresh consumer project, as a user's
// `npm install loopctl` would, and checks it from there:
// - every subpath in the exports map type-checks under moduleResolution
//   node10 (through typesVersions), node16 (ESM and CommonJS) and bundler;
// - the root loads, through import and require, none of the optional SDKs
//   (they are installed in the consumer, so only the root's own imports
//   could pull one in).
// Needs no network: the consumer's lockfile is cut out of this repository's,
// so `npm ci --offline` takes every tarball from the npm cache `npm ci` filled.
// Run after `npm run build`.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("..", import.meta.url));
const require = createRequire(import.meta.url);
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8"));
const lock = JSON.parse(readFileSync(join(repo, "package-lock.json"), "utf8"));
const tsc = require.resolve("typescript/bin/tsc");
const optional = (name) => pkg.peerDependenciesMeta?.[name]?.optional === true;

/** Where Node would find `name` from the package at lock path `from` ("" for the root). */
function locate(name, from) {
  for (let at = from; ; at = at.slice(0, Math.max(0, at.lastIndexOf("/node_modules/")))) {
    const path = `${at === "" ? "" : `${at}/`}node_modules/${name}`;
    if (lock.packages[path] !== undefined) return path;
    if (at === "") return undefined;
  }
}

/** The repository lock's entries for `names` and everything they need, at the same paths. */
function closure(names) {
  const entries = new Map();
  const visit = (name, from, required) => {
    const path = locate(name, from);
    if (path === undefined) {
      if (required) throw new Error(`${name} (needed by ${from || "the consumer"}) is not in package-lock.json`);
      return;
    }
    if (entries.has(path)) return;
    const { dev, optional: _o, devOptional, peer, ...entry } = lock.packages[path];
    entries.set(path, entry);
    for (const dep of Object.keys(entry.dependencies ?? {})) visit(dep, path, true);
    for (const dep of Object.keys(entry.optionalDependencies ?? {})) visit(dep, path, false);
    for (const dep of Object.keys(entry.peerDependencies ?? {})) {
      visit(dep, path, entry.peerDependenciesMeta?.[dep]?.optional !== true);
    }
  };
  for (const name of names) visit(name, "", true);
  return entries;
}

const work = mkdtempSync(join(tmpdir(), "loopctl-consumer-"));
try {
  const [packed] = JSON.parse(
    execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", work], {
      cwd: repo,
      encoding: "utf8",
    }),
  );
  const tarball = `file:../${packed.filename}`;
  const app = join(work, "app");
  mkdirSync(app);

  // What the consumer installs: the tarball, Node's types, and every peer at
  // the version this repository tests with (the optional SDKs included).
  const extra = ["@types/node", ...Object.keys(pkg.peerDependencies ?? {})];
  const versions = Object.fromEntries(extra.map((name) => [name, lock.packages[`node_modules/${name}`]?.version]));
  const dependencies = { loopctl: tarball, ...versions };
  const own = closure([...Object.keys(pkg.dependencies ?? {}), ...extra]);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "consumer", private: true, dependencies }, null, 2));
  writeFileSync(
    join(app, "package-lock.json"),
    JSON.stringify(
      {
        name: "consumer",
        lockfileVersion: 3,
        requires: true,
        packages: {
          "": { name: "consumer", dependencies },
          "node_modules/loopctl": {
            version: packed.version,
            resolved: tarball,
            integrity: packed.integrity,
            license: pkg.license,
            dependencies: pkg.dependencies,
            bin: pkg.bin,
            engines: pkg.engines,
            peerDependencies: pkg.peerDependencies,
            peerDependenciesMeta: pkg.peerDependenciesMeta,
          },
          ...Object.fromEntries(own),
        },
      },
      null,
      2,
    ),
  );
  execFileSync("npm", ["ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"], {
    cwd: app,
    stdio: "inherit",
  });

  // One file imports every subpath; a property no module has must be an
  // error, which proves each import resolved to real types (not `any`).
  // Our own declarations are checked whole (skipLibCheck off). The adapters'
  // declarations import their SDKs', which need what those SDKs' users have
  // (fetch's DOM types, @types/json-schema, exports-aware resolution), so the
  // adapter subpaths are checked in a second pass with skipLibCheck, as such
  // projects compile: their imports must still resolve to real types.
  const subpaths = Object.keys(pkg.exports)
    .filter((key) => key !== "./package.json")
    .map((key) => (key === "." ? "loopctl" : `loopctl/${key.slice(2)}`));
  const adapters = new Set(["loopctl/ai-sdk", "loopctl/mcp", "loopctl/openai-agents"]);
  const passes = {
    own: { subpaths: subpaths.filter((s) => !adapters.has(s)), skipLibCheck: false, lib: ["ES2023"] },
    adapters: { subpaths: subpaths.filter((s) => adapters.has(s)), skipLibCheck: true, lib: ["ES2023", "DOM"] },
  };
  const projects = {
    node10: { files: ["node10.ts"], options: { module: "commonjs", moduleResolution: "node10" } },
    node16: { files: ["node16-esm.mts", "node16-cjs.cts"], options: { module: "node16", moduleResolution: "node16" } },
    bundler: { files: ["bundler.ts"], options: { module: "esnext", moduleResolution: "bundler" } },
  };
  for (const [pass, { subpaths: checked, skipLibCheck, lib }] of Object.entries(passes)) {
    const source = [
      ...checked.map((s, i) => `import * as m${i} from "${s}";`),
      ...checked.flatMap((_, i) => ["// @ts-expect-error: no such export", `void m${i}.__notExported;`]),
      "",
    ].join("\n");
    const base = {
      strict: true,
      esModuleInterop: true,
      noEmit: true,
      skipLibCheck,
      types: ["node"],
      target: "ES2022",
      lib,
    };
    for (const [name, { files, options }] of Object.entries(projects)) {
      const named = files.map((file) => `${pass}-${file}`);
      for (const file of named) writeFileSync(join(app, file), source);
      writeFileSync(
        join(app, `tsconfig.${pass}-${name}.json`),
        JSON.stringify({ compilerOptions: { ...base, ...options }, files: named }),
      );
      execFileSync(process.execPath, [tsc, "-p", `tsconfig.${pass}-${name}.json`], { cwd: app, stdio: "inherit" });
      console.log(
        `types ok under moduleResolution ${name}${skipLibCheck ? " (skipLibCheck)" : ""}: ${checked.join(", ")}`,
      );
    }
  }

  // The root, loaded both ways, pulls in no optional SDK.
  const sdks = Object.keys(pkg.peerDependencies ?? {}).filter(optional);
  const forbidden = [
    ...new Set([
      ...sdks,
      "pg",
      "ai",
      "@ai-sdk/provider",
      "@openai/agents",
      "@modelcontextprotocol/sdk",
      "playwright-core",
    ]),
  ];
  // The same module hooks the test suite records the root's imports with.
  copyFileSync(join(repo, "test/support/record-imports-hooks.mjs"), join(app, "hooks.mjs"));
  writeFileSync(
    join(app, "load.mjs"),
    `import { register, createRequire } from "node:module";
register("./hooks.mjs", import.meta.url);
const esm = await import("loopctl");
const cjs = createRequire(import.meta.url)("loopctl");
if (typeof esm.ScriptedModel !== "function" || typeof cjs.ScriptedModel !== "function") throw new Error("the root lacks ScriptedModel");
console.log(JSON.stringify(Object.keys(createRequire(import.meta.url).cache)));
`,
  );
  writeFileSync(join(app, "loaded.txt"), "");
  const required = JSON.parse(
    execFileSync(process.execPath, ["load.mjs"], {
      cwd: app,
      encoding: "utf8",
      env: { ...process.env, LOOPCTL_IMPORT_LOG: join(app, "loaded.txt") },
    }),
  );
  const loaded = [...readFileSync(join(app, "loaded.txt"), "utf8").split("\n"), ...required].filter((l) => l !== "");
  const offending = loaded.filter((url) => forbidden.some((name) => url.includes(`/node_modules/${name}/`)));
  if (offending.length > 0) throw new Error(`importing the root loaded optional SDKs:\n${offending.join("\n")}`);
  if (!loaded.some((url) => url.includes("/node_modules/loopctl/dist/index.cjs")))
    throw new Error('require("loopctl") was not seen');
  console.log(`root ok: import and require load ${loaded.length} modules, none of ${forbidden.join(", ")}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
