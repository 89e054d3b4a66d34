import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { bundleChild } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";

// Each test starts real processes; on a busy machine node + tsx startup alone can take seconds.
vi.setConfig({ testTimeout: 60_000, hookTimeout: 120_000 });

const repo = fileURLToPath(new URL("..", import.meta.url));

interface Exit {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `file` with `args` from the repository, feeding `input` to its stdin (a pipe, not a TTY). */
function exec(file: string, args: readonly string[], input = "", env: NodeJS.ProcessEnv = process.env): Promise<Exit> {
  return new Promise((resolve) => {
    const child = execFile(file, args, { cwd: repo, timeout: 60_000, env }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr });
    });
    child.stdin?.end(input);
  });
}

/**
 * Runs the demo as `npm run demo` would, with stdin a pipe (not a TTY), so the
 * scripted approver answers. A hanging handle would hit the timeout.
 */
function demo(args: string[], input = ""): Promise<Exit> {
  return exec(process.execPath, ["--import", "tsx", "demo/release-assistant.ts", ...args], input);
}

/**
 * The demo's own source bundled once (esbuild, as the tests' child processes are), so that the runs
 * that check what the demo does, not how npm starts it, start without loading tsx; the runs below
 * that check `npm run demo` itself (its two runs sharing a ledger, `| head`, the printed commands) go
 * through tsx and npm.
 */
let bundled: Promise<Bundle> | undefined;

/** The bundled demo's path, bundled at the first call. */
async function demoBundle(): Promise<string> {
  // The entry is resolved from test/support, where bundleChild looks.
  bundled ??= bundleChild("../../demo/release-assistant.ts");
  return (await bundled).path;
}

/** {@link demo}, run from the bundle: the same source, the same folder, the same stdin. */
async function demoBundled(args: string[], input = ""): Promise<Exit> {
  return exec(process.execPath, [await demoBundle(), ...args], input);
}

/** The lines of `text` wider than 80 columns (none, if the output fits a terminal). */
function tooWide(text: string): string[] {
  return text.split("\n").filter((line) => [...line].length > 80);
}

/** `text` with every run of blanks and line breaks as one space: wrapped prose, unwrapped. */
function flat(text: string): string {
  return text.replace(/\s+/g, " ");
}

/** The command printed after or under `label` in the closing hint, continuation lines included. */
function printedCommand(out: string, label: string): string {
  const lines = out.split("\n");
  const at = lines.findIndex((line) => line.startsWith(`  ${label}`));
  expect(at, `"${label}" in\n${out}`).toBeGreaterThan(-1);
  const after = (lines[at] ?? "").slice(label.length + 2).trim();
  let next = at + 1;
  const command = [after === "" ? (lines[next++] ?? "").trim() : after];
  while (command.at(-1)?.endsWith("\\") === true) command.push((lines[next++] ?? "").trim());
  return command.join("\n");
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
  (await bundled)?.dispose();
  await rm(root, { recursive: true, force: true });
});

