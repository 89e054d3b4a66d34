import { InvalidAskResolutionError } from "./errors.js";
import { AskResolutionSchema } from "./types.js";
import type { AskResolution } from "./types.js";

/**
 * Validates an untrusted resolution and rebuilds it without unknown fields
 * (and without `undefined`-valued optionals, which `exactOptionalPropertyTypes`
 * forbids in an {@link AskResolution}).
 */
export function parseResolution(askId: string, value: unknown): AskResolution {
  let parsed: ReturnType<typeof AskResolutionSchema.safeParse>;
  try {
    if (value !== null && typeof value === "object" && typeof (value as { then?: unknown }).then === "function") {
      throw new InvalidAskResolutionError(askId, "got a Promise; answer with a resolution object");
    }
    parsed = AskResolutionSchema.safeParse(value);
  } catch (error) {
    if (error instanceof InvalidAskResolutionError) throw error;
    // A proxy or a throwing getter: still the caller's invalid resolution, not a crash.
    throw new InvalidAskResolutionError(askId, "the resolution could not be read", { cause: error });
  }
  if (!parsed.success) {
    throw new InvalidAskResolutionError(askId, parsed.error.message, { cause: parsed.error });
  }
  const data = parsed.data;
  const remember = data.remember === undefined ? {} : { remember: data.remember };
  if (data.type === "approve") return { type: "approve", ...remember };
  return { type: "deny", ...(data.reason === undefined ? {} : { reason: data.reason }), ...remember };
}
