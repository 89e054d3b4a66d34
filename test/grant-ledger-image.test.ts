import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Grant, GrantScope } from "../src/grant/index.js";
import { LedgerImage } from "../src/grant/ledger-image.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);

/** The ledger's bytes as the plain definition gives them. */
function expected(grants: readonly Grant[]): string {
  return `[${grants.map((g) => g.toLedgerText()).join(",")}]`;
}

const grantArb = fc
  .record({
    tool: fc.constantFrom("read", "write_file", "deploy", "é€😀"),
    verdict: fc.constantFrom("allow" as const, "deny" as const),
    args: fc.option(fc.dictionary(fc.string({ maxLength: 4 }), fc.oneof(fc.string(), fc.integer(), fc.boolean()), { maxKeys: 3 }), { nil: undefined }),
  })
  .map(({ tool, verdict, args }) => new Grant(tool, verdict, args === undefined ? GrantScope.thisTool() : GrantScope.thisCall(args)));

/** A save (replace-or-append, as FileGrantStore.save does) or a revoke by position. */
const stepArb = fc.oneof(
  grantArb.map((grant) => ({ type: "save" as const, grant })),
  fc.nat().map((at) => ({ type: "revoke" as const, at })),
);

describe("LedgerImage", () => {
  it("writes from scratch exactly the ledger's definition, empty included", () => {
    expect(LedgerImage.of([]).bytes.toString("utf8")).toBe("[]");
    const grants = [new Grant("a", "allow", GrantScope.thisTool()), new Grant("b", "deny", GrantScope.thisCall({ x: 1 }))];
    expect(LedgerImage.of(grants).bytes.toString("utf8")).toBe(expected(grants));
  });

  it("after any run of saves and revokes, each edit gives the same bytes as writing the ledger from scratch", () => {
    fc.assert(
      fc.property(fc.array(grantArb, { maxLength: 6 }), fc.array(stepArb, { maxLength: 25 }), fc.boolean(), (seed, steps, reuse) => {
        let image = LedgerImage.of(seed);
        // As FileGrantStore does: the buffer of the image edited from is the next edit's spare.
        let spare: Buffer | undefined;
        for (const step of steps) {
          let next: LedgerImage;
          if (step.type === "save") {
            const at = image.grants.findIndex((g) => g.id === step.grant.id);
            next = image.edit(at, step.grant, reuse ? spare : undefined);
          } else {
            if (image.grants.length === 0) continue;
            next = image.edit(step.at % image.grants.length, undefined, reuse ? spare : undefined);
          }
          spare = image.storage;
          image = next;
          expect(image.bytes.toString("utf8")).toBe(expected(image.grants));
          expect(LedgerImage.of(image.grants).bytes.equals(image.bytes)).toBe(true);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it("writes into a spare buffer that is large enough, and never into its own", () => {
    const grants = [new Grant("a", "allow", GrantScope.thisTool()), new Grant("b", "allow", GrantScope.thisTool())];
    const image = LedgerImage.of(grants);
    const spare = Buffer.alloc(4096, 0x78);
    const next = image.edit(0, undefined, spare);
    expect(next.storage).toBe(spare);
    expect(next.bytes.toString("utf8")).toBe(expected([grants[1]!]));
    expect(image.edit(-1, undefined, Buffer.alloc(1)).storage.length).toBeGreaterThan(1);
    expect(() => image.edit(0, undefined, image.storage)).toThrow(RangeError);
  });

  it("refuses to remove a record it does not have", () => {
    const image = LedgerImage.of([new Grant("a", "allow", GrantScope.thisTool())]);
    expect(() => image.edit(1, undefined)).toThrow(RangeError);
    expect(() => image.edit(-2, undefined)).toThrow(RangeError);
  });
});
