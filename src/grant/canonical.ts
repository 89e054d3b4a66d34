import { isDate, isProxy } from "node:util/types";
import { CanonicalJsonError } from "./errors.js";

/**
 * The deepest nesting canonicalJson accepts: at most this many arrays and
 * objects open around any value. The writer keeps its own stack, so this
 * holds exactly, however much of the call stack the caller has used.
 */
export const CANONICAL_JSON_MAX_DEPTH = 1000;

/**
 * The most values canonicalJson reaches in one call: every string, number,
 * boolean, null, array and object, and every property whose value is
 * `undefined` (reached, then omitted). A value shared by reference counts
 * each time it is reached, so a small object graph that spells a huge text
 * (`[x, x]` nested 26 times) stops here after a million steps instead of
 * walking 2^27 of them.
 */
export const CANONICAL_JSON_MAX_NODES = 1_000_000;

/**
 * The longest canonical text canonicalJson writes, in UTF-8 bytes (32 MiB):
 * larger than any tool call a model writes or any tool descriptor, far
 * smaller than what exhausts a process.
 */
export const CANONICAL_JSON_MAX_BYTES = 32 * 1024 * 1024;

/** Which of canonicalJson's limits a value went past. */
export type CanonicalJsonLimit = "depth" | "nodes" | "bytes";

/**
 * A value goes past one of canonicalJson's limits: nesting deeper than
 * {@link CANONICAL_JSON_MAX_DEPTH}, more values than
 * {@link CANONICAL_JSON_MAX_NODES}, or a text longer than
 * {@link CANONICAL_JSON_MAX_BYTES}. Code `"CANONICAL_JSON"`, like every
 * {@link CanonicalJsonError}; `jsonPath` names the value at which the limit
 * was crossed.
 */
export class CanonicalJsonLimitError extends CanonicalJsonError {
  /** The limit crossed. */
  readonly limit: CanonicalJsonLimit;
  /** Its value. */
  readonly max: number;

  constructor(jsonPath: string, limit: CanonicalJsonLimit, max: number) {
    super(jsonPath, LIMIT_PROBLEMS[limit](max));
    this.limit = limit;
    this.max = max;
  }
}

const LIMIT_PROBLEMS: Readonly<Record<CanonicalJsonLimit, (max: number) => string>> = {
  depth: (max) => `nesting deeper than ${max} levels`,
  nodes: (max) => `more than ${max} values (shared references count each time)`,
  bytes: (max) => `the text would be longer than ${max} bytes`,
};

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
  const ua = a.charCodeAt(i);
  const ub = b.charCodeAt(i);
  // Two units that are not surrogates are whole code points.
  if ((ua < 0xd800 || ua > 0xdfff) && (ub < 0xd800 || ub > 0xdfff)) return ua - ub;
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
 * A problem found while writing. The writer turns it into a
 * {@link CanonicalJsonError} naming the path, read off its own stack.
 */
class Fault extends Error {
  readonly problem: string;
  readonly limit: CanonicalJsonLimit | undefined;
  override readonly cause: unknown;
  readonly hasCause: boolean;

  constructor(problem: string, options: { limit?: CanonicalJsonLimit; cause?: unknown } = {}) {
    super(problem);
    this.problem = problem;
    this.limit = options.limit;
    this.hasCause = "cause" in options;
    this.cause = options.cause;
  }
}

type ToJsonable = { toJSON: (key: string) => unknown };

function hasToJson(value: object): value is ToJsonable {
  return typeof (value as Partial<ToJsonable>).toJSON === "function";
}

const REFUSED_OBJECTS: ReadonlyArray<readonly [abstract new (...args: never[]) => unknown, string]> = [
  [Map, "a Map"],
  [Set, "a Set"],
  [WeakMap, "a WeakMap"],
  [WeakSet, "a WeakSet"],
  [Promise, "a Promise"],
  [RegExp, "a RegExp"],
  [ArrayBuffer, "an ArrayBuffer"],
];

const PLAIN_DATA = "only plain objects, arrays and what toJSON returns are written";

