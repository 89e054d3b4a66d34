/**
 * `gateTools` in a Vercel AI SDK 6 loop: what the gate adds to one tool call
 * over calling the AI SDK tool's `execute` directly, and loopctl's approval
 * round trip through `gateTools` beside the SDK's own `needsApproval` round
 * trip, timed in the same process.
 */
import { asSchema, generateText, stepCountIs, tool } from "ai";
import type { LanguageModel } from "ai";
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { z } from "zod";
import type { BenchModule, Row, Target } from "./lib/harness.js";
import {
  failedRow,
  measuredRow,
  ns,
  paired,
  perRound,
  roundRange,
  timeTogether,
  unavailableRows,
} from "./lib/harness.js";
import { loadModules } from "./lib/load.js";
import { assertExecuted, type RoundTrip } from "./lib/round-trip.js";
import { vercelAIRoundTrip } from "./peers/vercel-ai.js";

/** A regression guard, not a felt cost: one model call takes 10^4-10^5 times longer. */
const OVERHEAD: Target = { label: "overhead per call", op: "<=", limit: 20, unit: "µs" };
/** What the adapter itself adds to the gate's own work: the descriptor lookup, the request, the outcome. */
const ADAPTER: Target = { label: "gateTools − gate.call", op: "<=", limit: 2, unit: "µs" };
const SPEEDUP: Target = { label: "peer/ours", op: ">=", limit: 1, unit: "x" };

const NAMES = [
  { name: "gateTools per allowed call (hook allows), vs the tool's execute directly", target: OVERHEAD },
  { name: "gateTools per allowed call (no hook)", target: null },
  { name: "gateTools per allowed call (no hook), vs gate.call with the same descriptor", target: ADAPTER },
  { name: "gateTools approval round trip in generateText (hook asks, SyncAskResolver approves)", target: null },
  { name: "speed-up vs the AI SDK's needsApproval round trip (peer time / gateTools time)", target: SPEEDUP },
] as const;

const USAGE: LanguageModelV3GenerateResult["usage"] = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** Asks for the echo tool until it sees the call's result, then answers: the peer's mock, as a V3 model. */
const echoModel: LanguageModel = {
  specificationVersion: "v3",
  provider: "bench",
  modelId: "echo",
  supportedUrls: {},
  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const answered = options.prompt.at(-1)?.role === "tool";
    return answered
      ? {
          content: [{ type: "text", text: "done" }],
          finishReason: { unified: "stop", raw: undefined },
          usage: USAGE,
          warnings: [],
        }
      : {
          content: [{ type: "tool-call", toolCallId: "call_1", toolName: "echo", input: '{"text":"hi"}' }],
          finishReason: { unified: "tool-calls", raw: undefined },
          usage: USAGE,
          warnings: [],
        };
  },
  doStream: () => Promise.reject(new Error("the benchmark never streams")),
};

