import { z } from "zod";
import { isAbortSignal } from "../abort-signal.js";
import { shownValue } from "../errors.js";
import { descriptorDigest, descriptorFingerprint } from "../grant/index.js";
import type { ToolDescriptor } from "../grant/index.js";
import { ToolDefinitionError, describeError } from "./errors.js";
import { frozenJson, isImmutableJson } from "./snapshot.js";
import { meantOption, shownKey } from "../unknown-option.js";
import { compileJsonSchema, zodValidator } from "./validation.js";
import type { ArgumentCheck, Validator } from "./validation.js";

/** What a tool's `execute` receives besides its arguments. */
export interface ToolContext {
  /** Aborts when the run is cancelled; a long-running tool should honour it. */
  readonly signal: AbortSignal;
  /** The model's id for this call. */
  readonly callId: string;
  /** The 0-based model turn. */
  readonly turn: number;
  readonly sessionId: string;
  readonly runId: string;
}

/** A JSON Schema object. */
export type JsonSchema = Readonly<Record<string, unknown>>;

/** What `defineTool` takes. */
export interface ToolDefinition<Input> {
  /** Unique within an agent; non-empty, at most 128 characters, no whitespace. */
  readonly name: string;
  /** Shown to the model; part of the descriptor a grant is pinned to. */
  readonly description: string;
  /** A zod 4 object schema, or a JSON Schema object (`type: "object"`, draft 2020-12 or draft-07). */
  readonly input: z.ZodType<Input> | JsonSchema;
  /** A display name for people; part of the descriptor a grant is pinned to. */
  readonly title?: string;
  /** Behaviour hints (MCP `annotations`); part of the descriptor a grant is pinned to. */
  readonly annotations?: Readonly<Record<string, unknown>>;
  /** The JSON Schema of the tool's structured output; part of the descriptor a grant is pinned to. */
  readonly outputSchema?: JsonSchema;
  /**
   * Runs the tool with validated arguments: zod's output for a zod schema,
   * the frozen arguments the gate approved for a JSON Schema. A returned
   * string goes to the model as is, anything else as JSON; a throw becomes an
   * error result (and counts as a failure for the circuit breaker).
   */
  readonly execute: (input: Input, context: ToolContext) => unknown;
}

/** A defined tool: its descriptor plus validation and execution. */
export interface Tool {
  /**
   * The tool's name: always `descriptor.name` (the engine refuses a tool made
   * by hand whose two names differ; see {@link toolDescriptorOf}).
   */
  readonly name: string;
  /** What the model sees and what grants pin: deeply frozen. */
  readonly descriptor: ToolDescriptor;
  /** `descriptorDigest(descriptor)`: 16 hex digits. */
  readonly descriptorDigest: string;
  /** `descriptorFingerprint(descriptor)`: `"sha256:<64 hex>"`. */
  readonly descriptorFingerprint: string;
  /**
   * Validates (and, for zod, parses) arguments, at once. Never throws. The
   * engine refuses a call whose check answers anything but `{ type: "valid" }`
   * or `{ type: "invalid", problems }` (a promise included).
   */
  check(input: unknown): ArgumentCheck;
  /** Runs the tool with arguments that passed {@link Tool.check}. */
  execute(input: unknown, context: ToolContext): unknown;
}

const NAME = /^[^\s\p{Cc}]{1,128}$/u;

/** The fields of a {@link ToolDefinition}: any other is refused. */
const FIELDS = ["name", "description", "input", "title", "annotations", "outputSchema", "execute"] as const;

/** The input schema's names elsewhere (a descriptor's, the AI SDK's): `inputSchema` is otherwise nearest `outputSchema`. */
const INPUT_NAMES = new Set(["inputschema", "parameters", "schema"]);

/**
 * Why the definition's key `key` is refused: ignored, a misspelt `title` or
 * `annotations` would be left out of what a person is shown and what a
 * grant is pinned to, and nothing would say so.
 */
function unknownField(key: string): string {
  const meant = meantOption(key, FIELDS);
  const hint = INPUT_NAMES.has(key.toLowerCase().replace(/_/g, ""))
    ? "the input schema is given as input: a zod 4 schema or a JSON Schema object"
    : meant === undefined
      ? `its fields are ${FIELDS.slice(0, -1).join(", ")} and ${FIELDS.at(-1) ?? ""}`
      : `did you mean ${meant}?`;
  return `the definition has no field ${shownKey(key)} (${hint})`;
}

