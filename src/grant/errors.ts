import { escapeHidden } from "../shown.js";
import { LoopctlError } from "../errors.js";

/**
 * A value cannot be written as canonical JSON: NaN, ±Infinity, a BigInt, a
 * function, a symbol, `undefined` where JSON has no way to omit it, a cycle,
 * an object that is not plain data (a `Map`, a `URLSearchParams`, a class
 * instance, an object with a custom prototype), or nesting deeper than the limit.
 *
 * Code `"CANONICAL_JSON"`. `jsonPath` points at the bad value, e.g. `$.a[2].b`.
 */
export class CanonicalJsonError extends LoopctlError {
  /** Where in the value the problem sits, as a JSONPath such as `$.a[2].b`. */
  readonly jsonPath: string;
  /** What is wrong with the value, e.g. `"NaN has no JSON form"`. */
  readonly problem: string;

  constructor(jsonPath: string, problem: string, options?: ErrorOptions) {
    super("CANONICAL_JSON", `cannot write canonical JSON at ${jsonPath}: ${problem}`, options);
    this.jsonPath = jsonPath;
    this.problem = problem;
  }
}

/**
 * A grant ledger exists but cannot be trusted: empty, not UTF-8, not JSON,
 * not an array, holding a record that is not a grant, or holding two
 * different rules under one grant id. A ledger that cannot
 * be read at all (EACCES, EIO) is a LedgerIoError instead: its content may be
 * sound, so it is never treated as corrupt or moved aside.
 *
 * Code `"LEDGER_CORRUPT"`. The file is never overwritten or deleted by a save
 * or a revoke; `FileGrantStore.resetCorrupt()` moves it aside on request.
 */
export class LedgerCorruptError extends LoopctlError {
  /** The ledger file at fault. */
  readonly path: string;

  constructor(path: string, problem: string, options?: ErrorOptions) {
    super("LEDGER_CORRUPT", `grant ledger ${path} is corrupt: ${problem}`, options);
    this.path = path;
  }
}

/**
 * A grant ledger is in a format this version of loopctl does not know: its
 * top level is a JSON object with a `version` member, the shape any later
 * ledger format takes (the format read here, the original's, is a JSON array
 * of grant records). It was most likely written by a newer loopctl, and its
 * grants are sound there: upgrade to use them.
 *
 * Code `"LEDGER_UNKNOWN_FORMAT"`. Not a {@link LedgerCorruptError}: the file
 * is never overwritten, deleted or moved aside, `resetCorrupt()` and
 * `clear({ corrupt: "keep-aside" })` included.
 */
export class LedgerFormatError extends LoopctlError {
  /** The ledger file at fault. */
  readonly path: string;
  /** The ledger's `version` member, as the file holds it (a JSON value). */
  readonly version: unknown;

  constructor(path: string, version: unknown) {
    super(
      "LEDGER_UNKNOWN_FORMAT",
      `grant ledger ${path} is in ledger format version ${shownVersion(version)}, which this version of loopctl ` +
        "cannot read (it reads the JSON array of grant records); it was likely written by a newer loopctl: " +
        "upgrade to use its grants",
    );
    this.path = path;
    this.version = version;
  }
}

/** A ledger's `version` as a message shows it: its JSON text, a long one cut short. */
function shownVersion(version: unknown): string {
  const text = escapeHidden(JSON.stringify(version) ?? String(version));
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}

/**
 * Reading or writing a grant ledger failed for a reason other than its
 * content, or its path cannot be trusted. Codes:
 * - `"LEDGER_IO"`: the file system failed (the ledger cannot be read, a full
 *   disk, a corrupt ledger that cannot be moved aside).
 * - `"LEDGER_NOT_REGULAR_FILE"`: the ledger is a symlink, a folder, a FIFO…;
 *   it is never read or written through.
 * - `"LEDGER_UNSAFE_PATH"`: a folder beneath the root (`projects`,
 *   `projects/<id>`) is a symlink or not a folder; it is never followed. Or
 *   the ledger has another name (a hard link), through which a writer would
 *   take another lock; it is never read or written.
 * - `"LEDGER_PERMISSIONS"`: a folder on the path or the ledger is owned by
 *   another user or writable by group or others, so its grants cannot be
 *   trusted.
 */
