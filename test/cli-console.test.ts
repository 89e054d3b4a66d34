import { spawn } from "node:child_process";
import { connect, createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { randomBytes } from "node:crypto";
import { appendFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditSink, readAuditKeyFile } from "loopctl/audit";
import { FileGrantStore, Grant, GrantScope } from "loopctl/grant";
import { encodeAuditLine } from "../src/audit/line.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { EXIT, runCli } from "../src/cli/index.js";
import { cli } from "./support/cli-harness.js";
import { request } from "./support/http-client.js";
import { startConsole } from "./support/console-run.js";

const repo = fileURLToPath(new URL("..", import.meta.url));
const bin = join(repo, "src", "cli", "main.ts");

/** The console URL a bin child prints; rejects if it exits first. */
function printedUrl(child: ReturnType<typeof spawn>): Promise<string> {
  let out = "";
  return new Promise<string>((resolve, reject) => {
    child.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
      const match = /^open (\S+)$/m.exec(out);
      if (match) resolve(match[1] as string);
    });
    child.stderr?.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")));
    child.once("exit", () => reject(new Error(`exited early: ${out}`)));
  });
}
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-cli-console-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("loopctl console", () => {
  it("serves the project's grants (list, revoke) and an audit log's latest decisions, until stopped", async () => {
    const root = join(dir, "root");
    const project = join(dir, "project");
    const store = new FileGrantStore(root, project);
    const grant = await store.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    const audit = join(dir, "gates.jsonl");
    const sink = await AuditSink.open(audit);
    await sink.append(gateRecord(1));
    await sink.append(gateRecord(2));
    await sink.close();

    const run = startConsole(dir, ["--port", "0", "--root", root, "--project", project, "--audit", audit]);
    const url = await run.printed;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=[A-Za-z0-9_-]{43}$/);
    expect(run.output()).toContain(`grants  ${store.ledgerPath}`);
    expect(run.output()).toContain(`audit   ${audit}`);
    const base = url.slice(0, url.indexOf("?"));
    const auth = { authorization: `Bearer ${new URL(url).searchParams.get("token") ?? ""}` };

    const grants = await request(`${base}api/grants`, { headers: auth });
    expect(grants.json).toMatchObject({
      available: true,
      grants: [{ id: grant.id, tool: "deploy", pin: { type: "unpinned" } }],
    });
    const records = await request(`${base}api/records`, { headers: auth });
    expect(records.json).toMatchObject({
      available: true,
      live: false,
      records: [
        { ...gateRecord(1), audit: { seq: 1, vouched: "chain" } },
        { ...gateRecord(2), audit: { seq: 2, vouched: "chain" } },
      ],
      audit: { by: "chain", ok: true, first: 1, last: 2 },
    });
    expect(run.output()).toContain(
      `audit   ${audit} (hash chain checked; no line authenticated without --audit-key-file)\n`,
    );
    expect((await request(`${base}api/asks`, { headers: auth })).json).toEqual({ asks: [] });
    expect((await request(`${base}api/grants/${grant.id}`, { method: "DELETE", headers: auth })).status).toBe(200);
    expect(await store.load()).toEqual([]);
    expect((await request(`${base}`, { headers: auth })).status).toBe(200);

    run.stop.abort();
    expect(await run.done).toBe(0);
    expect(run.output()).toContain("loopctl console: stopped");
    await expect(request(`${base}healthz`)).rejects.toThrow(/ECONNREFUSED/);
  });

  it("warns when an --audit starting with a ~ the shell left as it is names no file", async () => {
    // bash expands ~ in --audit ~/x, not in --audit=~/x: a log under a folder named ~ here, never written.
    const run = startConsole(dir, ["--root", join(dir, "r-tilde"), "--audit=~/gates.jsonl"]);
    expect(await run.printed).not.toBe("");
    run.stop.abort();
    expect(await run.done).toBe(0);
    expect(run.output()).toContain(
      `loopctl: warning: the audit log ${join(dir, "~", "gates.jsonl")} does not exist: the shell leaves a ~ ` +
        "after = as it is (--audit=~/…); write --audit ~/… or $HOME/…\n",
    );
  });

  it("--audit-key-file checks each line's mac and the seal: a line appended without the key is served as vouched for by nothing", async () => {
    const audit = join(dir, "keyed.jsonl");
    const keyFile = join(dir, "audit.key");
    await writeFile(keyFile, `${randomBytes(32).toString("hex")}\n`, { mode: 0o600 });
    const key = await readAuditKeyFile(keyFile);
    const sink = await AuditSink.open(audit, { key });
    await sink.append(gateRecord(1));
    await sink.close();
    const last = JSON.parse(await readFile(audit, "utf8")) as { hash: string };
    await appendFile(audit, encodeAuditLine(2, last.hash, gateRecord(2, { verdict: "ask_allowed" }), undefined).text);

    const run = startConsole(dir, ["--root", join(dir, "r-key"), "--audit", audit, "--audit-key-file", keyFile]);
    const url = await run.printed;
    expect(run.output()).toContain(`audit   ${audit} (each line's mac and the seal checked with the key)\n`);
    const base = url.slice(0, url.indexOf("?"));
    const auth = { authorization: `Bearer ${new URL(url).searchParams.get("token") ?? ""}` };
    expect((await request(`${base}api/records`, { headers: auth })).json).toMatchObject({
      records: [
        { tool: "tool_1", audit: { seq: 1, vouched: "sealed" } },
        { tool: "tool_2", verdict: "ask_allowed", audit: { seq: 2, vouched: "none" } },
      ],
      audit: { by: "key", ok: false, problem: "forged", line: 2, sealed: 1 },
    });
    run.stop.abort();
    expect(await run.done).toBe(0);

    for (const [args, line] of [
      [["--audit-key-file", keyFile], "--audit-key-file is the key of the --audit log: give --audit FILE too"],
      [["--audit", audit, "--audit-key-file="], "--audit-key-file needs the FILE of a key"],
      [
        ["--audit", audit, "--audit-key-file", join(dir, "none.key")],
        `--audit-key-file: ${join(dir, "none.key")}: no such file`,
      ],
    ] as const) {
      const result = await cli(["console", ...args, "--root", join(dir, "r-key")], { cwd: dir });
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr).toBe(`loopctl console: ${line}\nRun 'loopctl console --help' for usage.\n`);
    }
  });

  it("takes its token from LOOPCTL_CONSOLE_TOKEN", async () => {
    const run = startConsole(dir, ["--root", join(dir, "r2")], {
      LOOPCTL_CONSOLE_TOKEN: "a-console-token-of-enough-length",
    });
    const url = await run.printed;
    expect(new URL(url).searchParams.get("token")).toBe("a-console-token-of-enough-length");
    run.stop.abort();
    expect(await run.done).toBe(0);
  });

  it("usage errors exit 2: a bad port, a stray argument, an unknown option; a port in use exits 4", async () => {
    for (const args of [
      ["--port", "http"],
      ["--port", "70000"],
      ["--port", "-1"],
      ["extra"],
      ["--database-typo", "x"],
    ]) {
      const result = await cli(["console", ...args], { cwd: dir });
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr).toContain("Run 'loopctl console --help' for usage.");
    }
    const first = startConsole(dir, ["--root", join(dir, "r3")]);
    const port = new URL(await first.printed).port;
    const second = await cli(["console", "--port", port, "--root", join(dir, "r3")], { cwd: dir });
    expect(second.code).toBe(4);
    expect(second.stderr).toContain("EADDRINUSE");
    first.stop.abort();
    await first.done;
  });

  it("--allowed-host adds a Host to answer to, for use behind a proxy; any other Host is still refused", async () => {
    const run = startConsole(dir, [
      "--root",
      join(dir, "r5"),
      "--allowed-host",
      "approvals.example:8443",
      "--allowed-host",
      "Other.Example",
    ]);
    const url = await run.printed;
    const base = url.slice(0, url.indexOf("?"));
    expect(base).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    for (const host of ["approvals.example:8443", "other.example", new URL(base).host]) {
      expect((await request(`${base}healthz`, { headers: { host } })).status, host).toBe(200);
    }
    for (const host of ["approvals.example", "evil.example"]) {
      expect((await request(`${base}healthz`, { headers: { host } })).status, host).toBe(421);
    }
    run.stop.abort();
    expect(await run.done).toBe(0);
  });

  it("starts over a corrupt ledger, warning once as grants list says it, with the way out, and serves on", async () => {
    const root = join(dir, "r10");
    const project = join(dir, "p10");
    await mkdir(project);
    const store = new FileGrantStore(root, project);
    await store.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    await writeFile(store.ledgerPath, '[{"id":"x",');
    const listed = await cli(["grants", "list", "--root", root, "--project", project], { cwd: dir });
    expect(listed.code).toBe(3);
    const [said, hint] = listed.stderr.split("\n");
    expect(hint).toContain("loopctl grants repair");

    const run = startConsole(dir, ["--root", root, "--project", project]);
    const url = await run.printed;
    expect(run.errors()).toBe(
      `${(said as string).replace(/^loopctl: /, "loopctl: warning: ")}\n` +
        `${hint as string}; the console serves asks meanwhile, and its grants fail until then\n`,
    );
    const base = url.slice(0, url.indexOf("?"));
    const auth = { authorization: `Bearer ${new URL(url).searchParams.get("token") ?? ""}` };
    expect((await request(`${base}healthz`)).status).toBe(200);
    expect((await request(`${base}api/grants`, { headers: auth })).status).toBe(503);
    expect(run.errors().split("grants repair").length - 1, "the hint is said once").toBe(1);
    run.stop.abort();
    expect(await run.done).toBe(0);
  });

  it("bad server options exit 2 with one line naming the flag: a wildcard or empty --host, a bad --allowed-host or --host, a short token", async () => {
    const cases: [args: string[], env: Record<string, string>, line: string][] = [
      [
        ["--host", "0.0.0.0"],
        {},
        "loopctl console: --host 0.0.0.0 needs --allowed-host H: the names clients use to reach it",
      ],
      [["--host", "0"], {}, "loopctl console: --host 0 needs --allowed-host H: the names clients use to reach it"],
      // An empty --host ("$HOST" unset) is not taken for every address, with or without --allowed-host.
      [["--host="], {}, "loopctl console: --host needs an address to listen on (H)"],
      [
        ["--host=", "--allowed-host", "approvals.example.com"],
        {},
        "loopctl console: --host needs an address to listen on (H)",
      ],
      [["--allowed-host", "bad/host"], {}, 'loopctl console: --allowed-host: "bad/host" is not a host or host:port'],
      [
        ["--allowed-host", "approvals.example.com:99999"],
        {},
        'loopctl console: --allowed-host: "approvals.example.com:99999" has port 99999: a port is from 1 to 65535',
      ],
      [
        ["--host", "no-such-host.invalid"],
        {},
        "loopctl console: --host no-such-host.invalid: not an address of this machine to listen on (ENOTFOUND)",
      ],
      [
        [],
        { LOOPCTL_CONSOLE_TOKEN: "short" },
        "loopctl console: LOOPCTL_CONSOLE_TOKEN: must be at least 16 characters of A-Z a-z 0-9 . _ ~ - (it travels in URLs and headers)",
      ],
    ];
    for (const [args, env, line] of cases) {
      const result = await cli(["console", ...args, "--root", join(dir, "r6")], { cwd: dir, env });
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr).toBe(`${line}\nRun 'loopctl console --help' for usage.\n`);
      expect(result.stdout).toBe("");
    }
  });

  it("a bad server option over a corrupt ledger is said alone, not after a warning that the console serves on", async () => {
    const root = join(dir, "r11");
    const project = join(dir, "p11");
    await mkdir(project);
    const store = new FileGrantStore(root, project);
    await store.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    await writeFile(store.ledgerPath, '[{"id":"x",');
    const result = await cli(["console", "--root", root, "--project", project], {
      cwd: dir,
      env: { LOOPCTL_CONSOLE_TOKEN: "short" },
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      "loopctl console: LOOPCTL_CONSOLE_TOKEN: must be at least 16 characters of A-Z a-z 0-9 . _ ~ - (it travels in URLs and headers)\n" +
        "Run 'loopctl console --help' for usage.\n",
    );
    expect(result.stdout).toBe("");
  });

  it("with --database, a bad server option is said before any connection: a usage error (exit 2), not the database's", async () => {
    const usage = "Run 'loopctl console --help' for usage.\n";
    const unreachable = ["console", "--database", "postgres://postgres@127.0.0.1:1/test", "--port", "0"];
    const short = await cli(unreachable, { cwd: dir, env: { LOOPCTL_CONSOLE_TOKEN: "short" } });
    expect(short).toEqual({
      code: 2,
      stdout: "",
      stderr:
        "loopctl console: LOOPCTL_CONSOLE_TOKEN: must be at least 16 characters of A-Z a-z 0-9 . _ ~ - (it travels in URLs and headers)\n" +
        usage,
    });
    const host = await cli([...unreachable, "--allowed-host", "not a host"], { cwd: dir });
    expect(host).toEqual({
      code: 2,
      stdout: "",
      stderr: `loopctl console: --allowed-host: "not a host" is not a host or host:port\n${usage}`,
    });
    // With good options, the database is the fault, as before.
    const good = await cli(unreachable, { cwd: dir, env: { LOOPCTL_CONSOLE_TOKEN: "a".repeat(16) } });
    expect(good.code).toBe(4);
    expect(good.stderr).toContain("[POSTGRES_QUERY]");
  });

  it("a --host that spells every address without --allowed-host is refused before any file or connection is opened", async () => {
    // A socket in the database's place that counts every connection made to it.
    let connections = 0;
    const listener = createServer((socket) => {
      connections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", () => resolve()));
    const database = `postgres://postgres@127.0.0.1:${(listener.address() as AddressInfo).port}/test`;
    try {
      for (const host of ["0.0.0.0", "::", "0", "0x0", "::0", "::ffff:0.0.0.0", "::%lo"]) {
        // A key file that is not there: read first, it would be the fault said.
        const result = await cli(
          ["console", "--host", host, "--database", database, "--audit", dir, "--audit-key-file", join(dir, "none")],
          { cwd: dir },
        );
        expect(result, host).toEqual({
          code: 2,
          stdout: "",
          stderr:
            `loopctl console: --host ${host} needs --allowed-host H: the names clients use to reach it\n` +
            "Run 'loopctl console --help' for usage.\n",
        });
      }
      expect(connections).toBe(0);
      // The same command with the host allowed does reach the database (and fails there).
      const allowed = await cli(
        ["console", "--host", "0.0.0.0", "--allowed-host", "a.example", "--database", database],
        {
          cwd: dir,
        },
      );
      expect(allowed.code).toBe(4);
      expect(connections).toBeGreaterThan(0);
    } finally {
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    }
  });

  it("an output whose write throws once the server listens closes the server and fails the command", async () => {
    /** Resolves with whether a connection to `port` is refused. */
    const refused = (port: number): Promise<boolean> =>
      new Promise((resolve) => {
        const socket = connect(port, "127.0.0.1");
        socket.once("connect", () => {
          socket.destroy();
          resolve(false);
        });
        socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code === "ECONNREFUSED"));
      });
    const signals = [process.listenerCount("SIGINT"), process.listenerCount("SIGTERM")];

    // stdout throws as the link is written; no signal, so the console listens for SIGINT and SIGTERM.
    let url = "";
    let stderr = "";
    const code = await runCli(["console", "--root", join(dir, "r12"), "--project", dir], {
      stdout: {
        write: (chunk: string) => {
          url = /^open (\S+)$/m.exec(chunk)?.[1] ?? url;
          throw new Error("the output is gone");
        },
      },
      stderr: { write: (chunk: string) => (stderr += chunk) },
      env: {},
      cwd: dir,
    });
    expect(code).toBe(EXIT.internal);
    expect(stderr).toContain("the output is gone");
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
    expect(await refused(Number(new URL(url).port))).toBe(true);
    expect([process.listenerCount("SIGINT"), process.listenerCount("SIGTERM")]).toEqual(signals);

    // stderr throws as the warning about a corrupt ledger is written, before the link.
    const root = join(dir, "r13");
    const project = join(dir, "p13");
    await mkdir(project);
    const store = new FileGrantStore(root, project);
    await store.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    await writeFile(store.ledgerPath, '[{"id":"x",');
    const free = createServer();
    await new Promise<void>((resolve) => free.listen(0, "127.0.0.1", () => resolve()));
    const port = (free.address() as AddressInfo).port;
    await new Promise<void>((resolve) => free.close(() => resolve()));
    let out = "";
    const failed = await runCli(["console", "--root", root, "--project", project, "--port", String(port)], {
      stdout: { write: (chunk: string) => (out += chunk) },
      stderr: {
        write: () => {
          throw new Error("the error output is gone");
        },
      },
      env: {},
      cwd: dir,
      signal: new AbortController().signal,
    });
    expect(failed).toBe(EXIT.internal);
    expect(out).toBe("");
    expect(await refused(port)).toBe(true);
  });

  it("--help explains what it serves, and the top-level help lists it", async () => {
    const help = await cli(["console", "--help"], { cwd: dir });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain(
      "loopctl console [--port N] [--host H] [--allowed-host H]... [--project DIR]\n                  [--root DIR] [--audit FILE]",
    );
    expect(help.stdout).toContain("--allowed-host H");
    expect(help.stdout).toContain("--max-connections N");
    expect(help.stdout).toContain("loopctl console --database URL [--project NAME] [--schema NAME]");
    expect(help.stdout).toContain("LOOPCTL_CONSOLE_TOKEN");
    const top = (await cli(["--help"], { cwd: dir })).stdout;
    const usage = top.slice(top.indexOf("loopctl console"), top.indexOf("loopctl --version"));
    // Every option of the console, in the top-level usage too.
    for (const flag of [
      "--port",
      "--host",
      "--allowed-host",
      "--project",
      "--root",
      "--database",
      "--schema",
      "--audit",
      "--audit-key-file",
      "--max-connections",
    ])
      expect(usage).toMatch(new RegExp(`\\[${flag} `));
  });

  it("--max-connections caps the open connections of the real bin's server: one over is closed unread", async () => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", bin, "console", "--max-connections", "2", "--root", join(dir, "r7")],
      { cwd: repo, stdio: ["ignore", "pipe", "pipe"] },
    );
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    try {
      const port = Number(new URL(await printedUrl(child)).port);
      /** A raw connection, its `reply` everything received once the server closes it. */
      const open = (): { write: (text: string) => void; received: () => string; reply: Promise<string> } => {
        const socket = connect(port, "127.0.0.1");
        socket.on("error", () => undefined);
        let received = "";
        socket.setEncoding("utf8");
        socket.on("data", (chunk: string) => (received += chunk));
        const reply = new Promise<string>((resolve) => socket.once("close", () => resolve(received)));
        // Closed when the console stops, at the latest.
        void exited.then(() => socket.destroy());
        return { write: (text) => socket.write(text), received: () => received, reply };
      };
      const healthz = `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`;
      /** Sends a kept-alive request on `client` and waits for its `count`th reply. */
      const answered = async (client: ReturnType<typeof open>, count: number): Promise<void> => {
        client.write(healthz);
        for (let tries = 0; (client.received().match(/HTTP\/1\.1 200 /g) ?? []).length < count; tries++) {
          expect(tries, "a held connection is answered").toBeLessThan(500);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      };
      const held = [open(), open()];
      for (const client of held) await answered(client, 1);
      const over = open();
      over.write(healthz);
      expect(await over.reply).toBe("");
      // The two held ones are still served.
      for (const client of held) await answered(client, 2);
    } finally {
      child.kill("SIGINT");
    }
    expect(await exited).toBe(0);
  }, 60_000);

  it("refuses a --max-connections that is not an integer of at least 1, naming it (exit 2)", async () => {
    for (const value of ["0", "-1", "1.5", "two", "", " 3", "1e3", "0x10", "9007199254740993"]) {
      const result = await cli(["console", `--max-connections=${value}`, "--root", join(dir, "r8")], { cwd: dir });
      expect(result, value).toEqual({
        code: 2,
        stdout: "",
        stderr:
          `loopctl console: --max-connections must be an integer of at least 1, got ${JSON.stringify(value)}\n` +
          "Run 'loopctl console --help' for usage.\n",
      });
    }
    const missing = await cli(["console", "--max-connections"], { cwd: dir });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(
      "loopctl console: --max-connections needs a value\nRun 'loopctl console --help' for usage.\n",
    );
  });

  it("the real bin serves until SIGINT, then exits 0", async () => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", join(repo, "src", "cli", "main.ts"), "console", "--root", join(dir, "r4")],
      {
        cwd: repo,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString("utf8");
        const match = /^open (\S+)$/m.exec(out);
        if (match) resolve(match[1] as string);
      });
      child.once("exit", () => reject(new Error(`exited early: ${out}`)));
    });
    expect((await request(`${url.slice(0, url.indexOf("?"))}healthz`)).status).toBe(200);
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    child.kill("SIGINT");
    expect(await exited).toBe(0);
  }, 60_000);

  it("the real bin stopped as soon as the link shows exits 0, its stdout pipe's reader gone (console | tee, Ctrl-C) or not", async () => {
    for (const [stop, gone] of [
      ["SIGINT", true],
      ["SIGTERM", true],
      ["SIGINT", false],
      ["SIGTERM", false],
    ] as const) {
      const child = spawn(
        process.execPath,
        ["--import", "tsx", join(repo, "src", "cli", "main.ts"), "console", "--root", join(dir, "r8")],
        { cwd: repo, stdio: ["ignore", "pipe", "pipe"] },
      );
      let err = "";
      child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString("utf8")));
      await printedUrl(child);
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      // The reader goes first, as tee does on the Ctrl-C sent to the whole pipeline: the line saying
      // the console stopped meets a pipe nobody reads (EPIPE).
      if (gone) {
        const closed = new Promise((resolve) => child.stdout.once("close", resolve));
        child.stdout.destroy();
        await closed;
      }
      child.kill(stop);
      expect(await exited, `${stop}, reader gone: ${gone}`).toBe(0);
      expect(err, stop).toBe("");
    }
  }, 60_000);
});
