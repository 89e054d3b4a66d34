/**
 * `npm run demo`: a release assistant on a scripted model (no network, no
 * keys) whose risky tool calls park until someone answers.
 *
 * - reads files (a hook allows them), writes a changelog and deploys (the hook
 *   asks); the tools act on a scratch folder, the deploy writes a marker file;
 * - on a terminal you answer each ask; otherwise (CI, pipes) a scripted
 *   release manager answers some asks and leaves one to expire; with
 *   --console you answer them in the browser, from the approval console;
 * - answers can be remembered in a FileGrantStore, so a second run decides
 *   those calls without asking;
 * - it ends with the run's audit trail.
 *
 * Usage: npm run demo -- [--root DIR] [--workdir DIR] [--project DIR]
 *        [--interactive | --scripted | --console [--port N]] [--ask-timeout MS] [--reset]
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { ApprovalChannel } from "loopctl/ask";
import type { Approver } from "loopctl/ask";
import { RecentRecords, createApprovalServer } from "loopctl/server";
import type { ApprovalServer } from "loopctl/server";
import { Agent, CancelledError, LoopManagers } from "loopctl/engine";
import type { GateEvent, Observer } from "loopctl/engine";
import { FileGrantStore } from "loopctl/grant";
import { ScriptedModel } from "loopctl/testing";
import { auditTable, verdictStyle } from "./audit-table.js";
import { MODEL_TURNS, USER_TEXT, releaseHook, scriptedAnswer } from "./script.js";
import { makeStyle, wantsColor } from "./style.js";
import type { Style } from "./style.js";
import { runTerminalApprover } from "./terminal-approver.js";
import { releaseTools } from "./tools.js";
import { openWorkspace } from "./workspace.js";

const HELP = `loopctl demo: a release assistant whose risky tool calls wait for approval

  --root DIR        grant store root (default: ${FileGrantStore.defaultRoot()})
  --workdir DIR     scratch folder the tools act on (default: a fresh temp dir)
  --project DIR     project the grants belong to (default: --workdir, else ./.loopctl-demo)
  --interactive     answer asks at the terminal (default when stdin is a TTY)
  --scripted        let the scripted release manager answer (default otherwise)
  --console         answer asks in the browser: prints the approval console's URL
  --port N          the console's port (default: a free one)
  --ask-timeout MS  how long an ask may wait (default: 1000 scripted, 300000 otherwise)
  --reset           forget this project's grants first
  --help            this text
`;

interface Options {
  readonly root: string;
  readonly workdir: string | undefined;
  readonly project: string | undefined;
  /** Who answers the asks. */
  readonly approver: "terminal" | "scripted" | "console";
  readonly port: number;
  readonly askTimeoutMs: number;
  readonly reset: boolean;
}

function parseOptions(argv: string[]): Options | "help" {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      root: { type: "string" },
      workdir: { type: "string" },
      project: { type: "string" },
      interactive: { type: "boolean" },
      scripted: { type: "boolean" },
      console: { type: "boolean" },
      port: { type: "string" },
      "ask-timeout": { type: "string" },
      reset: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true) return "help";
  if ([values.interactive, values.scripted, values.console].filter((v) => v === true).length > 1) {
    throw new Error("--interactive, --scripted and --console exclude each other");
  }
  const approver =
    values.console === true
      ? "console"
      : values.interactive === true || (values.scripted !== true && process.stdin.isTTY === true)
        ? "terminal"
        : "scripted";
  const timeoutText = values["ask-timeout"];
  const askTimeoutMs = timeoutText === undefined ? (approver === "scripted" ? 1000 : 300_000) : Number(timeoutText);
  if (!Number.isSafeInteger(askTimeoutMs) || askTimeoutMs < 0) {
    throw new Error(`--ask-timeout must be a non-negative integer of milliseconds, got ${JSON.stringify(timeoutText)}`);
  }
  const port = Number(values.port ?? "0");
  if (values.port !== undefined && (approver !== "console" || !/^\d{1,5}$/.test(values.port) || port > 65_535)) {
    throw new Error(`--port takes a port from 0 to 65535 and goes with --console, got ${JSON.stringify(values.port)}`);
  }
  return {
    root: resolve(values.root ?? FileGrantStore.defaultRoot()),
    workdir: values.workdir,
    project: values.project,
    approver,
    port,
    askTimeoutMs,
    reset: values.reset === true,
  };
}

