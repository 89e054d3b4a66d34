import type { AuditProblem } from "../audit/verify.js";
import type { GateDecision } from "../engine/records.js";
import type { GateEvent } from "../engine/observer.js";
import { shownValue } from "../errors.js";
import { ServerConfigError } from "./errors.js";
import { callSignal, configFault, readOptions } from "./options.js";

/**
 * Where the approval server reads recent gate decisions from: a
 * {@link RecentRecords} observer in the agent's process, an audit log
 * ({@link auditLogRecords}), or anything else with this shape.
 */
export interface RecordSource {
  /**
   * Up to `limit` of the latest decisions, oldest first. The server passes
   * a `signal` that aborts once the request stops waiting (its client went,
   * or `recordsTimeoutMs` passed): a source that waits on a disk or a
   * database can stop then.
   */
  recent(
    limit: number,
    options?: { readonly signal?: AbortSignal },
  ): readonly GateDecision[] | Promise<readonly GateDecision[]>;
  /**
   * Optional: calls `listener` with each new decision as it lands; returns a
   * function that stops it, which the server calls when it closes. With it
   * the console shows decisions as they happen; without it the console
   * reloads them every few seconds. The server subscribes when it is made,
   * and refuses a source whose `subscribe` throws or returns no function
   * (`ServerConfigError` naming `records`).
   */
  subscribe?(listener: (record: GateDecision) => void): () => void;
  /**
   * Optional: as `recent`, each decision with what its audit log vouches for
   * it, and the check of the lines read ({@link auditLogRecords} has it).
   * When there, `GET /api/records` serves it in place of `recent`, and the
   * console shows each decision's standing. It is given the same `signal`.
   */
  audited?(limit: number, options?: { readonly signal?: AbortSignal }): Promise<AuditedRecords>;
}

/**
 * What an audit log's checks vouch for one line:
 * - `"sealed"`: checked with the key, and the seal vouches for it: written
 *   by the key's holder, and not removable without that being told.
 * - `"mac"`: checked with the key, after the line the seal vouches for (a
 *   writer that stopped before its next seal, or the seal beyond the lines
 *   read): written by the key's holder, but removing it would not be told.
 * - `"chain"`: checked without a key: its hash and its link to the line
 *   before hold, which anyone who can write the log can make of any line.
 * - `"none"`: at or after the first line that failed the checks: nothing
 *   vouches for it.
 */
export type RecordVouch = "sealed" | "mac" | "chain" | "none";

/** A decision read from an audit log, with its line's `seq` (`null` when it carries none that reads) and standing. */
export interface AuditedRecord {
  readonly record: GateDecision;
  readonly seq: number | null;
  readonly vouched: RecordVouch;
}

/** How the lines read from an audit log were checked, and what was found. */
export interface AuditLogCheck {
  /** `"key"`: hashes, links, every line's MAC and the seal; `"chain"`: hashes and links alone. */
  readonly by: "key" | "chain";
  /** Whether the lines read passed every check. */
  readonly ok: boolean;
  /** The first problem found, as `verifyAuditLog` names them. */
  readonly problem?: AuditProblem;
  /** The `seq` of the line at which it was found (`null` when that line carries none). */
  readonly line?: number | null;
  /** The problem in words. */
  readonly message?: string;
  /** The `seq`s of the first and last lines read (both 0 when none was). */
  readonly first: number;
  readonly last: number;
  /** Whether the lines read start at the log's first line (so line 1 was checked to start the chain). */
  readonly whole: boolean;
  /** Whether the lines carry MACs. Without the key they are not checked. */
  readonly keyed: boolean;
  /** With the key: the `seq` of the line the seal vouches for, once it is checked. */
  readonly sealed?: number;
  /** Without a key: whether a seal lies beside a log whose lines carry no MAC (pass the key to check it). */
  readonly sealBeside?: boolean;
  /** Whether the log ends in a line without its newline: one being written, or one cut short. */
  readonly partial: boolean;
}

/** What {@link RecordSource.audited} resolves: the decisions, oldest first, and the check of the lines read. */
export interface AuditedRecords {
  readonly records: readonly AuditedRecord[];
  readonly check: AuditLogCheck;
}

/** Options of {@link RecentRecords}. */
export interface RecentRecordsOptions {
  /**
   * How many of the latest decisions are kept; older ones are dropped.
   * @default 200
   */
  readonly capacity?: number;
}

/**
 * An engine observer that keeps the latest gate decisions in memory, for the
 * approval server's "recent decisions" (memory stays bounded by `capacity`,
 * however long the agent runs). Install it with `withObserver` and pass it
 * to `createApprovalServer({ records })`. It keeps nothing across restarts:
 * an `AuditSink` is the durable record, {@link auditLogRecords} its reader.
 *
 * @example
 * ```ts
 * const records = new RecentRecords();
 * const managers = new LoopManagers().withAskResolver(channel).withObserver(records);
 * const server = await createApprovalServer({ approver, records });
 * ```
 */
export class RecentRecords implements RecordSource {
  readonly #capacity: number;
  /** A ring: `#start` is the oldest slot once full. */
  readonly #ring: GateDecision[] = [];
  #start = 0;
  readonly #listeners = new Set<(record: GateDecision) => void>();

  /**
   * @throws {ServerConfigError} when `options` is not an object, holds a key
   * other than `capacity`, or `capacity` is not a positive integer.
   */
  constructor(options: RecentRecordsOptions = {}) {
    const capacity = readOptions(options, ["capacity"], configFault("records.")).capacity ?? 200;
    if (!Number.isSafeInteger(capacity) || capacity < 1) {
      throw new ServerConfigError("records.capacity", `must be a positive integer, got ${shownValue(capacity)}`);
    }
    this.#capacity = capacity;
  }

  /** How many decisions are kept now (at most the capacity). */
  get size(): number {
    return this.#ring.length;
  }

  /** The engine's `onGate`: keeps the decision and tells subscribers. Never throws into the run. */
  onGate(event: GateEvent): void {
    const record = event.decision;
    if (this.#ring.length < this.#capacity) {
      this.#ring.push(record);
    } else {
      this.#ring[this.#start] = record;
      this.#start = (this.#start + 1) % this.#capacity;
    }
    for (const listener of this.#listeners) {
      try {
        listener(record);
      } catch {
        // A subscriber's failure is its own; the run and the other subscribers go on.
      }
    }
  }

  /** Up to `limit` of the latest decisions, oldest first; `options` are checked as {@link callSignal} says. */
  recent(limit: number, options?: { readonly signal?: AbortSignal }): GateDecision[] {
    callSignal(options);
    const all = [...this.#ring.slice(this.#start), ...this.#ring.slice(0, this.#start)];
    const count = Math.max(0, Math.min(Math.floor(limit), all.length));
    return count === 0 ? [] : all.slice(all.length - count);
  }

  /** Calls `listener` with every later decision; returns the function that stops it. */
  subscribe(listener: (record: GateDecision) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }
}
