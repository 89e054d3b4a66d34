import type { Clock } from "./clock.js";
import { cutText } from "../text-head.js";
import type { GateDecision, GateVerdict, RuleSource } from "./records.js";

/** A record before its timestamp. */
export interface RecordDraft {
  readonly verdict: GateVerdict;
  readonly ruleId: string;
  readonly ruleSource: RuleSource;
  readonly matchedPattern: string | null;
  readonly reason: string | null;
}

/**
 * A record's `ts`: the clock's time, or the system's when the clock throws.
 * A clock that throws must not cost a call, or a run, the record it is
 * stamping (the tool may already have run; the run may be stopping).
 */
export function timestamp(clock: Clock): number {
  try {
    return clock.now();
  } catch {
    return Date.now();
  }
}

/**
 * The most UTF-16 units of each text of a record (`tool`, `ruleId`,
 * `matchedPattern`, `reason`) that are kept. Records carry text others wrote
 * (a hook's reason or prompt, an error's message, which may echo the
 * arguments or the tool's output), and a line of the audit log holds at most
 * 4 MiB: a text cut to this bound keeps every record within it (each unit is
 * at most 6 bytes of JSON), so the record lands there as it lands everywhere.
 */
export const RECORD_TEXT_MAX = 16_384;

/**
 * `text` as a record keeps it: whole up to {@link RECORD_TEXT_MAX} units,
 * else its head (never half a surrogate pair) and how many units were cut.
 */
export function recordText(text: string): string {
  return cutText(text, RECORD_TEXT_MAX);
}

/**
 * How a provisional record yields to later gates:
 * - `plain`: a hook had no objection; any later decision replaces it;
 * - `modified`: a hook rewrote the input; a middleware allow keeps it, a deny or an exit replaces it;
 * - `approved`: an approval or a grant; only a middleware deny replaces it,
 *   and it lands at every other exit (an approved call that is then
 *   stopped keeps the approval as its record).
 */
export type PendingKind = "plain" | "modified" | "approved";

/**
 * The one record of one tool-call attempt. The gate's record is held until
 * dispatch returns so a downstream middleware deny can displace it; exactly
 * one record lands, once.
 */
export class RecordSlot {
  readonly #tool: string;
  readonly #clock: Clock;
  readonly #emit: (decision: GateDecision) => void;
  #argsDigest = "";
  #argsSha256 = "";
  #pending: { draft: RecordDraft; kind: PendingKind } | undefined;
  #middlewareDeny: RecordDraft | undefined;
  #middlewareAllow: RecordDraft | undefined;
  #withheld: string | undefined;
  #record: GateDecision | undefined;

  constructor(tool: string, clock: Clock, emit: (decision: GateDecision) => void) {
    this.#tool = tool;
    this.#clock = clock;
    this.#emit = emit;
  }

  /** The record that landed, once one has. */
  get record(): GateDecision | undefined {
    return this.#record;
  }

  /** The digests records carry (of the arguments as they reached the gate's decision). */
  setDigests(argsDigest: string, argsSha256: string): void {
    this.#argsDigest = argsDigest;
    this.#argsSha256 = argsSha256;
  }

  /** Lands `draft` now (an ending decided before dispatch). */
  land(draft: RecordDraft): void {
    if (this.#record !== undefined) return;
    // Read the time before marking the slot landed.
    const ts = timestamp(this.#clock);
    const record: GateDecision = Object.freeze({
      tool: recordText(this.#tool),
      argsDigest: this.#argsDigest,
      argsSha256: this.#argsSha256,
      verdict: draft.verdict,
      ruleId: recordText(draft.ruleId),
      ruleSource: draft.ruleSource,
      matchedPattern: draft.matchedPattern === null ? null : recordText(draft.matchedPattern),
      reason: draft.reason === null ? null : recordText(draft.reason),
      ts,
    });
    this.#record = record;
    this.#emit(record);
  }

  /** Holds the gate's decision until dispatch returns. */
  hold(draft: RecordDraft, kind: PendingKind): void {
    this.#pending = { draft, kind };
  }

  /** Holds `draft` in place of a plain "no hook objected" allow only; any other held decision keeps its record. */
  holdOverPlain(draft: RecordDraft, kind: PendingKind): void {
    if (this.#pending?.kind === "plain") this.#pending = { draft, kind };
  }

  middlewareDeny(draft: RecordDraft): void {
    this.#middlewareDeny ??= draft;
  }

  middlewareAllow(draft: RecordDraft): void {
    this.#middlewareAllow ??= draft;
  }

  /**
   * The tool ran but a middleware refused its output: the record keeps the
   * decision that let it run, its `reason` saying why the output went.
   */
  outputWithheld(reason: string): void {
    this.#withheld ??= reason;
  }

  /** Dispatch returned: lands the deciding record. */
  settle(): void {
    const pending = this.#pending;
    if (this.#middlewareDeny !== undefined) return this.land(this.#middlewareDeny);
    if (pending === undefined) return;
    const decided =
      pending.kind === "plain" && this.#middlewareAllow !== undefined ? this.#middlewareAllow : pending.draft;
    this.land(this.#withheld === undefined ? decided : { ...decided, reason: this.#withheld });
  }

  /**
   * An exit before or during dispatch (loop stop, breaker refusal, cancel):
   * an approval or grant allow lands at that exit; a plain or
   * modified allow gives way to `draft`, the exit's own record.
   */
  exit(draft: RecordDraft): void {
    if (this.#middlewareDeny !== undefined) return this.land(this.#middlewareDeny);
    if (this.#pending?.kind === "approved") return this.land(this.#pending.draft);
    this.land(draft);
  }
}
