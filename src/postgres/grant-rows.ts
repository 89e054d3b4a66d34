import { z } from "zod";
import { Grant } from "../grant/index.js";
import { PostgresRowError } from "./errors.js";

/** The columns of a grants row as node-postgres returns them (bigint arrives as text). */
const GrantRowSchema = z.object({
  id: z.string(),
  tool: z.string(),
  verdict: z.enum(["allow", "deny"]),
  args: z.string().nullable(),
  pinned_descriptor: z.string().nullable(),
  created_at_ms: z.string().regex(/^\d+$/, "must be a non-negative integer"),
  note: z.string().nullable(),
  version: z.string().regex(/^\d+$/, "must be a non-negative integer"),
  revoked: z.boolean(),
});

/** A grants row read back: the grant (undefined for a tombstone) at its version. */
export interface GrantRow {
  readonly id: string;
  readonly version: number;
  readonly grant: Grant | undefined;
}

/** The columns a grant is written as: `[tool, verdict, args, pinned_descriptor, created_at_ms, note]`. */
export function grantColumns(grant: Grant): unknown[] {
  return [grant.tool, grant.verdict, grant.canonicalArgs, grant.pinnedDescriptor, grant.createdAtMs, grant.note];
}

/**
 * Rebuilds a grant from its row through the ledger record parser, so a row
 * is held to what a ledger file is held to, and checks that the row's id is
 * the id of its rule: a row whose id names another rule would replace or be
 * revoked as that rule.
 *
 * @throws {PostgresRowError} naming the table and the row's id.
 */
export function parseGrantRow(table: string, raw: Record<string, unknown>): GrantRow {
  const key = typeof raw["id"] === "string" ? raw["id"] : "<no id>";
  const parsed = GrantRowSchema.safeParse(raw);
  if (!parsed.success) {
    throw new PostgresRowError(
      table,
      key,
      parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "),
      {
        cause: parsed.error,
      },
    );
  }
  const row = parsed.data;
  const version = Number(row.version);
  if (row.revoked) return { id: row.id, version, grant: undefined };
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
