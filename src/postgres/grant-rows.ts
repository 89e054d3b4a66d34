import { z } from "zod";
import { Grant } from "../grant/index.js";
import { PostgresRowError } from "./errors.js";

/**
 * A bigint column read as text. Past 2^53 - 1 a JavaScript number no longer tells neighbouring
 * values apart: a version there would read as one already held, and the change it names would
 * never be applied. Only a hand edit gets there (versions count changes), so it is refused.
 */
const VersionSchema = z
  .string()
  .regex(/^\d+$/, "must be a non-negative integer")
  .superRefine((text, ctx) => {
    if (!Number.isSafeInteger(Number(text))) {
      ctx.addIssue({ code: "custom", message: `${text} is past ${Number.MAX_SAFE_INTEGER} (2^53 - 1)` });
    }
  });

/**
 * What a tombstone needs: its id and version. The rest of a revoked row is
 * never read, so a row revoked to repair it (by `clear()`, say) is a
 * tombstone whatever else it holds.
 */
const TombstoneSchema = z.object({ id: z.string(), version: VersionSchema, revoked: z.literal(true) });

/** The columns of a grants row as node-postgres returns them (bigint arrives as text). */
const GrantRowSchema = z.object({
  id: z.string(),
  tool: z.string(),
  verdict: z.enum(["allow", "deny"]),
  args: z.string().nullable(),
  pinned_descriptor: z.string().nullable(),
  created_at_ms: VersionSchema,
  note: z.string().nullable(),
  version: VersionSchema,
  revoked: z.literal(false),
});

function issues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
}

/** A grants row read back: the grant (undefined for a tombstone) at its version. */
export interface GrantRow {
  readonly id: string;
  readonly version: number;
  readonly grant: Grant | undefined;
}

/**
 * Reads a project's head version (`grant_projects.version` as text, `null` for a project with no row yet).
 *
 * @throws {PostgresRowError} naming the table and the project when it is not an integer from 0 to 2^53 - 1.
 */
export function parseHeadVersion(table: string, project: string, raw: unknown): number {
  if (raw === null || raw === undefined) return 0;
  const parsed = VersionSchema.safeParse(raw);
  if (!parsed.success) {
    throw new PostgresRowError(table, project, `version: ${parsed.error.issues.map((i) => i.message).join("; ")}`, {
      cause: parsed.error,
    });
  }
  return Number(parsed.data);
}

/** The columns a grant is written as: `[tool, verdict, args, pinned_descriptor, created_at_ms, note]`. */
export function grantColumns(grant: Grant): unknown[] {
  return [grant.tool, grant.verdict, grant.canonicalArgs, grant.pinnedDescriptor, grant.createdAtMs, grant.note];
}

/**
 * Rebuilds a grant from its row through the ledger record parser, so a row
 * is held to what a ledger file is held to, and checks that the row's id is
 * the id of its rule: a row whose id names another rule would replace or be
 * revoked as that rule. A revoked row is a tombstone: only its id and version
 * are read.
 *
 * @throws {PostgresRowError} naming the table and the row's id.
 */
export function parseGrantRow(table: string, raw: Record<string, unknown>): GrantRow {
  const key = typeof raw["id"] === "string" ? raw["id"] : "<no id>";
  if (raw["revoked"] === true) {
    const tombstone = TombstoneSchema.safeParse(raw);
    if (!tombstone.success) throw new PostgresRowError(table, key, issues(tombstone.error), { cause: tombstone.error });
    return { id: tombstone.data.id, version: Number(tombstone.data.version), grant: undefined };
  }
  const parsed = GrantRowSchema.safeParse(raw);
  if (!parsed.success) throw new PostgresRowError(table, key, issues(parsed.error), { cause: parsed.error });
  const row = parsed.data;
  const version = Number(row.version);
  let args: unknown;
  if (row.args !== null) {
    try {
      args = JSON.parse(row.args) as unknown;
    } catch (error) {
      throw new PostgresRowError(table, key, "args is not JSON text", { cause: error });
    }
  }
  let grant: Grant;
  try {
    grant = Grant.fromJSON({
      id: row.id,
      tool: row.tool,
      verdict: row.verdict === "allow" ? "Allow" : "Deny",
      scope: row.args === null ? "this_tool" : { this_call: { args } },
      pinned_descriptor: row.pinned_descriptor,
      created_at_ms: Number(row.created_at_ms),
      note: row.note,
    });
  } catch (error) {
    throw new PostgresRowError(table, key, error instanceof Error ? error.message : String(error), { cause: error });
  }
  if (grant.id !== row.id) {
    throw new PostgresRowError(table, key, `its tool, verdict and scope make grant id ${grant.id}, not ${row.id}`);
  }
  return { id: row.id, version, grant };
}
