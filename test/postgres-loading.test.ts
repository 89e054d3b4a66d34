import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);

// pg is an optional peer dependency: only a program that creates a pool loads it.
const SCRIPT = `
import { createRequire } from "node:module";
await import("./src/index.ts");
await import("./src/postgres/index.ts");
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((path) => /[\\\\/]node_modules[\\\\/]pg[\\\\/]/.test(path));
process.stdout.write(JSON.stringify(loaded));
`;

describe("loading loopctl and loopctl/postgres", () => {
  it("never loads pg", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "--input-type=module", "-e", SCRIPT], {
      timeout: 60_000,
    });
    expect(JSON.parse(stdout)).toEqual([]);
  });

  it("the check would see pg had it been loaded", async () => {
    const { stdout } = await run(
      process.execPath,
      [
        "--import",
        "tsx",
        "--input-type=module",
        "-e",
        SCRIPT.replace('await import("./src/index.ts");', 'await import("pg");'),
      ],
      {
        timeout: 60_000,
      },
    );
    expect(JSON.parse(stdout).length).toBeGreaterThan(0);
  });
});
