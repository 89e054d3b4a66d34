import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, openSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditSink } from "../src/audit/index.js";
import { Grant, GrantScope } from "../src/grant/index.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { seed } from "./support/cli-grants-fixtures.js";

const run = promisify(execFile);
const repo = fileURLToPath(new URL("..", import.meta.url));
const bin = join(repo, "src", "cli", "main.ts");

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-cli-bin-"));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const loopctl = async (args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
  try {
    const { stdout, stderr } = await run(process.execPath, ["--import", "tsx", bin, ...args], {
      cwd: repo,
      env: { ...process.env, XDG_STATE_HOME: join(dir, "state") },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
};

describe("the loopctl bin", () => {
  it("prints its version", async () => {
    expect(await loopctl(["--version"])).toMatchObject({ code: 0, stdout: "0.1.0\n", stderr: "" });
  });

  it("lists grants as JSON through the real bin", async () => {
    const root = join(dir, "grants-root");
    const grant = new Grant("read", "allow", GrantScope.thisTool());
    const store = await seed(root, repo, [grant]);
    const result = await loopctl(["grants", "list", "--root", root, "--json"]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(JSON.parse(result.stdout)).toEqual({ ledger: store.ledgerPath, grants: [grant.toJSON()] });
  });

  it("fails verification of a tampered audit log with the process exit code 1", async () => {
    const path = join(dir, "gates.jsonl");
    const sink = await AuditSink.open(path);
    await sink.append(gateRecord(1));
    await sink.append(gateRecord(2));
    await sink.close();
    const text = await readFile(path, "utf8");
    await writeFile(path, text.replace('"tool_1"', '"tool_0"'));
    const result = await loopctl(["audit", "verify", path, "--json"]);
    expect(result.code).toBe(1);
    expect(JSON.parse(result.stdout)).toMatchObject({ ok: false, line: 1, problem: "edited" });
  });

  it.runIf(existsSync("/dev/full"))(
    "exits 4 with one line, not a stack trace, when its output cannot be written",
    async () => {
      const full = openSync("/dev/full", "w");
      try {
        const child = spawn(process.execPath, ["--import", "tsx", bin, "--help"], {
          cwd: repo,
          stdio: ["ignore", full, "pipe"],
        });
        let stderr = "";
        child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
        const [code] = (await once(child, "close")) as [number];
        expect(code).toBe(4);
        expect(stderr).toBe("loopctl: cannot write the output: ENOSPC: no space left on device, write\n");
      } finally {
        closeSync(full);
      }
    },
  );
});
