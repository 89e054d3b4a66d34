import stableStringify from "fast-json-stable-stringify";
import { CanonicalJsonError } from "./errors.js";

/**
 * The deepest nesting canonicalJson accepts. The serializer underneath is
 * recursive; this bound keeps it far from the engine's stack limit even when
 * the caller is itself deep in a stack.
 */
export const CANONICAL_JSON_MAX_DEPTH = 1000;

type JsonObject = { [key: string]: JsonNode };
type JsonNode = null | boolean | number | string | JsonNode[] | JsonObject;

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function childPath(parent: string, key: string | number): string {
  if (typeof key === "number") return `${parent}[${key}]`;
  return IDENTIFIER.test(key) ? `${parent}.${key}` : `${parent}[${JSON.stringify(key)}]`;
}

function isHighSurrogate(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdbff;
}

/**
 * Orders two strings by Unicode code point, which is UTF-8 byte order.
 * JavaScript's default `<` compares UTF-16 code units, which puts astral
 * characters (surrogate pairs) before U+E000–U+FFFF; code-point order puts
 * them after.
 */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  if (i === n) return a.length - b.length;
  // The first differing unit may be the low half of a pair whose high half is
  // shared; compare whole code points from the start of that pair.
  const j = i > 0 && isHighSurrogate(a.charCodeAt(i - 1)) ? i - 1 : i;
  const ca = a.codePointAt(j) ?? -1;
  const cb = b.codePointAt(j) ?? -1;
  if (ca !== cb) return ca - cb;
  // Both held the same lone high surrogate at j; the code points at i decide.
  return (a.codePointAt(i) ?? -1) - (b.codePointAt(i) ?? -1);
}

type StableStringify = (
  value: unknown,
  options: { cmp: (a: { key: string }, b: { key: string }) => number },
) => string;
// The package's own typings omit the options argument it accepts.
const stringifyStable = stableStringify as unknown as StableStringify;

const CMP = (x: { key: string }, y: { key: string }): number => compareCodePoints(x.key, y.key);

type ToJsonable = { toJSON: (key: string) => unknown };

function hasToJson(value: object): value is ToJsonable {
  return typeof (value as Partial<ToJsonable>).toJSON === "function";
}

const REFUSED_OBJECTS: ReadonlyArray<[abstract new (...args: never[]) => unknown, string]> = [
  [Map, "a Map"],
  [Set, "a Set"],
  [WeakMap, "a WeakMap"],
  [WeakSet, "a WeakSet"],
  [Promise, "a Promise"],
  [RegExp, "a RegExp"],
  [ArrayBuffer, "an ArrayBuffer"],
];

/**
 * Turns one value into a JSON primitive, or into an object/array still to
 * fill, or `undefined` for "omit this property". Mirrors JSON.stringify's
 * `toJSON` and boxed-primitive handling, but refuses what it would silently
 * turn into `null` or `{}`.
 */
function normalizeLeaf(input: unknown, key: string, path: string): unknown {
  let value = input;
  if (value !== null && typeof value === "object" && hasToJson(value)) {
    try {
      value = value.toJSON(key);
    } catch (error) {
      throw new CanonicalJsonError(path, "toJSON() threw", { cause: error });
    }
  } else if (typeof value === "bigint") {
    throw new CanonicalJsonError(path, "a BigInt has no JSON form");
  }
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    value = value.valueOf();
  } else if (value instanceof BigInt) {
    throw new CanonicalJsonError(path, "a BigInt has no JSON form");
  } else if (value instanceof Symbol) {
    throw new CanonicalJsonError(path, "a symbol has no JSON form");
  }
  switch (typeof value) {
    case "string":
    case "boolean":
      return value;
    case "number":
      if (!Number.isFinite(value)) {
        throw new CanonicalJsonError(path, `${String(value)} has no JSON form`);
      }
      return value;
    case "bigint":
      throw new CanonicalJsonError(path, "a BigInt has no JSON form");
    case "function":
      throw new CanonicalJsonError(path, "a function has no JSON form");
    case "symbol":
      throw new CanonicalJsonError(path, "a symbol has no JSON form");
    case "undefined":
      return undefined;
    case "object":
      if (value === null) return null;
      if (ArrayBuffer.isView(value)) {
        throw new CanonicalJsonError(path, "a typed array or DataView has no faithful JSON form");
      }
      for (const [ctor, name] of REFUSED_OBJECTS) {
        if (value instanceof ctor) {
          throw new CanonicalJsonError(path, `${name} has no faithful JSON form`);
        }
      }
      return value;
  }
}

