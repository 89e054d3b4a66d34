import { hash } from "node:crypto";
import { realpathSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { canonicalJson } from "./canonical.js";
import { GrantConfigError } from "./errors.js";
import { shownValue } from "../errors.js";
import { fnv1a64 } from "./fnv.js";

/**
 * What a tool presents to the model and to the person who approves it: the
 * descriptor a grant is pinned to. The optional parts are the MCP tool's.
 */
export interface ToolDescriptor {
  /** The tool's name, matched exactly (case-sensitive) by grants. */
  readonly name: string;
  /** The description the model is shown. */
  readonly description: string;
  /** The tool's input JSON Schema (any JSON value). */
  readonly inputSchema: unknown;
  /** A display name for people. */
  readonly title?: string;
  /** Hints about the tool's behaviour (MCP `annotations`: `readOnlyHint`, `destructiveHint`, …). */
  readonly annotations?: unknown;
  /** The JSON Schema of the tool's structured output. */
  readonly outputSchema?: unknown;
}

/**
 * FNV-1a 64 over the UTF-8 bytes of `text`, as 16 lowercase hex digits.
 *
 * A lone surrogate has no UTF-8 form; like `TextEncoder` it is hashed as
 * U+FFFD. Text made by {@link canonicalJson} never holds one (it escapes
 * them as `\udxxx`), so the digests built on it are unaffected.
 *
 * @example
 * digest16("") // "cbf29ce484222325"
 */
export function digest16(text: string): string {
  return fnv1a64(text);
}

/**
 * The digest a `PendingAsk` and an audit record carry instead of the call's
 * arguments: `digest16(canonicalJson(args))`.
 *
 * @throws {CanonicalJsonError} when `args` has no JSON form.
 * @example
 * argsDigest({ path: "/tmp/x", limit: 10 }) // "f1ed61cd8ca5e26b"
 */
export function argsDigest(args: unknown): string {
  return digest16(canonicalJson(args));
}

/** sha256 of `text`'s UTF-8 bytes, 64 lowercase hex digits. */
export function sha256Hex(text: string): string {
  return hash("sha256", text, "hex");
}

/**
 * sha256 over the same canonical text as {@link argsDigest}, 64 lowercase
 * hex digits: records and asks carry it beside the FNV digest, and it is what
 * tells two calls apart where a collision must not be craftable (the loop
 * detector).
 *
 * @throws {CanonicalJsonError} when `args` has no JSON form.
 */
export function argsSha256(args: unknown): string {
  return sha256Hex(canonicalJson(args));
}

/**
 * The canonical text a descriptor is hashed over: the original's shape
 * (`name`, `description`, `schema`). With `extended`, `title`, `annotations`
 * and `outputSchema` join it when present, so a descriptor without them
 * keeps the text (and the pins) it always had.
 */
function descriptorText(descriptor: ToolDescriptor, where: string, extended: boolean): string {
  if (typeof descriptor !== "object" || descriptor === null) {
    throw new GrantConfigError(where, "descriptor", `must be an object, got ${shownValue(descriptor)}`);
  }
  const { name, description, inputSchema } = descriptor;
  // A Tool has a name but neither a description nor an input schema of its own: hashed, it would
  // pin the name alone, and a tool changed behind its grant would still match the pin.
  if (description === undefined && inputSchema === undefined) {
    throw new GrantConfigError(
      where,
      "descriptor",
      "has neither a description nor an inputSchema, so only its name would be pinned (for a Tool, pass tool.descriptor)",
    );
  }
  const text: Record<string, unknown> = {
    name,
    description,
    schema: { tool: name, description, input_schema: inputSchema },
  };
  if (extended) {
    const { title, annotations, outputSchema } = descriptor;
    if (title !== undefined) text["title"] = title;
    if (annotations !== undefined) text["annotations"] = annotations;
    if (outputSchema !== undefined) text["output_schema"] = outputSchema;
  }
  return canonicalJson(text);
}

/**
 * The original's 16-hex descriptor digest, used to honour pins in old ledgers:
 * FNV-1a 64 over the original's shape only (`name`, `description`,
 * `inputSchema`), so a tool digests as the original digested it whatever
 * `title`, `annotations` or `outputSchema` it also has.
 * FNV-1a is not collision resistant: new pins use {@link descriptorFingerprint}.
 *
 * @throws {CanonicalJsonError} when the input schema has no JSON form.
 * @throws {GrantConfigError} when `descriptor` is not an object, or has
 *   neither a `description` nor an `inputSchema` (a `Tool` passed in place
 *   of `tool.descriptor`).
 */
export function descriptorDigest(descriptor: ToolDescriptor): string {
  return digest16(descriptorText(descriptor, "descriptorDigest", false));
}

/**
 * `"sha256:"` + 64 lowercase hex over the same canonical text as
 * {@link descriptorDigest}, with the descriptor's `title`, `annotations` and
 * `outputSchema` added when present: the pin this library writes, so a
 * tool whose annotations alone changed is asked about again.
 *
 * @throws {CanonicalJsonError} when the input schema has no JSON form.
 * @throws {GrantConfigError} when `descriptor` is not an object, or has
 *   neither a `description` nor an `inputSchema` (a `Tool` passed in place
 *   of `tool.descriptor`).
 */
export function descriptorFingerprint(descriptor: ToolDescriptor): string {
  return `sha256:${sha256Hex(descriptorText(descriptor, "descriptorFingerprint", true))}`;
}

/**
 * The name of a project's ledger folder: `digest16` of the most canonical form
 * of `dir` that can be had: its realpath; else its parent's realpath joined
 * with its name (so a project bound before its folder existed keeps its
 * ledger once the folder is created); else the absolute path; else `dir` as
 * given. Letters are kept as given: on a case-insensitive file system two
 * spellings of one folder that differ in case are two identities.
 *
 * @throws {GrantConfigError} when `dir` is not a non-empty string (an unset
 *   environment variable, say), which would otherwise give every such project one identity,
 *   or holds a NUL character, which no path can.
 */
export function projectIdentity(dir: string): string {
  requireFolderPath(dir, "projectIdentity", "dir");
  return digest16(canonicalProjectPath(dir));
}

/**
 * @internal Throws GrantConfigError naming `argument` unless `value` is a
 * non-empty string without a NUL character: no path can hold one, so such a
 * root would fail every call with an I/O error, and such a project would be
 * given the identity of a folder that can never exist.
 */
export function requireFolderPath(value: unknown, where: string, argument: string): void {
  if (typeof value !== "string" || value === "") {
    throw new GrantConfigError(where, argument, `must be a non-empty string (a folder path), got ${shownValue(value)}`);
  }
  if (value.includes("\0")) {
    throw new GrantConfigError(
      where,
      argument,
      `must not hold a NUL character (no path can), got ${shownValue(value)}`,
    );
  }
}

function canonicalProjectPath(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    // fall through to the next rung
  }
  try {
    const absolute = resolve(dir);
    return join(realpathSync(dirname(absolute)), basename(absolute));
  } catch {
    // fall through
  }
  try {
    return resolve(dir);
  } catch {
    // process.cwd() throws when the working folder was deleted
  }
  return dir;
}
