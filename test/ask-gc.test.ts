import { describe, expect, it } from "vitest";
import { APPROVER_DROPPED_REASON } from "../src/ask/index.js";
import { gcChildResult } from "./support/child-process.js";

describe("an approver dropped without close()", () => {
  it("does not leave its asks parked: once collected, the park settles as a denial and ended() says abandoned", async () => {
    expect(await gcChildResult("test/support/ask-gc-child.ts")).toEqual({
      state: "fulfilled",
      value: { type: "deny", reason: APPROVER_DROPPED_REASON },
      ending: { type: "withdrawn", reason: "abandoned" },
    });
  });

  it("a for await loop over it that cannot answer does not keep it: once collected, the loop ends and its asks are denied", async () => {
    expect(await gcChildResult("test/fixtures/ask-iterator-gc-child.ts")).toEqual({
      state: "fulfilled",
      value: { type: "deny", reason: APPROVER_DROPPED_REASON },
      shown: 1,
      loopEnded: true,
    });
  });
});