function isZodSchema(value: unknown): value is z.ZodType {
  return (
    typeof value === "object" &&
    value !== null &&
    "_zod" in value &&
    typeof (value as { safeParse?: unknown }).safeParse === "function"
  );
}

/** zod 3 schemas have `_def` and `safeParse` but no `_zod`. */
function isZod3Schema(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    "_def" in value &&
    !("_zod" in value) &&
    typeof (value as { safeParse?: unknown }).safeParse === "function"
  );
}

/** True for a {@link Tool} (from `defineTool`, or shaped like one). */
export function isTool(value: unknown): value is Tool {
  const tool = value as Partial<Tool> | null;
  return (
    typeof value === "object" &&
    value !== null &&
    typeof tool?.check === "function" &&
    typeof tool.execute === "function"
  );
}

/**
 * The descriptor of a {@link Tool} as the engine holds it for a call: the
 * tool's own when it can never change (deeply frozen plain data, as
 * `defineTool` and the adapters make), else a deeply frozen JSON copy, read
 * once, which the hooks, the ask, the grants and the record all see. Its
 * name must be the tool's name: the model calls a
 * tool by its descriptor's name, records, asks and hooks name the tool, and
 * grants are looked up and pinned by the descriptor, so a hand-made tool
 * whose two names differ would let a grant remembered for one tool decide
 * calls of another. `defineTool` always makes the two the same. Internal.
 *
 * @throws {ToolDefinitionError} naming the tool (and, when they differ, both
 *   names) when the descriptor is not an object with a non-empty string
 *   name, is not JSON, or is named otherwise than the tool.
 */
export function toolDescriptorOf(tool: Tool): ToolDescriptor {
  const name: unknown = tool.name;
  const given: unknown = tool.descriptor;
  const shown = typeof name === "string" ? name : "";
  if (typeof given !== "object" || given === null || Array.isArray(given)) {
    throw new ToolDefinitionError(shown, "its descriptor must be an object { name, description, inputSchema }");
  }
  const descriptorName: unknown = (given as { name?: unknown }).name;
  if (typeof descriptorName !== "string" || descriptorName === "") {
    throw new ToolDefinitionError(shown, "its descriptor must have a non-empty string name");
  }
  if (name !== descriptorName) {
    throw new ToolDefinitionError(
      shown,
      `the name ${typeof name === "string" ? shownKey(name) : `(a ${typeof name})`} differs from its descriptor's name ${shownKey(descriptorName)}: ` +
        "a tool must be named as its descriptor is (grants are kept under the descriptor's name, records under the tool's)",
    );
  }
  // A descriptor that can never change (defineTool's, an adapter's, of this copy of loopctl or another)
  // is kept as it is: others may know it by identity. Any other, one frozen only at its top included, is
  // copied, deeply frozen: the call goes on with that one copy, so that what is written into the tool's
  // descriptor meanwhile (its name, its schema, its annotations) cannot part the two names, nor make
  // the grant an answer saves pinned to another descriptor than the one the hooks and the person saw.
  if (isImmutableJson(given)) return given as ToolDescriptor;
  let descriptor: ToolDescriptor;
  try {
    descriptor = frozenJson(given as ToolDescriptor);
  } catch (error) {
    throw new ToolDefinitionError(shown, `its descriptor is not JSON: ${describeError(error)}`, { cause: error });
  }
  // Read twice (the check, the copy): a getter that answers otherwise the second time is caught here.
  if (descriptor.name !== name) {
    throw new ToolDefinitionError(
      shown,
      `its descriptor's name changed while it was read (${shownKey(descriptor.name)})`,
    );
  }
  return descriptor;
}

/**
 * Defines a tool. `input` is a zod 4 schema (its JSON Schema, for the model
 * and the pins, comes from `z.toJSONSchema`; arguments are validated by zod
 * itself, so refinements, defaults and transforms hold) or a JSON Schema
 * object, draft 2020-12 (the default) or draft-07 (by `$schema`), compiled
 * once here with Ajv and the `ajv-formats` formats.
 *
 * Arguments are validated by the gate before any hook sees them; invalid
 * ones go back to the model as an error result and never reach `execute`.
 *
 * @throws {ToolDefinitionError} on a definition that is not an object or has
 *   a field other than those of {@link ToolDefinition} (`titel`,
 *   `inputSchema`), naming it; on an invalid name, description, schema or
 *   `execute`; on a zod 3 schema (loopctl needs zod 4); on a JSON Schema Ajv
 *   cannot compile (an unknown keyword or format, an unresolvable `$ref`).
 *
 * @example
 * ```ts
 * const read = defineTool({
 *   name: "read_file",
 *   description: "Read a UTF-8 text file",
 *   input: z.object({ path: z.string() }),
 *   execute: async ({ path }) => fs.readFile(path, "utf8"),
 * });
 * ```
 */
