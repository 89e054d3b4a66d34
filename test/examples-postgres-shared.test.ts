import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { beforeEach, describe, expect, it } from "vitest";
import { DATABASE_URL, unavailable } from "./support/postgres.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

beforeEach((context) => {
  if (unavailable !== undefined) context.skip(unavailable);
});

describe("examples/postgres-shared.ts", () => {
  it("runs to exit 0: the console's answer reaches the worker once, and the grant lands in the database", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/postgres-shared.ts"], {
      cwd: root,
      env: { ...process.env, DATABASE_URL },
      timeout: 30_000,
    });
    expect(stdout.split("\n")).toEqual([
      expect.stringMatching(/^asked: Run deploy\? \(deploy, args [0-9a-f]{16}\)$/),
      "answer landed: true; again: false",
      "ended: { type: 'answered', verdict: 'approve' }",
      "records: [ 'ask_allowed' ]",
      "grants: [ 'allow deploy this_tool' ]",
      "",
    ]);
  });
});