interface Frame {
  readonly source: object;
  readonly target: JsonNode[] | JsonObject;
  readonly keys: readonly string[] | null;
  readonly length: number;
  readonly path: string;
  index: number;
}

/**
 * Copies `value` into a tree of plain JSON values, without recursion so that
 * hostile nesting ends in a typed error rather than a RangeError.
 */
function normalize(value: unknown): JsonNode {
  const root = normalizeLeaf(value, "", "$");
  if (root === undefined) {
    throw new CanonicalJsonError("$", "undefined has no JSON form");
  }
  if (root === null || typeof root !== "object") return root as JsonNode;

  const onPath = new Set<object>();
  const stack: Frame[] = [];
  const open = (source: object, path: string): JsonNode[] | JsonObject => {
    if (onPath.has(source)) throw new CanonicalJsonError(path, "the value contains a cycle");
    if (stack.length >= CANONICAL_JSON_MAX_DEPTH) {
      throw new CanonicalJsonError(path, `nesting deeper than ${CANONICAL_JSON_MAX_DEPTH} levels`);
    }
    onPath.add(source);
    if (Array.isArray(source)) {
      const target: JsonNode[] = [];
      stack.push({ source, target, keys: null, length: source.length, path, index: 0 });
      return target;
    }
    // A null prototype keeps a "__proto__" key an ordinary property.
    const target = Object.create(null) as JsonObject;
    let keys: string[];
    try {
      keys = Object.keys(source);
    } catch (error) {
      throw new CanonicalJsonError(path, "listing the object's keys threw", { cause: error });
    }
    stack.push({ source, target, keys, length: keys.length, path, index: 0 });
    return target;
  };

  const result = open(root, "$");
  while (stack.length > 0) {
    const frame = stack[stack.length - 1] as Frame;
    if (frame.index >= frame.length) {
      stack.pop();
      onPath.delete(frame.source);
      continue;
    }
    const i = frame.index++;
    if (frame.keys === null) {
      const source = frame.source as unknown[];
      const path = childPath(frame.path, i);
      if (!(i in source)) throw new CanonicalJsonError(path, "an array hole has no JSON form");
      const child = normalizeLeaf(source[i], String(i), path);
      if (child === undefined) {
        throw new CanonicalJsonError(path, "undefined inside an array has no JSON form");
      }
      const target = frame.target as JsonNode[];
      target.push(child !== null && typeof child === "object" ? open(child, path) : (child as JsonNode));
    } else {
      const key = frame.keys[i] as string;
      const path = childPath(frame.path, key);
      let raw: unknown;
      try {
        raw = (frame.source as Record<string, unknown>)[key];
      } catch (error) {
        throw new CanonicalJsonError(path, "reading the property threw", { cause: error });
      }
      const child = normalizeLeaf(raw, key, path);
      // JSON.stringify omits undefined properties; so do we.
      if (child === undefined) continue;
      const target = frame.target as JsonObject;
      target[key] = child !== null && typeof child === "object" ? open(child, path) : (child as JsonNode);
    }
  }
  return result;
}

/**
 * Writes `value` as canonical JSON: compact, object keys sorted recursively by
 * Unicode code point (UTF-8 byte order), array order kept, strings escaped as
 * `JSON.stringify` escapes them (lone surrogates become `\udxxx`, so the text
 * is always well-formed and UTF-8 encodable).
 *
 * `toJSON` is honoured as by `JSON.stringify` (a `Date` becomes its ISO
 * string), and object properties whose value is `undefined` are omitted.
 *
 * @throws {CanonicalJsonError} for NaN, ±Infinity, a BigInt, a function, a
 * symbol, `undefined` at the top or inside an array, an array hole, a cycle,
 * a Map/Set/typed array or similar, or nesting deeper than
 * {@link CANONICAL_JSON_MAX_DEPTH}; the message names the path to the value.
 * @example
 * canonicalJson({ b: 1, a: [true, null] }) // '{"a":[true,null],"b":1}'
 */
export function canonicalJson(value: unknown): string {
  const tree = normalize(value);
  try {
    return stringifyStable(tree, { cmp: CMP });
  } catch (error) {
    if (error instanceof RangeError) {
      throw new CanonicalJsonError("$", "nesting too deep for the stack", { cause: error });
    }
    throw error;
  }
}
