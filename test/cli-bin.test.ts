import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, existsSync, openSync } from "node:fs";
import { chmod } from "node:fs/promises";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { AuditSink } from "../src/audit/index.js";
import { Grant, GrantScope } from "../src/grant/index.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { seed } from "./support/cli-grants-fixtures.js";
import { cli } from "./support/cli-harness.js";
import { request } from "./support/http-client.js";
import { bundleCli } from "./support/reliability-bundle.js";
import type { Bundle } from "./support/reliability-bundle.js";

const run = promisify(execFile);
const repo = fileURLToPath(new URL("..", import.meta.url));

let dir: string;
/**
 * The bin bundled once, as the package builds it, and run as `node <bin> …`: a child starts in a tenth
 * of the time tsx takes, and runs in any folder, even one deleted under it, where tsx cannot start.
 */
let cliBundle: Bundle;
let bin: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-cli-bin-"));
  cliBundle = await bundleCli();
  bin = cliBundle.path;
});

afterAll(async () => {
  cliBundle?.dispose();
  await rm(dir, { recursive: true, force: true });
});

const loopctl = async (args: string[], cwd = repo): Promise<{ code: number; stdout: string; stderr: string }> => {
  try {
    const { stdout, stderr } = await run(process.execPath, [bin, ...args], {
      cwd,
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

  it("prints a tool name holding a letter that passes for a Latin one with that letter escaped, through the real bin", async () => {
    const root = join(dir, "look-alike-root");
    await seed(root, repo, [
      new Grant("read_file", "allow", GrantScope.thisTool()),
      new Grant("re\u0430d_file", "deny", GrantScope.thisTool()),
      new Grant("файл", "allow", GrantScope.thisTool()),
    ]);
    const result = await loopctl(["grants", "list", "--root", root]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(result.stdout).toContain("re\\u0430d_file");
    expect(result.stdout).not.toContain("re\u0430d_file");
    expect(result.stdout).toContain("файл");
    const explained = await loopctl(["grants", "explain", "--root", root, "--tool", "re\u0430d_file", "--args", "{}"]);
    expect(explained).toMatchObject({ code: 0, stderr: "" });
    expect(explained.stdout).toContain("re\\u0430d_file");
    expect(explained.stdout).not.toContain("re\u0430d_file");
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

  it("verifies a keyed log with the key read from a shell's process substitution, --key-file <(…), never on the disk", async () => {
    const path = join(dir, "keyed-gates.jsonl");
    const hex = randomBytes(32).toString("hex");
    const sink = await AuditSink.open(path, { key: hex });
    await sink.append(gateRecord(1));
    await sink.close();
    // bash hands the bin a pipe, /dev/fd/N, with the key's writer on its other end.
    const { stdout } = await run("bash", [
      "-c",
      `"$0" "$1" audit verify "$2" --json --key-file <(echo "$3")`,
      process.execPath,
      bin,
      path,
      hex,
    ]);
    expect(JSON.parse(stdout)).toMatchObject({ ok: true, records: 1, keyed: true, authenticated: true });
  });

  it("says a library's process warning as one loopctl: warning line, not Node's block with its pid", async () => {
    // node-postgres warns of what sslmode=require will mean in its next major version. No server
    // listens on port 1: the command fails (exit 4) after the URL is read.
    const url = "postgres://postgres@127.0.0.1:1/test?sslmode=require";
    const result = await loopctl(["grants", "list", "--database", url, "--project", "p"]);
    expect(result).toMatchObject({ code: 4, stdout: "" });
    const lines = result.stderr.trimEnd().split("\n");
    expect(
      lines.filter((line) => !line.startsWith("loopctl: ")),
      result.stderr,
    ).toEqual([]);
    expect(lines).toContainEqual(
      expect.stringMatching(
        /^loopctl: warning: SECURITY WARNING: The SSL modes .* are treated as aliases for 'verify-full'\. /,
      ),
    );
    expect(result.stderr).not.toContain("--trace-warnings");
    // Turned off (NODE_NO_WARNINGS=1, --no-warnings), it stays off.
    const { stderr } = await run(process.execPath, [bin, "grants", "list", "--database", url, "--project", "p"], {
      cwd: repo,
      env: { ...process.env, XDG_STATE_HOME: join(dir, "state"), NODE_NO_WARNINGS: "1" },
    }).catch((error: { stderr: string }) => error);
    expect(stderr).not.toContain("warning");
    expect(stderr).toContain("[POSTGRES_QUERY]");
  });

  it.runIf(existsSync("/dev/full"))(
    "exits 4 with one line, not a stack trace, when its output cannot be written",
    async () => {
      const full = openSync("/dev/full", "w");
      try {
        const child = spawn(process.execPath, [bin, "--help"], {
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

describe("the loopctl bin with a stdout nobody reads", () => {
  it("exits 4, quietly, when the reader of its stdout pipe is gone (EPIPE)", async () => {
    const root = join(dir, "stdout-gone-root");
    const project = join(dir, "stdout-gone-project");
    await mkdir(project, { recursive: true });
    await seed(root, project, [new Grant("read", "allow", GrantScope.thisTool())]);
    for (const args of [["--help"], ["grants", "list", "--root", root, "--project", project]]) {
      const child = spawn(process.execPath, [bin, ...args], {
        cwd: repo,
        stdio: ["ignore", "pipe", "pipe"],
      });
      // Gone before the child writes a byte: its first write fails with EPIPE.
      child.stdout.destroy();
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      const [code] = (await once(child, "close")) as [number];
      // Not 0: the output was not delivered. Not a line either: `loopctl … | head` stays quiet.
      expect({ code, stderr }, args.join(" ")).toEqual({ code: 4, stderr: "" });
    }
  });

  it("keeps the exit code of a command that failed when the reader of its stdout is gone (EPIPE)", async () => {
    for (const [args, failed] of [
      [["grants", "list", "--bogus", "--json"], 2],
      [["audit", "verify", join(dir, "no-such.log"), "--json"], 1],
    ] as const) {
      const child = spawn(process.execPath, [bin, ...args], {
        cwd: repo,
        stdio: ["ignore", "pipe", "pipe"],
      });
      child.stdout.destroy();
      child.stderr.resume();
      const [code] = (await once(child, "close")) as [number];
      // Its failure, not an I/O error: a script must still tell a usage error or a failed check from a lost reader.
      expect(code, args.join(" ")).toBe(failed);
    }
  });

  it("exits 4 with one line when its stdout cannot be written to (EBADF)", async () => {
    // stdout open for reading only: every write fails with EBADF.
    const child = spawn("sh", ["-c", 'exec "$@" 1</dev/null', "sh", process.execPath, bin, "--help"], {
      cwd: repo,
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = (await once(child, "close")) as [number];
    expect({ code, stderr }).toEqual({
      code: 4,
      stderr: "loopctl: cannot write the output: EBADF: bad file descriptor, write\n",
    });
  });
});

describe("the loopctl bin with a stderr nobody reads", () => {
  it("still does its work and prints its one JSON document on stdout", async () => {
    const root = join(dir, "stderr-gone-root");
    const grant = new Grant("read", "allow", GrantScope.thisTool());
    const missing = join(dir, "stderr-gone-project");
    const store = await seed(root, missing, [grant]);
    // The missing project folder is warned about on stderr, whose reader is gone: EPIPE.
    const child = spawn(process.execPath, [bin, "grants", "list", "--json", "--root", root, "--project", missing], {
      cwd: repo,
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stderr.destroy();
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    const [code] = (await once(child, "close")) as [number];
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toEqual({ ledger: store.ledgerPath, grants: [grant.toJSON()] });
  });
});

describe("the loopctl bin refuses what names no file it can use", () => {
  it('an empty --root ("$UNSET") is refused instead of meaning the current folder', async () => {
    // A grant root laid out in the current folder: with --root "" the commands used it, and
    // `grants reset` said "removed 0 grants" while the grants under the real root stayed.
    const here = join(dir, "empty-root");
    const project = join(dir, "empty-root-project");
    await mkdir(project, { recursive: true });
    const grant = new Grant("read", "allow", GrantScope.thisTool());
    const stray = await seed(here, project, [grant]);
    const real = await seed(join(dir, "state", "loopctl", "grants"), project, [grant]);
    for (const argv of [
      ["grants", "list", "--root", "", "--project", project, "--json"],
      ["grants", "reset", "--root=", "--project", project],
      ["grants", "revoke", grant.id, "--root", "", "--project", project],
      ["grants", "explain", "--tool", "read", "--args", "{}", "--root", "", "--project", project],
      ["grants", "repair", "--root", "", "--project", project],
      ["console", "--root", "", "--project", project, "--port", "0"],
    ]) {
      const result = await loopctl(argv, here);
      expect(result.code, argv.join(" ")).toBe(2);
      // With --json, the refusal is also the one document on stdout.
      expect(result.stdout, argv.join(" ")).toEqual(
        argv.includes("--json") ? expect.stringContaining('"message": "--root needs a folder (DIR)"') : "",
      );
      expect(result.stderr, argv.join(" ")).toContain("--root needs a folder (DIR)");
    }
    expect(await stray.load()).toEqual([grant]);
    expect(await real.load()).toEqual([grant]);
  });

  it("console --audit naming a folder or a FIFO exits 4 before serving anything", async () => {
    const folder = join(dir, "audit-folder");
    await mkdir(folder, { recursive: true });
    const fifo = join(dir, "audit-fifo");
    await run("mkfifo", [fifo]);
    for (const audit of [folder, fifo]) {
      const child = spawn(process.execPath, [bin, "console", "--root", join(dir, "console-root"), "--audit", audit], {
        cwd: repo,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      // A console that started anyway is stopped, and the test then fails on its exit code and output.
      const timer = setTimeout(() => child.kill("SIGINT"), 8_000);
      const [code] = (await once(child, "close")) as [number];
      clearTimeout(timer);
      expect({ code, stdout }, audit).toEqual({ code: 4, stdout: "" });
      expect(stderr).toBe(`loopctl: audit log ${audit} is not a regular file [AUDIT_PATH]\n`);
    }
  });
});

describe("the loopctl bin with a --project it cannot read", () => {
  /** The user the bin runs as: this one, or under root (whom no mode stops) `nobody`. */
  const NOBODY = 65534;

  it("exits 4 naming the folder and the OS error, in one JSON document with --json, not 'does not exist'", async () => {
    const asRoot = process.getuid?.() === 0;
    const base = join(dir, "unreadable");
    await mkdir(base, { mode: 0o755 });
    const locked = join(base, "locked");
    const project = join(locked, "project");
    await mkdir(project, { recursive: true });
    const root = join(base, "grants-root");
    if (asRoot) {
      // The way down to the bin and to the folders must be open to `nobody`, and the folders its own.
      for (const path of [dir, dirname(dirname(bin)), dirname(bin)]) await chmod(path, 0o755);
      await run("chown", ["-R", `${NOBODY}:${NOBODY}`, base]);
    }
    await chmod(locked, 0o000);
    const asUser = (args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
      new Promise((resolve) => {
        execFile(
          process.execPath,
          [bin, ...args],
          { cwd: "/", env: { PATH: process.env["PATH"] }, ...(asRoot ? { uid: NOBODY, gid: NOBODY } : {}) },
          (error, stdout, stderr) =>
            resolve({ code: error === null ? 0 : ((error as { code?: number }).code ?? -1), stdout, stderr }),
        );
      });
    try {
      const message =
        `the project folder ${project} cannot be read (EACCES), so which grants are its own cannot be told; ` +
        "run loopctl as a user who can read it, or change the permissions of the folders on its path";
      for (const command of [["list"], ["reset"], ["explain", "--tool", "read", "--args", "{}"]]) {
        const args = ["grants", ...command, "--root", root, "--project", project];
        expect(await asUser(args), args.join(" ")).toEqual({
          code: 4,
          stdout: "",
          stderr: `loopctl: ${message} [PROJECT_UNREADABLE]\n`,
        });
      }
      const asJson = await asUser(["grants", "list", "--json", "--root", root, "--project", project]);
      expect(asJson.code).toBe(4);
      expect(JSON.parse(asJson.stdout)).toEqual({ error: "PROJECT_UNREADABLE", message });
      expect(asJson.stderr).toBe(`loopctl: ${message} [PROJECT_UNREADABLE]\n`);
      // Nothing was made for it: no ledger under some other path's name.
      expect(existsSync(root)).toBe(false);
    } finally {
      await chmod(locked, 0o755);
    }
  });
});

describe("the loopctl bin in a current folder deleted under it", () => {
  /** Runs the bundled bin from a folder that the shell removes just before starting it. */
  const inDeletedFolder = async (args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
    const gone = await mkdtemp(join(dir, "gone-"));
    const script = 'cd "$1" && rmdir "$1" && shift && exec "$@"';
    try {
      const { stdout, stderr } = await run("sh", ["-c", script, "sh", gone, process.execPath, bin, ...args]);
      return { code: 0, stdout, stderr };
    } catch (error) {
      const e = error as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  };

  const message = "the current folder cannot be read (ENOENT): was it deleted? run loopctl in a folder that exists";

  it("exits 4 naming the current folder, in one JSON document with --json, not a stack trace", async () => {
    const root = join(dir, "gone-root");
    for (const args of [
      ["grants", "list", "--json", "--root", root],
      ["grants", "explain", "--tool", "read", "--args", "{}", "--json"],
      ["audit", "verify", "gates.jsonl", "--json"],
    ]) {
      const result = await inDeletedFolder(args);
      expect(result.code, args.join(" ")).toBe(4);
      expect(JSON.parse(result.stdout), args.join(" ")).toEqual({ error: "CWD_UNAVAILABLE", message });
      expect(result.stderr, args.join(" ")).toBe(`loopctl: ${message} [CWD_UNAVAILABLE]\n`);
    }
    expect(await inDeletedFolder(["grants", "reset", "--root", root])).toEqual({
      code: 4,
      stdout: "",
      stderr: `loopctl: ${message} [CWD_UNAVAILABLE]\n`,
    });
  });
});

describe("the loopctl console through the real bin", () => {
  it("says a ledger warning as one plain loopctl line, as the grants commands do", async () => {
    const root = join(dir, "console-warn-root");
    const project = join(dir, "console-warn-project");
    await mkdir(project, { recursive: true });
    const grant = new Grant("deploy", "allow", GrantScope.thisTool());
    const store = await seed(root, project, [grant]);
    // Folders others can read: the console's revoke makes them owner-only and says so.
    for (const folder of [join(root, "projects"), dirname(store.ledgerPath)]) await chmod(folder, 0o755);
    const child = spawn(process.execPath, [bin, "console", "--root", root, "--project", project], {
      cwd: repo,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const url = await new Promise<string>((found, failed) => {
      child.stdout.on("data", (chunk: Buffer) => {
        stdout += chunk.toString();
        const match = /^open (\S+)$/m.exec(stdout);
        if (match) found(match[1] as string);
      });
      child.on("close", () => failed(new Error(`the console ended: ${stdout}${stderr}`)));
    });
    const base = url.slice(0, url.indexOf("?"));
    const auth = { authorization: `Bearer ${new URL(url).searchParams.get("token") ?? ""}` };
    const reply = await request(`${base}api/grants/${grant.id}`, { method: "DELETE", headers: auth });
    child.kill("SIGINT");
    const [code] = (await once(child, "close")) as [number];
    expect(reply.status).toBe(200);
    expect(await store.load()).toEqual([]);
    expect(code).toBe(0);
    const lines = stderr.split("\n");
    expect(lines.pop()).toBe("");
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines)
      expect(line).toMatch(/^loopctl: warning: grant ledger path .* made owner-only \(mode 700\)$/);
  });
});

describe("loopctl grants revoke through the real bin: a tool name that would read as more of the line", () => {
  it("is quoted in JSON's escapes, where a plain one is printed bare as before", async () => {
    const project = join(dir, "revoke-names-project");
    await mkdir(project, { recursive: true });
    const root = join(dir, "revoke-names-root");
    const forged = "x, this_tool) (allow shell\n\u001b[31m";
    const hostile = new Grant(forged, "deny", GrantScope.thisCall({ a: 1 }));
    const plain = new Grant("read", "allow", GrantScope.thisTool());
    await seed(root, project, [hostile, plain]);
    const first = await loopctl(["grants", "revoke", hostile.id, "--root", root, "--project", project]);
    expect(first).toMatchObject({ code: 0, stderr: "" });
    expect(first.stdout).toBe(
      `revoked ${hostile.id} (deny "x, this_tool) (allow shell\\n\\u001b[31m", this_call {"a":1})\n`,
    );
    const second = await loopctl(["grants", "revoke", plain.id, "--root", root, "--project", project]);
    expect(second.stdout).toBe(`revoked ${plain.id} (allow read, this_tool)\n`);
  });
});

describe("loopctl grants reset --tool through the real bin", () => {
  it("matches the name exactly, and names the grants a name differing in case left in force", async () => {
    const root = join(dir, "reset-case-root");
    const project = join(dir, "reset-case-project");
    await mkdir(project, { recursive: true });
    const deploy = new Grant("deploy", "allow", GrantScope.thisTool());
    const store = await seed(root, project, [deploy]);
    const result = await loopctl(["grants", "reset", "--tool", "Deploy", "--root", root, "--project", project]);
    expect(result).toEqual({
      code: 0,
      stdout: `removed 0 grants of tool "Deploy" from ${store.ledgerPath}\n`,
      stderr: 'loopctl grants reset: the name matches exactly; grants of "deploy" are left in force\n',
    });
    expect(await store.load()).toEqual([deploy]);
    const none = await loopctl(["grants", "reset", "--tool", "other", "--root", root, "--project", project]);
    expect(none).toMatchObject({ code: 0, stderr: "" });
  });
});

describe("loopctl grants reset --tool through the real bin: a name with spaces around it", () => {
  it("names the grants of the name without them left in force, as a cell copied from the table would be", async () => {
    const root = join(dir, "reset-space-root");
    const project = join(dir, "reset-space-project");
    await mkdir(project, { recursive: true });
    const deploy = new Grant("deploy", "allow", GrantScope.thisTool());
    const store = await seed(root, project, [deploy]);
    for (const tool of ["deploy ", "\tDeploy\n"]) {
      const result = await loopctl(["grants", "reset", "--tool", tool, "--root", root, "--project", project]);
      expect(result, JSON.stringify(tool)).toEqual({
        code: 0,
        stdout: `removed 0 grants of tool ${JSON.stringify(tool)} from ${store.ledgerPath}\n`,
        stderr: 'loopctl grants reset: the name matches exactly; grants of "deploy" are left in force\n',
      });
    }
    expect(await store.load()).toEqual([deploy]);
  });
});

describe("--json usage errors through the real bin", () => {
  /** The one JSON document a usage error prints on stdout with --json, and its stderr lines kept. */
  const usage = async (args: string[], message: string | RegExp, command: string): Promise<void> => {
    const result = await loopctl(args, dir);
    const shown = args.join(" ");
    expect(result.code, shown).toBe(2);
    expect(JSON.parse(result.stdout), shown).toEqual({
      error: "USAGE",
      message: typeof message === "string" ? message : expect.stringMatching(message),
      hint: `run '${command} --help' for usage`,
    });
    const [line, help, ...rest] = result.stderr.split("\n");
    expect(line, shown).toEqual(
      typeof message === "string" ? `${command}: ${message}` : expect.stringMatching(`^${command}: `),
    );
    expect([help, ...rest], shown).toEqual([`Run '${command} --help' for usage.`, ""]);
  };

  it("prints one JSON error document on stdout for a grants list line that fails to parse", async () => {
    const root = join(dir, "json-usage-root");
    await usage(["grants", "list", "--json", "--bogus"], 'unknown option "--bogus"', "loopctl grants list");
    await usage(
      ["grants", "list", "--jsno", "--json"],
      'unknown option "--jsno"; did you mean --json?',
      "loopctl grants list",
    );
    await usage(["grants", "list", "--json", "--project"], "--project needs a value", "loopctl grants list");
    await usage(
      ["grants", "list", "--root", root, "--root", root, "--json"],
      "--root given twice; give it once",
      "loopctl grants list",
    );
  });

  it("prints one for a value or argument refused after parsing", async () => {
    await usage(["grants", "list", "--json", "--project", ""], "--project needs a folder (DIR)", "loopctl grants list");
    await usage(["grants", "list", "--root=", "--json"], "--root needs a folder (DIR)", "loopctl grants list");
    await usage(["grants", "list", "--json", "extra"], 'unexpected argument "extra"', "loopctl grants list");
  });

  it("prints one for grants explain and audit verify", async () => {
    const root = join(dir, "json-usage-root");
    await usage(["grants", "explain", "--json", "--tool", "read"], "missing --args JSON", "loopctl grants explain");
    await usage(
      ["grants", "explain", "--root", root, "--tool", "read", "--args", "{", "--json"],
      /^--args is not valid JSON: /,
      "loopctl grants explain",
    );
    await usage(["audit", "verify", "--json"], "missing the FILE to verify", "loopctl audit verify");
    await usage(["audit", "verify", "log.jsonl", "--anchor", "nope", "--json"], /^--anchor: /, "loopctl audit verify");
  });

  it("counts --json where the line fails before its command is known", async () => {
    await usage(
      ["grants", "lsit", "--json"],
      'unknown command "grants lsit"; did you mean "grants list"?',
      "loopctl grants",
    );
    await usage(["--json"], 'unknown option "--json"', "loopctl");
    await usage(["grants", "reset", "--json"], 'unknown option "--json"', "loopctl grants reset");
  });

  it("counts a --json the command refuses as another option's value, and not one written as a value", async () => {
    // Refused as --tool's value (a dash-led value is written --tool=-x), so it is the option.
    await usage(
      ["grants", "explain", "--tool", "--json", "--args", "{}"],
      "--tool needs a value; to give one starting with a dash, write --tool=--json",
      "loopctl grants explain",
    );
    // Written as a value, or after "--" (a file named --json): no document, only the stderr line.
    for (const args of [
      ["grants", "explain", "--tool=--json", "--args", "{"],
      ["audit", "verify", "--anchor", "nope", "--", "--json"],
      ["audit", "verify", "--anchor=--json", "log.jsonl"],
    ]) {
      const result = await loopctl(args, dir);
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stdout, args.join(" ")).toBe("");
      expect(result.stderr, args.join(" ")).toMatch(/^loopctl (grants explain|audit verify): --(args|anchor)/);
    }
  });
});

/**
 * `args` (a `--help` line with `--json`) run through `run` prints `{command, help}` on stdout, exit 0, where `help`
 * is the text the same line without `--json` prints.
 */
async function expectJsonHelp(
  args: readonly string[],
  command: string,
  run: (line: string[]) => Promise<{ code: number; stdout: string; stderr: string }>,
): Promise<void> {
  const shown = args.join(" ");
  const text = await cli(
    args.filter((arg) => arg !== "--json"),
    { cwd: dir },
  );
  expect(text, shown).toMatchObject({ code: 0, stderr: "" });
  const result = await run([...args]);
  expect(result, shown).toMatchObject({ code: 0, stderr: "" });
  expect(JSON.parse(result.stdout), shown).toEqual({ command, help: text.stdout });
}

describe("--help with --json through the real bin", () => {
  it("prints the help as one JSON document, {command, help}, exit 0", async () => {
    for (const [args, command] of [
      [["--help", "--json"], "loopctl"],
      [["-h", "--json"], "loopctl"],
      [["grants", "--help", "--json"], "loopctl grants"],
      [["audit", "-h", "--json"], "loopctl audit"],
      [["grants", "list", "--json", "--help"], "loopctl grants list"],
      [["grants", "explain", "--help", "--json"], "loopctl grants explain"],
      [["audit", "verify", "-h", "--json"], "loopctl audit verify"],
    ] as const) {
      await expectJsonHelp(args, command, (line) => loopctl(line, dir));
    }
  });

  it("prints the help as JSON for the commands that take no --json of their own too", async () => {
    // The top-level help says every command takes --help, and with --json prints it as JSON.
    for (const [args, command] of [
      [["grants", "revoke", "--help", "--json"], "loopctl grants revoke"],
      [["grants", "reset", "--json", "-h"], "loopctl grants reset"],
      [["grants", "repair", "--help", "--json"], "loopctl grants repair"],
      [["console", "--help", "--json"], "loopctl console"],
    ] as const) {
      await expectJsonHelp(args, command, (line) => cli(line, { cwd: dir }));
    }
    // Without --help, such a command still refuses --json.
    const refused = await cli(["grants", "revoke", "abc", "--json"], { cwd: dir });
    expect(refused.code).toBe(2);
    expect(JSON.parse(refused.stdout)).toMatchObject({ error: "USAGE", message: 'unknown option "--json"' });
  });

  it("takes --json on either side of --help, for a command group as for a command", async () => {
    for (const [args, command] of [
      [["--json", "--help"], "loopctl"],
      [["--json", "-h"], "loopctl"],
      [["grants", "--json", "--help"], "loopctl grants"],
      [["audit", "--json", "-h"], "loopctl audit"],
      [["grants", "revoke", "--json", "--help"], "loopctl grants revoke"],
      [["console", "--json", "--help"], "loopctl console"],
      // After the group's first word too, as a command counts it after a positional.
      [["--help", "grants", "--json"], "loopctl"],
      [["grants", "-h", "list", "--json"], "loopctl grants"],
    ] as const) {
      await expectJsonHelp(args, command, (line) => loopctl(line, dir));
    }
  });

  it("refuses an unknown option beside a group's --help whichever side it is on", async () => {
    for (const [args, command] of [
      [["--bogus", "--help"], "loopctl"],
      [["--help", "--bogus"], "loopctl"],
      [["grants", "--bogus", "-h"], "loopctl grants"],
      [["grants", "-h", "--bogus"], "loopctl grants"],
    ] as const) {
      const shown = args.join(" ");
      const result = await cli([...args], { cwd: dir });
      expect(result, shown).toEqual({
        code: 2,
        stdout: "",
        stderr: `${command}: unknown option "--bogus"\nRun '${command} --help' for usage.\n`,
      });
    }
  });

  it("keeps the help as text after a --, where --json is a positional", async () => {
    for (const args of [
      ["--help", "--", "--json"],
      ["grants", "--help", "--", "--json"],
    ]) {
      const result = await cli(args, { cwd: dir });
      expect(result, args.join(" ")).toMatchObject({ code: 0, stderr: "" });
      expect(result.stdout, args.join(" ")).toMatch(/^loopctl(?: grants)?: /);
    }

    const result = await loopctl(["audit", "verify", "--help", "--", "--json"], dir);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(result.stdout).toMatch(/^loopctl audit verify: /);
  });
});