/** The name of the class `proto` belongs to, for a message, read without running a getter; `undefined` if none. */
function className(proto: object): string | undefined {
  try {
    const ctor: unknown = Object.getOwnPropertyDescriptor(proto, "constructor")?.value;
    if (typeof ctor !== "function") return undefined;
    const name: unknown = Object.getOwnPropertyDescriptor(ctor, "name")?.value;
    return typeof name === "string" && name !== "" ? name : undefined;
  } catch {
    // A proxy's trap threw: the object is refused all the same, unnamed.
    return undefined;
  }
}

/**
 * An array or object being written: which child is next, and where its text
 * lies in the writer's output. One class for both, so the loop that walks
 * them sees one shape.
 */
class Frame {
  readonly value: object;
  /** The object's own keys, in the order properties are read; `null` for an array. */
  readonly keys: readonly string[] | null;
  readonly length: number;
  /** Where `keys` are not in code-point order: the order to write them in. */
  readonly order: readonly number[] | null;
  /** The child being written (an index into the array, or into `keys`). */
  index = 0;
  /** Where its children's text begins in the output (just after its opening bracket). */
  readonly start: number;
  /** Where the child being written begins in the output: a slot for its comma and key. */
  mark = 0;
  /** With `order`: where each `"key":value` lies in the output, `undefined` where a property is omitted. */
  readonly members: (readonly [number, number] | undefined)[] | null;
  /** Children written so far, for the commas. */
  written = 0;

  constructor(value: object, keys: readonly string[] | null, length: number, start: number) {
    this.value = value;
    this.keys = keys;
    this.length = length;
    this.order = keys === null ? null : codePointOrder(keys);
    this.members = this.order === null ? null : [];
    this.start = start;
  }

  /** The path segment of the child being written: `[2]`, `.name` or `["a b"]`. */
  segment(): string {
    if (this.keys === null) return `[${this.index}]`;
    const key = this.keys[this.index] as string;
    return IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
  }
}

/** Quoted object keys with their colon, bounded: cleared when full. */
const quotedKeys = new Map<string, string>();
const QUOTED_KEYS_MAX = 4096;

/** What {@link Writer} returns for a value it opened as a container instead of writing it. */
const OPENED = Symbol("opened");

/** What {@link Writer} returns for a container it closed: its text is in the output already. */
const WRITTEN = Symbol("written");

/** Up to this depth, scanning the open containers beats hashing into a Set. */
const SCAN_DEPTH = 32;

/**
 * One canonicalJson call. It walks the value with a stack of its own rather
 * than by recursion, so its depth limit does not depend on the stack the
 * caller left, and it counts the values it reaches and the bytes it writes as
 * it goes, so a hostile value stops at a limit in a bounded number of steps.
 * The text goes into one list of pieces, joined once at the end: building a
 * string per container would make and keep millions of short-lived strings
 * for a value that is refused at a limit anyway.
 */
class Writer {
  readonly #stack: Frame[] = [];
  readonly #out: string[] = [];
  /** The containers open deeper than {@link SCAN_DEPTH}, for the cycle check. */
  #deep: Set<object> | undefined;
  #nodes = 0;
  #bytes = 0;

  write(root: unknown): string {
    const stack = this.#stack;
    let result: string | undefined | typeof OPENED | typeof WRITTEN;
    try {
      result = this.#value(root, "");
      while (stack.length > 0) {
        const frame = stack[stack.length - 1] as Frame;
        if (result !== OPENED) {
          this.#deliver(frame, result);
          frame.index++;
        }
        result = frame.index < frame.length ? this.#child(frame) : this.#close(frame);
      }
    } catch (thrown) {
      if (thrown instanceof Fault) throw this.#error(thrown);
      throw thrown;
    }
    if (result === undefined || result === OPENED) throw new CanonicalJsonError("$", "undefined has no JSON form");
    return result === WRITTEN ? this.#out.join("") : result;
  }

  /** Counts `bytes` more of output. */
  #spend(bytes: number): void {
    this.#bytes += bytes;
    if (this.#bytes > CANONICAL_JSON_MAX_BYTES) throw new Fault("", { limit: "bytes" });
  }

