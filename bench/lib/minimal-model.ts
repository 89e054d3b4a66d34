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
