import { constants } from "node:fs";
import { lstat, open } from "node:fs/promises";
import {
  argsDigest,
  CanonicalJsonError,
  descriptorDigest,
  descriptorFingerprint,
  FileGrantStore,
  Grant,
  GrantPolicy,
} from "../grant/index.js";
import type { GrantDecision, GrantStore, PinStatus, ToolDescriptor } from "../grant/index.js";
import { asksForJson, CliUsageError, EXIT, parseCommandArgs } from "./context.js";
import type { CliContext, ExitCode } from "./context.js";
import { clip, json, printable, table, timestamp } from "./format.js";
import { errorDocument } from "./failure.js";
import { closeOrWarn, openFileStore, openStore, STORE_OPTIONS } from "./grant-source.js";
import type { OpenedStore } from "./grant-source.js";
import { printHelp } from "./help.js";
import { shownBare } from "../unknown-option.js";
import { shownText } from "../shown.js";
import { shownValue } from "../errors.js";

const LOCATION_OPTIONS = STORE_OPTIONS;

const GRANT_ID = /^[0-9a-f]{16}$/;

/**
 * Runs `work` on the store the options name and closes it after; says where
 * the grants live. See {@link useStore}.
 */
async function withStore<T>(
  command: string,
  values: Parameters<typeof openStore>[1],
  context: CliContext,
  work: (store: GrantStore) => Promise<T>,
  asJson = false,
  warnNearProjects = true,
): Promise<{ location: string; value: T }> {
  return useStore(await openStore(command, values, context), context, work, asJson, warnNearProjects);
}

/**
 * Runs `work` on the opened store and closes it after; says where the grants
 * live. With `--database`, then warns (unless `warnNearProjects` is false)
 * of projects whose names differ from `--project` only in case or
 * surrounding spaces, when `--project` never held a grant. With `asJson`, a
 * failure of `work` (grants that cannot be read, an unexpected error) is
 * reported on stdout too, as `{"ledger", "error", "message", "hint"?}`, so
 * a script always has a document to parse; stderr and the exit code (3, 4 or
 * 5) say it as they do without `--json`. A store that fails to close (a
 * database pool) is one warning line on stderr: the work is done by then,
 * its changes made and its result or its own error the one to report.
 */
export async function useStore<T>(
  opened: OpenedStore,
  context: CliContext,
  work: (store: GrantStore) => Promise<T>,
  asJson = false,
  warnNearProjects = true,
): Promise<{ location: string; value: T }> {
  try {
    const value = await work(opened.store);
    if (warnNearProjects && opened.nearProjectsWarning !== undefined) {
      // Only a hint: the command's work is done and reported whatever it finds.
      const warning = await opened.nearProjectsWarning().catch(() => undefined);
      if (warning !== undefined) context.stderr.write(`loopctl: warning: ${printable(warning)}\n`);
    }
    return { location: opened.location, value };
  } catch (error) {
    // A usage error found while at work (--args that have no canonical form) is said as one.
    if (asJson && !(error instanceof CliUsageError)) {
      context.stdout.write(json({ ledger: opened.location, ...errorDocument(error, context.signal) }));
    }
    throw error;
  } finally {
    await closeOrWarn(opened, context);
  }
}

function noPositionals(command: string, positionals: readonly string[]): void {
  if (positionals.length > 0) {
    throw new CliUsageError(command, `unexpected argument ${shownValue(positionals[0])}`);
  }
}

/** How a grant's scope reads in a table: `this_tool`, or `this_call <canonical args>`. */
export function scopeText(grant: Grant, max = 48): string {
  return grant.scope.type === "this_tool" ? "this_tool" : `this_call ${clip(grant.canonicalArgs ?? "", max)}`;
}

/** One line naming a grant for people. */
export function grantSummary(grant: Grant): string {
  return `${grant.id} (${grant.verdict} ${printable(shownBare(grant.tool))}, ${printable(scopeText(grant, 80))})`;
}

/**
 * For a ledger file, one sentence per record whose stored `id` is not the id
 * of its tool, verdict and scope (edited by hand, the id kept; or written by
 * another implementation spelling a number otherwise): grants are known by
 * their content's id, which list shows and revoke takes, so the id the file
 * holds is named beside it. Read again after the store read the ledger; only
 * a hint, so none when it cannot be read.
 */
