// Checks the package as npm would publish it: the console's static files and
// the server subpath are in the tarball, and the built server (ESM and
// CommonJS) finds and serves them. Run after `npm run build`.
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const [pack] = JSON.parse(
  execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8" }),
);
const files = new Set(pack.files.map((f) => f.path));
const needed = [
  "dist/server/console/index.html",
  "dist/server/console/console.js",
  "dist/server/console/console.css",
  "dist/server/index.js",
  "dist/server/index.cjs",
  "dist/server/index.d.ts",
  "dist/server/index.d.cts",
  "dist/cli.js",
];
const missing = needed.filter((f) => !files.has(f));
if (missing.length > 0) throw new Error(`the packed tarball lacks ${missing.join(", ")}`);

const require = createRequire(import.meta.url);
for (const [kind, load] of [
  ["esm", () => import(new URL("../dist/server/index.js", import.meta.url).href)],
  ["cjs", async () => require("../dist/server/index.cjs")],
]) {
  const { createApprovalServer } = await load();
  const server = await createApprovalServer({});
  try {
    for (const path of ["", "console.js", "console.css"]) {
      const reply = await fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${server.token}` } });
      if (reply.status !== 200) throw new Error(`the ${kind} build serves /${path} with ${reply.status}`);
    }
  } finally {
    await server.close();
  }
}
console.log(
  `package ok: ${pack.files.length} files, the console ships in dist/server/console and both builds serve it`,
);
