import type { PendingAsk } from "./types.js";

/**
 * The async iterator of an inbox: yields what `take` gives, in order, until
 * it gives `undefined` (the inbox closed). Unlike an async generator's,
 * `return()` and `throw()` end it at once, even while a `next()` is waiting
 * for an ask: that wait is given up (the pending `next()` resolves done), so
 * the ask that comes next goes to whoever asks for it next, not to a consumer
 * that has stopped (a loop given up, a stream over the inbox destroyed).
 * An ask already handed to a waiting `next()` is still yielded by it.
 */
export function takeIterator(
  take: (signal: AbortSignal) => Promise<PendingAsk | undefined>,
): AsyncGenerator<PendingAsk, void, undefined> {
  const waits = new Set<AbortController>();
  let done = false;
  const stop = (): void => {
    done = true;
    for (const wait of waits) wait.abort();
    waits.clear();
  };
  const iterator: AsyncGenerator<PendingAsk, void, undefined> = {
    async next(): Promise<IteratorResult<PendingAsk, void>> {
      if (done) return { done: true, value: undefined };
      const wait = new AbortController();
      waits.add(wait);
      try {
        const ask = await take(wait.signal);
        if (ask !== undefined) return { done: false, value: ask };
        done = true;
        return { done: true, value: undefined };
      } catch (error) {
        if (wait.signal.aborted) return { done: true, value: undefined };
        throw error;
      } finally {
        waits.delete(wait);
      }
    },
    async return(): Promise<IteratorResult<PendingAsk, void>> {
      stop();
      return { done: true, value: undefined };
    },
    async throw(error: unknown): Promise<IteratorResult<PendingAsk, void>> {
      stop();
      throw error;
    },
    [Symbol.asyncIterator](): AsyncGenerator<PendingAsk, void, undefined> {
      return iterator;
    },
  };
  return iterator;
}
