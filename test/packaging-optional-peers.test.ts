import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "loopctl-loads-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The SDKs the adapters wrap: optional peers, never loaded unless their own adapter is used. */
const SDK = /node_modules\/(ai|@ai-sdk\/[^/]+|@modelcontextprotocol\/[^/]+|@openai\/[^/]+)\//;

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  exports: Record<string, unknown>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
  devDependencies: Record<string, string>;
};

/** Every module a fresh Node process loads to import `target` (a file under src/, or a package). */
async function loadsOf(name: string, target: string): Promise<string[]> {
  const log = join(scratch, `${name.replaceAll("/", "_")}.log`);
  const specifier = target.startsWith("src/") ? `./${target}` : target;
  await run(
    process.execPath,
    [
      "--import",
      "tsx",
      "--import",
      "./test/support/load-recorder.mjs",
      "--input-type=module",
      "-e",
      `await import(${JSON.stringify(specifier)});`,
    ],
    {
      cwd: root,
      env: { ...process.env, LOOPCTL_LOAD_LOG: log },
      timeout: 30_000,
    },
  );
  return readFileSync(log, "utf8")
    .split("\n")
    .filter((line) => line !== "");
}

const ENTRIES = Object.keys(pkg.exports)
  .filter((key) => key !== "./package.json")
  .map((key) => (key === "." ? "index" : `${key.slice(2)}/index`));

describe("the adapters' SDKs are optional peers", () => {
  it("importing the root or any subpath loads none of them (each in a fresh process)", async () => {
    const loaded = await Promise.all(
      ENTRIES.map(
        async (entry) => [entry, (await loadsOf(entry, `src/${entry}.ts`)).filter((url) => SDK.test(url))] as const,
      ),
    );
    expect(ENTRIES).toEqual(expect.arrayContaining(["index", "engine/index", "ai-sdk/index"]));
    expect(Object.fromEntries(loaded)).toEqual(Object.fromEntries(ENTRIES.map((entry) => [entry, []])));
  });

  it("the check sees an SDK that is loaded", async () => {
    const loaded = await loadsOf("ai", "ai");
    expect(loaded.some((url) => SDK.test(url))).toBe(true);
  });

  it("each is an optional peer dependency, and an exact pinned dev dependency", () => {
    const peers = Object.keys(pkg.peerDependencies).filter((name) => name !== "zod");
    expect(peers.length).toBeGreaterThan(0);
    for (const name of peers) {
      expect(pkg.peerDependenciesMeta[name], name).toEqual({ optional: true });
      expect(pkg.devDependencies[name], name).toMatch(/^\d+\.\d+\.\d+$/);
    }
  });
});
