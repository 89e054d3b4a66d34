import { BudgetExceededError } from "./errors.js";
import type { Usage } from "./model.js";

/**
 * Model requests per run when `withBudget` sets no `maxTurns`: like the
 * peers' (the OpenAI Agents SDK stops at 10 turns, the AI SDK's agent at 20
 * steps), a model that never stops calling tools cannot run forever.
 */
export const DEFAULT_MAX_TURNS = 20;

/** Options of `withBudget`. */
export interface BudgetOptions {
  /** Model requests per run. @default DEFAULT_MAX_TURNS; `Infinity` for none */
  readonly maxTurns?: number;
  /** Input plus output tokens per run, as reported by the model's `usage`. @default unbounded */
  readonly maxTokens?: number;
}

/** Returns the error that stops the run before the next model request, if any. */
export function checkBudget(
  budget: BudgetOptions | undefined,
  turnsUsed: number,
  usage: Usage,
): BudgetExceededError | undefined {
  const maxTurns = budget?.maxTurns ?? DEFAULT_MAX_TURNS;
  if (turnsUsed >= maxTurns) return new BudgetExceededError("turns", maxTurns, turnsUsed);
  const tokens = usage.inputTokens + usage.outputTokens;
  if (budget?.maxTokens !== undefined && tokens >= budget.maxTokens) {
    return new BudgetExceededError("tokens", budget.maxTokens, tokens);
  }
  return undefined;
}
