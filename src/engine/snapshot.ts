import { shownText } from "../shown.js";
import { CANONICAL_JSON_MAX_DEPTH, canonicalJson, digest16 } from "../grant/index.js";
import { sha256Hex } from "../grant/digest.js";
import { describeError } from "./errors.js";

/**
 * A call's arguments as the gate reads them, once: `value` is the parse of
 * their canonical JSON, deeply frozen, and the digests are over that same
 * text. Everything after the snapshot (validation, hooks, grants, the ask,
 * the record, `execute`) sees `value`, so nothing the model's object does
 * later (a getter, a mutation, an inherited property, `toJSON`) reaches them.
 */
export interface Snapshot {
  readonly value: unknown;
  readonly argsDigest: string;
  readonly argsSha256: string;
}

/** Arguments that are not a JSON value, and why. */
export interface NotJson {
  readonly problem: string;
}

function deepFreeze(value: unknown): void {
  if (typeof value !== "object" || value === null) return;
  Object.freeze(value);
  for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
}

/** Reads `input` into a {@link Snapshot}, or says why it is not a JSON value. */
export function snapshot(input: unknown): Snapshot | NotJson {
  let text: string;
  try {
    text = canonicalJson(input);
  } catch (error) {
    return { problem: describeError(error) };
  }
  const value: unknown = JSON.parse(text);
  deepFreeze(value);
  return { value, argsDigest: digest16(text), argsSha256: sha256Hex(text) };
}

/** The copies {@link frozenJson} made: deeply frozen plain data, which nothing can change. */
const frozenCopies = new WeakSet<object>();

/**
 * A deeply frozen JSON copy of `value` (its canonical JSON, parsed).
 * @throws {TypeError} when `value` is not a JSON value.
 */
export function frozenJson<T>(value: T): T {
  const read = snapshot(value);
  if (!isSnapshot(read)) throw new TypeError(read.problem);
  if (typeof read.value === "object" && read.value !== null) frozenCopies.add(read.value);
  return read.value as T;
}

/** Whether `value` is a copy {@link frozenJson} made, so that it can never change. */
export function isFrozenJson(value: unknown): boolean {
  return typeof value === "object" && value !== null && frozenCopies.has(value);
}

/**
 * Whether `value` is plain JSON data that can never change: a copy
 * {@link frozenJson} made, or (another copy of loopctl's, say) one whose
 * every object and array is frozen, has `Object.prototype`, `null` or
 * `Array.prototype` for its prototype and only data properties, and whose
 * every value is a string, a finite number, a boolean, `null` or such an
 * object, with no cycle. An object frozen only at its top is not: its
 * nested objects can still be written to.
 */
export function isImmutableJson(value: unknown): boolean {
  return isFrozenJson(value) || immutable(value, []);
}

function immutable(value: unknown, ancestors: object[]): boolean {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(value);
    case "object":
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (!Object.isFrozen(value) || ancestors.includes(value) || ancestors.length >= CANONICAL_JSON_MAX_DEPTH)
    return false;
  const proto: unknown = Object.getPrototypeOf(value);
  const array = Array.isArray(value);
  if (array ? proto !== Array.prototype : proto !== Object.prototype && proto !== null) return false;
  const keys = array ? Array.from({ length: (value as unknown[]).length }, (_, i) => String(i)) : Object.keys(value);
  ancestors.push(value);
  for (const key of keys) {
    const own = Object.getOwnPropertyDescriptor(value, key);
    if (own === undefined || !("value" in own) || !immutable(own.value, ancestors)) return false;
  }
  ancestors.pop();
  return true;
}

export function isSnapshot(read: Snapshot | NotJson): read is Snapshot {
  return "value" in read;
}

/** A value refused by {@link keptJson}: where it is, and what it is. */
class NotJsonValue extends Error {}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** What a value that has no JSON form is, for a message. */
function notJsonKind(value: unknown): string | undefined {
  switch (typeof value) {
    case "function":
      return "a function";
    case "symbol":
      return "a symbol";
    case "bigint":
      return "a BigInt";
    case "number":
      return Number.isFinite(value) ? undefined : `${value}`;
    case "object": {
      if (value === null || Array.isArray(value)) return undefined;
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto === Object.prototype || proto === null) return undefined;
      const name: unknown = (proto as { constructor?: { name?: unknown } }).constructor?.name;
      return `${typeof name === "string" && name !== "" ? `a ${name}` : "an object"}, not plain data`;
    }
    default:
      return undefined;
  }
}

/**
 * `value` as JSON keeps it, read once, with its keys in the order given:
 * `JSON.parse(JSON.stringify(value))`, deeply frozen. `toJSON` is honoured
 * and object properties whose value is `undefined` are left out, as JSON does;
 * anything JSON would change or cannot write (a function, a symbol, a
 * BigInt, NaN or ±Infinity, `undefined` or a hole inside an array, a Map or
 * other object that is not plain data, a cycle, more than
 * `CANONICAL_JSON_MAX_DEPTH` levels of nesting, a read that throws) is
 * refused, the problem naming its path. The cost is that of the value, once.
 */
export function keptJson(value: unknown): { readonly value: unknown } | NotJson {
  // Where each container reached so far sits, and how deep.
  const at = new Map<object, { readonly path: string; readonly depth: number }>();
  let text: string | undefined;
  try {
    text = JSON.stringify(value, function (this: unknown, key: string, item: unknown): unknown {
      const holder = at.get(this as object);
      const path =
        holder === undefined
          ? "$"
          : holder.path + (Array.isArray(this) ? `[${key}]` : IDENTIFIER.test(key) ? `.${key}` : `[${shownText(key)}]`);
      const depth = holder === undefined ? 0 : holder.depth + 1;
      if (item === undefined) {
        if (holder !== undefined && !Array.isArray(this)) return undefined;
        throw new NotJsonValue(`${path}: undefined${holder === undefined ? "" : " inside an array (or a hole)"}`);
      }
      const kind = notJsonKind(item);
      if (kind !== undefined) throw new NotJsonValue(`${path}: ${kind}`);
      if (typeof item === "object" && item !== null) {
        if (depth >= CANONICAL_JSON_MAX_DEPTH)
          throw new NotJsonValue(`${path}: nested too deep (more than ${CANONICAL_JSON_MAX_DEPTH} levels)`);
        // An object met before at a path this one goes on from holds this one: a cycle.
        const before = at.get(item)?.path;
        if (before !== undefined && path.startsWith(before) && /^[.[]/.test(path.slice(before.length)))
          throw new NotJsonValue(`${path}: a cycle (the object at ${before})`);
        at.set(item, { path, depth });
      }
      return item;
    });
  } catch (error) {
    // A read that throws (a getter, a proxy) is passed on as it is.
    return { problem: describeError(error) };
  }
  if (text === undefined) return { problem: "$: has no JSON form" };
  const copy: unknown = JSON.parse(text);
  deepFreeze(copy);
  // Deeply frozen plain data, as frozenJson's copies are: what reads it may rely on it never changing.
  if (typeof copy === "object" && copy !== null) frozenCopies.add(copy);
  return { value: copy };
}
