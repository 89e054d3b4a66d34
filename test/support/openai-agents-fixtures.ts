import { Usage, setTracingDisabled } from "@openai/agents";
import type { AgentInputItem, Model, ModelRequest, ModelResponse, StreamEvent } from "@openai/agents";

setTracingDisabled(true);

/**
 * One scripted model turn: function calls (`[callId, tool, arguments]`, arguments as JSON text or a value), final
 * text, or output items as the SDK takes them (a `tool_search_call`, say).
 */
export type FakeTurn =
  | { readonly calls: readonly (readonly [string, string, unknown])[] }
  | { readonly text: string }
  | { readonly output: ModelResponse["output"] };

/**
 * A model for the SDK's own Runner: plays `turns` in order, one per model
 * request, and keeps every request's input so a test can read what the
 * model was shown (function call results included).
 */
export class FakeModel implements Model {
  readonly inputs: AgentInputItem[][] = [];
  readonly #turns: FakeTurn[];

  constructor(turns: readonly FakeTurn[]) {
    this.#turns = [...turns];
  }

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.inputs.push(Array.isArray(request.input) ? [...request.input] : [{ role: "user", content: request.input }]);
    const turn = this.#turns.shift();
    if (turn === undefined) throw new Error("the fake model has no more turns");
    if ("output" in turn) return { usage: new Usage(), output: [...turn.output] };
    if ("text" in turn) {
      return {
        usage: new Usage(),
        output: [
          {
            type: "message",
            role: "assistant",
            status: "completed",
            content: [{ type: "output_text", text: turn.text }],
          },
        ],
      };
    }
    return {
      usage: new Usage(),
      output: turn.calls.map(([callId, name, args]) => ({
        type: "function_call" as const,
        callId,
        name,
        arguments: typeof args === "string" ? args : JSON.stringify(args),
        status: "completed" as const,
      })),
    };
  }

  /** A streamed run's turn: the same response, in one `response_done` event. */
  async *getStreamedResponse(request: ModelRequest): AsyncIterable<StreamEvent> {
    const { usage, output } = await this.getResponse(request);
    yield {
      type: "response_done",
      response: {
        id: `response_${this.inputs.length}`,
        usage: {
          requests: usage.requests,
          inputTokens: usage.inputTokens,
          outputTokens: usage.outputTokens,
          totalTokens: usage.totalTokens,
        },
        // What getResponse made: model output items, the only items a FakeTurn makes.
        output: output as Extract<StreamEvent, { type: "response_done" }>["response"]["output"],
      },
    };
  }
}

/** The outputs the model was shown for function calls, by call id, in its last request. */
export function shownResults(model: FakeModel): Record<string, unknown> {
  const last = model.inputs.at(-1) ?? [];
  const out: Record<string, unknown> = {};
  for (const item of last) {
    if (item.type === "function_call_result") {
      const output = item.output as { type?: string; text?: string } | string;
      out[item.callId] = typeof output === "string" ? output : output.type === "text" ? output.text : output;
    }
  }
  return out;
}
