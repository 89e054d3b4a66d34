import { isProxy } from "node:util/types";
import { CanonicalJsonError } from "./errors.js";

/**
 * The deepest nesting canonicalJson accepts. The serializer is recursive;
 * this bound keeps it far from the engine's stack limit even when the caller
 * is itself deep in a stack.
 */
export const CANONICAL_JSON_MAX_DEPTH = 1000;

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

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

/**
 * A problem found while writing, before its path is known. Each enclosing
 * container adds its key as the fault passes through it, so the happy path
 * never builds a path string; the typed error is made once, at the top.
 */
class Fault {
  readonly problem: string;
  readonly cause: unknown;
  readonly hasCause: boolean;
  /** Keys and indexes from the bad value outwards. */
  readonly segments: (string | number)[] = [];

  constructor(problem: string, hasCause = false, cause: unknown = undefined) {
    this.problem = problem;
    this.hasCause = hasCause;
    this.cause = cause;
  }

  toError(): CanonicalJsonError {
    let path = "$";
    for (let i = this.segments.length - 1; i >= 0; i--) {
      const key = this.segments[i] as string | number;
      if (typeof key === "number") path += `[${key}]`;
      else path += IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
    }
    return this.hasCause
      ? new CanonicalJsonError(path, this.problem, { cause: this.cause })
      : new CanonicalJsonError(path, this.problem);
  }
}

/** Adds the child's key to a fault on its way out; anything else passes unchanged. */
function via(thrown: unknown, key: string | number): unknown {
  if (thrown instanceof Fault) thrown.segments.push(key);
  return thrown;
}

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
 * A string as a JSON string literal, escaped exactly as `JSON.stringify`
 * escapes it. Most keys and values need no escape at all; those are quoted
 * without a call into the native serializer.
 */
function quote(text: string): string {
  const length = text.length;
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return JSON.stringify(text);
  }
  return `"${text}"`;
}

/**
 * Quoted object keys. Argument objects of one tool repeat the same few keys
 * call after call, and a key from `Object.keys` carries its hash already, so
 * a lookup is cheaper than scanning it again. Bounded: cleared when full.
 */
const quotedKeys = new Map<string, string>();
const QUOTED_KEYS_MAX = 4096;

function quoteKey(key: string): string {
  let quoted = quotedKeys.get(key);
  if (quoted === undefined) {
    quoted = quote(key);
    if (quotedKeys.size >= QUOTED_KEYS_MAX) quotedKeys.clear();
    if (key.length <= 64) quotedKeys.set(key, quoted);
  }
  return quoted;
}

/** The ancestors of the value being written, for the cycle check. */
interface Walk {
  /** `path[d]` is the open container at depth `d`. */
  readonly path: object[];
  /** The same containers below depth {@link LINEAR_DEPTH}, for a constant-time check. */
  deep: Set<object> | undefined;
}

/** Up to this depth, scanning the ancestors beats hashing into a Set. */
const LINEAR_DEPTH = 32;

function onPath(walk: Walk, value: object, depth: number): boolean {
  const path = walk.path;
  const scan = depth < LINEAR_DEPTH ? depth : LINEAR_DEPTH;
  for (let i = 0; i < scan; i++) if (path[i] === value) return true;
  return depth > LINEAR_DEPTH && walk.deep !== undefined && walk.deep.has(value);
}

/**
 * Writes one value, or returns `undefined` for "omit this property". Mirrors
 * `JSON.stringify`'s `toJSON` and boxed-primitive handling, but refuses what
 * it would silently turn into `null` or `{}`. `depth` counts the containers
 * open around the value.
 */
function write(value: unknown, key: string | number, depth: number, walk: Walk): string | undefined {
  switch (typeof value) {
    case "string":
      return quote(value);
    case "number":
      if (!Number.isFinite(value)) throw new Fault(`${String(value)} has no JSON form`);
      return String(value);
    case "boolean":
      return value ? "true" : "false";
    case "undefined":
      return undefined;
    case "bigint":
      throw new Fault("a BigInt has no JSON form");
    case "function":
      throw new Fault("a function has no JSON form");
    case "symbol":
      throw new Fault("a symbol has no JSON form");
    default:
      return value === null ? "null" : writeObject(value as object, key, depth, walk);
  }
}

function writeObject(input: object, key: string | number, depth: number, walk: Walk): string | undefined {
  try {
    return writeObjectChecked(input, key, depth, walk);
  } catch (thrown) {
    // A proxy trap (toJSON lookup, instanceof, …) may throw where no finer
    // check is; that is still the caller's bad value, not a crash. A
    // RangeError is left to canonicalJson, which reports nesting too deep.
    if (thrown instanceof Fault || thrown instanceof RangeError) throw thrown;
    throw new Fault("reading the value threw", true, thrown);
  }
}

function writeObjectChecked(input: object, key: string | number, depth: number, walk: Walk): string | undefined {
  let value: unknown = input;
  if (hasToJson(input)) {
    try {
      value = input.toJSON(typeof key === "number" ? String(key) : key);
    } catch (error) {
      throw new Fault("toJSON() threw", true, error);
    }
  }
  if (typeof value === "object" && value !== null && !isProxy(value)) {
    // A plain object or array (the shape of almost all arguments) cannot be
    // a boxed primitive or any refused kind: those checks would all be false.
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto === Object.prototype || (proto === Array.prototype && Array.isArray(value))) {
      return writeContainer(value, depth, walk);
    }
  }
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    value = value.valueOf();
  } else if (value instanceof BigInt) {
    throw new Fault("a BigInt has no JSON form");
  } else if (value instanceof Symbol) {
    throw new Fault("a symbol has no JSON form");
  }
  // What toJSON or unboxing gave is written as it is, never converted again.
  if (typeof value !== "object") return write(value, key, depth, walk);
  if (value === null) return "null";
  if (ArrayBuffer.isView(value)) throw new Fault("a typed array or DataView has no faithful JSON form");
  for (let i = 0; i < REFUSED_OBJECTS.length; i++) {
    const [ctor, name] = REFUSED_OBJECTS[i] as [abstract new (...args: never[]) => unknown, string];
    if (value instanceof ctor) throw new Fault(`${name} has no faithful JSON form`);
  }
  return writeContainer(value, depth, walk);
}

