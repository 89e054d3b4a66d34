import { CancelledError } from "./errors.js";

/** The error a cancelled run rejects with, carrying the signal's reason. */
export function cancelledBy(signal: AbortSignal): CancelledError {
  return new CancelledError("the run was cancelled", { cause: signal.reason });
}

/**
 * Waits for `work` unless `signal` aborts first (then rejects with
 * {@link CancelledError}). Late outcomes of `work` are absorbed so they never
 * surface as unhandled rejections; the listener is removed on every path.
 */
export function raceAbort<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(cancelledBy(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      work.catch(() => undefined);
      reject(cancelledBy(signal));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** A child signal that aborts with its parent (or on its own); `dispose` unhooks it from the parent. */
export function linkedSignal(parent: AbortSignal | undefined): { readonly controller: AbortController; dispose(): void } {
  const controller = new AbortController();
  if (parent === undefined) return { controller, dispose: () => undefined };
  if (parent.aborted) {
    controller.abort(parent.reason);
    return { controller, dispose: () => undefined };
  }
  const onAbort = (): void => controller.abort(parent.reason);
  parent.addEventListener("abort", onAbort, { once: true });
  return { controller, dispose: () => parent.removeEventListener("abort", onAbort) };
}
