import type { AskResolution, PendingAsk } from "loopctl/ask";
import { argsDigest } from "loopctl/grant";
import type { Hook } from "loopctl/engine";
import { describeChoice, resolutionFor } from "./terminal-approver.js";
import type { TerminalChoice } from "./terminal-approver.js";

/** The release the scripted run ships. */
export const VERSION = "1.4.0";

export const USER_TEXT = `Prepare and ship release ${VERSION}.`;

const CHANGELOG = {
  version: VERSION,
  entries: [
    "Faster cold start: lazy-load the editor bundle",
    "Fix: session cookie kept after sign-out",
    "Docs: self-hosting guide",
  ],
};
const STAGING = { env: "staging", version: VERSION };
const PRODUCTION = { env: "production", version: VERSION };
const PRODUCTION_SKIP_CHECKS = { env: "production", version: VERSION, skipChecks: true };

/**
 * What the scripted model does, turn by turn: read, write the changelog,
 * deploy to staging, try production, then try production again skipping the
 * checks (an agent working around a refusal), then report.
 */
export const MODEL_TURNS = [
  {
    text: "Let me look at the project first.",
    toolCalls: [
      { id: "call_1", name: "read_file", input: { path: "package.json" } },
      { id: "call_2", name: "read_file", input: { path: "NOTES.md" } },
    ],
  },
  { text: "Writing the changelog.", toolCalls: [{ id: "call_3", name: "write_changelog", input: CHANGELOG }] },
  { text: "Deploying to staging.", toolCalls: [{ id: "call_4", name: "deploy", input: STAGING }] },
  { text: "Staging is done; production next.", toolCalls: [{ id: "call_5", name: "deploy", input: PRODUCTION }] },
  {
    text: "Production was refused; retrying without the checks.",
    toolCalls: [{ id: "call_6", name: "deploy", input: PRODUCTION_SKIP_CHECKS }],
  },
  { text: `Release ${VERSION}: see the audit trail for what ran and what was refused.` },
];

/** Reading is safe; writing and deploying need a person. */
export const releaseHook: Hook = {
  name: "release-policy",
  preToolUse(call) {
    const input = (call.input ?? {}) as Record<string, unknown>;
    switch (call.name) {
      case "read_file":
        return { type: "allow" };
      case "write_changelog":
        return {
          type: "ask",
          prompt: `Write CHANGELOG.md for ${String(input["version"])} (${Array.isArray(input["entries"]) ? input["entries"].length : 0} entries)?`,
        };
      case "deploy":
        return {
          type: "ask",
          prompt: `Deploy ${String(input["version"])} to ${String(input["env"])}${input["skipChecks"] === true ? " WITHOUT checks" : ""}?`,
        };
      default:
        return { type: "ask", prompt: `Run ${call.name}?` };
    }
  },
};

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