async function staleIds(store: GrantStore): Promise<Array<{ readonly stored: string; readonly said: string }>> {
  if (!(store instanceof FileGrantStore)) return [];
  const path = store.ledgerPath;
  let records: unknown;
  try {
    // The file may have been swapped since the store read it: a FIFO must not leave the command waiting.
    const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      if (!(await handle.stat()).isFile()) return [];
      // Decoded as the store decodes it: a byte-order mark at its head is not part of the JSON.
      records = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(await handle.readFile()));
    } finally {
      await handle.close();
    }
  } catch {
    return [];
  }
  if (!Array.isArray(records)) return [];
  const found: Array<{ stored: string; said: string }> = [];
  records.forEach((record: unknown, i) => {
    const stored = (record as { id?: unknown } | null)?.id;
    if (typeof stored !== "string") return;
    let grant: Grant;
    try {
      grant = Grant.fromJSON(record);
    } catch {
      return;
    }
    if (grant.id === stored) return;
    found.push({
      stored,
      said:
        `record ${i} of ${printable(path)} holds id ${printable(shownText(stored).slice(1, -1))}, but its tool, ` +
        `verdict and scope (${grant.verdict} ${printable(shownBare(grant.tool))}, ${printable(scopeText(grant, 80))}) ` +
        `are grant ${grant.id}: it is listed, decided and revoked as ${grant.id}`,
    });
  });
  return found;
}

/** `loopctl grants list [--project DIR] [--root DIR] [--json]`. */
async function list(args: readonly string[], context: CliContext): Promise<ExitCode> {
  const { values, positionals } = parseCommandArgs(
    "grants list",
    args,
    { ...LOCATION_OPTIONS, json: { type: "boolean", default: false } },
    {
      tool:
        "list shows the grants of every tool: 'loopctl grants explain --tool NAME --args JSON' shows those " +
        "that decide one call of a tool, 'loopctl grants reset --tool NAME' removes one tool's",
    },
  );
  if (values.help) return printHelp("grants list", context, values.json);
  noPositionals("grants list", positionals);
  const { location, value } = await withStore(
    "grants list",
    values,
    context,
    async (store) => ({
      grants: await store.load(),
      stale: await staleIds(store),
      readable: await readableLedger(store),
    }),
    values.json,
  );
  const { grants, stale, readable } = value;
  for (const { said } of stale) context.stderr.write(`loopctl: warning: ${said}\n`);
  if (readable !== undefined) context.stderr.write(`loopctl: warning: ${printable(readable)}\n`);
  if (values.json) {
    context.stdout.write(json({ ledger: location, grants: grants.map((g) => g.toJSON()) }));
    return EXIT.ok;
  }
  context.stdout.write(`ledger: ${printable(location)}\n`);
  if (grants.length === 0) {
    context.stdout.write("no grants: every gated call is asked about\n");
    return EXIT.ok;
  }
  context.stdout.write(
    table(
      ["ID", "TOOL", "VERDICT", "SCOPE", "PINNED", "CREATED", "NOTE"],
      grants.map((g) => [
        g.id,
        g.tool,
        g.verdict,
        scopeText(g),
        g.pinnedDescriptor === null ? "-" : clip(g.pinnedDescriptor, 20),
        timestamp(g.createdAtMs),
        g.note ?? "-",
      ]),
    ),
  );
  context.stdout.write(`${grants.length} grant${grants.length === 1 ? "" : "s"}\n`);
  return EXIT.ok;
}

/**
 * For a ledger file others may read (copied in by hand as `0644`), what to
 * say of it: its grants tell anyone on the machine what the project's agent
 * may do unasked. Read after the store read the ledger (which refused one
 * others may write); only a hint, so none when it cannot be read. The mode is
 * left as it is: a read never changes one, and the next change writes the
 * ledger owner-only.
 */
async function readableLedger(store: GrantStore): Promise<string | undefined> {
  if (!(store instanceof FileGrantStore) || process.platform === "win32") return undefined;
  const path = store.ledgerPath;
  let mode: number;
  try {
    const found = await lstat(path);
    if (!found.isFile()) return undefined;
    mode = found.mode & 0o777;
  } catch {
    return undefined;
  }
  if ((mode & 0o077) === 0) return undefined;
  const octal = mode.toString(8).padStart(4, "0");
  return (
    `the grant ledger ${path} is readable by others (mode ${octal}), who can see what this project's agent ` +
    `may do without asking; run chmod 600 ${path} (the next change to the grants writes it owner-only too)`
  );
}

