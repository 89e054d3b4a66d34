import { Ajv, type ErrorObject, type Options, type ValidateFunction } from "ajv";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsImport from "ajv-formats";
import type { z } from "zod";
import { describeError } from "./errors.js";
import { linearRegExp } from "./pattern.js";
import { shownValue } from "../errors.js";

/** Outcome of validating a call's arguments. `value` is what the tool's own code receives. */
export type ArgumentCheck =
  | { readonly type: "valid"; readonly value: unknown }
  | { readonly type: "invalid"; readonly problems: readonly string[] };

/** What a check that does not answer an {@link ArgumentCheck} gave, for a problem's text. */
function answerKind(value: unknown): string {
  if (value === null) return "null";
  if (value instanceof Promise) return "a Promise";
  const type = typeof value;
  return type === "object" ? "an object" : type === "undefined" ? "undefined" : `a ${type}`;
}

/**
 * What `check` answered, read as an {@link ArgumentCheck}: `{ type: "valid" }`,
 * or `{ type: "invalid", problems }` with `problems` strings. Anything else (a
 * promise, from a check made async by mistake; another shape; a throw; reads
 * that throw) is invalid arguments, never valid: a tool's own check that
 * cannot be read must not let every call through.
 */
export function answeredCheck(check: () => unknown): ArgumentCheck {
  let answer: unknown;
  try {
    answer = check();
  } catch (error) {
    return { type: "invalid", problems: [`$: the tool's check failed: ${describeError(error)}`] };
  }
  try {
    if (typeof answer === "object" && answer !== null && !(answer instanceof Promise)) {
      const { type, value, problems } = answer as { type?: unknown; value?: unknown; problems?: unknown };
      if (type === "valid") return { type: "valid", value };
      if (type === "invalid" && Array.isArray(problems) && problems.every((problem) => typeof problem === "string"))
        return { type: "invalid", problems: [...problems] };
    }
  } catch (error) {
    return { type: "invalid", problems: [`$: the tool's check answered what cannot be read: ${describeError(error)}`] };
  }
  // A promise's rejection would otherwise surface as unhandled.
  if (answer instanceof Promise) answer.catch(() => undefined);
  return {
    type: "invalid",
    problems: [
      `$: the tool's check did not answer { type: "valid" } or { type: "invalid", problems }, got ${answerKind(answer)}`,
    ],
  };
}

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
 * tool's author meant to refuse. Annotations that constrain nothing are not
 * refused: OpenAPI's `example` and vendor extensions (`x-…`). Nothing rewrites the arguments (no
 * defaults, coercion or removal): the snapshot the gate validates is frozen.
 * Patterns run on a linear-time engine wherever it can run them (see
 * pattern.ts): a schema's author should not be able to stop the process with
 * one. `allowMatchingProperties` keeps Ajv from testing `patternProperties`
 * keys against `properties` names with a native `RegExp` while compiling, a
 * lint that JSON Schema does not ask for (a name both match is checked by
 * both subschemas).
 */
const OPTIONS: Options = {
  strictSchema: true,
  allowMatchingProperties: true,
  code: { regExp: linearRegExp },
  strictNumbers: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
  allErrors: false,
  addUsedSchema: false,
  logger: false,
};

/**
 * A shared validator and the ids it knows before any tool's schema: its
 * meta-schemas (and their aliases). Compiling a schema must leave exactly
 * these, so no tool's schema can change how another's compiles.
 */
interface SharedAjv {
  readonly ajv: Ajv;
  readonly schemas: Readonly<Record<string, unknown>>;
  readonly refs: Readonly<Record<string, unknown>>;
  /** Schemas compiled with it so far. */
  compiles: number;
}

/**
 * How many schemas one shared validator compiles before a fresh one takes
 * its place. Ajv's code generator keeps every value a compile used (the
 * schema, the validate function) in a scope of its instance, which
 * `removeSchema` does not empty: a process that sees many tools would keep
 * them all. A fresh validator costs a meta-schema compile (some tens of ms),
 * a few hundredths of that per schema here; a validate function already
 * made does not need the instance that made it.
 */
const COMPILES_PER_VALIDATOR = 128;

let ajv2020: SharedAjv | undefined;
let ajv07: SharedAjv | undefined;

const fresh = (shared: SharedAjv | undefined): shared is SharedAjv =>
  shared !== undefined && shared.compiles < COMPILES_PER_VALIDATOR;

function validatorFor(schema: Readonly<Record<string, unknown>>): SharedAjv {
  const declared = schema["$schema"];
  if (declared === undefined || (typeof declared === "string" && DRAFT_2020.test(declared))) {
    if (!fresh(ajv2020)) ajv2020 = pristine(new Ajv2020(OPTIONS));
    return ajv2020;
  }
  if (typeof declared === "string" && DRAFT_07.test(declared)) {
    if (!fresh(ajv07)) ajv07 = pristine(new Ajv(OPTIONS));
    return ajv07;
  }
  throw new TypeError(`$schema ${shownValue(declared)} is not supported (JSON Schema draft 2020-12 or draft-07)`);
}

function pristine(ajv: Ajv): SharedAjv {
  addFormats(ajv);
  ajv.addKeyword("example");
  return { ajv, schemas: { ...ajv.schemas }, refs: { ...ajv.refs }, compiles: 0 };
}

/**
 * A vendor extension's name: `x-` and a name, as OpenAPI writes them. Like
 * OpenAPI's `example`, it annotates and constrains nothing, so it is taken
 * as a known keyword; every other unknown keyword is still refused.
 */
