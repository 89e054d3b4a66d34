import { shownText } from "./shown.js";

/** Marks loopctl's error classes in every copy of the package a process loads (its ESM and CommonJS builds, a bundle). */
const ERROR_CLASS = Symbol.for("loopctl.errorClass");

/**
 * The base class of every error loopctl throws on purpose.
 *
 * `code` is stable across releases and safe to switch on; `message` names the
 * file, id or tool at fault and may be reworded.
 *
 * `instanceof` holds across copies of loopctl in one process: an error from
 * the CommonJS build is an instance of the ESM build's class of the same name,
 * and the other way round.
 */
export class LoopctlError extends Error {
  /** @internal */
  static readonly [ERROR_CLASS] = true;

  /** A stable, machine-readable identifier such as `"LEDGER_CORRUPT"`. */
  readonly code: string;

  constructor(code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }

  /**
   * True when `value` was made by this class or a subclass, in this copy of
   * loopctl or another: a loopctl error class of the same name is on its
   * prototype chain.
   */
  static override [Symbol.hasInstance]<T>(this: abstract new (...args: never[]) => T, value: unknown): value is T {
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true;
    if (typeof value !== "object" || value === null) return false;
    for (let proto: unknown = Object.getPrototypeOf(value); proto !== null; proto = Object.getPrototypeOf(proto)) {
      const owner: unknown = Object.hasOwn(proto as object, "constructor")
        ? (proto as { constructor: unknown }).constructor
        : undefined;
      if (
        typeof owner === "function" &&
        (owner as { [ERROR_CLASS]?: unknown })[ERROR_CLASS] === true &&
        owner.name === this.name
      )
        return true;
    }
    return false;
  }
}

/**
 * A short, printable description of a thrown value. It never throws: what
 * is thrown is outside code's (a `message` getter, a proxy, a `toString`
 * that throws), and describing it must not turn a tool that ran, or a
 * refusal, into something else.
 */
export function describeError(error: unknown): string {
  try {
    if (error instanceof Error) {
      const message: unknown = error.message;
      if (typeof message === "string" && message !== "") return message;
      const name: unknown = error.name;
      return typeof name === "string" && name !== "" ? name : "Error";
    }
    return String(error);
  } catch {
    return "unprintable error";
  }
}

/**
 * @internal A value as an argument error shows it: strings quoted ({@link shownText}), numbers
 * as they are, objects by their type. It never calls the value's own
 * `toString`, which may be missing or throw.
 */
export function shownValue(value: unknown): string {
  if (typeof value === "string") return shownText(value);
  if (typeof value === "number" || typeof value === "boolean" || value === undefined || value === null) {
    return String(value);
  }
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}