  #child(frame: Frame): string | undefined | typeof OPENED {
    const source = frame.value as Record<string | number, unknown>;
    const i = frame.index;
    // The child's comma and key go before its text, known only once it is
    // written: one slot for each, filled (or dropped) when it is delivered.
    frame.mark = this.#out.length;
    this.#out.push("", "");
    if (frame.keys === null) {
      let raw: unknown;
      let present: boolean;
      try {
        present = i in source;
        raw = source[i];
      } catch (error) {
        throw new Fault("reading the value threw", { cause: error });
      }
      if (!present) throw new Fault("an array hole has no JSON form");
      return this.#value(raw, i);
    }
    const key = frame.keys[i] as string;
    let raw: unknown;
    try {
      raw = source[key];
    } catch (error) {
      throw new Fault("reading the property threw", { cause: error });
    }
    return this.#value(raw, key);
  }

  /** Adds the child just written to its container; a comma goes before each but the first. */
  #deliver(frame: Frame, text: string | undefined | typeof WRITTEN): void {
    const out = this.#out;
    if (frame.keys === null) {
      if (text === undefined) throw new Fault("undefined inside an array has no JSON form");
    } else {
      if (text === undefined) {
        out.length = frame.mark;
        return;
      }
      out[frame.mark + 1] = this.#quoteKey(frame.keys[frame.index] as string);
    }
    if (frame.written > 0) this.#spend(1);
    if (text !== WRITTEN) out.push(text);
    // A member of an object written out of order gets its comma when the
    // object closes, in code-point order.
    if (frame.members !== null) frame.members[frame.index] = [frame.mark + 1, out.length];
    else if (frame.written > 0) out[frame.mark] = ",";
    frame.written++;
  }

  #close(frame: Frame): typeof WRITTEN {
    const stack = this.#stack;
    const out = this.#out;
    stack.pop();
    if (stack.length >= SCAN_DEPTH) this.#deep?.delete(frame.value);
    if (frame.keys === null) {
      out.push("]");
      return WRITTEN;
    }
    if (frame.order === null || frame.members === null) {
      out.push("}");
      return WRITTEN;
    }
    // Properties were read (and toJSON called) in the object's own key order,
    // as JSON.stringify reads them, so the first bad value is the one
    // reported; only the output follows code-point order.
    const pieces = out.splice(frame.start);
    let first = true;
    for (const i of frame.order) {
      const member = frame.members[i];
      if (member === undefined) continue;
      if (!first) out.push(",");
      for (let k = member[0]; k < member[1]; k++) out.push(pieces[k - frame.start] as string);
      first = false;
    }
    out.push("}");
    return WRITTEN;
  }

  /**
   * Writes one value, opens it as a container (returning {@link OPENED}), or
   * returns `undefined` for "omit this property". Mirrors `JSON.stringify`'s
   * `toJSON` and boxed-primitive handling, but refuses what it would silently
   * turn into `null` or `{}`.
   */
  #value(value: unknown, key: string | number): string | undefined | typeof OPENED {
    if (++this.#nodes > CANONICAL_JSON_MAX_NODES) throw new Fault("", { limit: "nodes" });
    if (typeof value === "object" && value !== null) return this.#object(value, key);
    return this.#primitive(value);
  }

  #primitive(value: unknown): string | undefined {
    switch (typeof value) {
      case "string":
        return this.#quote(value);
      case "number": {
        if (!Number.isFinite(value)) throw new Fault(`${String(value)} has no JSON form`);
        const text = String(value);
        this.#spend(text.length);
        return text;
      }
      case "boolean":
        this.#spend(value ? 4 : 5);
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
        // null: the one object that reaches here.
        this.#spend(4);
        return "null";
    }
  }

  #object(input: object, key: string | number): string | undefined | typeof OPENED {
    try {
      return this.#objectChecked(input, key);
    } catch (thrown) {
      // A proxy trap (toJSON lookup, instanceof, …) may throw where no finer
      // check is; that is still the caller's bad value, not a crash.
      if (thrown instanceof Fault) throw thrown;
      throw new Fault("reading the value threw", { cause: thrown });
    }
  }

  #objectChecked(input: object, key: string | number): string | undefined | typeof OPENED {
    let value: unknown = input;
    if (hasToJson(input)) {
      try {
        value = input.toJSON(typeof key === "number" ? String(key) : key);
      } catch (error) {
        throw new Fault("toJSON() threw", { cause: error });
      }
      // Date's own toJSON gives null for a time of NaN: the date would be lost, not written.
      if (value === null && isDate(input) && Number.isNaN(Date.prototype.getTime.call(input))) {
        throw new Fault("an invalid Date has no JSON form");
      }
    }
    if (typeof value === "object" && value !== null && !isProxy(value)) {
      // A plain object or array (the shape of almost all arguments) cannot be
      // a boxed primitive or any refused kind: those checks would all be false.
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto === Object.prototype || (proto === Array.prototype && Array.isArray(value))) return this.#open(value);
    }
    if (value instanceof Number || value instanceof String || value instanceof Boolean) {
      value = value.valueOf();
    } else if (value instanceof BigInt) {
      throw new Fault("a BigInt has no JSON form");
    } else if (value instanceof Symbol) {
      throw new Fault("a symbol has no JSON form");
    }
    // What toJSON or unboxing gave is written as it is, never converted again.
    if (typeof value !== "object" || value === null) return this.#primitive(value);
    if (ArrayBuffer.isView(value)) throw new Fault("a typed array or DataView has no faithful JSON form");
    for (const [ctor, name] of REFUSED_OBJECTS) {
      if (value instanceof ctor) throw new Fault(`${name} has no faithful JSON form`);
    }
    // Anything else but plain data (URLSearchParams, a class instance whose
    // data sits in getters or private fields, an object inheriting its
    // properties) has no own enumerable properties to speak of: written as
    // {}, a grant for {} would cover it, whatever it holds.
    if (!Array.isArray(value)) {
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        const name = className(proto as object);
        const what = name === undefined ? "an object with a custom prototype" : `an object of class ${name}`;
        throw new Fault(`${what} has no faithful JSON form (${PLAIN_DATA})`);
      }
    }
    return this.#open(value);
  }

  #open(value: object): typeof OPENED {
    const stack = this.#stack;
    const depth = stack.length;
    const scan = depth < SCAN_DEPTH ? depth : SCAN_DEPTH;
    for (let i = 0; i < scan; i++) {
      if ((stack[i] as Frame).value === value) throw new Fault("the value contains a cycle");
    }
    if (depth > SCAN_DEPTH && this.#deep?.has(value) === true) throw new Fault("the value contains a cycle");
    if (depth >= CANONICAL_JSON_MAX_DEPTH) throw new Fault("", { limit: "depth" });
    let frame: Frame;
    const out = this.#out;
    if (Array.isArray(value)) {
      out.push("[");
      frame = new Frame(value, null, value.length, out.length);
    } else {
      let keys: string[];
      try {
        keys = Object.keys(value);
      } catch (error) {
        throw new Fault("listing the object's keys threw", { cause: error });
      }
      out.push("{");
      frame = new Frame(value, keys, keys.length, out.length);
    }
    // Both brackets are counted as the container opens, so the value that
    // crosses the size limit is the one named, not the bracket after it.
    this.#spend(2);
    stack.push(frame);
    if (depth >= SCAN_DEPTH) (this.#deep ??= new Set()).add(value);
    return OPENED;
  }

  /**
   * A string as a JSON string literal, escaped exactly as `JSON.stringify`
   * escapes it, its UTF-8 length counted. Most strings are printable ASCII
   * and need no escape at all; those are quoted without a call into the
   * native serializer.
   */
  #quote(text: string): string {
    const length = text.length;
    // Nothing quoted is shorter than its text plus two quotes, in any unit:
    // a string too long is refused before it is scanned.
    if (this.#bytes + length + 2 > CANONICAL_JSON_MAX_BYTES) this.#spend(length + 2);
    let escape = false;
    for (let i = 0; i < length; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0x80) {
        // JSON.stringify escapes lone surrogates, so the quoted text is
        // well-formed and its UTF-8 length exact.
        const quoted = JSON.stringify(text);
        this.#spend(Buffer.byteLength(quoted, "utf8"));
        return quoted;
      }
      if (c < 0x20 || c === 0x22 || c === 0x5c) escape = true;
    }
    // ASCII in, ASCII out: one byte per character.
    const quoted = escape ? JSON.stringify(text) : `"${text}"`;
    this.#spend(quoted.length);
    return quoted;
  }

  /**
   * An object key, quoted, and the colon after it. Argument objects of one
   * tool repeat the same few keys call after call, so short keys that quote
   * to ASCII are remembered (their UTF-8 length is their length), and every
   * member with such a key shares one string.
   */
  #quoteKey(key: string): string {
    let quoted = quotedKeys.get(key);
    if (quoted !== undefined) {
      this.#spend(quoted.length);
      return quoted;
    }
    const before = this.#bytes;
    quoted = `${this.#quote(key)}:`;
    this.#spend(1);
    if (key.length <= 64 && this.#bytes - before === quoted.length) {
      if (quotedKeys.size >= QUOTED_KEYS_MAX) quotedKeys.clear();
      quotedKeys.set(key, quoted);
    }
    return quoted;
  }

  /** The typed error for `fault`, its path read off the stack. */
  #error(fault: Fault): CanonicalJsonError {
    let path = "$";
    for (const frame of this.#stack) path += frame.segment();
    if (fault.limit !== undefined) return new CanonicalJsonLimitError(path, fault.limit, LIMITS[fault.limit]);
    return fault.hasCause
      ? new CanonicalJsonError(path, fault.problem, { cause: fault.cause })
      : new CanonicalJsonError(path, fault.problem);
  }
}

