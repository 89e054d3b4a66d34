import { LoopctlError } from "../errors.js";
import type { AuditProblem } from "./verify.js";

/**
 * A file system path the audit sink refuses: a symbolic link, not a regular
 * file, or a log moved aside, replaced or removed while a sink had it open.
 */
export class AuditPathError extends LoopctlError {
  /** The refused path. */
  readonly path: string;

  constructor(path: string, message: string, options?: ErrorOptions) {
    super("AUDIT_PATH", message, options);
    this.path = path;
  }
}

/**
 * An existing audit log that does not verify. The sink never appends to it:
 * appending would bury the evidence under lines that chain to a broken prefix.
 */
export class AuditCorruptError extends LoopctlError {
  /** The log file. */
  readonly path: string;
  /** The 1-based line at which verification failed. */
  readonly line: number;
  /** What verification found at that line. */
  readonly problem: AuditProblem;

  constructor(path: string, line: number, problem: AuditProblem, message: string) {
    super("AUDIT_CORRUPT", message);
    this.path = path;
    this.line = line;
    this.problem = problem;
  }
}

/** Reading, writing, syncing or closing an audit log failed. */
export class AuditIoError extends LoopctlError {
  /** The log file. */
  readonly path: string;

  constructor(path: string, message: string, options?: ErrorOptions) {
    super("AUDIT_IO", message, options);
    this.path = path;
  }
}

/** A value handed to the sink is not a valid `GateDecision`. */
export class AuditRecordError extends LoopctlError {
  constructor(message: string, options?: ErrorOptions) {
    super("AUDIT_RECORD", message, options);
  }
}

/** An append reached a sink that was already closed. */
export class AuditClosedError extends LoopctlError {
  /** The log file. */
  readonly path: string;

  constructor(path: string) {
    super("AUDIT_CLOSED", `audit log ${path} is closed; the record was not written`);
    this.path = path;
  }
}

/**
 * The log is already open for appending by another sink in this process. Two
 * writers would each extend the chain from their own last line and fork it.
 */
export class AuditBusyError extends LoopctlError {
  /** The log file. */
  readonly path: string;

  constructor(path: string) {
    super("AUDIT_BUSY", `audit log ${path} is already open for appending in this process; close that sink first`);
    this.path = path;
  }
}

/**
 * An audit key that cannot be used: shorter than `AUDIT_KEY_MIN_BYTES`, a
 * key file others can read or write, or a keyed log opened without its key.
 */
export class AuditKeyError extends LoopctlError {
  constructor(message: string, options?: ErrorOptions) {
    super("AUDIT_KEY", message, options);
  }
}

/**
 * The lock that serializes writers of one log across processes could not be
 * taken in time, or at all, or was broken (as abandoned, by a writer on
 * another host) before this writer wrote. Nothing was written.
 */
export class AuditLockError extends LoopctlError {
  /** The log file. */
  readonly path: string;

  constructor(path: string, message: string, options?: ErrorOptions) {
    super("AUDIT_LOCK", message, options);
    this.path = path;
  }
}

/**
 * An argument or option of an audit function that cannot be used: a `path`
 * that is not a non-empty string, `options` that are not an object, a
 * `lockTimeoutMs` that is not a non-negative integer, an `fsync` that is not a
 * boolean, an `onError` that is not a function, a `signal` that is not an
 * AbortSignal, bytes to verify that are not a Uint8Array, a `seal` that is not
 * text, a sink that is not an AuditSink, an option the function does not take.
 */
export class AuditConfigError extends LoopctlError {
  /** The argument or option at fault, such as `"lockTimeoutMs"`, `"path"` or `"options"`. */
  readonly option: string;

  constructor(option: string, message: string) {
    super("AUDIT_CONFIG", message);
    this.option = option;
  }
}

/** An anchor string that is not `<seq>:<64 hex>`. */
export class AuditAnchorError extends LoopctlError {
  constructor(message: string) {
    super("AUDIT_ANCHOR", message);
  }
}

/** Every error the audit module throws on purpose. */
export type AuditError =
  | AuditPathError
  | AuditCorruptError
  | AuditIoError
  | AuditRecordError
  | AuditClosedError
  | AuditBusyError
  | AuditKeyError
  | AuditLockError
  | AuditConfigError
  | AuditAnchorError;