const aiSdk: BenchModule = {
  id: "ai-sdk",
  title:
    "gateTools (loopctl/ai-sdk) per call vs the AI SDK tool directly, and its approval round trip beside the SDK's needsApproval",
  async run(ctx) {
    const loaded = await loadModules({
      "ai-sdk": ["gateTools"],
      engine: ["Gate", "LoopManagers"],
      ask: ["SyncAskResolver"],
    });
    if (!loaded.ok) return unavailableRows(this.id, NAMES, loaded.reason);
    const { gateTools } = loaded.mod["ai-sdk"];
    const { Gate, LoopManagers } = loaded.mod.engine;
    const { SyncAskResolver } = loaded.mod.ask;

    let executions = 0;
    const echo = tool({
      description: "Echo the text back",
      inputSchema: z.object({ text: z.string() }),
      execute: async ({ text }) => {
        executions++;
        return text;
      },
    });
    const hooked = gateTools(
      { echo },
      new Gate(new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) })),
    );
    const bareGate = new Gate(new LoopManagers());
    const bare = gateTools({ echo }, bareGate);
    const descriptor = {
      name: "echo",
      description: "Echo the text back",
      inputSchema: await asSchema(echo.inputSchema).jsonSchema,
    };
    const options = { toolCallId: "call_1", messages: [] };
    const input = { text: "hi" };
    const call = (t: typeof hooked) => async (): Promise<void> => {
      const before = executions;
      await t.echo.execute!(input, options);
      if (executions !== before + 1) throw new Error("the gated tool did not run");
    };

    let gatedTrips = 0;
    const asking = gateTools(
      { echo },
      new Gate(
        new LoopManagers()
          .withHook({ preToolUse: () => ({ type: "ask", prompt: "Echo this text?" }) })
          .withAskResolver(new SyncAskResolver(() => true)),
      ),
    );
    const ours: RoundTrip = {
      label: "gateTools",
      async once() {
        const result = await generateText({ model: echoModel, tools: asking, prompt: "go", stopWhen: stepCountIs(3) });
        if (result.text !== "done") throw new Error(`unexpected final text ${result.text}`);
        gatedTrips++;
      },
      executions: () => executions,
      roundTrips: () => gatedTrips,
    };
    const peer = vercelAIRoundTrip();

    const rows: Row[] = [];
    try {
      await ours.once();
      await peer.once();
      assertExecuted(peer);
      if (executions !== gatedTrips) throw new Error("the gateTools round trip did not run the tool once per trip");
      // Per-call figures are timed apart from the round trips: between generateText runs of two
      // SDKs, a 10 µs call measures their caches and collections more than its own work, and a
      // heavy sample of 32 calls would be too short for the CPU clock.
      const t = await timeTogether(ctx, {
        direct: () => echo.execute!(input, options),
        hooked: call(hooked),
        bare: call(bare),
        gateCall: () =>
          bareGate.call({ tool: descriptor, callId: "call_1", input }, (approved) =>
            echo.execute!(approved as typeof input, options),
          ),
      });
      const trips = await timeTogether(
        ctx,
        { ours: () => ours.once(), peer: () => peer.once() },
        { heavy: true, verify: () => assertExecuted(peer) },
      );
      const overheadUs = perRound(t, (r) => r("hooked") - r("direct")) / 1e3;
      const bareUs = perRound(t, (r) => r("bare") - r("direct")) / 1e3;
      const adapterUs = perRound(t, (r) => r("bare") - r("gateCall")) / 1e3;
      const speedup = perRound(trips, (r) => r("peer") / r("ours"));
      rows.push(
        measuredRow({
          bench: this.id,
          name: NAMES[0].name,
          ours: ns(t.ns["hooked"]!),
          floor: ns(t.ns["direct"]!),
          target: OVERHEAD,
          checked: { value: overheadUs, unit: "µs" },
          ratioRange: roundRange(t, (r) => (r("hooked") - r("direct")) / 1e3),
          note: "the gated execute as generateText calls it (snapshot, JSON Schema validation, hook, record) minus `await execute(input, options)` on the same AI SDK tool; target: a regression guard (a model call costs 10^4-10^5 times more); range in µs",
        }),
        measuredRow({
          bench: this.id,
          name: NAMES[1].name,
          ...paired(t, "bare", "direct"),
          note: `overhead ${bareUs.toFixed(2)} µs per call`,
        }),
        measuredRow({
          bench: this.id,
          name: NAMES[2].name,
          ours: ns(t.ns["bare"]!),
          floor: ns(t.ns["gateCall"]!),
          target: ADAPTER,
          checked: { value: adapterUs, unit: "µs" },
          ratioRange: roundRange(t, (r) => (r("bare") - r("gateCall")) / 1e3),
          note: "the adapter's own share; the rest is the gate's, tracked by the gate module; range in µs",
        }),
        measuredRow({
          bench: this.id,
          name: NAMES[3].name,
          ours: ns(trips.ns["ours"]!),
          floor: null,
          note: "one generateText, two model steps; the call parks in execute and the resolver approves at once",
        }),
        measuredRow({
          bench: this.id,
          name: NAMES[4].name,
          ours: ns(trips.ns["ours"]!),
          floor: ns(trips.ns["peer"]!),
          ratio: speedup,
          target: SPEEDUP,
          checked: { value: speedup, unit: "x" },
          ratioRange: roundRange(trips, (r) => r("peer") / r("ours")),
          note: "floor column holds the peer's time: tool-approval-request, then a second generateText with the tool-approval-response (the peers module times it too)",
        }),
      );
    } catch (error) {
      rows.push(failedRow(this.id, NAMES[0].name, OVERHEAD, error));
    }
    return rows;
  },
};

export default aiSdk;
