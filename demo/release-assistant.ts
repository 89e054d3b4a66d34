/**
 * `npm run demo`: a release assistant on a scripted model (no network, no
 * keys) whose risky tool calls park until someone answers.
 *
 * - reads files (a hook allows them), writes a changelog and deploys (the hook
 *   asks); the tools act on a scratch folder, the deploy writes a marker file;
 * - on a terminal (stdin and stdout both) you answer each ask; otherwise (CI,
 *   pipes) a scripted release manager answers some asks and leaves one to
 *   expire; with --console you answer them in the browser, from the
 *   approval console;
 * - the model reads its tool results: what it does and says next follows
 *   the answers given;
 * - answers can be remembered in a FileGrantStore, so a second run decides
 *   those calls without asking;
 * - it ends with the run's audit trail, and how to see what was remembered;
 * - every line fits 80 columns, and a reader that goes away early
 *   (`npm run demo | head`) ends the run quietly.
 *
 * Usage: npm run demo -- [--root DIR] [--workdir DIR] [--project DIR]
 *        [--interactive | --scripted | --console [--port N]] [--ask-timeout MS] [--reset]
 */
import { mkdir } from "node:fs/promises";
import { resolve } from "node:path";
import { inspect, parseArgs } from "node:util";
import { ApprovalChannel } from "loopctl/ask";
import { RecentRecords, createApprovalServer } from "loopctl/server";
import type { ApprovalServer } from "loopctl/server";
import { Agent, CancelledError, LoopManagers } from "loopctl/engine";
import type { GateEvent } from "loopctl/engine";
import { FileGrantStore } from "loopctl/grant";
import { auditTable } from "./audit-table.js";
import { commandLines, displayPath, forgotLine, grantCommands } from "./closing.js";
import { narrator } from "./narrator.js";
import { Output } from "./output.js";
import { USER_TEXT } from "./release.js";
import { releaseHook } from "./release-hook.js";
import { releaseModel } from "./release-model.js";
import { runScriptedApprover } from "./scripted-approver.js";
import { makeStyle, wantsColor } from "./style.js";
import { runTerminalApprover } from "./terminal-approver.js";
import { releaseTools } from "./tools.js";
import { openWorkspace } from "./workspace.js";

const DEFAULT_PROJECT = ".loopctl-demo";