/** `loopctl grants revoke ID [--project DIR] [--root DIR]`. */
async function revoke(args: readonly string[], context: CliContext): Promise<ExitCode> {
  const { values, positionals } = parseCommandArgs("grants revoke", args, LOCATION_OPTIONS, {
    tool: "revoke removes one grant by its ID: 'loopctl grants reset --tool NAME' removes every grant of one tool",
  });
  if (values.help) return printHelp("grants revoke", context, asksForJson(args));
  const [id, extra] = positionals;
  if (id === undefined) throw new CliUsageError("grants revoke", "missing the ID of the grant to revoke");
  if (extra !== undefined) throw new CliUsageError("grants revoke", `unexpected argument ${shownText(extra)}`);
  if (!GRANT_ID.test(id)) {
    throw new CliUsageError("grants revoke", `${shownText(id)} is not a grant id (16 lowercase hex digits)`);
  }
  const { location, value } = await withStore("grants revoke", values, context, async (store) => {
    // Loading first makes a corrupt ledger fail here, before any write is attempted.
    await store.load();
    const revoked = await store.revoke(id);
    // The id of a record edited by hand is the one its content gives: say so to one who took it from the file.
    const stale = revoked === undefined ? (await staleIds(store)).filter((s) => s.stored === id) : [];
    return { revoked, stale };
  });
  const { revoked, stale } = value;
  if (revoked === undefined) {
    context.stderr.write(
      `loopctl grants revoke: no grant ${id} in ${printable(location)}${stale.map((s) => `; ${s.said}`).join("")}\n`,
    );
    return EXIT.failed;
  }
  context.stdout.write(`revoked ${grantSummary(revoked)}\n`);
  return EXIT.ok;
}

/** `loopctl grants reset [--tool NAME] [--project DIR] [--root DIR]`. */
async function reset(args: readonly string[], context: CliContext): Promise<ExitCode> {
  const { values, positionals } = parseCommandArgs("grants reset", args, {
    ...LOCATION_OPTIONS,
    tool: { type: "string" },
  });
  if (values.help) return printHelp("grants reset", context, asksForJson(args));
  noPositionals("grants reset", positionals);
  if (values.tool === "") throw new CliUsageError("grants reset", "--tool needs a tool name");
  const tool = values.tool;
  const { location, value: removed } = await withStore("grants reset", values, context, async (store) => {
    // Rows in a database are each marked revoked and kept, a malformed one too, so a
    // reset of the whole project is the way out of one; a ledger file is read first,
    // so that a corrupt one is reported, never rewritten.
    if (tool === undefined && values.database !== undefined) return { count: await store.clear(), near: [] };
    // One change for the whole tool: revoked one by one, each grant would be a change of its own
    // (a ledger rewritten, a version of the project taken), and a failure midway would leave half revoked.
    const count =
      tool !== undefined && store.revokeTool !== undefined
        ? (await store.revokeTool(tool)).length
        : await resetLoaded(store, tool);
    return { count, near: count === 0 && tool !== undefined ? await nearTools(store, tool) : [] };
  });
  const what = tool === undefined ? "" : ` of tool ${printable(shownText(tool))}`;
  const { count, near } = removed;
  context.stdout.write(`removed ${count} grant${count === 1 ? "" : "s"}${what} from ${printable(location)}\n`);
  if (near.length > 0) {
    context.stderr.write(
      `loopctl grants reset: the name matches exactly; grants of ${near.map((t) => printable(shownText(t))).join(", ")} ` +
        "are left in force\n",
    );
  }
  return EXIT.ok;
}

/** Removes every loaded grant, or those of `tool`; resolves to how many were removed. */
async function resetLoaded(store: GrantStore, tool: string | undefined): Promise<number> {
  const grants = await store.load();
  if (tool === undefined) return grants.length === 0 ? 0 : store.clear();
  let count = 0;
  for (const grant of grants) {
    if (grant.tool === tool && (await store.revoke(grant.id)) !== undefined) count++;
  }
  return count;
}

/**
 * After a `--tool` that matched nothing, the tools of the store whose names
 * differ from it only in case or surrounding spaces (the name matches
 * exactly, so `Deploy`, or `"deploy "` copied from a padded table cell,
 * leaves the grants of `deploy` in force), read from the same store; none
 * when it cannot be read: this is only a hint, the reset itself is done.
 */
async function nearTools(store: GrantStore, tool: string): Promise<string[]> {
  const grants = await store.load().catch(() => []);
  const loose = (name: string): string => name.trim().toLowerCase();
  return [...new Set(grants.map((g) => g.tool))].filter((t) => loose(t) === loose(tool));
}

/**
 * `loopctl grants repair [--project DIR] [--root DIR]`: moves a corrupt
 * ledger aside (its bytes kept) so the next save starts a fresh one. A sound
 * ledger is never touched.
 */
