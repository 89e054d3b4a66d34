import { z } from "zod";
import { AskResolutionSchema, PendingAskSchema } from "../ask/index.js";
import type { AskResolution, PendingAsk } from "../ask/index.js";
import type { AskEnding } from "../ask/index.js";
import { PostgresRowError } from "./errors.js";

/** Ids are UUIDs; anything else cannot name a row of the asks table. */
export const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

const EndRowSchema = z.discriminatedUnion("state", [
  z.object({ id: z.string(), state: z.literal("pending") }),
  z.object({ id: z.string(), state: z.literal("answered"), resolution: z.unknown() }),
  z.object({
    id: z.string(),
    state: z.literal("withdrawn"),
    reason: z.enum(["expired", "cancelled", "closed", "abandoned"]),
  }),
]);

/**
 * A stored answer: loopctl writes only the fields of an {@link AskResolution}
 * (see `parseAnswer`), so a row holding any other field was written by
 * something else and is malformed, never an answer with the extras dropped.
 */
const StoredResolutionSchema = z.discriminatedUnion("type", [
  AskResolutionSchema.options[0].strict(),
  AskResolutionSchema.options[1].strict(),
]);

/** A stored ask: the worker writes the parsed ask, so nothing else is in it. */
const StoredAskSchema = PendingAskSchema.strict();

/** What a row says about how its ask ended, as the worker and the consoles read it. */
export type RowEnding =
  | { readonly type: "pending" }
  | { readonly type: "answered"; readonly resolution: AskResolution }
  | { readonly type: "withdrawn"; readonly reason: "expired" | "cancelled" | "closed" | "abandoned" };

function issues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.length === 0 ? "" : `${i.path.join(".")}: `}${i.message}`).join("; ");
}

/**
 * Reads the state columns (`id, state, resolution, reason`) of an asks row.
 *
 * @throws {PostgresRowError} when the state is unknown or an answer is not an
 *   {@link AskResolution} (fields it does not have included): nothing read
 *   from such a row is ever an approval.
 */
export function parseEndRow(table: string, raw: Record<string, unknown>): RowEnding {
  const key = typeof raw["id"] === "string" ? raw["id"] : "<no id>";
  const parsed = EndRowSchema.safeParse(raw);
  if (!parsed.success) throw new PostgresRowError(table, key, issues(parsed.error), { cause: parsed.error });
  const row = parsed.data;
  switch (row.state) {
    case "pending":
      return { type: "pending" };
    case "withdrawn":
      return { type: "withdrawn", reason: row.reason };
    case "answered": {
      const resolution = StoredResolutionSchema.safeParse(row.resolution);
      if (!resolution.success) {
        throw new PostgresRowError(table, key, `the answer is not a resolution: ${issues(resolution.error)}`, {
          cause: resolution.error,
        });
      }
      return { type: "answered", resolution: resolution.data as AskResolution };
    }
    default:
      return assertNever(row);
  }
}

/** The ending a console is told about. */
export function askEnding(ending: Exclude<RowEnding, { type: "pending" }>): AskEnding {
  return ending.type === "answered"
    ? { type: "answered", verdict: ending.resolution.type }
    : { type: "withdrawn", reason: ending.reason };
}

/**
 * Reads the `id, ask` columns of a pending row into the ask a console shows.
 *
 * @throws {PostgresRowError} when the ask is not a pending ask (fields it does
 *   not have included), or is the ask of another id.
 */
export function parseAskRow(table: string, raw: Record<string, unknown>): PendingAsk {
  const key = typeof raw["id"] === "string" ? raw["id"] : "<no id>";
  const parsed = StoredAskSchema.safeParse(raw["ask"]);
  if (!parsed.success) {
    throw new PostgresRowError(table, key, `not a pending ask: ${issues(parsed.error)}`, { cause: parsed.error });
  }
  if (parsed.data.id.toLowerCase() !== key.toLowerCase()) {
    throw new PostgresRowError(table, key, `it holds the ask ${parsed.data.id}`);
  }
  return parsed.data;
}

export function assertNever(value: never): never {
  throw new TypeError(`unexpected value ${JSON.stringify(value)}`);
}
