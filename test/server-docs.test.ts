import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import ts from "typescript";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { AskResolution } from "loopctl/ask";
import { Grant, GrantScope, MemoryGrantStore } from "loopctl/grant";
import { RecentRecords, WEBHOOK_SIGNATURE_HEADER, WebhookResolver, createApprovalServer } from "loopctl/server";
import { makeAsk } from "./support/ask-fixtures.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";

// docs/server.md's examples, taken from the page itself and run: the curl
// commands against a real server with real curl, the receiver's signature
// check compiled with the project's compiler settings and run on real deliveries.

const repo = fileURLToPath(new URL("..", import.meta.url));
let docs: string;
let scratch: string;
beforeAll(async () => {
  docs = await readFile(join(repo, "docs", "server.md"), "utf8");
  scratch = await mkdtemp(join(tmpdir(), "loopctl-server-docs-"));
});
afterAll(() => rm(scratch, { recursive: true, force: true }));
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The fenced code blocks of `lang` in the section under `heading`. */
function blocks(heading: string, lang: string): string[] {
  const start = docs.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`docs/server.md has no ${heading}`);
  const end = docs.indexOf("\n## ", start + heading.length + 2);
  const section = docs.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))].map((m) => m[1] as string);
}

interface DocCommand {
  /** The command as the page shows it, continuation lines joined. */
  readonly command: string;
  /** The comment lines under it: what the page says comes back. */
  readonly says: string;
}

function curlCommands(block: string): DocCommand[] {
  const commands: { command: string; says: string }[] = [];
  let continued = false;
  for (const line of block.split("\n")) {
    if (continued) {
      const last = commands[commands.length - 1] as { command: string };
      last.command += ` ${line.trim().replace(/\\$/, "").trim()}`;
      continued = line.trimEnd().endsWith("\\");
    } else if (line.startsWith("curl ")) {
      commands.push({ command: line.replace(/\\$/, "").trim(), says: "" });
      continued = line.trimEnd().endsWith("\\");
    } else if (line.startsWith("#") && commands.length > 0) {
      (commands[commands.length - 1] as { says: string }).says += `${line}\n`;
    }
  }
  return commands;
}

interface CurlResult {
  readonly status: number;
  readonly body: string;
}

/** Runs a documented command in bash with `S` and `T` set, as the page's reader would; stops it once `enough` holds of its output. */
function runCurl(command: string, env: Record<string, string>, enough?: (out: string) => boolean): Promise<CurlResult> {
  return new Promise((resolve, reject) => {
    // -s keeps progress off stderr; -w appends the status on a line of its own.
    const child = spawn("bash", ["-c", `${command} -s -w '\\n%{http_code}'`], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
      if (enough?.(out)) child.kill("SIGTERM");
    });
    child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString("utf8")));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (signal !== null) return resolve({ status: 200, body: out });
      if (code !== 0) return reject(new Error(`${command} exited ${code}: ${err}`));
      const cut = out.lastIndexOf("\n");
      resolve({ status: Number(out.slice(cut + 1)), body: out.slice(0, cut) });
    });
  });
}