const EXTENSION = /^x-[A-Za-z0-9_$:-]+$/;

/** Makes the vendor extensions `schema` uses known to `ajv` (kept by it: they constrain nothing anywhere). */
function knowExtensions(ajv: Ajv, schema: unknown): void {
  const seen = new Set<object>();
  const open: unknown[] = [schema];
  while (open.length > 0) {
    const value = open.pop();
    if (typeof value !== "object" || value === null || seen.has(value)) continue;
    seen.add(value);
    for (const [key, member] of Object.entries(value)) {
      if (EXTENSION.test(key) && ajv.getKeyword(key) === false) ajv.addKeyword(key);
      open.push(member);
    }
  }
}

/** Puts `table` back to exactly `known`: what a compile added goes, what it removed or replaced comes back. */
function restore(table: Record<string, unknown>, known: Readonly<Record<string, unknown>>): void {
  for (const key of Object.keys(table)) if (!Object.hasOwn(known, key)) delete table[key];
  for (const [key, value] of Object.entries(known)) if (table[key] !== value) table[key] = value;
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
 * The validators compiled so far, by their schema's JSON text, each for as
 * long as something holds it: the same schema handed over again (a
 * descriptor made afresh for each call, a toolset listed again, one schema
 * shared by many tools) is not compiled again. A JSON Schema is JSON: two
 * of the same text are the same schema.
 */
const compiledByText = new Map<string, WeakRef<Validator>>();
const forgetCompiled = new FinalizationRegistry<string>((text) => {
  if (compiledByText.get(text)?.deref() === undefined) compiledByText.delete(text);
});

/**
 * How many of the validators used last are held here, whoever else holds
 * them: a descriptor made afresh for each call holds its validator only
 * during the call, and a collection between two calls would otherwise
 * cost a compile at each.
 */
const RECENT_VALIDATORS = 64;

/** The last {@link RECENT_VALIDATORS} used, by text, the one used last at the end. */
const recentValidators = new Map<string, Validator>();

function used(text: string, validator: Validator): Validator {
  recentValidators.delete(text);
  recentValidators.set(text, validator);
  if (recentValidators.size > RECENT_VALIDATORS) recentValidators.delete(recentValidators.keys().next().value!);
  return validator;
}

/**
 * Compiles a JSON Schema (draft 2020-12, or draft-07 when `$schema` says so)
 * with Ajv and the `ajv-formats` formats, once for each schema text while its
 * validator is held, or is among the last used.
 *
 * @throws {TypeError} when the schema does not compile: an unknown keyword or
 *   format, an unresolvable `$ref`, an unsupported `$schema`. The caller names the tool.
 */
export function compileJsonSchema(schema: Readonly<Record<string, unknown>>): Validator {
  let text: string | undefined;
  try {
    text = JSON.stringify(schema);
  } catch {
    // Nested deeper than JSON.stringify goes, or not JSON: compiled (or refused) as it is, and not kept.
  }
  if (text === undefined) return compileOnce(schema);
  const known = compiledByText.get(text)?.deref();
  if (known !== undefined) return used(text, known);
  // A copy of its own, which nothing else holds: a schema changed in place later (its text is then another)
  // never changes what this validator checks for the others that share it.
  const validator = compileOnce(JSON.parse(text) as Readonly<Record<string, unknown>>);
  compiledByText.set(text, new WeakRef(validator));
  forgetCompiled.register(validator, text);
  return used(text, validator);
}

function compileOnce(schema: Readonly<Record<string, unknown>>): Validator {
  const shared = validatorFor(schema);
  const { ajv, schemas, refs } = shared;
  shared.compiles += 1;
  let validate: ValidateFunction;
  try {
    knowExtensions(ajv, schema);
    validate = ajv.compile(schema);
  } catch (error) {
    throw new TypeError(describeError(error), { cause: error });
  } finally {
    // Ajv keeps every compiled schema; a process that sees many tools (an MCP
    // server that changes them) must not keep them all. The function stays valid.
    // Ajv also files ids by the schema's own word (a subschema's `$id`, an
    // `$anchor` under an `$id`), and removeSchema forgets by its `$id`, which
    // may be a meta-schema's: after each compile its tables are put back as
    // they were, so a tool's ids never reach another tool's schema.
    ajv.removeSchema(schema);
    restore(ajv.schemas, schemas);
    restore(ajv.refs, refs);
  }
  // Ajv validates an `$async` schema with a promise, which a boolean test would read as valid.
  if ((validate as { $async?: unknown }).$async === true)
    throw new TypeError("$async schemas are not supported (arguments are checked at once)");
  return (input) =>
    validate(input) ? { type: "valid", value: input } : { type: "invalid", problems: (validate.errors ?? []).map(at) };
}

/**
 * Validates with zod itself: its refinements, defaults and transforms have no
 * JSON Schema form. zod passes on what a refinement or transform throws (a
 * `new URL` of what is not one), and throws for one that is async: the
 * arguments are then refused with what was thrown, as any invalid ones.
 */
export function zodValidator(schema: z.ZodType): Validator {
  return (input) => {
    let parsed: ReturnType<typeof schema.safeParse>;
    try {
      parsed = schema.safeParse(input);
    } catch (error) {
      return { type: "invalid", problems: [`$: ${describeError(error)}`] };
    }
    if (parsed.success) return { type: "valid", value: parsed.data };
    return {
      type: "invalid",
      problems: parsed.error.issues.map((issue) => `${["$", ...issue.path.map(String)].join(".")}: ${issue.message}`),
    };
  };
}
