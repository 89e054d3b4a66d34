import { InvalidAskResolutionError } from "./errors.js";
import { AskResolutionSchema } from "./types.js";
import type { AskResolution } from "./types.js";

/**
 * Validates an untrusted resolution and rebuilds it without unknown fields
 * (and without `undefined`-valued optionals, which `exactOptionalPropertyTypes`
 * forbids in an {@link AskResolution}).
 */
export function parseResolution(askId: string, value: unknown): AskResolution {
  if (value !== null && typeof value === "object" && typeof (value as { then?: unknown }).then === "function") {
    throw new InvalidAskResolutionError(askId, "got a Promise; answer with a resolution object");
  }
  const parsed = AskResolutionSchema.safeParse(value);
  if (!parsed.success) {
    throw new InvalidAskResolutionError(askId, parsed.error.message, { cause: parsed.error });
  }
  const data = parsed.data;
  const remember = data.remember === undefined ? {} : { remember: data.remember };
  if (data.type === "approve") return { type: "approve", ...remember };
  return { type: "deny", ...(data.reason === undefined ? {} : { reason: data.reason }), ...remember };
}