describe("npm run demo --workdir", () => {
  it("acts on the named folder: the changelog and the staging deploy ran, production did not", async () => {
    const work = join(root, "work");
    const result = await demoBundled(["--root", join(root, "state-2"), "--workdir", work, "--ask-timeout", "200"]);
    expect(result.code).toBe(0);
    expect(readFileSync(join(work, "CHANGELOG.md"), "utf8")).toContain("## 1.4.0\n\n- Faster cold start");
    expect(JSON.parse(readFileSync(join(work, "deploys", "staging.json"), "utf8"))).toMatchObject({ version: "1.4.0" });
    expect(existsSync(join(work, "deploys", "production.json"))).toBe(false);
    expect(result.stdout).toContain("the ask expires after 200 ms");
  });

  it("rejects a bad flag with a message and exit 1", async () => {
    const result = await demoBundled(["--ask-timeout", "soon"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("--ask-timeout must be a non-negative integer");
  });

  it("is what the README's first shell block runs", () => {
    const readme = readFileSync(join(repo, "README.md"), "utf8");
    const firstBlock = /```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
    expect(
      firstBlock
        .split("\n")
        .filter((l) => l.trim() !== "")
        .map((l) => l.split("#")[0]?.trim()),
    ).toEqual(["npm ci && npm run demo", "npm test"]);
    const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { scripts: Record<string, string> };
    expect(pkg.scripts["demo"]).toBe("tsx demo/release-assistant.ts");
  });

  it("prints help within 80 columns", async () => {
    const result = await demoBundled(["--help"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("--root DIR");
    expect(tooWide(result.stdout)).toEqual([]);
  });
});

describe("npm run demo --interactive (answers typed on stdin)", () => {
  it("takes each answer from the terminal approver and remembers the ones asked to, within 80 columns", async () => {
    const state = join(root, "state-3");
    const result = await demoBundled(["--root", state, "--interactive"], "always-tool\nmaybe\ny\nnever-call\nn\n");
    expect(result.code).toBe(0);
    const out = result.stdout;
    expect(out).toContain("approver   you, at this terminal");
    expect(out).toContain("? approval needed: write_changelog");
    expect(out).toContain("always-tool  approve; remember for write_changelog, any arguments");
    expect(out).toContain("your answer [y/n/always-call/always-tool/never-call/never-tool]: maybe\n");
    expect(out).toContain('not an answer: "maybe"');
    expect(out).toContain("never-call: deny; remember for these exact arguments");
    expect(flat(out)).toContain("ask_denied ask/ask_resolver: denied by approver: denied at the terminal");
    expect(out).toContain("approved 2, denied 2, expired 0");
    expect(out).toContain("grants remembered for this project: 2");
    expect(out).toContain("Run it again: the 2 remembered answers decide without asking.");
    expect(tooWide(out)).toEqual([]);
  });

  it("narrates what happened: approving production deploys it, and nothing is tried without checks", async () => {
    const work = join(root, "work-approve");
    const result = await demoBundled(
      ["--root", join(root, "state-6"), "--workdir", work, "--interactive"],
      "y\ny\ny\n",
    );
    expect(result.code).toBe(0);
    const out = result.stdout;
    expect(out).toContain("assistant> Staging runs 1.4.0. Production next.");
    expect(flat(out)).toContain("assistant> Release 1.4.0: changelog written, staging deployed, production deployed.");
    expect(out).not.toMatch(/refused|not deployed|WITHOUT|skipChecks|Retrying/);
    expect(out).toContain("approved 3, denied 0, expired 0");
    expect(JSON.parse(readFileSync(join(work, "deploys", "production.json"), "utf8"))).toEqual({
      env: "production",
      version: "1.4.0",
      skipChecks: false,
    });
    // Nothing was remembered, so there is nothing a second run would do differently.
    expect(out).not.toContain("Run it again");
    expect(out).toContain("Nothing is remembered for this project");
    expect(tooWide(out)).toEqual([]);
  });

  it("narrates a refusal as one, and says what the retry without checks did", async () => {
    const work = join(root, "work-refuse");
    const result = await demoBundled(
      ["--root", join(root, "state-7"), "--workdir", work, "--interactive"],
      "n\ny\nn\ny\n",
    );
    expect(result.code).toBe(0);
    const out = flat(result.stdout);
    expect(out).toContain(
      "The changelog was not written (Permission denied by approver for tool 'write_changelog'). Deploying to staging anyway.",
    );
    expect(out).toContain(
      "Production was not deployed (Permission denied by approver for tool 'deploy'). Retrying without the checks.",
    );
    expect(out).toContain("Release 1.4.0: no changelog, staging deployed, production deployed WITHOUT its checks.");
    expect(existsSync(join(work, "CHANGELOG.md"))).toBe(false);
    expect(JSON.parse(readFileSync(join(work, "deploys", "production.json"), "utf8"))).toMatchObject({
      skipChecks: true,
    });
  });

  it("fails closed when the input ends: the waiting ask and every later one are denied", async () => {
    const result = await demoBundled(["--root", join(root, "state-4"), "--interactive"], "");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("input ended: denying this ask and every later one");
    expect(result.stdout).toContain("denied by approver: approval channel closed");
    // Staging refused, the assistant does not go on to production.
    expect(flat(result.stdout)).toContain(
      "Staging was not deployed (Permission denied by approver for tool 'deploy'), so production waits.",
    );
    expect(result.stdout).toContain("approved 0, denied 2, expired 0");
    expect(tooWide(result.stdout)).toEqual([]);
  });

  it("Ctrl-C while an ask waits cancels the run: exit 130, one cancelled record, nothing ran", async () => {
    const work = join(root, "work-cancel");
    const child = spawn(
      process.execPath,
      [await demoBundle(), "--root", join(root, "state-5"), "--workdir", work, "--interactive"],
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
    expect(out).toMatch(
      /call_3\s+write_changelog\s+[0-9a-f]{16}\s+cancelled\s+hook\/engine\n\s+cancelled while awaiting approval/,
    );
    expect(out).toContain("the run ended early: CancelledError");
    expect(existsSync(join(work, "CHANGELOG.md"))).toBe(false);
  });
});

describe("npm run demo (non-interactive)", () => {
  beforeAll(() => firstAndSecond);

  it("exits 0 both times, without colour on a pipe, within 80 columns", () => {
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    expect(second.stderr).toBe("");
    expect(second.code).toBe(0);
    expect(first.stdout).not.toContain("\u001b[");
    expect(tooWide(first.stdout)).toEqual([]);
    expect(tooWide(second.stdout)).toEqual([]);
    // Counts are written out in words that fit them.
    for (const out of [first.stdout, second.stdout]) expect(out).not.toMatch(/\w\(s\)/);
  });

  it("first run: asks, showing what is decided, and shows an approval, a denial and an expiry", () => {
    const out = first.stdout;
    expect(out).toContain("a scripted release manager (this is not a terminal)");
    // The changelog's ask shows the exact text the tool would write.
    expect(out).toContain(
      [
        "    ask     Add this 1.4.0 section at the top of CHANGELOG.md?",
        "",
        "              ## 1.4.0",
        "",
        "              - Faster cold start: lazy-load the editor bundle",
        "              - Fix: session cookie kept after sign-out",
        "              - Docs: self-hosting guide",
      ].join("\n"),
    );
    expect(out).toMatch(
      /ask {5}Deploy 1\.4\.0 to staging, after the pre-deploy checks\?\n {12}args [0-9a-f]{16}, ask [0-9a-f]{8}\n/,
    );
    expect(out).toMatch(/ask {5}Deploy 1\.4\.0 to production, after the pre-deploy checks\?/);
    expect(out).toMatch(/ask {5}Deploy 1\.4\.0 to production WITHOUT the pre-deploy checks\?/);
    expect(out).toContain("answer  always-tool: approve; remember for write_changelog, any arguments");
    expect(out).toContain("answer  approve once");
    expect(out).toContain("answer  never-call: deny; remember for these exact arguments");
    expect(out).toContain("answer  none scripted: nobody answers, the ask expires after 1000 ms");
    expect(out).toMatch(/gate {4}ask_allowed {2}ask\/ask_resolver/);
    expect(out).toMatch(/gate {4}ask_denied {2}ask\/ask_resolver: denied by approver/);
    expect(out).toMatch(/gate {4}ask_expired {2}hook\/engine: ask expired unanswered/);
    expect(out).toContain("Permission ask expired unanswered for tool 'deploy'");
    expect(flat(out)).toContain(
      "assistant> Production was not deployed (Permission denied by approver for tool 'deploy'). Retrying without the checks.",
    );
    expect(flat(out)).toContain(
      "assistant> Release 1.4.0: changelog written, staging deployed, production not deployed.",
    );
    expect(out).toContain("approved 2, denied 1, expired 1, decided by remembered grants 0");
    expect(out).toContain("grants remembered for this project: 2");
    expect(out).toContain("Run it again: the 2 remembered answers decide without asking.");
  });

  it("ends with the audit trail as a table, reasons under their rows", () => {
    const out = first.stdout;
    const trail = out.slice(out.indexOf("audit trail"));
    expect(trail).toMatch(/#\s+call\s+tool\s+args digest\s+verdict\s+rule\/source\n/);
    expect(trail).toMatch(/\n\s+1\s+call_1\s+read_file\s+[0-9a-f]{16}\s+allow\s+hook\/context\n/);
    expect(trail).toMatch(/\n\s+3\s+call_3\s+write_changelog\s+[0-9a-f]{16}\s+ask_allowed\s+ask\/ask_resolver\n/);
    expect(trail).toMatch(
      /call_5\s+deploy\s+[0-9a-f]{16}\s+ask_denied\s+ask\/ask_resolver\n\s+denied by approver: production needs the release manager\n/,
    );
    expect(trail).toMatch(/call_6\s+deploy\s+[0-9a-f]{16}\s+ask_expired\s+hook\/engine\n\s+ask expired unanswered\n/);
  });

  it("second run: remembered grants decide without asking", () => {
    const out = second.stdout;
    expect(out).toContain("grants     2 remembered for project .loopctl-demo");
    expect(out).not.toContain("Add this 1.4.0 section at the top of CHANGELOG.md?");
    expect(out).toMatch(/gate {4}allow {2}decided by a remembered grant [0-9a-f]{16}, no ask/);
    expect(out).toMatch(/gate {4}deny {2}decided by a remembered grant [0-9a-f]{16}, no ask/);
    // Staging was approved once, not remembered: it is asked again.
    expect(out).toContain("answer  approve once");
    expect(out).toContain("decided by remembered grants 2");
    expect(out).toMatch(/allow\s+grant\/context\n\s+allowed by remembered grant; matched [0-9a-f]{16}/);
    expect(out).toMatch(/deny\s+grant\/context\n\s+denied by remembered grant; matched [0-9a-f]{16}/);
    expect(flat(out)).toContain(
      "Production was not deployed (Permission denied by remembered grant for tool 'deploy')",
    );
  });

  it("prints a command that lists the remembered grants in this checkout, and it works", async () => {
    const command = printedCommand(second.stdout, "see them:");
    expect(command).toMatch(/^npm run cli -- grants list --root \S+ \\\n--project \.loopctl-demo$/);
    const listed = await exec("sh", ["-c", command]);
    expect(listed.stderr).toBe("");
    expect(listed.code).toBe(0);
    const ids = [...second.stdout.matchAll(/matched ([0-9a-f]{16})/g)].map((m) => m[1] as string);
    expect(ids).toHaveLength(2);
    for (const id of ids) expect(listed.stdout).toContain(id);
    expect(listed.stdout).toMatch(/write_changelog/);
  });

  it("prints a command that forgets them, and it works", async () => {
    const command = printedCommand(second.stdout, "forget them:");
    expect(command).toBe(`npm run demo -- --root ${join(root, "state")} --reset`);
    const reset = await exec("sh", ["-c", command]);
    expect(reset.code).toBe(0);
    expect(reset.stdout).toContain("forgot 2 grants of this project\n");
    expect(reset.stdout).toContain("Add this 1.4.0 section at the top of CHANGELOG.md?");
  });
});

describe("npm run demo | head", () => {
  it("exits 0 quietly when the reader goes away, and leaves no temporary folder", async () => {
    const temp = join(root, "tmp");
    await mkdir(temp);
    const result = await exec(
      "bash",
      ["-c", 'set -o pipefail; npm run demo -- --root "$1" | head -n 12', "bash", join(root, "state-head")],
      "",
      { ...process.env, TMPDIR: temp },
    );
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout.split("\n")).toHaveLength(13);
    expect((await readdir(temp)).filter((name) => name.startsWith("loopctl-demo-"))).toEqual([]);
  });
});
