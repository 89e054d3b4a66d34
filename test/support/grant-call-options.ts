import { expect } from "vitest";
import { GrantConfigError } from "../../src/grant/index.js";

/** Call options every grant store and GrantPolicy refuse, with the argument their GrantConfigError names. */
const BAD_CALL_OPTIONS = [
  [null, "options"],
  ["soon", "options"],
  [7, "options"],
  [{ signal: "soon" }, "options.signal"],
  [{ signal: { aborted: true, reason: "stop" } }, "options.signal"],
  [{ signal: { aborted: false } }, "options.signal"],
  [{ signal: Object.create(AbortSignal.prototype) as AbortSignal }, "options.signal"],
] as const;

/** A real AbortSignal that refuses every listener. */
function refusingSignal(): AbortSignal {
  const signal = new AbortController().signal;
  Object.defineProperty(signal, "addEventListener", {
    value: () => {
      throw new Error("this signal takes no listeners");
    },
  });
  return signal;
}

/**
 * Signals that pass for AbortSignals until listened to: a fake that only
 * inherits from AbortSignal with an `aborted` of its own (aborted or not), and
 * a real one whose `addEventListener` throws. A store that listens on its
 * call's signal refuses them too, naming `options.signal`.
 */
export const UNLISTENABLE_SIGNAL_OPTIONS = [
  [{ signal: Object.setPrototypeOf({ aborted: false }, AbortSignal.prototype) as AbortSignal }, "options.signal"],
  [
    {
      signal: Object.setPrototypeOf({ aborted: true, reason: new Error("stop") }, AbortSignal.prototype) as AbortSignal,
    },
    "options.signal",
  ],
  [{ signal: refusingSignal() }, "options.signal"],
] as const;

/**
 * Gives each of the bad call options, and `more` of them, to every call
 * `calls` makes of them (named as its error must name it, e.g.
 * `"FileGrantStore.load"`), and checks each rejects with GrantConfigError
 * naming the option at fault.
 */
export async function expectBadCallOptionsRefused(
  calls: (options: never) => readonly (readonly [string, () => Promise<unknown>])[],
  more: readonly (readonly [unknown, string])[] = [],
): Promise<void> {
  for (const [options, argument] of [...BAD_CALL_OPTIONS, ...more]) {
    for (const [where, call] of calls(options as never)) {
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, `${where} ${JSON.stringify(options)}`).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument });
      expect((error as Error).message.startsWith(`${where}: ${argument} must be `)).toBe(true);
    }
  }
}
