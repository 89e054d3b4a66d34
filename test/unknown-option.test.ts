import { describe, expect, it } from "vitest";
import { optionsProblem } from "../src/unknown-option.js";

const KNOWN = ["signal", "limit"] as const;

describe("optionsProblem: what is wrong with a value given as an object of options", () => {
  it("finds nothing wrong with an object of known options, some or none of them", () => {
    expect(optionsProblem({ signal: new AbortController().signal, limit: 3 }, KNOWN)).toBeUndefined();
    expect(optionsProblem({}, KNOWN)).toBeUndefined();
    expect(optionsProblem(Object.create(null), KNOWN)).toBeUndefined();
    // Only its own keys are options: what its class gives it is not.
    expect(
      optionsProblem(
        new (class {
          limit = 1;
        })(),
        KNOWN,
      ),
    ).toBeUndefined();
  });

  it("refuses what is not an object, naming what it got and what it must be", () => {
    for (const [value, got] of [
      [null, "null"],
      [undefined, "undefined"],
      [5, "5"],
      ["fast", "a string"],
      [true, "true"],
      [() => undefined, "a function"],
      [[], "an array"],
      [[{ limit: 3 }], "an array"],
    ] as const) {
      expect(optionsProblem(value, KNOWN), got).toEqual({ key: undefined, problem: `must be an object, got ${got}` });
    }
    // A string where options go may be a connection string or a key given in the wrong place: never shown.
    const secret = "postgres://app:hunter2@db.internal/prod";
    expect(JSON.stringify(optionsProblem(secret, KNOWN))).not.toContain("hunter2");
    expect(optionsProblem(null, KNOWN, { shape: "an object: { signal?, limit? }" })).toEqual({
      key: undefined,
      problem: "must be an object: { signal?, limit? }, got null",
    });
  });

  it("refuses an AbortSignal given bare, saying how to give it where the options take a signal", () => {
    const signal = new AbortController().signal;
    expect(optionsProblem(signal, KNOWN)).toEqual({
      key: undefined,
      problem: "must be an object, got an AbortSignal (give it as { signal })",
    });
    // Where no option is a signal, it is named, and the caller says where it goes, if anywhere.
    expect(optionsProblem(signal, ["limit"])).toEqual({
      key: undefined,
      problem: "must be an object, got an AbortSignal",
    });
    expect(optionsProblem(signal, ["limit"], { signal: "a signal is given to each call: { signal }" })).toEqual({
      key: undefined,
      problem: "must be an object, got an AbortSignal (a signal is given to each call: { signal })",
    });
  });

  it("refuses an object whose keys cannot be listed, with what listing them threw", () => {
    const thrown = new Error("revoked");
    const listing = new Proxy(
      {},
      {
        ownKeys: () => {
          throw thrown;
        },
      },
    );
    expect(optionsProblem(listing, KNOWN)).toEqual({
      key: undefined,
      problem: "cannot be read: revoked",
      cause: thrown,
    });
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const revoked = optionsProblem(proxy, KNOWN);
    expect(revoked).toMatchObject({ key: undefined, problem: expect.stringMatching(/^cannot be read: .*revoked/) });
    expect(revoked?.cause).toBeInstanceOf(TypeError);
  });

  it("refuses the first key none of the options, naming the one meant, else the caller's hint, else the list", () => {
    expect(optionsProblem({ limit: 1, sginal: undefined }, KNOWN)).toEqual({
      key: "sginal",
      problem: "unknown option 'sginal' (did you mean signal?)",
    });
    expect(optionsProblem({ colour: "red" }, KNOWN)).toEqual({
      key: "colour",
      problem: "unknown option 'colour' (the options are signal and limit)",
    });
    const hint = (key: string): string | undefined => (key === "maxTurns" ? "caps go in withBudget" : undefined);
    expect(optionsProblem({ maxTurns: 5 }, KNOWN, { hint })).toEqual({
      key: "maxTurns",
      problem: "unknown option 'maxTurns' (caps go in withBudget)",
    });
    // A near option is named before the hint: the key was most likely that option misspelt.
    expect(optionsProblem({ limits: 5 }, KNOWN, { hint: () => "never said" })).toEqual({
      key: "limits",
      problem: "unknown option 'limits' (did you mean limit?)",
    });
    expect(optionsProblem({ "a'b": 1 }, KNOWN)?.problem).toBe(
      `unknown option "a'b" (the options are signal and limit)`,
    );
  });

  it("never reads an option's value: a getter that throws is left to the caller's read", () => {
    const options = {
      get limit(): number {
        throw new Error("read");
      },
    };
    expect(optionsProblem(options, KNOWN)).toBeUndefined();
  });
});
