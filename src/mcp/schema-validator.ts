import type {
  JsonSchemaValidator,
  JsonSchemaValidatorResult,
  jsonSchemaValidator,
} from "@modelcontextprotocol/sdk/validation";
import { describeError } from "../engine/errors.js";
import { recordText } from "../engine/records-slot.js";
import { compileJsonSchema, type Validator } from "../engine/validation.js";

/** The validator of a schema that does not compile: it refuses every value, with `message`. */
function refuseAll<T>(message: string): JsonSchemaValidator<T> {
  return () => ({ valid: false, data: undefined, errorMessage: message });
}

const kindOf = (value: unknown): string => (value === null ? "null" : Array.isArray(value) ? "an array" : typeof value);

/**
 * The schema validator for an MCP SDK `Client` (its `jsonSchemaValidator`
 * option), on loopctl's own schema engine: the one that checks tool
 * arguments and, in `mcpTools`, results. The client checks every
 * result's structured content against its tool's output schema, which the
 * server wrote, before loopctl sees it. With the SDK's default validator (Ajv
 * with JavaScript's backtracking `RegExp`) a server that lists a pattern such
 * as `^(a+)+$` and answers with forty a's and a `!` stops the whole process
 * inside `client.callTool`; an output schema that validator cannot compile
 * fails `client.listTools()`, every tool of the server with it. With this
 * one:
 *
 * - patterns are matched in time linear in the text wherever RE2 can run
 *   them with ECMAScript's meaning, and the others (a lookahead, a
 *   backreference, a word boundary) by `RegExp`, as loopctl's own checks do;
 * - the dialect is draft 2020-12, or draft-07 when `$schema` says so, with
 *   the `ajv-formats` formats; an unknown keyword or format is refused;
 * - `getValidator` never throws: a schema that does not compile gives a
 *   validator that refuses every value, its message saying why (`the schema
 *   does not compile: …`), so a call of that tool fails and the others work;
 * - a schema is compiled once: the client asks again for every output schema
 *   of every listing (page by page, then for the whole of a paged one), and
 *   gets the validator made before for a schema of the same JSON text, for as
 *   long as anything holds it;
 * - a value it cannot check (nested deeper than the stack goes) is refused, not thrown;
 * - messages (`$.count: must be number`) are cut as a record's texts are:
 *   at most 16 384 UTF-16 units, then `… [<n> characters cut]`.
 *
 * Importing it loads nothing of the MCP SDK; its type is the SDK's interface.
 *
 * @example
 * ```ts
 * const client = new Client({ name: "app", version: "1.0.0" }, { jsonSchemaValidator: mcpSchemaValidator() });
 * await client.connect(transport);
 * const toolset = await mcpTools(client);
 * ```
 */
export function mcpSchemaValidator(): jsonSchemaValidator {
  // By the compiled check, which compileJsonSchema gives again for a schema of the same JSON text while it is held.
  const made = new WeakMap<Validator, JsonSchemaValidator<unknown>>();
  return {
    getValidator<T>(schema: unknown): JsonSchemaValidator<T> {
      if (typeof schema !== "object" || schema === null || Array.isArray(schema))
        return refuseAll(`the schema does not compile: it must be an object, not ${kindOf(schema)}`);
      let check: Validator;
      try {
        check = compileJsonSchema(schema as Readonly<Record<string, unknown>>);
      } catch (error) {
        return refuseAll(recordText(`the schema does not compile: ${describeError(error)}`));
      }
      let validator = made.get(check);
      if (validator === undefined) {
        validator = checking(check);
        made.set(check, validator);
      }
      return validator as JsonSchemaValidator<T>;
    },
  };
}

/** The MCP SDK's validator of `check`'s answers. */
function checking(check: Validator): JsonSchemaValidator<unknown> {
  return (input): JsonSchemaValidatorResult<unknown> => {
    let checked: ReturnType<typeof check>;
    try {
      checked = check(input);
    } catch (error) {
      return {
        valid: false,
        data: undefined,
        errorMessage: recordText(`$: could not be checked: ${describeError(error)}`),
      };
    }
    return checked.type === "valid"
      ? { valid: true, data: input, errorMessage: undefined }
      : { valid: false, data: undefined, errorMessage: recordText(checked.problems.join("; ")) };
  };
}
