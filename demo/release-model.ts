import type { Message, ModelResponse, ToolCall } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";
import type { RecordedRequest } from "loopctl/testing";
import { CHANGELOG, PRODUCTION, PRODUCTION_SKIP_CHECKS, STAGING, VERSION } from "./release.js";

/** How a call came out, as the model reads it from its tool result. */
interface Outcome {
  readonly ran: boolean;
  /** The tool's output, or the refusal the engine sent instead. */
  readonly text: string;
}

const CALLS = {
  changelog: { id: "call_3", name: "write_changelog", input: CHANGELOG },
  staging: { id: "call_4", name: "deploy", input: STAGING },
  production: { id: "call_5", name: "deploy", input: PRODUCTION },
  skipChecks: { id: "call_6", name: "deploy", input: PRODUCTION_SKIP_CHECKS },
} satisfies Record<string, ToolCall>;

function outcome(messages: readonly Message[], call: ToolCall): Outcome | undefined {
  const result = messages.find((m) => m.type === "tool_result" && m.callId === call.id);
  return result?.type === "tool_result" ? { ran: result.status === "ran", text: result.content } : undefined;
}

/** The closing report: what ran, read from the results, never assumed. */
function report({ messages }: RecordedRequest, before?: string): ModelResponse {
  const ran = (call: ToolCall): boolean => outcome(messages, call)?.ran === true;
  const production = ran(CALLS.production)
    ? "production deployed"
    : ran(CALLS.skipChecks)
      ? "production deployed WITHOUT its checks"
      : outcome(messages, CALLS.production) === undefined
        ? "production not tried"
        : "production not deployed";
  const done = [
    ran(CALLS.changelog) ? "changelog written" : "no changelog",
    ran(CALLS.staging) ? "staging deployed" : "staging not deployed",
    production,
  ];
  const text = `Release ${VERSION}: ${done.join(", ")}.`;
  return { text: before === undefined ? text : `${before} ${text}`, toolCalls: [] };
}

/** The next step, from how `call` came out (the report, if it never got a result). */
function after(call: ToolCall, request: RecordedRequest, next: (done: Outcome) => ModelResponse): ModelResponse {
  const done = outcome(request.messages, call);
  return done === undefined ? report(request) : next(done);
}

/**
 * The release assistant's model: scripted (no network, no keys), but each
 * turn reads the results of the last one, as a real model would. What it
 * says follows what happened: a refused production deploy makes it try
 * again without the checks (an agent working around a refusal, asked about
 * again because its arguments changed); an approved one ends the release.
 */
export function releaseModel(): ScriptedModel {
  return new ScriptedModel([
    {
      text: "Let me look at the project first.",
      toolCalls: [
        { id: "call_1", name: "read_file", input: { path: "package.json" } },
        { id: "call_2", name: "read_file", input: { path: "NOTES.md" } },
      ],
    },
    { text: "Writing the changelog.", toolCalls: [CALLS.changelog] },
    (request) =>
      after(CALLS.changelog, request, (changelog) => ({
        text: changelog.ran
          ? "The changelog is written. Deploying to staging."
          : `The changelog was not written (${changelog.text}). Deploying to staging anyway.`,
        toolCalls: [CALLS.staging],
      })),
    (request) =>
      after(CALLS.staging, request, (staging) =>
        staging.ran
          ? { text: `Staging runs ${VERSION}. Production next.`, toolCalls: [CALLS.production] }
          : report(request, `Staging was not deployed (${staging.text}), so production waits.`),
      ),
    (request) =>
      after(CALLS.production, request, (production) =>
        production.ran
          ? report(request)
          : {
              text: `Production was not deployed (${production.text}). Retrying without the checks.`,
              toolCalls: [CALLS.skipChecks],
            },
      ),
    (request) => report(request),
  ]);
}
