import { randomUUID } from "node:crypto";
import { NIL_UUID } from "../../src/ask/index.js";
import type { PendingAsk } from "../../src/ask/index.js";

const SESSION = "0f8fad5b-d9cb-469f-a165-70867728950e";

/** A valid PendingAsk; `n` keeps ids and call ids distinct and readable. */
export function makeAsk(n: number, overrides: Partial<PendingAsk> = {}): PendingAsk {
  return {
    id: randomUUID(),
    sessionId: SESSION,
    runId: NIL_UUID,
    turn: n,
    callId: `call_${n}`,
    tool: "write_file",
    argsDigest: "0123456789abcdef",
    prompt: `write file #${n}?`,
    ...overrides,
  };
}

/** How many ended asks an `ApprovalChannel` remembers, refusing their ids if they are parked again. */
export const REMEMBERED_ENDINGS = 256;

/**
 * Parks and withdraws as many throwaway asks on `channel` as it remembers
 * endings, so it no longer remembers the asks that ended before: a channel
 * long in use, on which an id that repeats (a seeded id generator started
 * again) can be parked again.
 */
export async function outliveEndings(channel: {
  resolve(ask: PendingAsk, options: { signal: AbortSignal }): Promise<unknown>;
}): Promise<void> {
  for (let n = 0; n < REMEMBERED_ENDINGS; n += 1) {
    const stop = new AbortController();
    const parked = channel.resolve(makeAsk(1_000 + n), { signal: stop.signal });
    stop.abort(new Error("withdrawn"));
    await parked.catch(() => undefined);
  }
}

/** An options argument an untyped caller could pass to `next()` or `ended()`, and the argument it gets wrong. */
export type BadWaitOptions = readonly [label: string, options: unknown, argument: "options" | "options.signal"];

/** A real AbortSignal whose `addEventListener` throws `error`: it passes every check, and listening on it fails. */
export function unlistenableSignal(error = new Error("cannot listen")): AbortSignal {
  const signal = new AbortController().signal;
  Object.defineProperty(signal, "addEventListener", {
    value: () => {
      throw error;
    },
  });
  return signal;
}

/**
 * A real AbortSignal whose `reason` getter throws `error`, and its controller: it passes every check, and
 * aborts as any other, but what it aborted with cannot be read.
 */
export function unreadableReasonSignal(error = new Error("reason unreadable")): {
  readonly controller: AbortController;
  readonly signal: AbortSignal;
} {
  const controller = new AbortController();
  Object.defineProperty(controller.signal, "reason", {
    get: () => {
      throw error;
    },
  });
  return { controller, signal: controller.signal };
}

/** How `next()` or `ended()` of any approver refuses a signal whose `addEventListener` threw `cause`. */
export function unlistenableRefusal(method: "next" | "ended", cause: Error): Record<string, unknown> {
  return {
    code: "ASK_OPTIONS_INVALID",
    method,
    argument: "options.signal",
    message: `Approver.${method}: options.signal cannot be listened to`,
    cause,
  };
}

/** How `next()` or `ended()` of any approver refuses a signal that aborted with a `reason` whose getter threw `cause`. */
export function unreadableReasonRefusal(method: "next" | "ended", cause: Error): Record<string, unknown> {
  return {
    code: "ASK_OPTIONS_INVALID",
    method,
    argument: "options.signal",
    message: `Approver.${method}: options.signal aborted, and its reason could not be read`,
    cause,
  };
}

/** Each is rejected by a call that has to wait (a signal is listened to only then). */
export const BAD_WAIT_OPTIONS: readonly BadWaitOptions[] = [
  ["null as the options", null, "options"],
  ["a string as the options", "soon", "options"],
  ["a plain object as the signal", { signal: {} }, "options.signal"],
  [
    "an object that only inherits from AbortSignal as the signal",
    { signal: Object.create(AbortSignal.prototype) },
    "options.signal",
  ],
  ["a signal that cannot be listened to", { signal: unlistenableSignal() }, "options.signal"],
  // Misspelt, the call would wait on, deaf to the signal meant to stop it.
  ["a misspelt signal", { Signal: new AbortController().signal }, "options"],
  ["a signal in place of its options", new AbortController().signal, "options"],
];

export type Outcome<T> =
  | { readonly state: "pending" }
  | { readonly state: "fulfilled"; readonly value: T }
  | { readonly state: "rejected"; readonly reason: unknown };

/** Observes a promise without awaiting it; `settlements` counts callbacks run. */
export interface Tracked<T> {
  readonly outcome: Outcome<T>;
  readonly settlements: number;
}

export function track<T>(promise: Promise<T>): Tracked<T> {
  const tracked = { outcome: { state: "pending" } as Outcome<T>, settlements: 0 };
  promise.then(
    (value) => {
      tracked.settlements += 1;
      tracked.outcome = { state: "fulfilled", value };
    },
    (reason: unknown) => {
      tracked.settlements += 1;
      tracked.outcome = { state: "rejected", reason };
    },
  );
  return tracked;
}

/**
 * How `promise` stands once every reaction queued by now has run (one
 * macrotask turn): `track(promise).outcome` read at once is always pending,
 * whatever the promise did.
 */
export async function outcomeNow<T>(promise: Promise<T>): Promise<Outcome<T>> {
  const tracked = track(promise);
  await flush();
  return tracked.outcome;
}

/** Lets every queued promise reaction run (one macrotask turn), no wall clock involved. */
export function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** A controller whose signal throws from `removeEventListener`: a waiter on it must still settle, and let others settle. */
export function stuckController(): AbortController {
  const controller = new AbortController();
  Object.defineProperty(controller.signal, "removeEventListener", {
    value: () => {
      throw new Error("cannot remove");
    },
  });
  return controller;
}
