import { Ajv, type ErrorObject, type Options, type ValidateFunction } from "ajv";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsImport from "ajv-formats";
import type { z } from "zod";
import { describeError } from "./errors.js";

/** Outcome of validating a call's arguments. `value` is what the tool's own code receives. */
export type ArgumentCheck =
  | { readonly type: "valid"; readonly value: unknown }
  | { readonly type: "invalid"; readonly problems: readonly string[] };

/** Validates one tool's arguments; compiled once per tool, never throws. */
export type Validator = (input: unknown) => ArgumentCheck;

// ajv-formats is CommonJS with a default export; the ESM and CJS builds see it differently.
const addFormats = ((addFormatsImport as unknown as { default?: unknown }).default ?? addFormatsImport) as (
  ajv: Ajv,
) => void;

const DRAFT_07 = /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/;
const DRAFT_2020 = /^https?:\/\/json-schema\.org\/draft\/2020-12\/schema#?$/;

/**
 * Unknown keywords and formats are refused when the schema is compiled: a
 * constraint the validator skipped would let arguments through that the
 * tool's author meant to refuse. Nothing rewrites the arguments (no
 * defaults, coercion or removal): the snapshot the gate validates is frozen.
 */
const OPTIONS: Options = {
  strictSchema: true,
  strictNumbers: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
  allErrors: false,
  addUsedSchema: false,
  logger: false,
};

let ajv2020: Ajv | undefined;
let ajv07: Ajv | undefined;

function validatorFor(schema: Readonly<Record<string, unknown>>): Ajv {
  const declared = schema["$schema"];
  if (declared === undefined || (typeof declared === "string" && DRAFT_2020.test(declared))) {
    ajv2020 ??= withFormats(new Ajv2020(OPTIONS));
    return ajv2020;
  }
  if (typeof declared === "string" && DRAFT_07.test(declared)) {
    ajv07 ??= withFormats(new Ajv(OPTIONS));
    return ajv07;
  }
  throw new TypeError(`$schema ${JSON.stringify(declared)} is not supported (JSON Schema draft 2020-12 or draft-07)`);
}

function withFormats(ajv: Ajv): Ajv {
  addFormats(ajv);
  return ajv;
}

function at(error: ErrorObject): string {
  const path = error.instancePath
    .split("/")
    .slice(1)
    .map((segment) => `.${segment.replaceAll("~1", "/").replaceAll("~0", "~")}`)
    .join("");
  const extra = (error.params as { additionalProperty?: unknown }).additionalProperty;
  const message =
    typeof extra === "string" ? `must NOT have additional property '${extra}'` : (error.message ?? error.keyword);
  return `$${path}: ${message}`;
}

/**
 * Compiles a JSON Schema (draft 2020-12, or draft-07 when `$schema` says so)
 * with Ajv and the `ajv-formats` formats.
 *
 * @throws {TypeError} when the schema does not compile: an unknown keyword or
 *   format, an unresolvable `$ref`, an unsupported `$schema`. The caller names the tool.
 */
export function compileJsonSchema(schema: Readonly<Record<string, unknown>>): Validator {
  const ajv = validatorFor(schema);
  let validate: ValidateFunction;
  try {
    validate = ajv.compile(schema);
  } catch (error) {
    throw new TypeError(describeError(error), { cause: error });
  } finally {
    // Ajv keeps every compiled schema; a process that sees many tools (an MCP
    // server that changes them) must not keep them all. The function stays valid.
    ajv.removeSchema(schema);
  }
  return (input) =>
    validate(input) ? { type: "valid", value: input } : { type: "invalid", problems: (validate.errors ?? []).map(at) };
}

/** Validates with zod itself: its refinements, defaults and transforms have no JSON Schema form. */
export function zodValidator(schema: z.ZodType): Validator {
  return (input) => {
    const parsed = schema.safeParse(input);
    if (parsed.success) return { type: "valid", value: parsed.data };
    return {
      type: "invalid",
      problems: parsed.error.issues.map((issue) => `${["$", ...issue.path.map(String)].join(".")}: ${issue.message}`),
    };
  };
}
