/** One approval round trip of an agent loop, counted so a benchmark can prove the tool ran. */
export interface RoundTrip {
  readonly label: string;
  /** Model asks for the tool, the call is approved, the tool runs, the model answers. */
  once(): Promise<void>;
  /** How many times the tool's execute ran. */
  executions(): number;
  /** How many round trips completed. */
  roundTrips(): number;
}

/** Throws unless every completed round trip executed the tool exactly once after its approval. */
export function assertExecuted(rt: RoundTrip): void {
  if (rt.roundTrips() === 0) throw new Error(`${rt.label}: no round trip completed`);
  if (rt.executions() !== rt.roundTrips()) {
    throw new Error(`${rt.label}: ${rt.roundTrips()} round trips but the tool executed ${rt.executions()} times`);
  }
}
