import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { ClientOptions } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { spawn } from "node:child_process";
import { afterAll, afterEach, expect } from "vitest";
import type { Tool } from "loopctl/engine";
import { bundleChild, type Bundle } from "./reliability-bundle.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const filesystemServer = createRequire(import.meta.url).resolve(
  "@modelcontextprotocol/server-filesystem/dist/index.js",
);

/** A server process and the client connected to it. */
export interface Started {
  readonly client: Client;
  readonly pid: number;
  /** Every line the server wrote to stderr so far. */
  readonly lines: readonly string[];
  /** Resolves once the server has written `line` to stderr (at once if it already has). */
  waitFor(line: string): Promise<void>;
  signal(name: "SIGUSR1" | "SIGUSR2"): void;
}

const running: { client: Client; pid: number }[] = [];

/** True while a process with this pid exists. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// The fixture server is bundled once per test file, so that each of the many servers the tests start
// loads in a fraction of the time tsx takes to compile it.
let bundled: Promise<Bundle> | undefined;
afterAll(async () => {
  const bundle = await bundled;
  bundled = undefined;
  bundle?.dispose();
});

async function fixtureArgs(mode: FixtureMode): Promise<string[]> {
  bundled ??= bundleChild("mcp-fixture-server.ts");
  return [(await bundled).path, ...mode.split(" ")];
}

// No server outlives its test: each is closed, and its process checked gone.
afterEach(async () => {
  const started = running.splice(0);
  await Promise.all(started.map(({ client }) => client.close()));
  for (const { pid } of started) expect(isAlive(pid), `server process ${pid} still alive`).toBe(false);
});

async function start(
  command: string,
  args: readonly string[],
  clientOptions?: ClientOptions,
  client = new Client({ name: "loopctl-tests", version: "1.0.0" }, clientOptions),
): Promise<Started> {
  const transport = new StdioClientTransport({ command, args: [...args], cwd: root, stderr: "pipe" });
  const lines: string[] = [];
  const waiters: { line: string; resolve: () => void }[] = [];
  let partial = "";
  transport.stderr?.on("data", (chunk: Buffer) => {
    const text = partial + chunk.toString("utf8");
    const parts = text.split("\n");
    partial = parts.pop() ?? "";
    for (const line of parts) {
      lines.push(line);
      for (const waiter of waiters.filter((w) => w.line === line)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  });
  await client.connect(transport);
  const pid = transport.pid;
  if (pid === null) throw new Error("the server has no pid");
  running.push({ client, pid });
  return {
    client,
    pid,
    lines,
    waitFor: (line) =>
      lines.includes(line) ? Promise.resolve() : new Promise((resolve) => waiters.push({ line, resolve })),
    signal: (name) => process.kill(pid, name),
  };
}

type FixtureMode =
  | "mutable"
  | "paged"
  | "paged broken"
  | `paged broken ${number}`
  | "odd-ids"
  | "restless"
  | "stalling"
  | "stalling stalled"
  | "erring"
  | "garbled"
  | "bulky"
  | "deep"
  | `long-name ${number}`
  | `looping ${number}`
  | "http"
  | `dripping ${number} ${number}`
  | "structured"
  | "twins"
  | "lookalike"
  | "hostile-names"
  | "respelt"
  | "odd-output unknown-keyword"
  | "odd-output invalid"
  | "patterned"
  | "hostile-output"
  | `crowded ${number}`
  | `crowded ${number} ${number}`;

/** The fixture server (see mcp-fixture-server.ts) in `mode`, its client made with `clientOptions`. */
export async function startFixture(mode: FixtureMode, clientOptions?: ClientOptions): Promise<Started> {
  return start(process.execPath, await fixtureArgs(mode), clientOptions);
}

/** Closes `started`'s client (its server ends) and connects that same client to a new fixture server in `mode`. */
export async function reconnectFixture(started: Started, mode: FixtureMode): Promise<Started> {
  await started.client.close();
  return start(process.execPath, await fixtureArgs(mode), undefined, started.client);
}

/** A server process spoken to over streamable HTTP, and the client connected to it. */
export interface StartedHttp {
  readonly client: Client;
  /** Every line the server wrote to stderr so far. */
  readonly lines: readonly string[];
  signal(name: "SIGUSR2" | "SIGKILL"): void;
}

const httpServers: { kill(): void }[] = [];

// Over HTTP the client's close does not end the server: each is killed after its test.
afterEach(() => {
  for (const server of httpServers.splice(0)) server.kill();
});

/** The fixture server in `http` mode, and a client connected to it over streamable HTTP. */
export async function startHttpFixture(): Promise<StartedHttp> {
  const child = spawn(process.execPath, await fixtureArgs("http"), { cwd: root, stdio: ["pipe", "ignore", "pipe"] });
  httpServers.push({ kill: () => void child.kill("SIGKILL") });
  const lines: string[] = [];
  let partial = "";
  const port = new Promise<string>((resolve, reject) => {
    child.once("exit", () => reject(new Error("the http fixture server exited before listening")));
    child.stderr.on("data", (chunk: Buffer) => {
      const parts = (partial + chunk.toString("utf8")).split("\n");
      partial = parts.pop() ?? "";
      for (const line of parts) {
        lines.push(line);
        if (line.startsWith("port ")) resolve(line.slice(5));
      }
    });
  });
  const client = new Client({ name: "loopctl-tests", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${await port}/mcp`)));
  return { client, lines, signal: (name) => void child.kill(name) };
}

/** `@modelcontextprotocol/server-filesystem` from npm, allowed only `dir`. */
export function startFilesystem(dir: string): Promise<Started> {
  return start(process.execPath, [filesystemServer, dir]);
}

/** Collects a toolset's changes; `next()` resolves with the next one. */
export function changes(): { readonly onChange: (tools: readonly Tool[]) => void; next(): Promise<readonly Tool[]> } {
  const queued: (readonly Tool[])[] = [];
  const waiting: ((tools: readonly Tool[]) => void)[] = [];
  return {
    onChange(tools) {
      const waiter = waiting.shift();
      if (waiter === undefined) queued.push(tools);
      else waiter(tools);
    },
    next() {
      const tools = queued.shift();
      return tools === undefined ? new Promise((resolve) => waiting.push(resolve)) : Promise.resolve(tools);
    },
  };
}
