/** Options of `withLoopDetection`. */
export interface LoopDetectionOptions {
  /**
   * How many times the same call (tool and `argsSha256`) may reach dispatch
   * within one run; the next one stops the run with `LoopDetectedError`. A
   * run keeps the counts of its 1024 most recently seen distinct calls.
   * Calls refused before the hooks count too, at their refusal: a call to an
   * unknown tool, one whose arguments fail the tool's schema, and one whose
   * arguments are not JSON values (those of one tool all count as the same
   * call, having no digest). Calls a hook or
   * an approver refuses end before pre-detection (the gate's order, docs/gate.md) and do not count.
   */
  readonly maxRepeats: number;
}

/**
 * Distinct calls whose counts one run keeps (the least recently seen go
 * first): a run that lasts, such as the nil run of every call given no
 * `runId`, would otherwise keep one count for every distinct call it ever saw.
 * A loop repeats a call long before a thousand others come between.
 */
const CALLS_KEPT = 1024;

/** Counts identical calls per run, for its {@link CALLS_KEPT} most recently seen calls. */
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
    const seen = this.#seen;
    const count = (seen.get(key) ?? 0) + 1;
    // Set anew, so the Map's order is the order calls were last seen in.
    seen.delete(key);
    seen.set(key, count);
    if (seen.size > CALLS_KEPT) seen.delete(seen.keys().next().value as string);
    return count > this.#maxRepeats ? count : undefined;
  }
}