function oneLine(value: unknown, max = 72): string {
  const text = (typeof value === "string" ? value : JSON.stringify(value) ?? String(value)).replace(/\s+/g, " ");
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** Tells what the agent does as it happens. */
function narrator(write: (line: string) => void, style: Style, gates: GateEvent[]): Observer {
  return {
    onModelResponse({ response }) {
      if (response.text !== undefined && response.text !== "") write(`\n${style.cyan("assistant>")} ${response.text}`);
    },
    onToolPre({ turn, call }) {
      write(`  ${style.dim(`[turn ${turn}]`)} ${style.bold(call.name)} ${oneLine(call.input)}`);
    },
    onGate(event) {
      gates.push(event);
      const d = event.decision;
      const paint = verdictStyle(d.verdict, style);
      const why =
        d.ruleId === "grant"
          ? `decided by a remembered grant ${d.matchedPattern ?? ""}, no ask`
          : [`${d.ruleId}/${d.ruleSource}`, d.reason].filter((x) => x !== null).join(": ");
      write(`    ${style.dim("gate")}    ${paint(d.verdict)}  ${why}`);
    },
    onToolPost({ outcome }) {
      const text = oneLine(outcome.type === "ran" ? String(outcome.output) : outcome.message);
      write(`    ${style.dim("result")}  ${outcome.type === "ran" ? text : style.red(text)}`);
    },
    onGrantError({ error }) {
      write(`    ${style.red("could not remember the answer:")} ${error instanceof Error ? error.message : String(error)}`);
    },
  };
}

/** The non-interactive approver: answers what the release manager decided in advance. */
async function runScriptedApprover(approver: Approver, write: (line: string) => void, style: Style, timeoutMs: number): Promise<void> {
  for await (const ask of approver) {
    write(`    ${style.yellow("ask")}     ${ask.prompt}  ${style.dim(`(args ${ask.argsDigest}, ask ${ask.id.slice(0, 8)})`)}`);
    const answer = scriptedAnswer(ask);
    if (answer === undefined) {
      write(`    ${style.dim("answer")}  none scripted: nobody answers, the ask expires after ${timeoutMs} ms`);
      continue;
    }
    const delivered = approver.resolve(ask.id, answer.resolution);
    const paint = answer.resolution.type === "approve" ? style.green : style.red;
    write(`    ${style.dim("answer")}  ${paint(answer.says)} (scripted release manager)${delivered ? "" : " — too late"}`);
  }
}

async function main(): Promise<number> {
  const parsed = parseOptions(process.argv.slice(2));
  if (parsed === "help") {
    process.stdout.write(HELP);
    return 0;
  }
  const options = parsed;
  const style = makeStyle(wantsColor(process.stdout));
  const write = (line: string): void => {
    process.stdout.write(`${line}\n`);
  };

  const workspace = await openWorkspace(options.workdir);
  const projectDir = resolve(options.project ?? (options.workdir === undefined ? ".loopctl-demo" : workspace.dir));
  const store = new FileGrantStore(options.root, projectDir);
  try {
    if (options.reset) write(`forgot ${await store.clear()} grant(s) of this project`);
    const remembered = await store.load();
    const tools = releaseTools(workspace);
    const descriptors = new Map(tools.map((t) => [t.name, t.descriptor]));

    write(style.bold("loopctl demo: a release assistant on a scripted model (no network, no keys)"));
    write(`  workspace  ${workspace.dir}`);
    write(`  grants     ${store.ledgerPath} (${remembered.length} remembered)`);
    const who = {
      terminal: "you, at this terminal",
      scripted: "a scripted release manager (stdin is not a terminal)",
      console: "you, in the browser",
    }[options.approver];
    write(`  approver   ${who}; asks expire after ${options.askTimeoutMs} ms`);

    const [channel, approver] = ApprovalChannel.pair(4);
    const gates: GateEvent[] = [];
    const records = new RecentRecords();
    let server: ApprovalServer | undefined;
    if (options.approver === "console") {
      server = await createApprovalServer({
        approver,
        grants: store,
        records,
        describeTool: (name) => descriptors.get(name),
        askTimeoutMs: options.askTimeoutMs,
        port: options.port,
      });
      write(`  console    ${style.bold(server.consoleUrl)}`);
      write(`             ${style.dim("open it in a browser: the asks appear there as the assistant parks them")}`);
    }
    write(`\n${style.cyan("user>")} ${USER_TEXT}`);

    const managers = new LoopManagers()
      .withHook(releaseHook)
      .withAskResolver(channel)
      .withAskTimeout(options.askTimeoutMs)
      .withGrantStore(store)
      .withObserver(narrator(write, style, gates))
      .withObserver(records);
    const agent = new Agent({ model: new ScriptedModel(MODEL_TURNS), tools, managers });

    const stopApprover = new AbortController();
    const approving =
      options.approver === "terminal"
        ? runTerminalApprover(approver, {
            input: process.stdin,
            output: process.stdout,
            color: wantsColor(process.stdout),
            describeTool: (name) => descriptors.get(name),
            signal: stopApprover.signal,
          })
        : options.approver === "scripted"
          ? runScriptedApprover(approver, write, style, options.askTimeoutMs)
          : Promise.resolve();

    const cancel = new AbortController();
    const onSigint = (): void => cancel.abort(new Error("interrupted"));
    process.once("SIGINT", onSigint);
    let failure: unknown;
    try {
      await agent.run(USER_TEXT, { signal: cancel.signal });
    } catch (error) {
      failure = error;
    } finally {
      process.removeListener("SIGINT", onSigint);
      // Closing denies anything still parked and ends the approver loop; the
      // terminal approver also stops reading stdin, which would keep the process alive.
      approver.close();
      stopApprover.abort();
      await approving;
      await server?.close();
    }

    write(`\n${style.bold("audit trail")} ${style.dim("(the run's gate records, in order)")}`);
    process.stdout.write(auditTable(gates, style));
    const count = (verdict: string): number => gates.filter((g) => g.decision.verdict === verdict).length;
    const byGrant = gates.filter((g) => g.decision.ruleId === "grant").length;
    write(
      `\n  approved ${count("ask_allowed")}, denied ${count("ask_denied")}, expired ${count("ask_expired")}, decided by remembered grants ${byGrant}`,
    );
    write(`  workspace now holds: ${(await workspace.files()).join(", ")}`);
    write(`  grants remembered for this project: ${(await store.load()).length}`);
    if (failure !== undefined) {
      write(style.red(`\nthe run ended early: ${failure instanceof Error ? `${failure.name}: ${failure.message}` : String(failure)}`));
      // 130: the shell's convention for "stopped by Ctrl-C".
      return failure instanceof CancelledError ? 130 : 1;
    }
    write(
      `\nRun it again: remembered answers decide without asking. ${style.dim(`(--reset forgets them; \`loopctl grants list --root ${options.root} --project ${projectDir}\` shows them)`)}`,
    );
    return 0;
  } finally {
    await workspace.dispose();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`demo: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);
