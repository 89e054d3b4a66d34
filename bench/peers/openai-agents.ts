/**
 * The approval round trip of the OpenAI Agents SDK (@openai/agents 0.14.x):
 * `tool({ needsApproval: true })` → `run()` stops with one interruption →
 * `state.approve(interruption)` → `run(agent, state)` executes the tool and
 * the model answers. The model is a local mock: no network, no tracing.
 */
import {
  Agent,
  run,
  setTracingDisabled,
  tool,
  Usage,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type StreamEvent,
} from "@openai/agents";
import { z } from "zod";
import type { RoundTrip } from "../lib/round-trip.js";

/** Replies with one function call until it sees that call's result, then with final text. */
class ScriptedOpenAIModel implements Model {
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = request.input;
    const sawResult = Array.isArray(input) && input.some((item) => item.type === "function_call_result");
    if (!sawResult) {
      return {
        usage: new Usage(),
        output: [
          { type: "function_call", callId: "call_1", name: "echo", arguments: '{"text":"hi"}', status: "completed" },
        ],
      };
    }
    return {
      usage: new Usage(),
      output: [
        { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] },
      ],
    };
  }

  // eslint-disable-next-line require-yield -- the interface wants a generator; this one only refuses
  async *getStreamedResponse(): AsyncIterable<StreamEvent> {
    throw new Error("the benchmark never streams");
  }
}

/** `fresh`: a new agent, tool and mock model per round trip (as a process that builds them per request would). */
export function openAIAgentsRoundTrip(fresh = false): RoundTrip {
  setTracingDisabled(true);
  let executions = 0;
  let roundTrips = 0;
  const makeAgent = () => {
    const echo = tool({
      name: "echo",
      description: "Echo the text back",
      parameters: z.object({ text: z.string() }),
      needsApproval: true,
      execute: async ({ text }) => {
        executions++;
        return text;
      },
    });
    return new Agent({
      name: "bench",
      instructions: "Use the echo tool.",
      model: new ScriptedOpenAIModel(),
      tools: [echo],
    });
  };
  const session = fresh ? undefined : makeAgent();
  return {
    label: "OpenAI Agents SDK",
    async once() {
      const agent = session ?? makeAgent();
      const first = await run(agent, "go");
      const [interruption, ...rest] = first.interruptions;
      if (interruption === undefined || rest.length > 0) throw new Error("expected exactly one approval interruption");
      first.state.approve(interruption);
      const second = await run(agent, first.state);
      if (second.finalOutput !== "done") throw new Error(`unexpected final output ${String(second.finalOutput)}`);
      roundTrips++;
    },
    executions: () => executions,
    roundTrips: () => roundTrips,
  };
}