const HELP = `Usage: npm run demo -- [options]

A release assistant on a scripted model whose risky tool calls wait for
approval.

  --root DIR        where grants are kept (default:
                    ${FileGrantStore.defaultRoot()})
  --workdir DIR     scratch folder the tools act on (default: a new temp dir)
  --project DIR     project the grants belong to (default: --workdir, else
                    ./${DEFAULT_PROJECT})
  --interactive     answer asks here (the default when stdin and stdout are
                    both a terminal)
  --scripted        a scripted release manager answers (the default otherwise)
  --console         answer asks in the browser: prints the approval console's
                    link
  --port N          the console's port (default: a free one)
  --ask-timeout MS  how long an ask may wait (default: 1000 when scripted,
                    300000 otherwise)
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
      : values.interactive === true ||
          (values.scripted !== true && process.stdin.isTTY === true && process.stdout.isTTY === true)
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

async function main(out: Output): Promise<number> {
  const parsed = parseOptions(process.argv.slice(2));
  if (parsed === "help") {
    out.write(HELP);
    return 0;
  }
  const options = parsed;
  const style = makeStyle(wantsColor(process.stdout));
  const field = (label: string, text: string): void => out.line(text, `  ${label.padEnd(9)}  `);

  const workspace = await openWorkspace(options.workdir);
  const defaultProject = resolve(DEFAULT_PROJECT);
  const projectDir = resolve(options.project ?? (options.workdir === undefined ? defaultProject : workspace.dir));
  // The demo's own project folder is made, so the command it prints at the end finds the project it names.
  if (projectDir === defaultProject) await mkdir(projectDir, { recursive: true });
  const store = new FileGrantStore(options.root, projectDir);
  try {
    if (options.reset) out.line(forgotLine(await store.clear()));
    const remembered = await store.load();
    const tools = releaseTools(workspace);
    const descriptors = new Map(tools.map((t) => [t.name, t.descriptor]));

    out.line(style.bold("loopctl demo: a release assistant on a scripted model (no network, no keys)"));
    field("workspace", workspace.dir);
    field("grants", `${remembered.length} remembered for project ${displayPath(projectDir, process.cwd())}`);
    field("", `kept under ${displayPath(options.root, process.cwd())}`);
    const who = {
      terminal: "you, at this terminal",
      scripted: "a scripted release manager (this is not a terminal)",
      console: "you, in the browser",
    }[options.approver];
    field("approver", who);
    field("", `asks expire after ${options.askTimeoutMs} ms`);

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
      field("console", "open this link in a browser: the asks appear there as the assistant parks them");
      // Whole on its line, never wrapped: it is clicked or copied.
      out.write(`    ${style.bold(server.consoleUrl)}\n`);
    }
    out.write("\n");
    out.line(USER_TEXT, `${style.cyan("user>")} `);

    const managers = new LoopManagers()
      .withHook(releaseHook)
      .withAskResolver(channel)
      .withAskTimeout(options.askTimeoutMs)
      .withGrantStore(store)
      .withObserver(narrator(out, style, gates))
      .withObserver(records);
    const agent = new Agent({ model: releaseModel(), tools, managers });

    const stopApprover = new AbortController();
    const approving =
      options.approver === "terminal"
        ? runTerminalApprover(approver, {
            input: process.stdin,
            output: process.stdout,
            color: wantsColor(process.stdout),
            width: out.width,
            describeTool: (name) => descriptors.get(name),
            signal: stopApprover.signal,
          })
        : options.approver === "scripted"
          ? runScriptedApprover(approver, out, style, options.askTimeoutMs)
          : Promise.resolve();

    const interrupt = new AbortController();
    const onSigint = (): void => interrupt.abort(new Error("interrupted"));
    process.once("SIGINT", onSigint);
    let failure: unknown;
    try {
      // Nobody reading the output any more is a reason to stop too.
      await agent.run(USER_TEXT, { signal: AbortSignal.any([interrupt.signal, out.gone]) });
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
    if (out.gone.aborted) return out.failed ? 1 : 0;

    out.write("\n");
    out.line(`${style.bold("audit trail")} ${style.dim("(the run's gate records, in order)")}`);
    out.write(auditTable(gates, style, out.width));
    const count = (verdict: string): number => gates.filter((g) => g.decision.verdict === verdict).length;
    const byGrant = gates.filter((g) => g.decision.ruleId === "grant").length;
    out.write("\n");
    out.line(
      `approved ${count("ask_allowed")}, denied ${count("ask_denied")}, expired ${count("ask_expired")}, decided by remembered grants ${byGrant}`,
      "  ",
    );
    out.line(`the workspace holds ${(await workspace.files()).join(", ")}`, "  ");
    const kept = (await store.load()).length;
    out.line(`grants remembered for this project: ${kept}`, "  ");
    if (failure !== undefined) {
      out.write("\n");
      out.line(
        style.red(
          `the run ended early: ${failure instanceof Error ? `${failure.name}: ${failure.message}` : inspect(failure)}`,
        ),
      );
      // 130: the shell's convention for "stopped by Ctrl-C".
      return failure instanceof CancelledError ? 130 : 1;
    }
    out.write("\n");
    if (kept === 0) {
      out.line(
        "Nothing is remembered for this project: answer always-… or never-… to let the next run decide without asking.",
      );
      return 0;
    }
    out.line(
      `Run it again: the ${kept === 1 ? "remembered answer decides" : `${kept} remembered answers decide`} without asking.`,
    );
    const commands = grantCommands({
      root: options.root,
      project: projectDir,
      cwd: process.cwd(),
      defaultRoot: FileGrantStore.defaultRoot(),
      defaultProject,
    });
    // Laid out already, to stay valid shell: not wrapped again.
    const lines = [
      ...commandLines("  see them:     ", commands.list, out.width),
      ...commandLines("  forget them:  ", commands.reset, out.width),
    ];
    out.write(lines.map((line) => `${line}\n`).join(""));
    return 0;
  } finally {
    await workspace.dispose();
  }
}

const out = new Output(process.stdout);
main(out).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`demo: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);