describe("docs/server.md", () => {
  it("every curl example of the HTTP API runs against a real server and gets the status and fields the page shows", async () => {
    const [http] = blocks("## The HTTP API", "sh");
    expect(http).toBeDefined();
    const commands = curlCommands(http as string);
    expect(commands.map((c) => /\$S(\/[^ "']*)/.exec(c.command)?.[1] ?? c.command)).toEqual([
      "/healthz",
      "/api/asks",
      "/api/asks/stream",
      "/api/asks/<ask",
      "/api/grants",
      "/api/grants/<16-hex",
      "/api/records?limit=50",
    ]);

    const [channel, approver] = ApprovalChannel.pair(4);
    const grants = new MemoryGrantStore();
    const grant = await grants.save(new Grant("deploy", "allow", GrantScope.thisTool()));
    const records = new RecentRecords();
    records.onGate({ turn: 1, callId: "c1", decision: gateRecord(1) });
    const server = await createApprovalServer({ approver, grants, records });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const ask = makeAsk(1, { tool: "deploy" });
    let answered: AskResolution | undefined;
    void channel.resolve(ask, { signal: new AbortController().signal }).then((r) => (answered = r));
    const env = { S: server.url.replace(/\/$/, ""), T: server.token };

    for (const { command, says } of commands) {
      const runnable = command.replaceAll("<ask id>", ask.id).replaceAll("<16-hex id>", grant.id);
      const documented = Number(/^# (\d{3})\b/m.exec(says)?.[1]);
      if (runnable.startsWith("curl -N ")) {
        // The event stream never ends by itself: read until its first ask, then stop.
        const stream = await runCurl(runnable, env, (out) => {
          // Not before the ask has come: the retry line may arrive in a read of its own.
          const at = out.indexOf("event: ask");
          return at >= 0 && out.includes("\n\n", at);
        });
        expect(says).toContain("text/event-stream");
        expect(stream.body).toMatch(
          /^retry: \d+\n\nevent: heartbeat\ndata: \{"heartbeatMs":\d+\}\n\nid: 1\nevent: ask\ndata: \{/,
        );
        expect(says).toContain("event: heartbeat");
        const data = JSON.parse(/^event: ask\ndata: (.*)$/m.exec(stream.body)?.[1] ?? "null") as {
          ask: { id: string };
        };
        expect(data.ask.id).toBe(ask.id);
        continue;
      }
      const result = await runCurl(runnable, env);
      expect(result.status, command).toBe(documented);
      const body = JSON.parse(result.body) as Record<string, unknown>;
      // Every field of the reply is one the page names.
      for (const key of Object.keys(body)) expect(says, `${command}: "${key}"`).toContain(`"${key}"`);
    }
    expect(answered).toEqual({ type: "approve", remember: "this_tool" });
    expect(await grants.load()).toEqual([]);
  });

  it("the receiver's signature check compiles under the project's strict settings and verifies real deliveries", async () => {
    const snippet = blocks("### Verifying a delivery", "ts").find((code) =>
      code.includes("function verifyLoopctlSignature("),
    );
    expect(snippet).toBeDefined();
    const source = `import { createHmac, timingSafeEqual } from "node:crypto";\n${snippet as string}\nexport { verifyLoopctlSignature };\n`;
    const file = join(scratch, "verify.mts");
    await writeFile(file, source);
    const config = ts.getParsedCommandLineOfConfigFile(
      join(repo, "tsconfig.json"),
      {},
      { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => undefined },
    );
    expect(config).toBeDefined();
    const options = {
      ...(config as ts.ParsedCommandLine).options,
      noEmit: true,
      paths: {},
      typeRoots: [join(repo, "node_modules", "@types")],
      noUnusedLocals: true,
    };
    const program = ts.createProgram([file], options);
    const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    expect(problems).toEqual([]);
    const js = ts.transpileModule(source, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    }).outputText;
    await writeFile(join(scratch, "verify.mjs"), js);
    const { verifyLoopctlSignature } = (await import(pathToFileURL(join(scratch, "verify.mjs")).href)) as {
      verifyLoopctlSignature: (secret: string, header: string, rawBody: Buffer, nowMs?: number) => boolean;
    };

    // A receiver that checks each delivery with the page's function, on the raw body bytes.
    const secret = "a-webhook-secret-of-enough-length";
    const got: { header: string; raw: Buffer; verified: boolean }[] = [];
    const receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const raw = Buffer.concat(chunks);
        const header = String(req.headers[WEBHOOK_SIGNATURE_HEADER] ?? "");
        const verified = verifyLoopctlSignature(secret, header, raw);
        got.push({ header, raw, verified });
        res.writeHead(verified ? 204 : 401).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => receiver.close(() => resolve())));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const resolver = new WebhookResolver({ url, secret });
    cleanups.push(() => resolver.close());
    const ask = makeAsk(1);
    const parked = resolver.resolve(ask, { signal: new AbortController().signal });
    await expect.poll(() => got.length).toBe(1);
    const [{ header, raw, verified }] = got as [(typeof got)[0]];
    expect(verified).toBe(true);
    expect(resolver.inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    await expect(parked).resolves.toEqual({ type: "approve" });

    // And it refuses what it should: another body, another secret, an old delivery, a malformed header.
    const t = Number(/^t=(\d+),/.exec(header)?.[1]);
    expect(verifyLoopctlSignature(secret, header, Buffer.concat([raw, Buffer.from(" ")]))).toBe(false);
    expect(verifyLoopctlSignature("another-secret-of-enough-length", header, raw)).toBe(false);
    expect(verifyLoopctlSignature(secret, header, raw, t + 5 * 60_000 + 1)).toBe(false);
    expect(verifyLoopctlSignature(secret, header, raw, t + 5 * 60_000)).toBe(true);
    expect(verifyLoopctlSignature(secret, header.toUpperCase(), raw)).toBe(false);
    const resigned = `t=${t},v1=${createHmac("sha256", secret).update(`${t}.`).update(raw).digest("hex")}`;
    expect(verifyLoopctlSignature(secret, resigned, raw, t)).toBe(true);
  });
});
