import type { AskResolution } from "../ask/index.js";
import { sessionEnded } from "./db.js";
import type { Db, Rows } from "./db.js";

/**
 * "The ask is still pending", as statements that pick asks by id spell it.
 * It is the same as `state = 'pending'` (a CHECK constraint ties the two),
 * but a planner that sees `state = 'pending'` may pick the partial index of
 * pending asks and scan every one of them instead of the primary key (it
 * does on a table not yet analyzed, and in the generic plan of a prepared
 * statement): answers would then cost more as more asks wait. For the same
 * reason such statements also say `id = ANY($1)`, which the primary key
 * serves in any plan.
 */
export const PENDING = "a.ended_at IS NULL";

/**
 * The `WITH` clause of a statement that ends several asks at once (`$1`, a `uuid[]` of their ids):
 * `locked`, their pending rows, locked in the order of their ids before the statement changes any.
 * Every such statement (a console's answers, a worker's withdrawals, `close()`) takes its locks so,
 * so two of them in two processes, over overlapping sets of asks given in whatever order, take them
 * in one order: neither can hold a row the other has while waiting for one the other holds (a
 * deadlock, which the server would end by failing one of the two, `40P01`). An UPDATE alone locks
 * its rows in the order its plan meets them: that of the array, say, through a join.
 */
export function lockedInOrder(table: string): string {
  return `WITH locked AS MATERIALIZED (
    SELECT a.id FROM ${table} AS a WHERE a.id = ANY($1::uuid[]) AND ${PENDING} ORDER BY a.id FOR NO KEY UPDATE)`;
}

interface Answer {
  readonly id: string;
  readonly resolution: AskResolution;
  /**
   * The ask the answer was made for, when it says, as the row's own `jsonb` text: the row must
   * still hold exactly that ask (compared as `jsonb`, so nothing a parse dropped or rounded counts).
   */
  readonly ask: string | undefined;
  readonly resolve: (landed: boolean) => void;
  readonly reject: (error: unknown) => void;
}

/** The columns of an asks row that say how it ended (what `parseEndRow` reads, `a.reason` after them), and its worker. */
const END_COLUMNS = "a.id::text AS id, a.worker_id::text AS worker_id, a.state, a.resolution";

/**
 * The columns of an asks row a read of endings takes: {@link END_COLUMNS}, and an answered row's
 * ask (`answered_ask`), which its worker checks is still the ask it parked.
 */
export const ENDING_COLUMNS = `${END_COLUMNS}, CASE WHEN a.state = 'answered' THEN a.ask END AS answered_ask, a.reason`;

/**
 * The columns an answer's UPDATE returns (`$4`, a `uuid[]`, the workers of the calls parked in the
 * answering process): {@link ENDING_COLUMNS}, but the ask only of a row one of those workers
 * wrote, the one kind whose call that reply settles and whose ask it checks. A console has shown
 * the ask already: it is not sent back for every answer. (A call's worker is set before its row is
 * written; were a row of this process's to come back without its ask, the check would deny it.)
 */
const ANSWERED_COLUMNS = `${END_COLUMNS}, CASE WHEN a.worker_id = ANY($4::uuid[]) THEN a.ask END AS answered_ask, a.reason`;

/**
 * Lands the answers a process gives: `UPDATE … WHERE state = 'pending'` (spelled
 * `ended_at IS NULL`, see {@link PENDING}) on
 * a row whose worker's lease still holds, so the database lets exactly one
 * answer end each ask. Answers given at about the same time go in one
 * statement (one commit); an id answered twice in one batch goes once, and
 * the second answer waits for the next batch, where it finds the ask ended.
 */
export class AnswerBatch {
  readonly #db: Db;
  readonly #landing: () => (row: Record<string, unknown>) => void;
  readonly #workers: () => readonly string[];
  readonly #queue: Answer[] = [];
  #running = false;
  #draining: Promise<void> = Promise.resolve();

  /**
   * `landing` is called as each statement is sent; what it returns is given
   * the row of every ask that statement's answers ended, as the UPDATE
   * returned it ({@link ANSWERED_COLUMNS}): what the database confirmed.
   * `workers` gives the ids of the workers whose calls are parked in this
   * process, as each statement is sent: only their rows' asks come back.
   */
  constructor(db: Db, landing: () => (row: Record<string, unknown>) => void, workers: () => readonly string[]) {
    this.#db = db;
    this.#landing = landing;
    this.#workers = workers;
  }

