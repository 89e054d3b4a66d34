import type { Readable, Writable } from "node:stream";
import type { AskResolution, Approver, PendingAsk } from "loopctl/ask";
import { descriptorFingerprint } from "loopctl/grant";
import type { ToolDescriptor } from "loopctl/grant";
import { printable } from "../src/cli/format.js";
import { MAX_WIDTH, clip, wrap } from "./layout.js";
import { LineReader } from "./line-reader.js";
import { makeStyle } from "./style.js";
import type { Style } from "./style.js";

/**
 * What a person can answer, typed as shown. The one-off answers are one
 * letter; an answer that is remembered across runs is spelled out, so no
 * slip of a finger saves a grant.
 */
export type TerminalChoice = "y" | "n" | "always-call" | "always-tool" | "never-call" | "never-tool";

/** Each choice: what it does, in a few words (`tool` names the asking tool). */
export const TERMINAL_CHOICES: ReadonlyArray<{
  readonly choice: TerminalChoice;
  readonly says: (tool: string) => string;
}> = [
  { choice: "y", says: () => "approve once" },
  { choice: "n", says: () => "deny once" },
  { choice: "always-call", says: () => "approve; remember for these exact arguments" },
  { choice: "always-tool", says: (tool) => `approve; remember for ${tool}, any arguments` },
  { choice: "never-call", says: () => "deny; remember for these exact arguments" },
  { choice: "never-tool", says: (tool) => `deny; remember for ${tool}, any arguments` },
];

/** Other words for the one-off answers; a remembering answer has no other spelling. */
const ALIASES: Readonly<Record<string, TerminalChoice>> = { yes: "y", approve: "y", no: "n", deny: "n" };

/** What `choice` says for `tool`, e.g. `always-tool: approve; remember for deploy, any arguments`. */
export function describeChoice(choice: TerminalChoice, tool: string): string {
  const says = TERMINAL_CHOICES.find((c) => c.choice === choice)?.says(tool) ?? choice;
  return choice === "y" || choice === "n" ? says : `${choice}: ${says}`;
}

/** The resolution each choice sends back to the engine; `reason` goes with a denial. */
export function resolutionFor(choice: TerminalChoice, reason = "denied at the terminal"): AskResolution {
  switch (choice) {
    case "y":
      return { type: "approve" };
    case "n":
      return { type: "deny", reason };
    case "always-call":
      return { type: "approve", remember: "this_call" };
    case "always-tool":
      return { type: "approve", remember: "this_tool" };
    case "never-call":
      return { type: "deny", reason, remember: "this_call" };
    case "never-tool":
      return { type: "deny", reason, remember: "this_tool" };
  }
}

/**
 * Parses what a person typed into a choice, ignoring case and surrounding
 * blanks; `undefined` for anything else (a prefix, a typo, a single letter
 * of a remembering answer): never a guess.
 */
export function parseChoice(line: string): TerminalChoice | undefined {
  const text = line.trim().toLowerCase().replace(/\s+/g, "-");
  return TERMINAL_CHOICES.find((c) => c.choice === text)?.choice ?? ALIASES[text];
}

/** Options for {@link runTerminalApprover}. */
export interface TerminalApproverOptions {
  /** Where answers are typed (process.stdin, or a PassThrough in tests). */
  readonly input: Readable;
  /** Where asks are shown. */
  readonly output: Writable;
  /** ANSI colour; the caller decides (TTY and NO_COLOR). Default: off. */
  readonly color?: boolean;
  /** The widest line to write. Default: 80. */
  readonly width?: number;
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

const QUESTION = `your answer [${TERMINAL_CHOICES.map((c) => c.choice).join("/")}]: `;

async function answerAll(
  approver: Approver,
  lines: LineReader,
  options: TerminalApproverOptions,
  style: Style,
): Promise<TerminalApproverReport> {
  const width = options.width ?? MAX_WIDTH;
  const say = (lead: string, text: string): void => {
    options.output.write(`${wrap(lead, text, width).join("\n")}\n`);
  };
  let answered = 0;
  let late = 0;
  for await (const ask of approver) {
    options.output.write(describeAsk(ask, style, options.describeTool?.(ask.tool), width));
    let choice: TerminalChoice | undefined;
    while (choice === undefined) {
      options.output.write(`  ${style.bold(QUESTION)}`);
      const line = await lines.next();
      if (line === undefined) {
        if (options.signal?.aborted === true) return { answered, late };
        options.output.write("\n");
        say("  ", style.red("input ended: denying this ask and every later one"));
        approver.close();
        return { answered, late };
      }
      // A terminal echoes what is typed; from a pipe, the transcript shows it instead.
      if ((options.input as { isTTY?: boolean }).isTTY !== true) {
        options.output.write(`${clip(printable(line), width - QUESTION.length - 2)}\n`);
      }
      choice = parseChoice(line);
      if (choice === undefined) {
        say(
          "  ",
          style.yellow(`not an answer: ${JSON.stringify(printable(line))} (type one of the words in the list)`),
        );
      }
    }
    if (approver.resolve(ask.id, resolutionFor(choice))) {
      answered += 1;
      const paint = resolutionFor(choice).type === "approve" ? style.green : style.red;
      say("  ", `${paint(describeChoice(choice, printable(ask.tool)))}\n`);
    } else {
      late += 1;
      say("  ", `${style.yellow("too late: this ask is no longer waiting (it expired or the run was cancelled)")}\n`);
    }
  }
  return { answered, late };
}

/**
 * The block of text shown for one ask: what is asked, and what each answer
 * does. No line is wider than `width`.
 */
export function describeAsk(asked: PendingAsk, style: Style, descriptor?: ToolDescriptor, width = MAX_WIDTH): string {
  // The prompt often quotes the model's arguments, and an ask may come off a
  // wire: escape sequences in it must not redraw what the person approves.
  const tool = printable(asked.tool);
  const prompt = asked.prompt.split("\n").map(printable).join("\n");
  const block = (lead: string, text: string, hang?: string): string[] => wrap(lead, text, width, hang);
  const menu = TERMINAL_CHOICES.flatMap(({ choice, says }) =>
    block(`  ${style.bold(choice.padEnd(11))}  `, says(tool)),
  );
  const pin =
    descriptor === undefined
      ? []
      : block(
          "  ",
          style.dim(
            `A remembered answer is pinned to ${descriptorFingerprint(descriptor).slice(0, 19)}…: if the tool changes, it is asked about again.`,
          ),
        );
  return [
    "",
    ...block(
      "",
      `${style.yellow("? approval needed:")} ${style.bold(tool)} ${style.dim(`(turn ${asked.turn}, call ${printable(asked.callId)})`)}`,
      "  ",
    ),
    ...block("  ", prompt),
    ...block("  ", style.dim(`args ${asked.argsDigest}, ask ${asked.id}`)),
    "",
    ...menu,
    ...pin,
    "",
  ].join("\n");
}
