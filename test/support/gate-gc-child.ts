// Run as: node --expose-gc --import tsx test/support/gate-gc-child.ts [listening]
// Makes sequential gate calls on one caller signal while another call on it
// stays in flight, forces collection, and prints as one JSON line how many of
// the finished calls' outputs are still reachable. With `listening`, each
// call's tool listens to the signal it is given, holding its output, and
// never stops: as a tool that kills its child process on abort does.
import { setImmediate as nextTurn } from "node:timers/promises";
import { Gate, LoopManagers } from "../../src/engine/index.js";
import type { ToolDescriptor } from "../../src/engine/index.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const CALLS = 2_000;
const listening = process.argv[2] === "listening";
const tool: ToolDescriptor = { name: "echo", description: "echo", inputSchema: { type: "object" } };
const gate = new Gate(
  new LoopManagers().withHook({ preToolUse: () => ({ type: "allow" }) }).withMiddleware((_call, _ctx, next) => next()),
);
const caller = new AbortController();
let finish: (value: unknown) => void = () => undefined;
const held = gate.call(
  { tool, callId: "held", input: {}, signal: caller.signal },
  () => new Promise((resolve) => (finish = resolve)),
);

/**
 * The calls, in a function of their own: once it returns, nothing of its frame
 * holds an outcome. Left at the top level, the module's suspended frame may
 * keep the last one in a register it saves at each later await, whatever the
 * gate keeps.
 */
async function finishedCalls(): Promise<WeakRef<object>[]> {
  const outputs: WeakRef<object>[] = [];
  for (let i = 0; i < CALLS; i++) {
    const outcome = await gate.call(
      { tool, callId: `c${i}`, input: {}, signal: caller.signal },
      (_input, { signal }) => {
        const output = { i };
        outputs.push(new WeakRef(output));
        if (listening) signal.addEventListener("abort", () => void output, { once: true });
        return output;
      },
    );
    if (outcome.type !== "ran") throw new Error(`call ${i} ended ${outcome.type}`);
  }
  return outputs;
}
const outputs = await finishedCalls();

// A WeakRef's target lives to the end of the job that made or read it: each try collects on a fresh turn
// before reading. A bounded number of tries keeps a regression from hanging.
const alive = (): number => outputs.filter((ref) => ref.deref() !== undefined).length;
let reachable = CALLS;
for (let attempt = 0; attempt < 20 && reachable > 0; attempt++) {
  await nextTurn();
  gc();
  reachable = alive();
}
finish("done");
await held;
process.stdout.write(`${JSON.stringify({ calls: CALLS, reachable })}\n`);
