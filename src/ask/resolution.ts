import { isProxy } from "node:util/types";
import { InvalidAskResolutionError } from "./errors.js";
import { AskResolutionSchema } from "./types.js";
import type { AskResolution } from "./types.js";
import { zodIssuesLine } from "../zod-issues.js";

/**
 * The two constant answers, `{ type: "approve" }` and `{ type: "deny" }`
 * (a plain object with that one key), as fresh resolutions; `undefined` for
 * anything else, which the schema then judges. Both are exactly what the
 * schema would give for them, without its cost on every answer.
 */
export function constantResolution(value: unknown): AskResolution | undefined {
  if (typeof value !== "object" || value === null || isProxy(value)) return undefined;
  if (Object.getPrototypeOf(value) !== Object.prototype) return undefined;
  const keys = Object.keys(value);
  if (keys.length !== 1 || keys[0] !== "type") return undefined;
  const type = (value as { type?: unknown }).type;
  if (type === "approve") return { type: "approve" };
  if (type === "deny") return { type: "deny" };
  return undefined;
}

/**
 * Validates an untrusted resolution and rebuilds it without unknown fields
 * (and without `undefined`-valued optionals, which `exactOptionalPropertyTypes`
 * forbids in an {@link AskResolution}).
 */
export function parseResolution(askId: string, value: unknown): AskResolution {
  let parsed: ReturnType<typeof AskResolutionSchema.safeParse>;
  try {
    if (value !== null && typeof value === "object" && typeof (value as { then?: unknown }).then === "function") {
      // The caller broke the contract by going async; keep its eventual rejection from surfacing as an unhandled one.
      (value as PromiseLike<unknown>).then(undefined, () => undefined);
      throw new InvalidAskResolutionError(askId, "got a Promise; answer with a resolution object");
    }
    const constant = constantResolution(value);
    if (constant !== undefined) return constant;
    parsed = AskResolutionSchema.safeParse(value);
  } catch (error) {
    if (error instanceof InvalidAskResolutionError) throw error;
    // A proxy or a throwing getter: still the caller's invalid resolution, not a crash.
    throw new InvalidAskResolutionError(askId, "the resolution could not be read", { cause: error });
  }
  if (!parsed.success) {
    throw new InvalidAskResolutionError(askId, zodIssuesLine(parsed.error), { cause: parsed.error });
  }
  const data = parsed.data;
  const remember = data.remember === undefined ? {} : { remember: data.remember };
  if (data.type === "approve") return { type: "approve", ...remember };
  return { type: "deny", ...(data.reason === undefined ? {} : { reason: data.reason }), ...remember };
}
