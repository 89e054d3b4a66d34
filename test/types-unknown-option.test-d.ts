import { describe, expectTypeOf, it } from "vitest";
import { everyKey, type EveryKey } from "../src/unknown-option.js";

/** Options of two kinds: optional and required. */
interface Options {
  readonly signal?: AbortSignal;
  readonly limit?: number;
  readonly name: string;
}

describe("everyKey: a list of known options checked to name every key of their type", () => {
  it("accepts a list naming every key, in any order, and gives it back as written", () => {
    expectTypeOf(everyKey<Options>()(["name", "signal", "limit"])).toEqualTypeOf<
      readonly ["name", "signal", "limit"]
    >();
  });

  it("refuses a list that leaves a key out, naming it, and one that names a key the type does not have", () => {
    // @ts-expect-error -- `limit` is left out: an option added to the type but not to the list would be refused.
    everyKey<Options>()(["name", "signal"]);
    // @ts-expect-error -- every key is left out.
    everyKey<Options>()([]);
    // @ts-expect-error -- `limits` is no key of Options.
    everyKey<Options>()(["name", "signal", "limit", "limits"]);
    // What the refusal names: the keys left out.
    expectTypeOf<EveryKey<Options, readonly ["name"]>>().toEqualTypeOf<
      readonly ["name"] & { readonly missing: "signal" | "limit" }
    >();
  });
});
