/**
 * A small JSON Schema validator for the subset tool schemas use. Unsupported
 * keywords are rejected when the tool is defined, never silently ignored: a
 * constraint the validator skipped would let arguments through that the
 * tool's author meant to refuse.
 */

const TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"] as const;
type JsonType = (typeof TYPES)[number];

const ANNOTATIONS = new Set([
  "$schema",
  "$id",
  "$comment",
  "title",
  "description",
  "default",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
]);

const ASSERTIONS = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "enum",
  "const",
  "items",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "pattern",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
]);

/** Every keyword {@link checkJsonSchema} accepts. */
export const SUPPORTED_JSON_SCHEMA_KEYWORDS: readonly string[] = [...ASSERTIONS, ...ANNOTATIONS];

type Schema = Readonly<Record<string, unknown>>;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isCount(value: unknown): boolean {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

/**
 * Checks that `schema` uses only supported keywords with well-formed values.
 * Returns the first problem as `"<path>: <what>"`, or `undefined` when the
 * schema is usable.
 */
export function checkJsonSchema(schema: unknown, path = "#"): string | undefined {
  if (typeof schema === "boolean") return undefined;
  if (!isRecord(schema)) return `${path}: a schema must be an object or a boolean`;
  for (const [key, value] of Object.entries(schema)) {
    const at = `${path}/${key}`;
    if (ANNOTATIONS.has(key)) continue;
    if (!ASSERTIONS.has(key)) return `${at}: unsupported keyword '${key}'`;
    switch (key) {
      case "type": {
        const list = Array.isArray(value) ? value : [value];
        if (list.length === 0 || !list.every((t) => (TYPES as readonly unknown[]).includes(t))) {
          return `${at}: must be one of ${TYPES.join(", ")} or a non-empty array of them`;
        }
        break;
      }
      case "properties": {
        if (!isRecord(value)) return `${at}: must be an object`;
        for (const [name, sub] of Object.entries(value)) {
          const problem = checkJsonSchema(sub, `${at}/${name}`);
          if (problem !== undefined) return problem;
        }
        break;
      }
      case "required":
        if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) return `${at}: must be an array of strings`;
        break;
      case "additionalProperties":
      case "items": {
        const problem = checkJsonSchema(value, at);
        if (problem !== undefined) return problem;
        break;
      }
      case "enum":
        if (!Array.isArray(value)) return `${at}: must be an array`;
        break;
      case "const":
        break;
      case "minItems":
      case "maxItems":
      case "minLength":
      case "maxLength":
        if (!isCount(value)) return `${at}: must be a non-negative integer`;
        break;
      case "pattern":
        if (typeof value !== "string") return `${at}: must be a string`;
        try {
          new RegExp(value, "u");
        } catch {
          return `${at}: not a valid regular expression`;
        }
        break;
      default:
        if (typeof value !== "number" || !Number.isFinite(value)) return `${at}: must be a finite number`;
    }
  }
  return undefined;
}

function typeOf(value: unknown): JsonType | "unsupported" {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  switch (typeof value) {
    case "string":
      return "string";
    case "boolean":
      return "boolean";
    case "number":
      return Number.isFinite(value) ? (Number.isInteger(value) ? "integer" : "number") : "unsupported";
    case "object":
      return "object";
    default:
      return "unsupported";
  }
}

function matchesType(actual: JsonType | "unsupported", wanted: unknown): boolean {
  if (actual === "unsupported") return false;
  if (wanted === actual) return true;
  return wanted === "number" && actual === "integer";
}

/** Structural equality over JSON values (key order ignored). */
function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]));
  }
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return false;
}

/**
 * Validates `value` against a schema that passed {@link checkJsonSchema}.
 * Returns every problem found as `"<path>: <what>"` (empty when valid).
 */
export function validateJsonSchema(schema: unknown, value: unknown, path = "$"): string[] {
  if (schema === true) return [];
  if (schema === false) return [`${path}: no value is allowed here`];
  if (!isRecord(schema)) return [`${path}: invalid schema`];
  const s: Schema = schema;
  const problems: string[] = [];
  const actual = typeOf(value);
  if (actual === "unsupported") return [`${path}: not a JSON value`];

  if (s["type"] !== undefined) {
    const wanted = Array.isArray(s["type"]) ? s["type"] : [s["type"]];
    if (!wanted.some((t) => matchesType(actual, t))) {
      return [`${path}: expected ${wanted.join(" or ")}, got ${actual}`];
    }
  }
  if (Array.isArray(s["enum"]) && !s["enum"].some((option) => jsonEqual(option, value))) {
    problems.push(`${path}: must be one of ${JSON.stringify(s["enum"])}`);
  }
  if ("const" in s && !jsonEqual(s["const"], value)) {
    problems.push(`${path}: must equal ${JSON.stringify(s["const"])}`);
  }

  if (typeof value === "string") {
    const length = [...value].length;
    if (typeof s["minLength"] === "number" && length < s["minLength"]) problems.push(`${path}: shorter than ${s["minLength"]}`);
    if (typeof s["maxLength"] === "number" && length > s["maxLength"]) problems.push(`${path}: longer than ${s["maxLength"]}`);
    if (typeof s["pattern"] === "string" && !new RegExp(s["pattern"], "u").test(value)) {
      problems.push(`${path}: does not match ${s["pattern"]}`);
    }
  }
  if (typeof value === "number") {
    if (typeof s["minimum"] === "number" && value < s["minimum"]) problems.push(`${path}: less than ${s["minimum"]}`);
    if (typeof s["maximum"] === "number" && value > s["maximum"]) problems.push(`${path}: greater than ${s["maximum"]}`);
    if (typeof s["exclusiveMinimum"] === "number" && value <= s["exclusiveMinimum"]) {
      problems.push(`${path}: must be greater than ${s["exclusiveMinimum"]}`);
    }
    if (typeof s["exclusiveMaximum"] === "number" && value >= s["exclusiveMaximum"]) {
      problems.push(`${path}: must be less than ${s["exclusiveMaximum"]}`);
    }
  }
  if (Array.isArray(value)) {
    if (typeof s["minItems"] === "number" && value.length < s["minItems"]) problems.push(`${path}: fewer than ${s["minItems"]} items`);
    if (typeof s["maxItems"] === "number" && value.length > s["maxItems"]) problems.push(`${path}: more than ${s["maxItems"]} items`);
    if (s["items"] !== undefined) {
      value.forEach((item, i) => problems.push(...validateJsonSchema(s["items"], item, `${path}[${i}]`)));
    }
  }
  if (isRecord(value)) {
    const properties = isRecord(s["properties"]) ? s["properties"] : {};
    if (Array.isArray(s["required"])) {
      for (const name of s["required"]) {
        if (typeof name === "string" && !Object.hasOwn(value, name)) problems.push(`${path}.${name}: required`);
      }
    }
    for (const [name, item] of Object.entries(value)) {
      if (Object.hasOwn(properties, name)) {
        problems.push(...validateJsonSchema(properties[name], item, `${path}.${name}`));
      } else if (s["additionalProperties"] !== undefined) {
        if (s["additionalProperties"] === false) problems.push(`${path}.${name}: unexpected property`);
        else problems.push(...validateJsonSchema(s["additionalProperties"], item, `${path}.${name}`));
      }
    }
  }
  return problems;
}
