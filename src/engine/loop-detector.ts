/** Options of `withLoopDetection`. */
export interface LoopDetectionOptions {
  /**
   * How many times the same call (tool and `argsSha256`) may reach dispatch
   * within one run; the next one stops the run with `LoopDetectedError`.
   * Calls refused before the hooks count too, at their refusal: a call to an
   * unknown tool, and a call whose arguments are not JSON values (those of
   * one tool all count as the same call, having no digest). Calls a hook or
   * an approver refuses end before pre-detection (the gate's order, docs/gate.md) and do not count.
   */
  readonly maxRepeats: number;
}

/** Counts identical calls per run. */
export class LoopDetector {
  readonly #maxRepeats: number;
  readonly #seen = new Map<string, number>();

  constructor(options: LoopDetectionOptions) {
    this.#maxRepeats = options.maxRepeats;
  }

  /**
   * Registers one call (`argsSha256` `""` for non-JSON arguments); returns its
   * count when it goes past the limit, else `undefined`. Keyed by sha256, not
   * by the FNV-1a `argsDigest`, which can be made to collide on purpose.
   */
  observe(tool: string, argsSha256: string): number | undefined {
    const key = `${tool}\u0000${argsSha256}`;
    const count = (this.#seen.get(key) ?? 0) + 1;
    this.#seen.set(key, count);
    return count > this.#maxRepeats ? count : undefined;
  }
}
