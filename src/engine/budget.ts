import { BudgetExceededError } from "./errors.js";
import type { Usage } from "./model.js";

/** Options of `withBudget`. Each limit is optional; omitted means unbounded. */
export interface BudgetOptions {
  /** Model requests per run. */
  readonly maxTurns?: number;
  /** Input plus output tokens per run, as reported by the model's `usage`. */
  readonly maxTokens?: number;
}

/** Returns the error that stops the run before the next model request, if any. */
export function checkBudget(budget: BudgetOptions | undefined, turnsUsed: number, usage: Usage): BudgetExceededError | undefined {
  if (budget === undefined) return undefined;
  if (budget.maxTurns !== undefined && turnsUsed >= budget.maxTurns) {
    return new BudgetExceededError("turns", budget.maxTurns, turnsUsed);
  }
  const tokens = usage.inputTokens + usage.outputTokens;
  if (budget.maxTokens !== undefined && tokens >= budget.maxTokens) {
    return new BudgetExceededError("tokens", budget.maxTokens, tokens);
  }
  return undefined;
}