const LIMITS: Readonly<Record<CanonicalJsonLimit, number>> = {
  depth: CANONICAL_JSON_MAX_DEPTH,
  nodes: CANONICAL_JSON_MAX_NODES,
  bytes: CANONICAL_JSON_MAX_BYTES,
};

/** Indexes of `keys` in code-point order of the keys; `null` when they already are in it. */
function codePointOrder(keys: readonly string[]): number[] | null {
  const n = keys.length;
  let i = 1;
  while (i < n && compareCodePoints(keys[i - 1] as string, keys[i] as string) < 0) i++;
  if (i >= n) return null;
  const order: number[] = [];
  for (let k = 0; k < n; k++) order.push(k);
  if (n > 16) return order.sort((x, y) => compareCodePoints(keys[x] as string, keys[y] as string));
  // Insertion sort: the few keys of a typical argument object.
  for (let a = 1; a < n; a++) {
    const index = order[a] as number;
    const key = keys[index] as string;
    let b = a - 1;
    while (b >= 0 && compareCodePoints(keys[order[b] as number] as string, key) > 0) {
      order[b + 1] = order[b] as number;
      b--;
    }
    order[b + 1] = index;
  }
  return order;
}

/**
 * Writes `value` as canonical JSON: compact, object keys sorted recursively by
 * Unicode code point (UTF-8 byte order), array order kept, strings escaped as
 * `JSON.stringify` escapes them (lone surrogates become `\udxxx`, so the text
 * is always well-formed and UTF-8 encodable).
 *
 * `toJSON` is honoured as by `JSON.stringify` (a `Date` becomes its ISO
 * string), and object properties whose value is `undefined` are omitted.
 * Objects are written only when they are plain data: arrays, and objects
 * whose prototype is `Object.prototype` or `null` (what `JSON.parse` and zod
 * make); any other (a `Map`, a `URLSearchParams`, a class instance whose data
 * sits in getters or private fields) would otherwise be written as `{}`.
 *
 * Bounded: at most {@link CANONICAL_JSON_MAX_DEPTH} levels of nesting,
 * {@link CANONICAL_JSON_MAX_NODES} values reached and
 * {@link CANONICAL_JSON_MAX_BYTES} bytes of text; past one of them it stops
 * where the limit was crossed.
 *
 * @throws {CanonicalJsonLimitError} past a limit, naming the path where it was crossed.
 * @throws {CanonicalJsonError} for NaN, ±Infinity, an invalid Date, a BigInt,
 * a function, a symbol, `undefined` at the top or inside an array, an array hole, a cycle,
 * a Map/Set/typed array, any other object that is not plain data; the message
 * names the path to the value.
 * @example
 * canonicalJson({ b: 1, a: [true, null] }) // '{"a":[true,null],"b":1}'
 */
export function canonicalJson(value: unknown): string {
  return new Writer().write(value);
}
