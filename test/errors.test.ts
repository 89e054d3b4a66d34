import { describe, expect, it } from "vitest";
import { LoopctlError } from "../src/index.js";

describe("LoopctlError", () => {
  it("carries a stable code and its subclass name", () => {
    class ExampleError extends LoopctlError {}
    const err = new ExampleError("EXAMPLE", "example failed", { cause: new Error("root") });
    expect(err).toBeInstanceOf(Error);
    expect(err.code).toBe("EXAMPLE");
    expect(err.name).toBe("ExampleError");
    expect((err.cause as Error).message).toBe("root");
  });
});
