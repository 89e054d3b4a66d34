import { z } from "zod";
import type { AskResolver } from "../../src/ask/index.js";
import { Agent, Gate, LoopManagers, defineTool } from "../../src/engine/index.js";
import type { GateDecision, GateOutcome, Observer, Tool, ToolCall } from "../../src/engine/index.js";
import { ManualClock, ScriptedModel } from "../../src/testing/index.js";
import type { ScriptedTurn } from "../../src/testing/index.js";

/** A promise with its resolve/reject exposed. */
export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets pending microtasks and one macrotask run (no wall-clock wait). */
export async function flush(): Promise<void> {
  await new Promise<void>((resolve) => setImmediate(resolve));
}

/** Flushes until `condition` holds (bounded). */
export async function until(condition: () => boolean, rounds = 200): Promise<void> {
  for (let i = 0; i < rounds; i += 1) {
    if (condition()) return;
    await flush();
  }
  throw new Error("condition never held");
}

/** The result a stopped run gives a call whose tool it stopped before. */
export function notRunResult(callId: string, tool: string) {
  return {
    type: "tool_result",
    callId,
    tool,
    content: `Tool '${tool}' did not run: the run stopped before it`,
    status: "refused",
    isError: true,
  } as const;
}

/** A `read` tool that records what it executed. */
export function readTool(executed: unknown[] = []): Tool {
  return defineTool({
    name: "read",
    description: "Read a file",
    input: z.object({ path: z.string() }),
    execute: ({ path }) => {
      executed.push({ path });
      return `contents of ${path}`;
    },
  });
}

/** A `write` tool that records what it executed. */
export function writeTool(executed: unknown[] = []): Tool {
  return defineTool({
    name: "write",
    description: "Write a file",
    input: {
      type: "object",
      properties: { path: { type: "string" }, text: { type: "string" } },
      required: ["path"],
      additionalProperties: false,
    },
    execute: (input) => {
      executed.push(input);
      return { ok: true };
    },
  });
}

export const call = (id: string, name: string, input: unknown): ToolCall => ({ id, name, input });

/** An observer that logs every event as a short string. */
export function eventLog(): { log: string[]; observer: Observer } {
  const log: string[] = [];
  return {
    log,
    observer: {
      onModelRequest: ({ turn }) => log.push(`model-request:${turn}`),
      onModelResponse: ({ turn }) => log.push(`model-response:${turn}`),
      onToolPre: ({ call: c }) => log.push(`pre:${c.id}`),
      onGate: ({ callId, decision }) => log.push(`gate:${callId}:${decision.verdict}`),
      onToolPost: ({ call: c, outcome }) => log.push(`post:${c.id}:${outcome.type === "ran" ? "ok" : "error"}`),
    },
  };
}

/** Hook that asks for every call with a fixed prompt. */
export const askAll = (prompt = "May I?") => ({ preToolUse: () => ({ type: "ask" as const, prompt }) });

/** A scripted run: one turn with `calls`, then "done". */
export function script(...calls: ToolCall[]): ScriptedTurn[] {
  return [{ toolCalls: calls }, { text: "done" }];
}

export function build(options: { turns: readonly ScriptedTurn[]; tools?: readonly Tool[]; managers?: LoopManagers }): {
  agent: Agent;
  model: ScriptedModel;
} {
  const model = new ScriptedModel(options.turns);
  const agent = new Agent({
    model,
    tools: options.tools ?? [readTool()],
    managers: options.managers ?? new LoopManagers(),
  });
  return { agent, model };
}

/**
 * The fields of a record that do not depend on time, without `argsSha256`
 * (which is checked here to be there exactly when `argsDigest` is: both are
 * digests of the same text; test/engine-gate.test.ts checks its value).
 */
export function shape(record: GateDecision): Omit<GateDecision, "ts" | "argsSha256"> {
  const { ts: _ts, argsSha256, ...rest } = record;
  if (record.argsDigest === "" ? argsSha256 !== "" : !/^[0-9a-f]{64}$/.test(argsSha256 ?? "")) {
    throw new Error(`argsSha256 ${String(argsSha256)} does not go with argsDigest ${record.argsDigest}`);
  }
  return rest;
}

export { ManualClock };

/**
 * One call through a `Gate` whose hook asks `resolver` about it, under a
 * caller signal the test aborts: the call, its records as they land, and
 * how many times its tool ran.
 */
export function askingCall(
  resolver: AskResolver,
  tool = "deploy",
): {
  readonly calling: Promise<GateOutcome>;
  readonly caller: AbortController;
  readonly records: GateDecision[];
  executed(): number;
} {
  const records: GateDecision[] = [];
  const gate = new Gate(
    new LoopManagers()
      .withHook({ preToolUse: () => ({ type: "ask", prompt: `${tool}?` }) })
      .withAskResolver(resolver)
      .withObserver({ onGate: ({ decision }) => records.push(decision) }),
  );
  const caller = new AbortController();
  let executed = 0;
  const calling = gate.call(
    {
      tool: { name: tool, description: tool, inputSchema: { type: "object" } },
      callId: "c1",
      input: {},
      signal: caller.signal,
    },
    () => (executed += 1),
  );
  return { calling, caller, records, executed: () => executed };
}
