import { z } from "zod";
import { descriptorDigest, descriptorFingerprint } from "../grant/index.js";
import type { ToolDescriptor } from "../grant/index.js";
import { ToolDefinitionError, describeError } from "./errors.js";
import { checkJsonSchema, validateJsonSchema } from "./json-schema.js";

/** What a tool's `execute` receives besides its arguments. */
export interface ToolContext {
  /**
   * Aborts when the run is cancelled; a long-running tool should honour it.
   * A run started without a signal cannot be cancelled: its tools get a
   * signal that never aborts, which the agent's runs share (a listener you
   * add and leave on it retires it, so it is collected with your run).
   */
  readonly signal: AbortSignal;
  /** The model's id for this call. */
  readonly callId: string;
  /** The 0-based model turn. */
  readonly turn: number;
  readonly sessionId: string;
  readonly runId: string;
}

/** A JSON Schema object (the supported subset, see `defineTool`). */
export type JsonSchema = Readonly<Record<string, unknown>>;

/** What `defineTool` takes. */
export interface ToolDefinition<Input> {
  /** Unique within an agent; non-empty, at most 128 characters, no whitespace. */
  readonly name: string;
  /** Shown to the model; part of the descriptor a grant is pinned to. */
  readonly description: string;
  /** A zod object schema, or a JSON Schema object (`type: "object"`). */
  readonly input: z.ZodType<Input> | JsonSchema;
  /**
   * Runs the tool with validated arguments. A returned string goes to the model
   * as is, anything else as JSON; a throw becomes an error result (and counts
   * as a failure for the circuit breaker).
   */
  readonly execute: (input: Input, context: ToolContext) => unknown;
}

/** Outcome of validating a call's arguments. */
export type ArgumentCheck = { readonly type: "valid"; readonly value: unknown } | { readonly type: "invalid"; readonly problems: readonly string[] };

/** A defined tool: its descriptor plus validation and execution. */
export interface Tool {
  readonly name: string;
  /** `{ name, description, inputSchema }`: what the model sees and what grants pin. */
  readonly descriptor: ToolDescriptor;
  /** `descriptorDigest(descriptor)`: 16 hex digits. */
  readonly descriptorDigest: string;
  /** `descriptorFingerprint(descriptor)`: `"sha256:<64 hex>"`. */
  readonly descriptorFingerprint: string;
  /** Validates (and, for zod, parses) arguments. Never throws. */
  check(input: unknown): ArgumentCheck;
  /** Runs the tool with arguments that passed {@link Tool.check}. */
  execute(input: unknown, context: ToolContext): unknown;
}

const NAME = /^[^\s\p{Cc}]{1,128}$/u;

function isZodSchema(value: unknown): value is z.ZodType {
  return typeof value === "object" && value !== null && "_zod" in value && typeof (value as { safeParse?: unknown }).safeParse === "function";
}

/**
 * Defines a tool. `input` is a zod schema (its JSON Schema comes from
 * `z.toJSONSchema`) or a JSON Schema object using the supported subset: `type`,
 * `properties`, `required`, `additionalProperties`, `enum`, `const`, `items`,
 * `minItems`/`maxItems`, `minLength`/`maxLength`, `pattern`,
 * `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`, plus annotations
 * (`title`, `description`, `default`, …). Any other keyword is refused here
 * rather than silently skipped during validation.
 *
 * Arguments are validated before dispatch; invalid ones go back to the model
 * as an error result and never reach `execute`.
 *
 * @throws {ToolDefinitionError} on an invalid name, description, schema or `execute`.
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
  if (typeof definition !== "object" || definition === null) {
    throw new ToolDefinitionError("", "the definition must be an object");
  }
  const { name, description, input, execute } = definition;
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new ToolDefinitionError(String(name), "the name must be 1-128 characters without whitespace or control characters");
  }
  if (typeof description !== "string") throw new ToolDefinitionError(name, "the description must be a string");
  if (typeof execute !== "function") throw new ToolDefinitionError(name, "execute must be a function");

  let inputSchema: JsonSchema;
  let check: (value: unknown) => ArgumentCheck;
  if (isZodSchema(input)) {
    try {
      // The model writes the input side of the schema (before defaults and transforms).
      inputSchema = z.toJSONSchema(input, { io: "input" }) as JsonSchema;
    } catch (error) {
      throw new ToolDefinitionError(name, `the zod schema has no JSON Schema form: ${describeError(error)}`, { cause: error });
    }
    const schema = input;
    check = (value) => {
      const parsed = schema.safeParse(value);
      if (parsed.success) return { type: "valid", value: parsed.data };
      return {
        type: "invalid",
        problems: parsed.error.issues.map((issue) => `${["$", ...issue.path.map(String)].join(".")}: ${issue.message}`),
      };
    };
  } else if (typeof input === "object" && input !== null && !Array.isArray(input)) {
    const problem = checkJsonSchema(input);
    if (problem !== undefined) throw new ToolDefinitionError(name, `input schema ${problem}`);
    inputSchema = structuredClone(input);
    const schema = inputSchema;
    check = (value) => {
      const problems = validateJsonSchema(schema, value);
      // A copy, so a tool that mutates its arguments cannot rewrite the transcript.
      return problems.length === 0 ? { type: "valid", value: structuredClone(value) } : { type: "invalid", problems };
    };
  } else {
    throw new ToolDefinitionError(name, "input must be a zod schema or a JSON Schema object");
  }
  if (inputSchema["type"] !== "object") {
    throw new ToolDefinitionError(name, "the input schema must describe an object (type: \"object\")");
  }

  const descriptor: ToolDescriptor = Object.freeze({ name, description, inputSchema });
  let digest: string | undefined;
  let fingerprint: string | undefined;
  const run = execute as (value: unknown, context: ToolContext) => unknown;
  return Object.freeze({
    name,
    descriptor,
    get descriptorDigest(): string {
      digest ??= descriptorDigest(descriptor);
      return digest;
    },
    get descriptorFingerprint(): string {
      fingerprint ??= descriptorFingerprint(descriptor);
      return fingerprint;
    },
    check,
    execute: (value: unknown, context: ToolContext) => run(value, context),
  });
}
