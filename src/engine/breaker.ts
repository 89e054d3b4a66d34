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
 * `cooldownMs`; after that, calls go through again (half-open) and the next
 * failure re-opens it at once, the next success closes it.
 */
export class CircuitBreaker {
  readonly #options: CircuitBreakerOptions;
  readonly #state = new Map<string, { failures: number; openedAt: number | undefined }>();

  constructor(options: CircuitBreakerOptions) {
    this.#options = options;
  }

  /** True while the tool's breaker is open at `now`. */
  isOpen(tool: string, now: number): boolean {
    const state = this.#state.get(tool);
    return state?.openedAt !== undefined && now - state.openedAt < this.#options.cooldownMs;
  }

  /** Records one execution outcome. */
  report(tool: string, ok: boolean, now: number): void {
    if (ok) {
      this.#state.delete(tool);
      return;
    }
    const state = this.#state.get(tool) ?? { failures: 0, openedAt: undefined };
    state.failures += 1;
    if (state.failures >= this.#options.failureThreshold) state.openedAt = now;
    // Set anew, so the Map's order is the order tools last failed in.
    this.#state.delete(tool);
    this.#state.set(tool, state);
    if (this.#state.size > TOOLS_KEPT) this.#state.delete(this.#state.keys().next().value as string);
  }
}
