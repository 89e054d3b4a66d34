import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";

// Each test starts real processes; on a busy machine node + tsx startup alone can take seconds.
vi.setConfig({ testTimeout: 60_000, hookTimeout: 120_000 });

const repo = fileURLToPath(new URL("..", import.meta.url));

interface Exit {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs the demo as `npm run demo` would, with stdin a pipe (not a TTY), so the
 * scripted approver answers. A hanging handle would hit the timeout.
 */
function demo(args: string[], input = ""): Promise<Exit> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      ["--import", "tsx", "demo/release-assistant.ts", ...args],
      { cwd: repo, timeout: 60_000 },
      (error, stdout, stderr) => {
        resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr });
      },
    );
    child.stdin?.end(input);
  });
}

let root: string;
let first: Exit;
let second: Exit;
let firstAndSecond: Promise<void>;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "loopctl-demo-test-"));
  // The two runs that share a ledger go one after the other, in the background
  // while the independent runs below are tested, to keep the file fast.
  firstAndSecond = (async () => {
    first = await demo(["--root", join(root, "state")]);
    second = await demo(["--root", join(root, "state")]);
  })();
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("npm run demo --workdir", () => {
  it("acts on the named folder: the changelog and the staging deploy ran, production did not", async () => {
    const work = join(root, "work");
    const result = await demo(["--root", join(root, "state-2"), "--workdir", work, "--ask-timeout", "200"]);
    expect(result.code).toBe(0);
    expect(readFileSync(join(work, "CHANGELOG.md"), "utf8")).toContain("## 1.4.0\n\n- Faster cold start");
    expect(JSON.parse(readFileSync(join(work, "deploys", "staging.json"), "utf8"))).toMatchObject({ version: "1.4.0" });
    expect(existsSync(join(work, "deploys", "production.json"))).toBe(false);
    expect(result.stdout).toContain("the ask expires after 200 ms");
  });

  it("rejects a bad flag with a message and exit 1", async () => {
    const result = await demo(["--ask-timeout", "soon"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("--ask-timeout must be a non-negative integer");
  });

  it("is what the README's first shell block runs", () => {
    const readme = readFileSync(join(repo, "README.md"), "utf8");
    const firstBlock = /```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
    expect(firstBlock.split("\n").filter((l) => l.trim() !== "").map((l) => l.split("#")[0]?.trim())).toEqual([
      "npm ci && npm run demo",
      "npm test",
    ]);
    const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { scripts: Record<string, string> };
    expect(pkg.scripts["demo"]).toBe("tsx demo/release-assistant.ts");
  });

  it("prints help", async () => {
    const result = await demo(["--help"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("--root DIR");
  });
});

describe("npm run demo --interactive (answers typed on stdin)", () => {
  it("takes each answer from the terminal approver and remembers the ones asked to", async () => {
    const state = join(root, "state-3");
    const result = await demo(["--root", state, "--interactive"], "always-tool\nmaybe\ny\nnever-call\nn\n");
    expect(result.code).toBe(0);
    const out = result.stdout;
    expect(out).toContain("approver   you, at this terminal");
    expect(out).toContain("? approval needed: write_changelog");
    expect(out).toContain("always-tool  approve; remember for write_changelog, any arguments");
    expect(out).toContain('not an answer: "maybe"');
    expect(out).toContain("never-call: deny; remember for these exact arguments");
    expect(out).toMatch(/ask_denied  ask\/ask_resolver: denied by approver: denied at the terminal/);
    expect(out).toContain("approved 2, denied 2, expired 0");
    expect(out).toContain("grants remembered for this project: 2");
  });

  it("fails closed when the input ends: the waiting ask and every later one are denied", async () => {
    const result = await demo(["--root", join(root, "state-4"), "--interactive"], "");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("input ended: denying this ask and every later one");
    expect(result.stdout).toContain("denied by approver: approval channel closed");
    expect(result.stdout).toContain("approved 0, denied 4, expired 0");
  });

  it("Ctrl-C while an ask waits cancels the run: exit 130, one cancelled record, nothing ran", async () => {
    const work = join(root, "work-cancel");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", "demo/release-assistant.ts", "--root", join(root, "state-5"), "--workdir", work, "--interactive"],
      { cwd: repo, stdio: ["pipe", "pipe", "pipe"] },
    );
    let out = "";
    let interrupted = false;
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
      // Once: a second Ctrl-C is meant to kill the process outright.
      if (!interrupted && out.includes("your answer")) interrupted = child.kill("SIGINT");
    });
    const [code] = (await once(child, "exit")) as [number | null];
    expect(code).toBe(130);
    expect(out).toMatch(/call_3\s+write_changelog\s+[0-9a-f]{16}\s+cancelled\s+hook\/engine\s+cancelled while awaiting approval/);
    expect(out).toContain("the run ended early: CancelledError");
    expect(existsSync(join(work, "CHANGELOG.md"))).toBe(false);
  });
});

describe("npm run demo (non-interactive)", () => {
  beforeAll(() => firstAndSecond);

  it("exits 0 both times, without colour on a pipe", () => {
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    expect(second.code).toBe(0);
    expect(first.stdout).not.toContain("\u001b[");
  });

  it("first run: asks, and shows an approval, a denial and an expiry", () => {
    const out = first.stdout;
    expect(out).toContain("a scripted release manager (stdin is not a terminal)");
    expect(out).toMatch(/ask {5}Write CHANGELOG\.md for 1\.4\.0 \(3 entries\)\? +\(args [0-9a-f]{16}/);
    expect(out).toMatch(/ask {5}Deploy 1\.4\.0 to production\?/);
    expect(out).toContain("answer  always-tool: approve; remember for write_changelog, any arguments (scripted release manager)");
    expect(out).toContain("answer  approve once (scripted release manager)");
    expect(out).toContain("answer  never-call: deny; remember for these exact arguments (scripted release manager)");
    expect(out).toContain("answer  none scripted: nobody answers, the ask expires after 1000 ms");
    expect(out).toMatch(/gate {4}ask_allowed  ask\/ask_resolver/);
    expect(out).toMatch(/gate {4}ask_denied  ask\/ask_resolver: denied by approver/);
    expect(out).toMatch(/gate {4}ask_expired  hook\/engine: ask expired unanswered/);
    expect(out).toContain("Permission ask expired unanswered for tool 'deploy'");
    expect(out).toContain("approved 2, denied 1, expired 1, decided by remembered grants 0");
    expect(out).toContain("grants remembered for this project: 2");
  });

  it("ends with the audit trail as a table", () => {
    const out = first.stdout;
    const trail = out.slice(out.indexOf("audit trail"));
    expect(trail).toMatch(/#\s+time\s+turn\s+call\s+tool\s+args digest\s+verdict\s+rule\/source\s+detail/);
    expect(trail).toMatch(/\n\s+1\s+\+0ms\s+0\s+call_1\s+read_file\s+[0-9a-f]{16}\s+allow\s+hook\/context\n/);
    expect(trail).toMatch(/\n\s+3\s+\+\d+ms\s+1\s+call_3\s+write_changelog\s+[0-9a-f]{16}\s+ask_allowed\s+ask\/ask_resolver\n/);
    expect(trail).toMatch(/call_6\s+deploy\s+[0-9a-f]{16}\s+ask_expired\s+hook\/engine\s+ask expired unanswered/);
  });

  it("second run: remembered grants decide without asking", () => {
    const out = second.stdout;
    expect(out).toContain("(2 remembered)");
    expect(out).not.toContain("Write CHANGELOG.md for 1.4.0 (3 entries)?  (args");
    expect(out).toMatch(/gate {4}allow  decided by a remembered grant [0-9a-f]{16}, no ask/);
    expect(out).toMatch(/gate {4}deny  decided by a remembered grant [0-9a-f]{16}, no ask/);
    // Staging was approved once, not remembered: it is asked again.
    expect(out).toContain("answer  approve once (scripted release manager)");
    expect(out).toContain("decided by remembered grants 2");
    expect(out).toMatch(/allow\s+grant\/context\s+allowed by remembered grant; matched [0-9a-f]{16}/);
    expect(out).toMatch(/deny\s+grant\/context\s+denied by remembered grant; matched [0-9a-f]{16}/);
  });
});