function writeContainer(value: object, depth: number, walk: Walk): string {
  if (onPath(walk, value, depth)) throw new Fault("the value contains a cycle");
  if (depth >= CANONICAL_JSON_MAX_DEPTH) throw new Fault(`nesting deeper than ${CANONICAL_JSON_MAX_DEPTH} levels`);
  walk.path[depth] = value;
  if (depth >= LINEAR_DEPTH) (walk.deep ??= new Set()).add(value);
  const text = Array.isArray(value) ? writeArray(value, depth, walk) : writeProperties(value, depth, walk);
  if (depth >= LINEAR_DEPTH) walk.deep?.delete(value);
  return text;
}

function writeArray(array: readonly unknown[], depth: number, walk: Walk): string {
  const length = array.length;
  if (length === 0) return "[]";
  let out = "[";
  for (let i = 0; i < length; i++) {
    try {
      if (!(i in array)) throw new Fault("an array hole has no JSON form");
      const text = write(array[i], i, depth + 1, walk);
      if (text === undefined) throw new Fault("undefined inside an array has no JSON form");
      out += i === 0 ? text : `,${text}`;
    } catch (thrown) {
      throw via(thrown, i);
    }
  }
  return `${out}]`;
}

/** The property's value, written, or `undefined` when JSON omits it. */
function writeProperty(source: object, key: string, depth: number, walk: Walk): string | undefined {
  try {
    let raw: unknown;
    try {
      raw = (source as Record<string, unknown>)[key];
    } catch (error) {
      throw new Fault("reading the property threw", true, error);
    }
    return write(raw, key, depth + 1, walk);
  } catch (thrown) {
    throw via(thrown, key);
  }
}

/** `compareCodePoints` for keys without surrogates, where it equals JavaScript's own `<`. */
function compareUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function hasSurrogate(keys: readonly string[]): boolean {
  for (let k = 0; k < keys.length; k++) {
    const key = keys[k] as string;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdfff) return true;
    }
  }
  return false;
}

/** Code-point order of `keys`, as indexes; `null` when they already are in it. */
function codePointOrder(keys: readonly string[]): number[] | null {
  const n = keys.length;
  // UTF-16 order differs from code-point order only where a surrogate meets
  // a unit above it (U+E000-U+FFFF): without surrogates, `<` is exact.
  const compare = hasSurrogate(keys) ? compareCodePoints : compareUnits;
  let i = 1;
  while (i < n && compare(keys[i - 1] as string, keys[i] as string) < 0) i++;
  if (i >= n) return null;
  const order: number[] = [];
  for (let k = 0; k < n; k++) order.push(k);
  if (n <= 16) {
    // Insertion sort: the few keys of a typical argument object.
    for (let a = 1; a < n; a++) {
      const index = order[a] as number;
      const key = keys[index] as string;
      let b = a - 1;
      while (b >= 0 && compare(keys[order[b] as number] as string, key) > 0) {
        order[b + 1] = order[b] as number;
        b--;
      }
      order[b + 1] = index;
    }
  } else {
    order.sort((x, y) => compare(keys[x] as string, keys[y] as string));
  }
  return order;
}

function writeProperties(source: object, depth: number, walk: Walk): string {
  let keys: string[];
  try {
    keys = Object.keys(source);
  } catch (error) {
    throw new Fault("listing the object's keys threw", true, error);
  }
  const n = keys.length;
  if (n === 0) return "{}";
  const order = codePointOrder(keys);
  let out = "{";
  let first = true;
  if (order === null) {
    for (let i = 0; i < n; i++) {
      const key = keys[i] as string;
      const text = writeProperty(source, key, depth, walk);
      if (text === undefined) continue;
      out += `${first ? "" : ","}${quoteKey(key)}:${text}`;
      first = false;
    }
    return `${out}}`;
  }
  // Properties are read (and toJSON called) in the object's own key order,
  // as JSON.stringify does, so the first bad value is the one reported; only
  // the output follows code-point order.
  const texts: (string | undefined)[] = [];
  for (let i = 0; i < n; i++) texts.push(writeProperty(source, keys[i] as string, depth, walk));
  for (let j = 0; j < n; j++) {
    const i = order[j] as number;
    const text = texts[i];
    if (text === undefined) continue;
    out += `${first ? "" : ","}${quoteKey(keys[i] as string)}:${text}`;
    first = false;
  }
  return `${out}}`;
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
  let text: string | undefined;
  try {
    text = write(value, "", 0, { path: [], deep: undefined });
  } catch (thrown) {
    if (thrown instanceof Fault) throw thrown.toError();
    if (thrown instanceof RangeError) {
      throw new CanonicalJsonError("$", "nesting too deep for the stack", { cause: thrown });
    }
    throw thrown;
  }
  if (text === undefined) throw new CanonicalJsonError("$", "undefined has no JSON form");
  return text;
}
