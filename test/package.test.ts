import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import * as root from "loopctl";
import * as ask from "loopctl/ask";
import * as audit from "loopctl/audit";
import * as engine from "loopctl/engine";
import * as grant from "loopctl/grant";
import * as server from "loopctl/server";
import * as testing from "loopctl/testing";
import { importedUrls } from "./support/imported-urls.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as {
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  types: string;
  exports: Record<string, string | { require: { types: string } }>;
  typesVersions: Record<string, Record<string, string[]>>;
};
const optionalPeer = (name: string): boolean => pkg.peerDependenciesMeta?.[name]?.optional === true;
/** What an install of the package brings: its dependencies and the peers it requires. */
const required = new Set([
  ...Object.keys(pkg.dependencies ?? {}),
  ...Object.keys(pkg.peerDependencies ?? {}).filter((name) => !optionalPeer(name)),
]);

/** SDKs an adapter may wrap: the root must load none of them, whatever package.json says. */
const OPTIONAL_SDKS = [
  "pg",
  "ai",
  "@ai-sdk/provider",
  "@openai/agents",
  "@modelcontextprotocol/sdk",
  "playwright",
  "playwright-core",
];

/** The package a `file:` URL inside node_modules belongs to. */
function packageOf(url: string): string | undefined {
  const at = url.lastIndexOf("/node_modules/");
  if (at === -1) return undefined;
  const [scope, name] = url.slice(at + "/node_modules/".length).split("/");
  return scope?.startsWith("@") === true ? `${scope}/${name}` : scope;
}

describe("the package root `loopctl`", () => {
  it.each([
    ["loopctl/ask", ask],
    ["loopctl/grant", grant],
    ["loopctl/engine", engine],
    ["loopctl/audit", audit],
    ["loopctl/testing", testing],
    ["loopctl/server", server],
  ] as Array<[string, Record<string, unknown>]>)("exports everything %s does, the same objects", (_, subpath) => {
    const names = Object.keys(subpath);
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) expect((root as Record<string, unknown>)[name], name).toBe(subpath[name]);
  });

  it("holds exactly what the README's Install section says: the six subpaths' exports, plus LoopctlError", () => {
    const readme = readFileSync(join(repo, "README.md"), "utf8");
    const claim =
      /The root `loopctl` holds exactly what these (\w+) subpaths\s+export: ([^(]+)\(`ScriptedModel` included\), plus `(\w+)`, the base class of every\s+typed error\./.exec(
        readme,
      );
    expect(claim, "README.md says what the root holds").not.toBeNull();
    const [, count, list, extra] = claim as RegExpExecArray;
    const named = [...(list as string).matchAll(/`(loopctl\/[\w-]+)`/g)].map((m) => m[1] as string);
    const subpaths: Record<string, Record<string, unknown>> = {
      "loopctl/ask": ask,
      "loopctl/grant": grant,
      "loopctl/engine": engine,
      "loopctl/audit": audit,
      "loopctl/server": server,
      "loopctl/testing": testing,
    };
    expect(named.sort()).toEqual(Object.keys(subpaths).sort());
    expect(count).toBe(["zero", "one", "two", "three", "four", "five", "six", "seven"][named.length]);
    const union = new Set(named.flatMap((name) => Object.keys(subpaths[name] ?? {})));
    expect(union.has("ScriptedModel")).toBe(true);
    expect(Object.keys(root).filter((name) => !union.has(name))).toEqual([extra]);
    expect([...union].filter((name) => !Object.hasOwn(root, name))).toEqual([]);
    expect(root.LoopctlError).toBeTypeOf("function");
    expect(new root.LedgerCorruptError("/x", "y")).toBeInstanceOf(root.LoopctlError);
  });

  it("is installed with zod, its one required peer, as the README's install line says", () => {
    const readme = readFileSync(join(repo, "README.md"), "utf8");
    const install = /## Install\n\n```sh\n([^\n]*)\n```/.exec(readme)?.[1];
    const peers = Object.keys(pkg.peerDependencies ?? {}).filter((name) => !optionalPeer(name));
    expect(peers).toEqual(["zod"]);
    expect(pkg.peerDependencies?.["zod"]).toMatch(/^\^4\./);
    expect(install).toBe(`npm install loopctl ${peers.join(" ")}`);
  });

  it("has ScriptedModel, as the README's examples use it", () => {
    expect(root.ScriptedModel).toBe(testing.ScriptedModel);
  });

  it("loads only its own files, the packages an install brings and Node's built-ins: never an optional SDK", async () => {
    const urls = await importedUrls(
      repo,
      `const root = await import(${JSON.stringify(pathToFileURL(join(repo, "src/index.ts")).href)});
       if (typeof root.ScriptedModel !== "function") process.exit(3);`,
    );
    expect(urls).toContain(pathToFileURL(join(repo, "src/testing/index.ts")).href);
    const outside = urls.filter(
      (u) => !u.startsWith("node:") && !u.startsWith(pathToFileURL(join(repo, "src")).href + "/"),
    );
    const packages = [...new Set(outside.map((u) => packageOf(u) ?? u))];
    expect(packages).toContain("zod");
    expect(packages.filter((p) => !required.has(p))).toEqual([]);
    expect(packages.filter((p) => OPTIONAL_SDKS.includes(p) || optionalPeer(p))).toEqual([]);
  });
});

// `moduleResolution: node10` (TypeScript's old "node") ignores `exports`: it
// finds a subpath's types only through `typesVersions`.
describe("package.json typesVersions", () => {
  it("maps every subpath of the exports map to its CommonJS types, and nothing else", () => {
    const expected = Object.fromEntries(
      Object.entries(pkg.exports)
        .filter(([key]) => key !== "." && key !== "./package.json")
        .map(([key, target]) => [key.slice(2), [typeof target === "string" ? target : target.require.types]]),
    );
    expect(Object.keys(expected)).toContain("testing");
    expect(pkg.typesVersions).toEqual({ "*": expected });
  });

  it("leaves the root to `types` (a `*` pattern would remap it too)", () => {
    expect(pkg.types).toBe("./dist/index.d.cts");
    expect(Object.keys(pkg.typesVersions["*"] ?? {}).filter((key) => key.includes("*"))).toEqual([]);
  });
});
