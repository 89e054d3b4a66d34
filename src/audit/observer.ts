import type { GateDecision } from "../engine/records.js";
import { AuditConfigError } from "./errors.js";
import type { AuditSink } from "./sink.js";

/** The engine observer {@link auditObserver} returns: it handles `onGate` only. */
export interface AuditObserver {
  onGate(event: { readonly decision: GateDecision }): void;
}

/**
 * An engine observer that appends every gate decision to `sink`. It returns
 * at once and never throws into the run; a record that does not land is
 * reported through the sink's `onError` option and its `flush()`.
 *
 * @example
 * ```ts
 * const sink = await AuditSink.open("audit/gates.jsonl", { onError: console.error });
 * const managers = new LoopManagers().withObserver(auditObserver(sink));
 * // … run the agent …
 * await sink.flush();
 * await sink.close();
 * ```
 *
 * @throws AuditConfigError naming `sink` when it is not an {@link AuditSink}.
 */
export function auditObserver(sink: AuditSink): AuditObserver {
  // Checked here: a sink without append would throw into the run at its first decision.
  if (typeof (sink as { append?: unknown } | null | undefined)?.append !== "function") {
    throw new AuditConfigError("sink", "auditObserver: sink must be an AuditSink, with an append method");
  }
  return {
    onGate(event) {
      // A malformed event becomes a reported AuditRecordError, never a throw into the run.
      let decision: GateDecision | undefined;
      try {
        decision = (event as { decision?: GateDecision } | undefined)?.decision;
      } catch {
        // An event that throws when read (a getter, a revoked Proxy) has no decision to log.
      }
      sink.append(decision as GateDecision).catch(() => undefined);
    },
  };
}
