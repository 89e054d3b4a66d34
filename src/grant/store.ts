import { isAbortSignal } from "../abort-signal.js";
import { describeError } from "../errors.js";
import { Grant } from "./grant.js";
import { GrantConfigError, GrantIdCollisionError, GrantRecordError } from "./errors.js";
import { shownValue } from "../errors.js";
import { everyKey, optionsProblem, shownKey } from "../unknown-option.js";
import { GrantIndex, coveringList, requireCoveringQuery } from "./grant-index.js";

/** Options for one call to a {@link GrantStore}. */
export interface StoreCallOptions {
  /**
   * Stops the call: it rejects with the signal's reason. A store that waits
   * (for a lock, for its own earlier calls) stops waiting at once, and
   * nothing is half-written: a change is made whole or not at all. A signal
   * already aborted rejects before the call's arguments are checked; one that
   * cannot be listened to is refused with GrantConfigError.
   */
  readonly signal?: AbortSignal | undefined;
}

/**
 * Where grants are remembered. Implementations keep at most one grant per id:
 * saving a grant whose id is already stored replaces that entry when it is
 * the same rule (tool, verdict, scope), and is refused with
 * GrantIdCollisionError when a different rule owns the id. Every method
 * rejects with the signal's reason once `options.signal` is aborted.
 */
export interface GrantStore {
  /** Every stored grant. */
  load(options?: StoreCallOptions): Promise<Grant[]>;
  /** Stores `grant`, replacing any grant with the same id; resolves to it. */
  save(grant: Grant, options?: StoreCallOptions): Promise<Grant>;
  /** Removes the grant with `id`; resolves to it, or `undefined` when none was stored. */
  revoke(id: string, options?: StoreCallOptions): Promise<Grant | undefined>;
  /** Removes every grant; resolves to how many were removed. */
  clear(options?: StoreCallOptions): Promise<number>;
  /**
   * Optional: the stored grants that cover a call of `tool` whose arguments'
   * canonical JSON is `canonicalArgs` (its `this_tool` grants and the
   * `this_call` grants for exactly those arguments), as of this call. A store
   * that has it lets `GrantPolicy` decide without loading every grant, so a
   * decision costs the same with 10 grants or 100k; without it the policy
   * loads the store for each decision. `canonicalArgs` is `canonicalJson(args)`:
   * another text of the same arguments (`JSON.stringify`'s) would miss their
   * this_call grants, so the built-in stores refuse it with GrantConfigError.
   */
  covering?(tool: string, canonicalArgs: string, options?: StoreCallOptions): Promise<readonly Grant[]>;
  /**
   * Optional: removes every grant of `tool` (matched exactly) in one change,
   * all or nothing; resolves to them, oldest first, or to an empty array when
   * there are none. `FileGrantStore` and `PostgresGrantStore` have it;
   * `loopctl grants reset --tool` uses it when a store has it, and revokes
   * the loaded grants one by one when it has not.
   */
  revokeTool?(tool: string, options?: StoreCallOptions): Promise<Grant[]>;
}

/** Whether `value` has what every grant store has: `load`, `save`, `revoke` and `clear` as functions. */
export function isGrantStore(value: unknown): value is GrantStore {
  if (typeof value !== "object" || value === null) return false;
  const methods = value as Partial<Record<keyof GrantStore, unknown>>;
  return (["load", "save", "revoke", "clear"] as const).every((name) => typeof methods[name] === "function");
}

/**
 * The id a `revoke` was given, refused unless it is a string: a Grant (or
 * anything else) passed for its id would otherwise name no grant and revoke
 * nothing without a word.
 *
 * @throws {GrantConfigError} naming `where` and `id`.
 */
export function revokedId(where: string, id: unknown): string {
  if (typeof id !== "string") throw new GrantConfigError(where, "id", `must be a string, got ${shownValue(id)}`);
  return id;
}

const CALL_OPTIONS = everyKey<StoreCallOptions>()(["signal"]);

/**
 * @internal The signal of a store call's `options` from an untyped caller,
 * checked before anything else the call is given: the built-in stores listen
 * on it while they wait (their own earlier calls, the ledger's lock, a
 * statement to cancel on the server), so one that throws there (a fake that
 * only inherits from AbortSignal, an `addEventListener` or
 * `removeEventListener` that throws) is refused up front, naming it, rather
 * than failing the call with whatever it threw or leaving it waiting.
 *
 * @throws {GrantConfigError} naming `options` when it is not an object or
 *   undefined (an array or an `AbortSignal` included), its keys cannot be
 *   listed, or it holds a key none of `known`, the call's options (a misspelt
 *   `sginal` would leave the call deaf to its cancel),
 *   or `options.signal` when it is not an AbortSignal or undefined,
 *   or cannot be listened to; else the signal's reason when it has aborted.
 */
export function callSignal(
  where: string,
  options: unknown,
  known: readonly string[] = CALL_OPTIONS,
): AbortSignal | undefined {
  if (options === undefined) return undefined;
  const wrong = optionsProblem(options, known, { shape: "an object or undefined" });
  if (wrong !== undefined)
    throw new GrantConfigError(where, "options", wrong.key === undefined ? wrong.problem : `holds an ${wrong.problem}`);
  const signal = (options as StoreCallOptions).signal;
  if (signal === undefined) return undefined;
  if (!isAbortSignal(signal)) {
    throw new GrantConfigError(
      where,
      "options.signal",
      `must be an AbortSignal or undefined, got ${shownValue(signal)}`,
    );
  }
  const probe = (): void => undefined;
  try {
    signal.addEventListener("abort", probe, { once: true });
  } catch (error) {
    throw unlistenable(where, "addEventListener", error);
  }
  try {
    signal.removeEventListener("abort", probe);
  } catch (error) {
    throw unlistenable(where, "removeEventListener", error);
  }
  signal.throwIfAborted();
  return signal;
}

