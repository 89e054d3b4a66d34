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

/**
 * Gives each of the bad call options to every call `calls` makes of them
 * (named as its error must name it, e.g. `"FileGrantStore.load"`), and
 * checks each rejects with GrantConfigError naming the option at fault.
 */
export async function expectBadCallOptionsRefused(
  calls: (options: never) => readonly (readonly [string, () => Promise<unknown>])[],
): Promise<void> {
  for (const [options, argument] of BAD_CALL_OPTIONS) {
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
