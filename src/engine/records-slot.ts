import type { Clock } from "./clock.js";
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
 * How a provisional record yields to later gates:
 * - `plain`: a hook had no objection; any later decision replaces it;
 * - `modified`: a hook rewrote the input; a middleware allow keeps it, a deny or an exit replaces it;
 * - `approved`: an approval or a grant; only a middleware deny replaces it,
 *   and it lands at every other exit (spec §3).
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
  #argsDigest: string;
  #pending: { draft: RecordDraft; kind: PendingKind } | undefined;
  #middlewareDeny: RecordDraft | undefined;
  #middlewareAllow: RecordDraft | undefined;
  #landed = false;

  constructor(tool: string, argsDigest: string, clock: Clock, emit: (decision: GateDecision) => void) {
    this.#tool = tool;
    this.#argsDigest = argsDigest;
    this.#clock = clock;
    this.#emit = emit;
  }

  get landed(): boolean {
    return this.#landed;
  }

  /** The digest records carry (the input as it reached the gate's decision). */
  setArgsDigest(digest: string): void {
    this.#argsDigest = digest;
  }

  /** Lands `draft` now (an ending decided before dispatch). */
  land(draft: RecordDraft): void {
    if (this.#landed) return;
    // Read the time before marking the slot landed: a clock that throws must
    // not cost the call its one record (the tool may already have run).
    let ts: number;
    try {
      ts = this.#clock.now();
    } catch {
      ts = Date.now();
    }
    this.#landed = true;
    this.#emit({ tool: this.#tool, argsDigest: this.#argsDigest, ...draft, ts });
  }

  /** Holds the gate's decision until dispatch returns. */
  hold(draft: RecordDraft, kind: PendingKind): void {
    this.#pending = { draft, kind };
  }

  middlewareDeny(draft: RecordDraft): void {
    this.#middlewareDeny ??= draft;
  }

  middlewareAllow(draft: RecordDraft): void {
    this.#middlewareAllow ??= draft;
  }

  /** Dispatch returned: lands the deciding record. */
  settle(): void {
    const pending = this.#pending;
    if (this.#middlewareDeny !== undefined) return this.land(this.#middlewareDeny);
    if (pending === undefined) return;
    if (pending.kind === "plain" && this.#middlewareAllow !== undefined) return this.land(this.#middlewareAllow);
    this.land(pending.draft);
  }

  /**
   * An exit before or during dispatch (loop stop, breaker refusal, cancel):
   * an approval or grant allow lands at that exit (spec §3); a plain or
   * modified allow gives way to `draft`, the exit's own record.
   */
  exit(draft: RecordDraft): void {
    if (this.#middlewareDeny !== undefined) return this.land(this.#middlewareDeny);
    if (this.#pending?.kind === "approved") return this.land(this.#pending.draft);
    this.land(draft);
  }
}