async function repair(args: readonly string[], context: CliContext): Promise<ExitCode> {
  const { values, positionals } = parseCommandArgs("grants repair", args, LOCATION_OPTIONS);
  if (values.help) return printHelp("grants repair", context, asksForJson(args));
  noPositionals("grants repair", positionals);
  if (values.database !== undefined) {
    throw new CliUsageError(
      "grants repair",
      "--database: repair moves a ledger file aside; a malformed grants row in PostgreSQL is forgotten with " +
        "the project's other grants by 'loopctl grants reset', or revoked alone at the project's next version " +
        "(docs/postgres.md shows the statement)",
    );
  }
  const store = openFileStore("grants repair", values, context);
  const aside = await store.resetCorrupt();
  const ledger = printable(store.ledgerPath);
  if (aside === undefined) {
    const exists = await lstat(store.ledgerPath).then(
      () => true,
      () => false,
    );
    context.stderr.write(
      exists
        ? `loopctl grants repair: ${ledger} is not corrupt; left as it is\n`
        : `loopctl grants repair: no ledger at ${ledger}; nothing to repair\n`,
    );
    return EXIT.failed;
  }
  context.stdout.write(
    `moved the corrupt ledger aside to ${printable(aside)} (its bytes kept)\n` +
      `the next grant saved starts a fresh ledger at ${ledger}; until then every gated call is asked about\n`,
  );
  return EXIT.ok;
}

/** Parses a JSON option value, naming the option when it is not JSON. */
function jsonOption(command: string, option: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new CliUsageError(command, `${option} is not valid JSON: ${(error as Error).message}`);
  }
}

/** Runs `digest` over an option's value, its lack of a canonical JSON form a usage error naming `option`. */
function canonicalOption(option: string, digest: () => unknown): void {
  try {
    digest();
  } catch (error) {
    if (error instanceof CanonicalJsonError) {
      throw new CliUsageError(
        "grants explain",
        `${option}: cannot write canonical JSON at ${shownPath(error.jsonPath)}: ${error.problem}`,
      );
    }
    throw error;
  }
}

/** The most columns of a JSONPath an error line spells out, its cut included. */
const MAX_PATH_COLUMNS = 80;

/** One step of a JSONPath as canonical JSON writes it: `.name`, `[2]` or `["a b"]`. */
const PATH_SEGMENT = /\.[A-Za-z_$][A-Za-z0-9_$]*|\[\d+\]|\["(?:[^"\\]|\\.)*"\]/gy;

/**
 * `path` whole when short, else its head, in whole steps where one fits, and
 * its depth: a value nested thousands of levels deep would spell out a path
 * of kilobytes (`$[0][0]…`), and a long member name as many.
 */
function shownPath(path: string): string {
  if (path.length <= MAX_PATH_COLUMNS) return path;
  let depth = 0;
  let head = "$";
  let whole = true;
  PATH_SEGMENT.lastIndex = 1;
  for (let step = PATH_SEGMENT.exec(path); step !== null; step = PATH_SEGMENT.exec(path)) {
    depth++;
    if (whole && head.length + step[0].length < MAX_PATH_COLUMNS) head += step[0];
    else whole = false;
  }
  const cut = head === "$" ? clip(path, MAX_PATH_COLUMNS) : `${head}…`;
  return `${cut} (${depth} ${depth === 1 ? "level" : "levels"} deep)`;
}

/** The members of a `--descriptor` that are read: what a pin covers, and the tool's name. */
const DESCRIPTOR_MEMBERS = new Set(["name", "description", "inputSchema", "title", "annotations", "outputSchema"]);

/**
 * `--descriptor`: `{"description", "inputSchema"}`, and the `"title"`,
 * `"annotations"` and `"outputSchema"` a tool may have (a pin covers them),
 * and optionally `"name"`, which must be the tool.
 */
