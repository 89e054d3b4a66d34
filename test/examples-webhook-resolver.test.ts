import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("..", import.meta.url));

describe("examples/webhook-resolver.ts", () => {
  it("runs to exit 0: signed deliveries verify, the person's link answers come back through the server", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", "examples/webhook-resolver.ts"], {
      cwd: root,
      timeout: 20_000,
    });
    const lines = stdout.trim().split("\n");
    expect(lines.filter((l) => l.startsWith("bot: "))).toEqual([
      "bot: ask for deploy, signature ok",
      "bot: ask for deploy, signature ok",
    ]);
    expect(lines.filter((l) => l.startsWith("record: "))).toEqual([
      "record: ask_allowed deploy",
      "record: ask_denied deploy",
    ]);
  });

  it("is where docs/server.md's verification snippet comes from, word for word", () => {
    const example = readFileSync(new URL("../examples/webhook-resolver.ts", import.meta.url), "utf8");
    const docs = readFileSync(new URL("../docs/server.md", import.meta.url), "utf8");
    const snippet = /\/\*\* True when `header` signs[\s\S]*?\n}\n/.exec(example)?.[0];
    expect(snippet).toBeDefined();
    expect(docs).toContain(snippet);
  });
});
