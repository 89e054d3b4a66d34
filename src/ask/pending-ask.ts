import { zodIssuesLine } from "../zod-issues.js";
import { InvalidPendingAskError } from "./errors.js";
import { PendingAskSchema } from "./types.js";
import type { PendingAsk } from "./types.js";

/**
 * Checks an ask from an untyped caller against {@link PendingAskSchema} and
 * returns it as the schema parses it: a fresh object without unknown fields,
 * each getter read once.
 *
 * @throws {InvalidPendingAskError} naming the fields at fault, or with the
 * thrown error as `cause` when the ask cannot be read.
 */
export function parsePendingAsk(value: unknown): PendingAsk {
  let parsed: ReturnType<typeof PendingAskSchema.safeParse>;
  try {
    parsed = PendingAskSchema.safeParse(value);
  } catch (error) {
    // A throwing getter or proxy trap: still the caller's invalid ask, not a crash.
    throw new InvalidPendingAskError("the ask could not be read", { cause: error });
  }
  if (!parsed.success) {
    throw new InvalidPendingAskError(`the ask is not a PendingAsk: ${zodIssuesLine(parsed.error)}`, {
      cause: parsed.error,
    });
  }
  return parsed.data;
}