function unlistenable(where: string, method: string, error: unknown): GrantConfigError {
  return new GrantConfigError(
    where,
    "options.signal",
    `must be an AbortSignal that can be listened to; its ${method} threw: ${describeError(error)}`,
  );
}

/** @internal Refuses anything but a real Grant, naming what arrived. */
export function requireGrant(grant: unknown, where: string): Grant {
  if (!(grant instanceof Grant)) {
    throw new GrantRecordError(`${where}: expected a Grant, got ${grant === null ? "null" : typeof grant}`);
  }
  return grant;
}

/** @internal A rule as errors name it: `deny 'shell' this_call {"cmd":"rm"}`. */
export function describeRule(grant: Grant): string {
  const scope = grant.canonicalArgs === null ? "this_tool" : `this_call ${grant.canonicalArgs}`;
  return `${grant.verdict} ${shownKey(grant.tool)} ${scope}`;
}

/** @internal Whether two grants are one rule (tool, verdict, scope), whatever their metadata. */
export function sameRule(a: Grant, b: Grant): boolean {
  return a.tool === b.tool && a.verdict === b.verdict && a.canonicalArgs === b.canonicalArgs;
}

/**
 * Throws unless `stored` (the grant already saved under `incoming.id`, if
 * any) is the same rule as `incoming`: same tool, verdict and scope. Metadata
 * (pin, time, note) may differ: that is a re-grant, which replaces the entry.
 *
 * @throws {GrantIdCollisionError} when the id belongs to a different rule.
 */
export function assertSameRule(stored: Grant | undefined, incoming: Grant, where?: string): void {
  if (stored === undefined || sameRule(stored, incoming)) return;
  throw new GrantIdCollisionError(incoming.id, describeRule(stored), describeRule(incoming), where);
}

/**
 * A {@link GrantStore} in memory, for tests and for runs that should not
 * remember across processes.
 */
export class MemoryGrantStore implements GrantStore {
  readonly #grants = new Map<string, Grant>();
  /** Built on the first decision, then kept up to date by each change: a change costs the same with 10 grants or 100k. */
  #index: GrantIndex | undefined;

  /**
   * Starts with `grants` stored; a later one replaces an earlier one of the
   * same rule, as a save does.
   *
   * @throws {GrantRecordError} when `grants` is not iterable, or one is not a Grant.
   * @throws {GrantIdCollisionError} when two different rules share an id.
   */
  constructor(grants: Iterable<Grant> = []) {
    if (typeof (grants as Partial<Iterable<Grant>> | null)?.[Symbol.iterator] !== "function") {
      throw new GrantRecordError(`MemoryGrantStore: expected an iterable of Grants, got ${shownValue(grants)}`);
    }
    for (const grant of grants) {
      requireGrant(grant, "MemoryGrantStore");
      assertSameRule(this.#grants.get(grant.id), grant);
      this.#grants.delete(grant.id);
      this.#grants.set(grant.id, grant);
    }
  }

  /**
   * The grants covering a call (see {@link GrantStore.covering}), from an index that each change updates.
   *
   * @throws {GrantConfigError} (as a rejection) naming `tool` when it is not
   *   a non-empty string, or `canonicalArgs` when it is not `canonicalJson(args)`.
   */
  covering(tool: string, canonicalArgs: string, options: StoreCallOptions = {}): Promise<readonly Grant[]> {
    return this.#call("MemoryGrantStore.covering", options, () => {
      requireCoveringQuery("MemoryGrantStore.covering", tool, canonicalArgs);
      this.#index ??= new GrantIndex(this.#grants.values());
      return coveringList(this.#index.lookup(tool, canonicalArgs));
    });
  }

  /** Every stored grant, oldest save first. */
  load(options: StoreCallOptions = {}): Promise<Grant[]> {
    return this.#call("MemoryGrantStore.load", options, () => [...this.#grants.values()]);
  }

  /** Stores `grant`, replacing (and moving to the end) any grant with its id. */
  save(grant: Grant, options: StoreCallOptions = {}): Promise<Grant> {
    return this.#call("MemoryGrantStore.save", options, () => {
      requireGrant(grant, "MemoryGrantStore.save");
      assertSameRule(this.#grants.get(grant.id), grant);
      this.#grants.delete(grant.id);
      this.#grants.set(grant.id, grant);
      this.#index?.put(grant);
      return grant;
    });
  }

  /**
   * Removes the grant with `id`, if stored.
   * @throws {GrantConfigError} (as a rejection) when `id` is not a string.
   */
  revoke(id: string, options: StoreCallOptions = {}): Promise<Grant | undefined> {
    return this.#call("MemoryGrantStore.revoke", options, () => {
      const grant = this.#grants.get(revokedId("MemoryGrantStore.revoke", id));
      if (grant !== undefined) {
        this.#grants.delete(id);
        this.#index?.remove(grant);
      }
      return grant;
    });
  }

  /** Removes every grant; resolves to how many there were. */
  clear(options: StoreCallOptions = {}): Promise<number> {
    return this.#call("MemoryGrantStore.clear", options, () => {
      const count = this.#grants.size;
      this.#grants.clear();
      this.#index = undefined;
      return count;
    });
  }

  /** Runs `body` unless the signal has aborted, as a promise that never throws synchronously. */
  #call<T>(where: string, options: StoreCallOptions, body: () => T): Promise<T> {
    try {
      callSignal(where, options);
      return Promise.resolve(body());
    } catch (error) {
      return Promise.reject(error);
    }
  }
}
