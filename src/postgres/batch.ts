/**
 * Gathers keys and hands them to `run` in batches: one run at a time, and
 * every key added while a run is in flight goes into the next one. A burst of
 * a thousand notifications thus costs a few statements, not a thousand.
 */
export class Batch<K> {
  readonly #run: (keys: K[]) => Promise<void>;
  readonly #onError: (error: unknown) => void;
  #pending = new Set<K>();
  #running = false;
  #draining: Promise<void> = Promise.resolve();

  constructor(run: (keys: K[]) => Promise<void>, onError: (error: unknown) => void) {
    this.#run = run;
    this.#onError = onError;
  }

  add(key: K): void {
    this.#pending.add(key);
    if (this.#running) return;
    this.#running = true;
    // A microtask later, so keys added in the same turn share the first run.
    this.#draining = new Promise<void>((resolve) => queueMicrotask(() => void this.#drain().finally(resolve)));
  }

  /** Resolves once no run is in flight or due (runs never reject: failures go to `onError`). */
  idle(): Promise<void> {
    return this.#running ? this.#draining : Promise.resolve();
  }

  async #drain(): Promise<void> {
    while (this.#pending.size > 0) {
      const keys = [...this.#pending];
      this.#pending = new Set();
      try {
        await this.#run(keys);
      } catch (error) {
        // The owner's periodic re-read covers what this run missed.
        this.#onError(error);
      }
    }
    this.#running = false;
  }
}
