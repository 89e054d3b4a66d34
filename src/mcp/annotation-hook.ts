import { callPrompt } from "../ask/index.js";
import { everyKey } from "../unknown-option.js";
import { maxArgsCharsProblem, redactProblem } from "../ask/call-prompt.js";
import type { Redactor } from "../ask/index.js";
import type { Hook, HookDecision } from "../engine/index.js";
import { changedSinceListed } from "./changed.js";
import { McpConfigError } from "./errors.js";
import { refuseUnknown } from "./options.js";

/** Options of {@link mcpAnnotationHook}. */
export interface McpAnnotationHookOptions {
  /**
   * Whether the server's annotations may decide: with `true`, a tool that
   * says it is read-only and not destructive runs without asking (unless it
   * changed on the server since it was first listed). Only for a server you
   * run or vet: any server can claim anything. It applies to every tool the
   * hook sees, whichever server lists it.
   * @default false
   */
  readonly trusted?: boolean;
  /** Hides secrets in the arguments shown (see `callPrompt`). @default redactSecretKeys */
  readonly redact?: Redactor | false;
  /** The most characters of arguments shown. @default 2000 */
  readonly maxArgsChars?: number;
}

/** The options of {@link mcpAnnotationHook}: any other is refused, never ignored. */
const OPTIONS = everyKey<McpAnnotationHookOptions>()(["trusted", "redact", "maxArgsChars"]);

interface Hints {
  readonly readOnly: boolean | undefined;
  readonly destructive: boolean | undefined;
  readonly idempotent: boolean | undefined;
  readonly openWorld: boolean | undefined;
}

function hintsOf(annotations: unknown): Hints {
  const read = (key: string): boolean | undefined => {
    const value =
      typeof annotations === "object" && annotations !== null
        ? (annotations as Record<string, unknown>)[key]
        : undefined;
    return typeof value === "boolean" ? value : undefined;
  };
  return {
    readOnly: read("readOnlyHint"),
    destructive: read("destructiveHint"),
    idempotent: read("idempotentHint"),
    openWorld: read("openWorldHint"),
  };
}

function describeHints(hints: Hints): string {
  const said: string[] = [];
  if (hints.readOnly === true) said.push("read-only");
  if (hints.readOnly === false) said.push("modifies its environment");
  if (hints.destructive === true) said.push("destructive");
  if (hints.destructive === false) said.push("not destructive");
  if (hints.idempotent === true) said.push("idempotent");
  if (hints.openWorld === true) said.push("reaches outside systems");
  return said.length === 0
    ? "The server gives no hints about this tool."
    : `The server says (unverified): ${said.join(", ")}.`;
}

/**
 * A ready hook for MCP tools, which treats their annotations as the untrusted
 * hints they are: by default every call asks (remembered grants may then
 * decide); with `trusted: true`, a tool that says it is read-only and not
 * destructive is allowed, and every other asks. A tool whose descriptor
 * changed on the server since an `mcpTools` toolset first listed it always
 * asks, whatever it now claims.
 *
 * The ask carries only the digest of the arguments, so its prompt is what a
 * person sees: it names the tool (and its title), says what the server
 * claims and whether the tool changed, and shows the arguments readably,
 * redacted and capped (`callPrompt`).
 *
 * @throws {McpConfigError} on an option of the wrong kind, or one it does not know.
 *
 * @example
 * ```ts
 * const managers = new LoopManagers().withHook(mcpAnnotationHook({ trusted: true })).withAskResolver(channel);
 * ```
 */
export function mcpAnnotationHook(options: McpAnnotationHookOptions = {}): Hook {
  refuseUnknown(options, OPTIONS);
  const { trusted = false, redact, maxArgsChars } = options;
  if (typeof trusted !== "boolean") throw new McpConfigError("trusted", "must be a boolean");
  const redactFault = redactProblem(redact);
  if (redactFault !== undefined) throw new McpConfigError("redact", redactFault);
  const maxFault = maxArgsChars === undefined ? undefined : maxArgsCharsProblem(maxArgsChars);
  if (maxFault !== undefined) throw new McpConfigError("maxArgsChars", maxFault);
  const promptOptions = {
    ...(redact === undefined ? {} : { redact }),
    ...(maxArgsChars === undefined ? {} : { maxArgsChars }),
  };
  return {
    name: "mcpAnnotationHook",
    preToolUse(call, { descriptor }): HookDecision {
      const hints = hintsOf(descriptor.annotations);
      const changed = changedSinceListed(descriptor);
      if (trusted && !changed && hints.readOnly === true && hints.destructive !== true) return { type: "allow" };
      const notes = [describeHints(hints)];
      if (changed) notes.push("This tool changed on the server since it was first listed.");
      return { type: "ask", prompt: callPrompt(descriptor, call.input, { ...promptOptions, notes }) };
    },
  };
}
