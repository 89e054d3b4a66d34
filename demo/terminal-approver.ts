import type { Readable, Writable } from "node:stream";
import type { AskResolution, Approver, PendingAsk } from "loopctl/ask";
import { descriptorFingerprint } from "loopctl/grant";
import type { ToolDescriptor } from "loopctl/grant";
import { printable } from "../src/cli/format.js";
import { LineReader } from "./line-reader.js";
import { makeStyle } from "./style.js";
import type { Style } from "./style.js";

/** One of the answers a person can give at the terminal. */
export type TerminalChoice = "once" | "this_call" | "this_tool" | "deny" | "never";

/** The key a person types for each choice, and what it means. */
export const TERMINAL_CHOICES: ReadonlyArray<{
  readonly key: string;
  readonly choice: TerminalChoice;
  readonly label: string;
}> = [
  { key: "a", choice: "once", label: "approve once" },
  { key: "c", choice: "this_call", label: "always this call" },
  { key: "t", choice: "this_tool", label: "always this tool" },
  { key: "d", choice: "deny", label: "deny" },
  { key: "n", choice: "never", label: "always deny" },
];

/** The resolution each choice sends back to the engine. */
export function resolutionFor(choice: TerminalChoice): AskResolution {
  switch (choice) {
    case "once":
      return { type: "approve" };
    case "this_call":
      return { type: "approve", remember: "this_call" };
    case "this_tool":
      return { type: "approve", remember: "this_tool" };
    case "deny":
      return { type: "deny", reason: "denied at the terminal" };
    case "never":
      // The narrowest deny grant: these exact arguments, never the whole tool.
      return { type: "deny", reason: "denied at the terminal, remembered", remember: "this_call" };
  }
}

/** Parses what a person typed (`a`, `approve`, `T`, …) into a choice; `undefined` if unknown. */
export function parseChoice(line: string): TerminalChoice | undefined {
  const text = line.trim().toLowerCase();
  if (text === "") return undefined;
  const byKey = TERMINAL_CHOICES.find((c) => c.key === text);
  if (byKey !== undefined) return byKey.choice;
  if (text === "y" || text === "yes" || text === "approve") return "once";
  if (text === "no") return "deny";
  return TERMINAL_CHOICES.find((c) => c.label === text)?.choice;
}

/** Options for {@link runTerminalApprover}. */
export interface TerminalApproverOptions {
  /** Where answers are typed (process.stdin, or a PassThrough in tests). */
  readonly input: Readable;
  /** Where asks are shown. */
  readonly output: Writable;
  /** ANSI colour; the caller decides (TTY and NO_COLOR). Default: off. */
  readonly color?: boolean;
  /** Looks up a tool's descriptor so the approver can show the pin a grant would carry. */
  readonly describeTool?: (tool: string) => ToolDescriptor | undefined;
  /**
   * Stops the approver: it closes the approver (denying what still waits) and
   * stops reading input, so a pending prompt does not keep the process alive.
   */
  readonly signal?: AbortSignal;
}

/** What the terminal approver did, for the caller's summary. */
export interface TerminalApproverReport {
  /** Answers that reached a parked ask. */
  readonly answered: number;
  /** Answers that came too late (the ask had expired or been cancelled). */
  readonly late: number;
}

/**
 * Shows each ask the approver receives and answers it with what the person
 * types. Returns when the approver is closed. If the input ends first (Ctrl-D,
 * a closed pipe), it closes the approver, which denies every ask still
 * waiting and every later one: no answer is never a yes.
 */
export async function runTerminalApprover(
  approver: Approver,
  options: TerminalApproverOptions,
): Promise<TerminalApproverReport> {
  const style = makeStyle(options.color ?? false);
  using lines = new LineReader(options.input);
  const stop = (): void => {
    approver.close();
    lines.close();
  };
  if (options.signal?.aborted === true) stop();
  options.signal?.addEventListener("abort", stop, { once: true });
  try {
    return await answerAll(approver, lines, options, style);
  } finally {
    options.signal?.removeEventListener("abort", stop);
  }
}

async function answerAll(
  approver: Approver,
  lines: LineReader,
  options: TerminalApproverOptions,
  style: Style,
): Promise<TerminalApproverReport> {
  const write = (text: string): void => {
    options.output.write(text);
  };
  let answered = 0;
  let late = 0;
  for await (const ask of approver) {
    write(describeAsk(ask, style, options.describeTool?.(ask.tool)));
    let choice: TerminalChoice | undefined;
    while (choice === undefined) {
      write(style.bold("  your answer [a/c/t/d/n]: "));
      const line = await lines.next();
      if (line === undefined) {
        if (options.signal?.aborted === true) return { answered, late };
        write(`\n  ${style.red("input ended: denying this ask and every later one")}\n`);
        approver.close();
        return { answered, late };
      }
      choice = parseChoice(line);
      if (choice === undefined) write(`  ${style.yellow(`not an answer: ${JSON.stringify(line)}`)}\n`);
    }
    if (approver.resolve(ask.id, resolutionFor(choice))) {
      answered += 1;
      const label = TERMINAL_CHOICES.find((c) => c.choice === choice)?.label ?? choice;
      write(`  ${choice === "deny" || choice === "never" ? style.red(label) : style.green(label)}\n\n`);
    } else {
      late += 1;
      write(`  ${style.yellow("too late: this ask is no longer waiting (it expired or the run was cancelled)")}\n\n`);
    }
  }
  return { answered, late };
}

/** The block of text shown for one ask: what is asked, and what each remembered answer would cover. */
export function describeAsk(asked: PendingAsk, style: Style, descriptor?: ToolDescriptor): string {
  // The prompt often quotes the model's arguments, and an ask may come off a
  // wire: escape sequences in it must not redraw what the person approves.
  const ask = {
    ...asked,
    tool: printable(asked.tool),
    callId: printable(asked.callId),
    prompt: asked.prompt.split("\n").map(printable).join("\n  "),
  };
  const rows: Array<[string, string]> = [
    ["a", "approve once"],
    ["c", `always this call   remembers: allow ${ask.tool} with exactly these arguments (args ${ask.argsDigest})`],
    ["t", `always this tool   remembers: allow ${ask.tool}, any arguments`],
    ["d", "deny"],
    ["n", `always deny        remembers: deny ${ask.tool} with exactly these arguments`],
  ];
  const pin =
    descriptor === undefined
      ? []
      : [
          `  ${style.dim(`a remembered answer is pinned to ${descriptorFingerprint(descriptor).slice(0, 19)}…; if the tool changes, it asks again`)}`,
        ];
  return [
    "",
    `${style.yellow("? approval needed")}  ${style.bold(ask.tool)}  ${style.dim(`(turn ${ask.turn}, call ${ask.callId}, ask ${ask.id})`)}`,
    `  ${ask.prompt}`,
    `  ${style.dim("args digest")} ${ask.argsDigest}`,
    ...rows.map(([key, text]) => `  [${style.bold(key)}] ${text}`),
    ...pin,
    "",
  ].join("\n");
}
