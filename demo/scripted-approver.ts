import type { AskResolution, Approver, PendingAsk } from "loopctl/ask";
import { argsDigest } from "loopctl/grant";
import { printable } from "../src/cli/format.js";
import type { Output } from "./output.js";
import { CHANGELOG, PRODUCTION, STAGING } from "./release.js";
import type { Style } from "./style.js";
import { describeChoice, resolutionFor } from "./terminal-approver.js";
import type { TerminalChoice } from "./terminal-approver.js";

/** One line of the scripted approver's policy. */
interface ScriptedAnswer {
  readonly tool: string;
  readonly args: unknown;
  /** The answer, as a person would type it at the terminal. */
  readonly choice: TerminalChoice;
  readonly reason?: string;
}

/**
 * The non-interactive answering policy: what a release manager decided in
 * advance. It matches an ask by tool and argument digest (asks never carry the
 * arguments). An ask it has no answer for is left alone, so the engine's
 * deadline expires it.
 */
const SCRIPTED_ANSWERS: readonly ScriptedAnswer[] = [
  { tool: "write_changelog", args: CHANGELOG, choice: "always-tool" },
  { tool: "deploy", args: STAGING, choice: "y" },
  { tool: "deploy", args: PRODUCTION, choice: "never-call", reason: "production needs the release manager" },
];

/** The scripted policy's answer for `ask`, or `undefined` to let it expire. */
export function scriptedAnswer(ask: PendingAsk): { resolution: AskResolution; says: string } | undefined {
  const answer = SCRIPTED_ANSWERS.find((a) => a.tool === ask.tool && argsDigest(a.args) === ask.argsDigest);
  if (answer === undefined) return undefined;
  return { resolution: resolutionFor(answer.choice, answer.reason), says: describeChoice(answer.choice, ask.tool) };
}

/** The non-interactive approver: shows each ask and answers what the release manager decided in advance. */
export async function runScriptedApprover(
  approver: Approver,
  out: Output,
  style: Style,
  timeoutMs: number,
): Promise<void> {
  for await (const ask of approver) {
    out.line(ask.prompt.split("\n").map(printable).join("\n"), `    ${style.yellow("ask")}     `);
    out.line(style.dim(`args ${ask.argsDigest}, ask ${ask.id.slice(0, 8)}`), "            ");
    const answer = scriptedAnswer(ask);
    if (answer === undefined) {
      out.line(`none scripted: nobody answers, the ask expires after ${timeoutMs} ms`, `    ${style.dim("answer")}  `);
      continue;
    }
    const delivered = approver.resolve(ask.id, answer.resolution);
    const paint = answer.resolution.type === "approve" ? style.green : style.red;
    out.line(`${paint(answer.says)}${delivered ? "" : " (too late)"}`, `    ${style.dim("answer")}  `);
  }
}
