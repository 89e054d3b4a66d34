import { expect } from "vitest";
import { isAbortSignal } from "../../src/abort-signal.js";
import { Grant, GrantConfigError, GrantScope } from "../../src/grant/index.js";
import type { GrantStore } from "../../src/grant/index.js";

/** A real AbortSignal whose `method` throws, aborted when `reason` is given. */
function refusingSignal(method: "addEventListener" | "removeEventListener", reason?: Error): AbortSignal {
  const controller = new AbortController();
  if (reason !== undefined) controller.abort(reason);
  Object.defineProperty(controller.signal, method, {
    value: () => {
      throw new Error(`this signal refuses ${method}`);
    },
  });
  return controller.signal;
}

/**
 * Call options every grant store and GrantPolicy refuse, with the argument
 * their GrantConfigError names: options that are not an object, a signal
 * that is not an AbortSignal, and signals that pass for AbortSignals until
 * listened to (a fake that only inherits from AbortSignal with an `aborted`
 * of its own, a real one whose `addEventListener` or `removeEventListener`
 * throws), aborted or not: what is wrong with the options comes before an
 * abort.
 */
const BAD_CALL_OPTIONS = [
  [null, "options"],
  ["soon", "options"],
  [7, "options"],
  [{ signal: "soon" }, "options.signal"],
  [{ signal: { aborted: true, reason: "stop" } }, "options.signal"],
  [{ signal: { aborted: false } }, "options.signal"],
  [{ signal: Object.create(AbortSignal.prototype) as AbortSignal }, "options.signal"],
  [{ signal: Object.setPrototypeOf({ aborted: false }, AbortSignal.prototype) as AbortSignal }, "options.signal"],
  [
    {
      signal: Object.setPrototypeOf({ aborted: true, reason: new Error("stop") }, AbortSignal.prototype) as AbortSignal,
    },
    "options.signal",
  ],
  [{ signal: refusingSignal("addEventListener") }, "options.signal"],
  [{ signal: refusingSignal("addEventListener", new Error("stop")) }, "options.signal"],
  [{ signal: refusingSignal("removeEventListener") }, "options.signal"],
  // A bare signal has no `signal` of its own, and a misspelt key is never read: either way the call is deaf to its cancel.
  [new AbortController().signal, "options"],
  [AbortSignal.abort(new Error("stop")), "options"],
  [{ sginal: new AbortController().signal }, "options"],
  [{ signal: undefined, timeoutMs: 5 }, "options"],
] as const;

/**
 * Gives each of the bad call options to every call `calls` makes of them
 * (named as its error must name it, e.g. `"FileGrantStore.load"`), and checks
 * each rejects with GrantConfigError naming the option at fault.
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
      const message = (error as Error).message;
      if (isAbortSignal(options)) {
        expect(message).toBe(
          `${where}: options must be an object or undefined, got an AbortSignal (give it as { signal })`,
        );
      } else if (
        typeof options === "object" &&
        options !== null &&
        Object.keys(options).some((key) => key !== "signal")
      ) {
        expect(message).toMatch(new RegExp(`^${where}: options holds an unknown option '(sginal|timeoutMs)' \\(`));
        if ("sginal" in options) expect(message).toContain("(did you mean signal?)");
      } else {
        expect(message.startsWith(`${where}: ${argument} must be `)).toBe(true);
      }
    }
  }
}

/** Things that are not a Grant, named, and ids that name no grant any store can hold. */
const NOT_GRANTS = [
  ["null", null],
  ["undefined", undefined],
  ["an empty object", {}],
  ["a grant record", new Grant("read", "allow", GrantScope.thisTool()).toJSON()],
] as const;
const NOT_IDS = [null, undefined, 7, "", "\u0000", "\ud800"];

/**
 * Calls every method of `store` with an aborted signal and arguments it
 * would refuse or find nothing for (something that is not a Grant to save,
 * an id that is not one to revoke), and checks each rejects with the
 * signal's reason, before anything else is checked, and that nothing changed.
 * `more` adds calls of the same kind (a policy over the store, a store's own
 * methods), each given the aborted signal.
 */
export async function expectAbortedSignalFirst(
  store: GrantStore,
  more: (signal: AbortSignal) => readonly (readonly [string, () => Promise<unknown>])[] = () => [],
): Promise<void> {
  const before = (await store.load()).map((grant) => grant.id);
  const reason = new Error("stopped");
  const signal = AbortSignal.abort(reason);
  const calls: (readonly [string, () => Promise<unknown>])[] = [
    ["load", () => store.load({ signal })],
    ["clear", () => store.clear({ signal })],
  ];
  for (const [name, grant] of NOT_GRANTS) calls.push([`save of ${name}`, () => store.save(grant as never, { signal })]);
  for (const id of NOT_IDS) calls.push([`revoke ${JSON.stringify(id)}`, () => store.revoke(id as never, { signal })]);
  if (store.covering !== undefined) {
    const covering = store.covering.bind(store);
    calls.push(["covering", () => covering(7 as never, null as never, { signal })]);
  }
  calls.push(...more(signal));
  for (const [what, call] of calls) {
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error, what).toBe(reason);
  }
  expect((await store.load()).map((grant) => grant.id)).toEqual(before);
}
