import { isProxy } from "node:util/types";
import { zodIssuesLine } from "../zod-issues.js";
import { InvalidPendingAskError } from "./errors.js";
import { DIGEST16, PendingAskSchema, SHA256, UUID } from "./types.js";
import type { PendingAsk } from "./types.js";

/**
 * True for a plain object that {@link PendingAskSchema} accepts exactly as it
 * is: every field valid and no field the schema would drop. It never accepts
 * what the schema rejects; anything it turns down, the schema judges. It
 * reads each field once and skips the schema's cost on every ask the engine
 * makes.
 */
function isPlainPendingAsk(value: unknown): value is PendingAsk {
  if (typeof value !== "object" || value === null || isProxy(value)) return false;
  if (Object.getPrototypeOf(value) !== Object.prototype) return false;
  const { id, sessionId, runId, turn, callId, tool, argsDigest, argsSha256, prompt } = value as Record<string, unknown>;
  if (typeof id !== "string" || typeof sessionId !== "string" || typeof runId !== "string") return false;
  if (typeof turn !== "number" || !Number.isSafeInteger(turn) || turn < 0) return false;
  if (typeof callId !== "string" || typeof prompt !== "string" || typeof tool !== "string" || tool === "") return false;
  if (typeof argsDigest !== "string" || !DIGEST16.test(argsDigest)) return false;
  if (argsSha256 !== undefined && (typeof argsSha256 !== "string" || !SHA256.test(argsSha256))) return false;
  if (!UUID.test(id) || !UUID.test(sessionId) || !UUID.test(runId)) return false;
  let fields = 0;
  for (const _ in value) fields += 1;
  // An `argsSha256: undefined` counts as a field here, so the schema judges that rare shape.
  return fields === (argsSha256 === undefined ? 8 : 9);
}

/**
 * Checks an ask from an untyped caller against {@link PendingAskSchema}. A
 * plain, valid ask is returned as it is; anything else is returned as the
 * schema parses it (a fresh object without unknown fields, each getter read
 * once).
 *
 * @throws {InvalidPendingAskError} naming the fields at fault, or with the
 * thrown error as `cause` when the ask cannot be read.
 */
export function parsePendingAsk(value: unknown): PendingAsk {
  let parsed: ReturnType<typeof PendingAskSchema.safeParse>;
  try {
    if (isPlainPendingAsk(value)) return value;
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