export function defineTool<Input>(definition: ToolDefinition<Input>): Tool {
  if (typeof definition !== "object" || definition === null || isAbortSignal(definition)) {
    const got = isAbortSignal(definition) ? "an AbortSignal" : shownValue(definition);
    throw new ToolDefinitionError("", `the definition must be an object, got ${got}`);
  }
  // What the definition's reads throw (a getter, a revoked proxy) is the definition's fault, named as such.
  const read = <T>(tool: string, get: () => T): T => {
    try {
      return get();
    } catch (error) {
      throw new ToolDefinitionError(tool, `the definition cannot be read: ${describeError(error)}`, { cause: error });
    }
  };
  const name = read("", () => definition.name);
  const shownName = typeof name === "string" ? name : "";
  const unknown = read(shownName, () =>
    Object.keys(definition).find((key) => !(FIELDS as readonly string[]).includes(key)),
  );
  if (unknown !== undefined) throw new ToolDefinitionError(shownName, unknownField(unknown));
  const { description, input, execute, title, annotations, outputSchema } = read(shownName, () => {
    const { description, input, execute, title, annotations, outputSchema } = definition;
    return { description, input, execute, title, annotations, outputSchema };
  });
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new ToolDefinitionError(
      typeof name === "string" ? name : shownValue(name),
      "the name must be 1-128 characters without whitespace or control characters",
    );
  }
  if (typeof description !== "string") throw new ToolDefinitionError(name, "the description must be a string");
  if (typeof execute !== "function") throw new ToolDefinitionError(name, "execute must be a function");
  if (title !== undefined && typeof title !== "string")
    throw new ToolDefinitionError(name, "the title must be a string");

  const kind = read(name, () =>
    isZodSchema(input)
      ? "zod"
      : isZod3Schema(input)
        ? "zod3"
        : typeof input === "object" && input !== null && !Array.isArray(input)
          ? "json"
          : "other",
  );
  let inputSchema: JsonSchema;
  let check: Validator;
  if (kind === "zod") {
    try {
      // The model writes the input side of the schema (before defaults and transforms).
      inputSchema = z.toJSONSchema(input as z.ZodType, { io: "input" });
    } catch (error) {
      throw new ToolDefinitionError(name, `the zod schema has no JSON Schema form: ${describeError(error)}`, {
        cause: error,
      });
    }
    check = zodValidator(input as z.ZodType);
  } else if (kind === "zod3") {
    throw new ToolDefinitionError(
      name,
      'the input is a zod 3 schema; loopctl needs zod 4 (install zod@^4 and import from "zod")',
    );
  } else if (kind === "json") {
    try {
      inputSchema = frozenJson(input as JsonSchema);
      check = compileJsonSchema(inputSchema);
    } catch (error) {
      throw new ToolDefinitionError(name, `the input schema does not compile: ${describeError(error)}`, {
        cause: error,
      });
    }
  } else {
    throw new ToolDefinitionError(name, "input must be a zod 4 schema or a JSON Schema object");
  }
  if (inputSchema["type"] !== "object") {
    throw new ToolDefinitionError(name, 'the input schema must describe an object (type: "object")');
  }

  let descriptor: ToolDescriptor;
  try {
    descriptor = frozenJson({
      name,
      description,
      inputSchema,
      ...(title === undefined ? {} : { title }),
      ...(annotations === undefined ? {} : { annotations }),
      ...(outputSchema === undefined ? {} : { outputSchema }),
    });
  } catch (error) {
    throw new ToolDefinitionError(name, `the descriptor has no JSON form: ${describeError(error)}`, { cause: error });
  }
  const digest = descriptorDigest(descriptor);
  const fingerprint = descriptorFingerprint(descriptor);
  const run = execute as (value: unknown, context: ToolContext) => unknown;
  return Object.freeze({
    name,
    descriptor,
    descriptorDigest: digest,
    descriptorFingerprint: fingerprint,
    check,
    execute: (value: unknown, context: ToolContext): unknown => {
      // The gate validated these arguments; zod's output (defaults, transforms) is made here again for the tool.
      const result = check(value);
      if (result.type === "invalid") throw new TypeError(`invalid arguments: ${result.problems.join("; ")}`);
      return run(result.value, context);
    },
  });
}
