import type { IncomingMessage, ServerResponse } from "node:http";
import { onClose } from "./socket-close.js";

/** How a call the handler made for a request (to the grant store, the record source) ended, for that request. */
export type BoundedOutcome<T> =
  | { readonly type: "answered"; readonly value: T }
  | { readonly type: "failed"; readonly error: unknown }
  /** It had not settled within the bound; its signal was aborted with `reason`. */
  | { readonly type: "late"; readonly reason: Error }
  /** The request's client went first; its signal was aborted. */
  | { readonly type: "gone" };

/**
 * Runs `call` for the request `res` answers, with a signal that aborts when
 * `timeoutMs` passes or the client goes (its connection closes before the
 * reply is written), and stops waiting for it then: a source that never
 * settles (a stalled network filesystem, a database that swallows packets)
 * must not hold the request, and its connection, for ever. `late` names
 * `what` did not answer in time.
 */
export async function boundedCall<T>(
  res: ServerResponse,
  what: string,
  timeoutMs: number,
  call: (signal: AbortSignal) => T | PromiseLike<T>,
): Promise<BoundedOutcome<T>> {
  const controller = new AbortController();
  const signal = controller.signal;
  let stop: (outcome: BoundedOutcome<T>) => void = () => undefined;
  const stopped = new Promise<BoundedOutcome<T>>((resolve) => (stop = resolve));
  const gone = (): void => {
    if (res.writableFinished) return;
    // Said before the abort, which a call may answer at once by rejecting: it is the cause, not the failure.
    stop({ type: "gone" });
    controller.abort(new DOMException("the client closed the connection before the reply", "AbortError"));
  };
  // A pipelined request's reply, queued behind another, has no socket yet and hears nothing of its close.
  const socket = (res.req as IncomingMessage | undefined)?.socket ?? null;
  if (res.destroyed || res.socket?.destroyed === true || socket?.destroyed === true) return { type: "gone" };
  res.once("close", gone);
  const unwatch = socket === null ? undefined : onClose(socket, gone);
  // Unref'd: while the client waits, its connection keeps the process alive; once it went, nothing should.
  const timer = setTimeout(() => {
    const reason = new DOMException(`${what} did not answer within ${timeoutMs} ms`, "TimeoutError");
    stop({ type: "late", reason });
    controller.abort(reason);
  }, timeoutMs);
  timer.unref();
  try {
    const answered = (async (): Promise<BoundedOutcome<T>> => {
      try {
        return { type: "answered", value: await call(signal) };
      } catch (error) {
        return { type: "failed", error };
      }
    })();
    return await Promise.race([answered, stopped]);
  } finally {
    clearTimeout(timer);
    res.off("close", gone);
    unwatch?.();
  }
}