  /**
   * Resolves `true` when this answer ended the ask, `false` when it had already ended (or never
   * was), or when `ask` is given and the row holds another ask under that id.
   */
  land(id: string, resolution: AskResolution, ask?: string): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.#queue.push({ id, resolution, ask, resolve, reject });
      if (this.#running) return;
      this.#running = true;
      this.#draining = new Promise<void>((done) => queueMicrotask(() => void this.#drain().finally(done)));
    });
  }

  /** Resolves once every answer given so far has its outcome. */
  idle(): Promise<void> {
    return this.#running ? this.#draining : Promise.resolve();
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      const batch = new Map<string, Answer>();
      const later: Answer[] = [];
      for (const answer of this.#queue.splice(0)) {
        if (batch.has(answer.id)) later.push(answer);
        else batch.set(answer.id, answer);
      }
      this.#queue.unshift(...later);
      await this.#write([...batch.values()]);
    }
    this.#running = false;
  }

  async #write(answers: readonly Answer[]): Promise<void> {
    const landing = this.#landing();
    let result: Rows;
    try {
      result = await this.#update(answers);
    } catch (error) {
      if (!sessionEnded(error)) {
        for (const answer of answers) answer.reject(error);
        return;
      }
      await this.#writeAgain(answers, error);
      return;
    }
    this.#settle(answers, result, landing);
  }

  /**
   * The answers' statement failed with the server ending its session: it did
   * not commit and never will, or it committed visibly before the error came
   * (see {@link sessionEnded}). It is sent once more on another connection,
   * where `WHERE state = 'pending'` lets it land only if no answer did. An
   * answer it does not land is read back: an ask that ended otherwise
   * (withdrawn, answered differently) gives `false`; one answered exactly so,
   * or gone, may be this answer's first statement or another console's
   * identical answer, which cannot be told apart, and rejects with the first
   * error, as before.
   */
  async #writeAgain(answers: readonly Answer[], first: unknown): Promise<void> {
    const names = this.#db.names;
    const landing = this.#landing();
    let landed: Map<string, Record<string, unknown>>;
    let found: Map<string, Record<string, unknown>>;
    try {
      const result = await this.#update(answers);
      landed = new Map(result.rows.map((r) => [String(r["id"]), r]));
      const rest = answers.filter((a) => !landed.has(a.id));
      const read =
        rest.length === 0
          ? { rows: [] }
          : await this.#db.read(
              "PostgresApprover.resolve",
              `SELECT a.id::text AS id, a.state, a.resolution = v.resolution AS same
               FROM ${names.table("asks")} AS a JOIN unnest($1::uuid[], $2::jsonb[]) AS v(id, resolution) ON a.id = v.id
               WHERE a.id = ANY($1::uuid[])`,
              [rest.map((a) => a.id), rest.map((a) => JSON.stringify(a.resolution))],
            );
      found = new Map(read.rows.map((r) => [String(r["id"]), r]));
    } catch {
      for (const answer of answers) answer.reject(first);
      return;
    }
    for (const answer of answers) {
      const row = landed.get(answer.id);
      if (row !== undefined) {
        landing(row);
        answer.resolve(true);
        continue;
      }
      const now = found.get(answer.id);
      if (now === undefined || (now["state"] === "answered" && now["same"] === true)) answer.reject(first);
      else answer.resolve(false);
    }
  }

  #update(answers: readonly Answer[]): Promise<Rows> {
    const names = this.#db.names;
    const leaseHolds = `EXISTS (SELECT 1 FROM ${names.table("workers")} AS w WHERE w.id = a.worker_id AND w.lease_until > now())`;
    const [only] = answers;
    const workers = [...this.#workers()];
    // One answer (a person at a console) takes the plainer statement: its plan is cached
    // and reused, where the batch's is made anew for each execution.
    return answers.length === 1 && only !== undefined
      ? this.#db.query(
          "PostgresApprover.resolve",
          `UPDATE ${names.table("asks")} AS a SET state = 'answered', resolution = $2::jsonb, ended_at = now()
           WHERE a.id = $1::uuid AND ${PENDING} AND ${leaseHolds} AND ($3::jsonb IS NULL OR a.ask = $3::jsonb)
           RETURNING ${ANSWERED_COLUMNS}`,
          [only.id, JSON.stringify(only.resolution), only.ask ?? null, workers],
        )
      : // Its rows locked in the order of their ids first: two consoles' batches cannot deadlock.
        this.#db.query(
          "PostgresApprover.resolve",
          `${lockedInOrder(names.table("asks"))}
           UPDATE ${names.table("asks")} AS a SET state = 'answered', resolution = v.resolution, ended_at = now()
           FROM unnest($1::uuid[], $2::jsonb[], $3::jsonb[]) AS v(id, resolution, ask), locked AS l
           WHERE a.id = ANY($1::uuid[]) AND a.id = v.id AND a.id = l.id AND ${PENDING} AND ${leaseHolds}
             AND (v.ask IS NULL OR a.ask = v.ask)
           RETURNING ${ANSWERED_COLUMNS}`,
          [
            answers.map((a) => a.id),
            answers.map((a) => JSON.stringify(a.resolution)),
            answers.map((a) => a.ask ?? null),
            workers,
          ],
        );
  }

  #settle(answers: readonly Answer[], result: Rows, landing: (row: Record<string, unknown>) => void): void {
    const landed = new Map(result.rows.map((r) => [String(r["id"]), r]));
    for (const answer of answers) {
      const row = landed.get(answer.id);
      if (row !== undefined) landing(row);
      answer.resolve(row !== undefined);
    }
  }
}