export class LedgerIoError extends LoopctlError {
  /** The file or folder at fault. */
  readonly path: string;

  /**
   * @param options.folder `path` is a folder on the ledger's path (the root,
   *   `projects`, `projects/<id>`), not the ledger: the message then says
   *   `grant ledger folder <path>: …` rather than `grant ledger <path>: …`.
   */
  constructor(
    code: "LEDGER_IO" | "LEDGER_NOT_REGULAR_FILE" | "LEDGER_UNSAFE_PATH" | "LEDGER_PERMISSIONS",
    path: string,
    problem: string,
    options?: ErrorOptions & { readonly folder?: boolean },
  ) {
    super(
      code,
      `${options?.folder === true ? "grant ledger folder" : "grant ledger"} ${path}: ${problem}`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.path = path;
  }
}

/**
 * The ledger's lock file could not be taken within the wait bound, or could
 * not be created at all.
 *
 * Code `"LEDGER_LOCK"`. `path` is the lock file (`grants.json.lock`).
 */
export class LedgerLockError extends LoopctlError {
  /** The lock file at fault. */
  readonly path: string;

  constructor(path: string, problem: string, options?: ErrorOptions) {
    super("LEDGER_LOCK", `grant ledger lock ${path}: ${problem}`, options);
    this.path = path;
  }
}

/**
 * A grant store or function was given an argument it cannot use: a
 * `FileGrantStore` root or project folder, or a `projectIdentity` folder, that
 * is not a non-empty string (an unset environment variable would otherwise
 * give every project so bound one shared ledger), or a `lockTimeoutMs` or
 * `staleLockMs` that is not a non-negative integer (NaN or a string would make
 * a save wait for the lock forever), a descriptor given to
 * `descriptorDigest` or `descriptorFingerprint` that is not an object, a
 * `GrantPolicy` store without `load`, `save`, `revoke` and `clear`, or
 * call options of a built-in store or of `GrantPolicy` that are not an
 * object, or whose `signal` is not an `AbortSignal` or cannot be listened to
 * (the call rejects, before an aborted signal's reason), or, of
 * `MemoryGrantStore` and `GrantPolicy`, that have a key the call does not
 * take or are an `AbortSignal` themselves.
 *
 * Code `"GRANT_CONFIG"`. `argument` names what is at fault, e.g.
 * `"projectDir"`, `"options.lockTimeoutMs"` or `"options.signal"`.
 */
export class GrantConfigError extends LoopctlError {
  /** The argument at fault, such as `"projectDir"`. */
  readonly argument: string;

  constructor(where: string, argument: string, problem: string) {
    super("GRANT_CONFIG", `${where}: ${argument} ${problem}`);
    this.argument = argument;
  }
}

/**
 * A grant record, or the arguments used to build a grant, is not valid.
 *
 * Code `"GRANT_RECORD"`. The message names the grant id or tool involved.
 */
export class GrantRecordError extends LoopctlError {
  constructor(message: string, options?: ErrorOptions) {
    super("GRANT_RECORD", message, options);
  }
}

/**
 * A save whose grant id is already taken by a different rule (another tool,
 * verdict or scope). Ids are 64-bit FNV-1a digests, which a hostile caller can
 * make collide on purpose; replacing the stored rule (a deny, say) with the
 * colliding one would silently change what was decided, so the save is
 * refused and the ledger left as it was.
 */
export class GrantIdCollisionError extends LoopctlError {
  /** The contested grant id. */
  readonly id: string;

  /**
   * @param where The store holding the id, for the message (`grant ledger <path>`); omitted when
   *   there is nothing to name.
   */
  constructor(id: string, stored: string, incoming: string, where?: string) {
    super(
      "GRANT_ID_COLLISION",
      `grant id ${id}${where === undefined ? "" : ` in ${where}`} is already taken by a different rule ` +
        `(stored ${stored}, new ${incoming}); refusing to replace it`,
    );
    this.id = id;
  }
}
