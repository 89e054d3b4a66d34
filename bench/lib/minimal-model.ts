import type { Model, ModelResponse } from "../../src/engine/index.js";

/**
 * The leanest possible scripted model: hands back prebuilt responses in
 * order, copying and recording nothing. It is the counterpart of the peers'
 * hand-written mocks, so that a per-call figure measures the engine rather
 * than ScriptedModel's deep copy of every request (which a test double wants).
 */
export function minimalModel(turns: readonly ModelResponse[]): Model {
  let next = 0;
  return {
    generate() {
      const turn = turns[next++];
      return turn === undefined ? Promise.reject(new Error("script exhausted")) : Promise.resolve(turn);
    },
  };
}

/**
 * A mock that, like the peers' mocks, is made once and reads its input: the
 * first turn while the last message is not a tool result, the second after.
 * It copies and records nothing.
 */
export function sessionModel(turns: readonly [ModelResponse, ModelResponse]): Model {
  const [call, answer] = turns;
  return {
    generate({ messages }) {
      return Promise.resolve(messages.at(-1)?.type === "tool_result" ? answer : call);
    },
  };
}
