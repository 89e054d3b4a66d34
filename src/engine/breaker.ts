/** Options of `withCircuitBreaker`. */
export interface CircuitBreakerOptions {
  /** Consecutive execution failures of one tool that open its breaker. */
  readonly failureThreshold: number;
  /** How long (clock milliseconds) an open breaker refuses the tool. */
  readonly cooldownMs: number;
}

/** The text the model receives, and the record's reason, while a breaker is open. */
export const BREAKER_OPEN_TEXT = "tool temporarily unavailable: circuit breaker open";

/**
 * Tools whose failures a breaker keeps (the least recently failed go first):
 * a gate whose tools keep changing (an MCP server that lists new ones) would
 * otherwise keep the count of every tool that ever failed last.
 */
const TOOLS_KEPT = 1024;

/**
 * Per-tool health, of the {@link TOOLS_KEPT} tools that failed most recently:
 * after `failureThreshold` consecutive failures the tool is refused for
 * `cooldownMs`. After that it is half-open: one call at a time goes through
 * as the trial, the others are refused as while open. The trial's failure
 * re-opens it, its success closes it; a trial that ends without an outcome
 * (cancelled, refused by middleware, its report lost) leaves it half-open,
 * and the next call is the trial.
 */
export class CircuitBreaker {
  readonly #options: CircuitBreakerOptions;
  readonly #state = new Map<string, { failures: number; openedAt: number | undefined; trial: object | undefined }>();

  constructor(options: CircuitBreakerOptions) {
    this.#options = options;
  }

  /**
   * Whether a call of `tool` may go on at `now`. While the breaker is
   * half-open and no call holds the trial, `caller` takes it and holds it
   * until {@link release}: every other call of the tool is refused meanwhile.
   */
  admit(tool: string, now: number, caller: object): boolean {
    const state = this.#state.get(tool);
    if (state?.openedAt === undefined) return true;
    if (now - state.openedAt < this.#options.cooldownMs || state.trial !== undefined) return false;
    state.trial = caller;
    return true;
  }

  /**
   * `caller`'s call has ended, its outcome reported or not: if it holds the
   * trial, the next call may take it (after the new cool-down, if it failed).
   * A caller that holds no trial (let through while the breaker was closed,
   * or of a tool the breaker has since forgotten) changes nothing.
   */
  release(tool: string, caller: object): void {
    const state = this.#state.get(tool);
    if (state?.trial === caller) state.trial = undefined;
  }

  /** Records one execution outcome. */
  report(tool: string, ok: boolean, now: number): void {
    if (ok) {
      this.#state.delete(tool);
      return;
    }
    const state = this.#state.get(tool) ?? { failures: 0, openedAt: undefined, trial: undefined };
    state.failures += 1;
    if (state.failures >= this.#options.failureThreshold) state.openedAt = now;
    // Set anew, so the Map's order is the order tools last failed in.
    this.#state.delete(tool);
    this.#state.set(tool, state);
    if (this.#state.size > TOOLS_KEPT) this.#state.delete(this.#state.keys().next().value as string);
  }
}