function descriptorOption(tool: string, text: string, context: CliContext): ToolDescriptor {
  const value = jsonOption("grants explain", "--descriptor", text);
  const d = value as {
    name?: unknown;
    description?: unknown;
    inputSchema?: unknown;
    title?: unknown;
    annotations?: unknown;
    outputSchema?: unknown;
  } | null;
  if (
    typeof d !== "object" ||
    d === null ||
    Array.isArray(d) ||
    typeof d.description !== "string" ||
    !("inputSchema" in d)
  ) {
    throw new CliUsageError(
      "grants explain",
      '--descriptor must be a JSON object {"description": string, "inputSchema": …}',
    );
  }
  if (d.name !== undefined && d.name !== tool) {
    throw new CliUsageError("grants explain", `--descriptor names tool ${shownValue(d.name)}, not ${shownText(tool)}`);
  }
  if (d.title !== undefined && typeof d.title !== "string") {
    throw new CliUsageError("grants explain", "--descriptor: title must be a string");
  }
  // Not refused (a tool's whole MCP listing, `_meta` and all, is fine to paste), but said: a
  // misspelt member is left out of the check, and the tool would read as changed.
  const left = Object.keys(d).filter((member) => !DESCRIPTOR_MEMBERS.has(member));
  if (left.length > 0) {
    const names = left.map((member) => printable(shownText(member)));
    const listed = names.length === 1 ? names[0] : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
    context.stderr.write(
      `loopctl: warning: --descriptor: ${listed} ${left.length === 1 ? "is" : "are"} not part of a tool's pin and ` +
        `${left.length === 1 ? "was" : "were"} left out (it covers description, inputSchema, title, annotations and outputSchema)\n`,
    );
  }
  return {
    name: tool,
    description: d.description,
    inputSchema: d.inputSchema,
    ...(d.title === undefined ? {} : { title: d.title }),
    ...(d.annotations === undefined ? {} : { annotations: d.annotations }),
    ...(d.outputSchema === undefined ? {} : { outputSchema: d.outputSchema }),
  };
}

function decisionJson(decision: GrantDecision | null): unknown {
  if (decision === null) return null;
  switch (decision.type) {
    case "allow":
    case "deny":
      return { type: decision.type, grant: decision.grant.id };
    case "ask":
      return decision.reason === "no_grant"
        ? { type: "ask", reason: "no_grant" }
        : { type: "ask", reason: "tool_changed", grant: decision.grant.id };
  }
}

function pinJson(pin: PinStatus): unknown {
  return pin.type === "match" || pin.type === "mismatch" ? { type: pin.type, kind: pin.kind } : { type: pin.type };
}

/** `loopctl grants explain --tool NAME --args JSON [--descriptor JSON] [--json]`. */
async function explain(args: readonly string[], context: CliContext): Promise<ExitCode> {
  const { values, positionals } = parseCommandArgs("grants explain", args, {
    ...LOCATION_OPTIONS,
    tool: { type: "string" },
    args: { type: "string" },
    descriptor: { type: "string" },
    json: { type: "boolean", default: false },
  });
  if (values.help) return printHelp("grants explain", context, values.json);
  noPositionals("grants explain", positionals);
  if (values.tool === undefined || values.tool === "") {
    throw new CliUsageError("grants explain", "missing --tool NAME");
  }
  if (values.args === undefined) throw new CliUsageError("grants explain", "missing --args JSON");
  const callArgs = jsonOption("grants explain", "--args", values.args);
  const descriptor =
    values.descriptor === undefined ? undefined : descriptorOption(values.tool, values.descriptor, context);
  // Checked before the grants are read, each naming its option: the policy digests a descriptor
  // only for a pinned grant, where its refusal would have been said as one of --args.
  canonicalOption("--args", () => argsDigest(callArgs));
  if (descriptor !== undefined) {
    canonicalOption("--descriptor", () => [descriptorFingerprint(descriptor), descriptorDigest(descriptor)]);
  }
  const tool = values.tool;
  const { location, value: explanation } = await withStore(
    "grants explain",
    values,
    context,
    async (store) => {
      try {
        return await new GrantPolicy(store).explain(tool, callArgs, descriptor);
      } catch (error) {
        if ((error as { code?: unknown } | null)?.code === "CANONICAL_JSON") {
          throw new CliUsageError("grants explain", `--args: ${(error as Error).message}`);
        }
        throw error;
      }
    },
    values.json,
  );
  if (values.json) {
    context.stdout.write(
      json({
        ledger: location,
        tool: explanation.tool,
        argsDigest: explanation.argsDigest,
        decision: decisionJson(explanation.decision),
        covering: explanation.covering.map(({ grant, pin }) => ({ grant: grant.toJSON(), pin: pinJson(pin) })),
      }),
    );
    return EXIT.ok;
  }
  context.stdout.write(`ledger: ${printable(location)}\n`);
  context.stdout.write(explanation.lines.map((line) => `${printable(line)}\n`).join(""));
  return EXIT.ok;
}

/** The `loopctl grants …` commands by name. */
export const GRANTS_COMMANDS = { list, revoke, reset, explain, repair } as const;
