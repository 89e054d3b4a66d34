import { createHash } from "node:crypto";
import { z } from "zod";
import { GateDecisionSchema } from "../engine/records.js";
import type { GateDecision } from "../engine/records.js";
import { zodIssuesLine } from "../zod-issues.js";
import { duplicateMember } from "../duplicate-member.js";
import { cutText } from "../text-head.js";
import { lineMac, sameMac } from "./key.js";
import { AUDIT_LINE_MAX_BYTES } from "./line.js";
import type { AuditAnchor } from "./line.js";
import type { AuditProblem, AuditVerifyResult } from "./verify.js";
import { shownText } from "../shown.js";

const Hex64Schema = z.string().regex(/^[0-9a-f]{64}$/);

const LineSchema = z
  .object({
    seq: z.number().int().min(1),
    prev: Hex64Schema,
    record: GateDecisionSchema,
    hash: Hex64Schema,
    mac: Hex64Schema.optional(),
  })
  .strict();

/** `,"hash":"…"` then, in a keyed log, `,"mac":"…"`, closing the line. */
const TAIL_PATTERN = /,"hash":"([0-9a-f]{64})"(?:,"mac":"([0-9a-f]{64})")?\}$/;
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
export const NEWLINE = 0x0a;

type ParsedLine =
  | {
      readonly type: "line";
      readonly seq: number;
      readonly prev: string;
      readonly hash: string;
      readonly mac: string | undefined;
      readonly computed: string;
      readonly record: GateDecision;
    }
  | { readonly type: "malformed"; readonly why: string };

/** Controls (C0, DEL, C1: escape sequences start with one) and bidi controls, which reorder what a terminal shows. */
const UNSHOWN = /[\p{Cc}\p{Bidi_Control}]/gu;

/**
 * Text quoting a line (a member's name) with every control and bidi control
 * written as a `\uXXXX` escape, as the file holds it: JSON.parse decodes
 * those escapes, and a message that a sink's `onError` prints must not carry
 * an escape sequence the log did not.
 */
function shown(text: string): string {
  return text.replace(UNSHOWN, (c) => `\\u${(c.codePointAt(0) as number).toString(16).padStart(4, "0")}`);
}

/** The most UTF-16 units of a part of a line (a member's name, its path, what the schema says of it) a message quotes. */
const QUOTED_MAX = 500;

/**
 * `text`, a part of a line, as a message quotes it: whole up to
 * {@link QUOTED_MAX} units, else its head (never half a surrogate pair) and
 * how many units were cut. Anyone who can write the log picks a member's
 * name, up to a line's 4 MiB: every error reporting the line would carry it.
 */
function clipped(text: string): string {
  return cutText(text, QUOTED_MAX);
}

function parseLine(bytes: Uint8Array): ParsedLine {
  if (bytes.length === 0) return { type: "malformed", why: "it is empty" };
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return { type: "malformed", why: "it is not valid UTF-8" };
  }
  // What an editor leaves in a log it saved: said as such, not as "not JSON".
  if (text.startsWith("\uFEFF")) return { type: "malformed", why: "it starts with a byte order mark (U+FEFF)" };
  if (text.endsWith("\r")) return { type: "malformed", why: "it ends with a carriage return (CRLF line endings)" };
  // JSON allows it, but no writer leaves it, and the line does end with its "hash" member.
  if (text.endsWith(" ") || text.endsWith("\t")) {
    return { type: "malformed", why: "it ends with whitespace after its last member" };
  }
  const tail = TAIL_PATTERN.exec(text);
  if (!tail || tail.index === 0) {
    return { type: "malformed", why: 'it does not end with a "hash" member' };
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { type: "malformed", why: "it is not JSON" };
  }
  const duplicate = duplicateMember(text);
  if (duplicate !== undefined) {
    return {
      type: "malformed",
      why: shown(
        `it has member ${clipped(shownText(duplicate.key))} twice, at ${clipped(duplicate.path)} ` +
          "(JSON readers disagree on which one counts)",
      ),
    };
  }
  const parsed = LineSchema.safeParse(json);
  if (!parsed.success) return { type: "malformed", why: shown(clipped(zodIssuesLine(parsed.error, 1))) };
  if (parsed.data.hash !== tail[1] || parsed.data.mac !== tail[2]) {
    return { type: "malformed", why: 'its last members are not its "hash" and "mac"' };
  }
  // The body is the line minus its hash (and mac) members: hash the raw
  // bytes, never a re-serialization, so that any byte-level change is seen.
  // The tail is ASCII, so its length in characters is its length in bytes.
  const computed = createHash("sha256")
    .update(bytes.subarray(0, bytes.length - tail[0].length))
    .update("}")
    .digest("hex");
  return {
    type: "line",
    seq: parsed.data.seq,
    prev: parsed.data.prev,
    hash: parsed.data.hash,
    mac: parsed.data.mac,
    computed,
    record: parsed.data.record,
  };
}

/** The `hash` a line carries, when it is a line of this format. */
export function lineHash(bytes: Uint8Array): string | undefined {
  const entry = parseLine(bytes);
  return entry.type === "line" ? entry.hash : undefined;
}

export type Failure = Extract<AuditVerifyResult, { ok: false }>;

/**
 * What a reader of a log hands each line to: `line` every line up to
 * {@link AUDIT_LINE_MAX_BYTES} (its bytes without the newline), until it
 * returns `false`; `oversized` the first line longer than that, with where it
 * starts, after which nothing more is read.
 */
export interface LineVisitor {
  line(bytes: Uint8Array): boolean;
  oversized(offset: number): void;
}

/** How {@link ChainCheck} checks MACs. */
export type MacCheck =
  | { readonly type: "key"; readonly key: Buffer }
  /** No key: lines with and without a `mac` must not mix; `keyed` fixes which, when known. */
  | { readonly type: "none"; readonly keyed: boolean | undefined };

/** What a {@link ChainCheck} keeps besides the chain's end. */
export interface ChainKeep {
  /** Keep every record, for the result's `records`; without it, none are kept. */
  readonly records: boolean;
  /** The `seq`s whose hashes are kept, for what vouches for them (an anchor, a seal). */
  readonly hashes: Iterable<number | undefined>;
}

/** A verified run of lines: where it ends, whether its lines carry MACs, and what was kept of it. */
export interface Chain {
  /** Every record in order, when kept ({@link ChainKeep.records}); otherwise empty. */
  readonly records: GateDecision[];
  readonly anchor: AuditAnchor;
  readonly keyed: boolean | undefined;
  /** The hashes kept by `seq` ({@link ChainKeep.hashes}), and those of the run's start and end. */
  readonly hashes: ReadonlyMap<number, string>;
}

/**
 * A line that repeats an earlier `seq`, whose hash was not kept: a copy of
 * that line (`duplicated`) or other content (`forked`), which only the
 * earlier line's hash tells. Settled by {@link ChainCheck.repeated}.
 */
export interface Repeat {
  readonly type: "repeat";
  /** The line repeated, counted from the start of the run (1 for its first line). */
  readonly index: number;
}

/**
 * Verifies the lines of a chain one at a time, as the continuation of the
 * chain at `start` (the genesis for a whole log): each must carry the next
 * `seq`, link to the line before, match its own hash and, with a key, carry
 * that key's MAC. What it holds does not grow with the lines: the end of the
 * chain, the hashes asked for, and the records only when asked for. Line
 * numbers in failures count from the log's first line.
 */
export class ChainCheck implements LineVisitor {
  readonly #start: AuditAnchor;
  readonly #macs: MacCheck;
  readonly #records: GateDecision[] = [];
  readonly #keepRecords: boolean;
  readonly #wanted: ReadonlySet<number | undefined>;
  readonly #hashes = new Map<number, string>();
  #seq: number;
  #hash: string;
  #keyed: boolean | undefined;
  /** A line whose `seq` skips ahead: later lines are read only to tell reordered lines from removed ones. */
  #gap: { readonly line: number; readonly seq: number } | undefined;
  /** A repeated `seq` whose earlier hash was not kept. */
  #repeat: { readonly line: number; readonly seq: number; readonly hash: string } | undefined;
  #failure: Failure | undefined;

  constructor(start: AuditAnchor, macs: MacCheck, keep: ChainKeep) {
    this.#start = start;
    this.#macs = macs;
    this.#keepRecords = keep.records;
    this.#wanted = new Set(keep.hashes);
    this.#seq = start.seq;
    this.#hash = start.hash;
    this.#keyed = macs.type === "none" ? macs.keyed : true;
    this.#hashes.set(start.seq, start.hash);
  }

  #fail(line: number, problem: AuditProblem, message: string): false {
    this.#failure = { ok: false, line, problem, message, records: this.#records };
    return false;
  }

  /**
   * Checks the next line (its bytes without the newline). Returns `false`
   * once the outcome is known, when no later line can change it.
   */
  line(bytes: Uint8Array): boolean {
    if (this.#failure !== undefined || this.#repeat !== undefined) return false;
    const entry = parseLine(bytes);
    const gap = this.#gap;
    if (gap !== undefined) {
      if (entry.type === "line" && entry.seq >= gap.line && entry.seq < gap.seq) {
        return this.#fail(gap.line, "reordered", `line ${gap.line} carries seq ${gap.seq}: lines were reordered`);
      }
      return true;
    }
    const n = this.#seq + 1;
    if (entry.type === "malformed") {
      return this.#fail(n, "malformed", `line ${n} is malformed: ${entry.why}`);
    }
    if (entry.computed !== entry.hash) {
      return this.#fail(n, "edited", `line ${n} was edited: its content does not match its hash`);
    }
    if (entry.seq < n) {
      const earlier =
        entry.seq < this.#start.seq ? null : entry.seq === this.#seq ? this.#hash : this.#hashes.get(entry.seq);
      if (earlier === undefined) {
        this.#repeat = { line: n, seq: entry.seq, hash: entry.hash };
        return false;
      }
      return this.#repeated(n, entry.seq, entry.hash, earlier);
    }
    if (entry.seq > n) {
      this.#gap = { line: n, seq: entry.seq };
      return true;
    }
    if (entry.prev !== this.#hash) {
      return this.#fail(
        n,
        "edited",
        n === 1
          ? "line 1 does not start the chain: its prev is not the genesis value"
          : `line ${n} does not link to line ${n - 1}: one of them was rewritten`,
      );
    }
    const macs = this.#macs;
    if (macs.type === "key") {
      if (entry.mac === undefined) {
        return this.#fail(n, "forged", `line ${n} carries no mac: it was not written with this key`);
      }
      if (!sameMac(entry.mac, lineMac(macs.key, entry.hash))) {
        return this.#fail(n, "forged", `line ${n} has a mac not made with this key: forged, or another key`);
      }
    } else if (this.#keyed !== undefined && this.#keyed !== (entry.mac !== undefined)) {
      return this.#fail(
        n,
        "malformed",
        this.#keyed
          ? `line ${n} carries no mac, unlike the lines before it`
          : `line ${n} carries a mac, unlike the lines before it`,
      );
    }
    this.#keyed = entry.mac !== undefined;
    if (this.#keepRecords) this.#records.push(entry.record);
    if (this.#wanted.has(n)) this.#hashes.set(n, entry.hash);
    this.#seq = n;
    this.#hash = entry.hash;
    return true;
  }

  /**
   * The next line is longer than {@link AUDIT_LINE_MAX_BYTES}, from byte
   * `offset` of the log on: no line of this format is, and the rest of it is
   * not read. After a skipped `seq` the lines are read only to tell reordered
   * lines from removed ones, and the outcome stays that.
   */
  oversized(offset: number): void {
    if (this.#failure !== undefined || this.#repeat !== undefined || this.#gap !== undefined) return;
    const n = this.#seq + 1;
    this.#fail(
      n,
      "malformed",
      `line ${n} is malformed: it is longer than AUDIT_LINE_MAX_BYTES (${AUDIT_LINE_MAX_BYTES} bytes) ` +
        `from byte ${offset} on, which no line of this format is; the rest of it was not read`,
    );
  }

  #repeated(line: number, seq: number, hash: string, earlier: string | null): false {
    return earlier === hash
      ? this.#fail(line, "duplicated", `line ${line} duplicates line ${seq}`)
      : this.#fail(line, "forked", `line ${line} repeats seq ${seq} with other content: the chain forked`);
  }

  /**
   * The outcome, the lines having ended with `tail` bytes after the last
   * newline (a line cut short); a {@link Repeat} when the hash of an earlier
   * line must be read again to tell it.
   */
  end(tail: number): Chain | Failure | Repeat {
    if (this.#failure !== undefined) return this.#failure;
    if (this.#repeat !== undefined) return { type: "repeat", index: this.#repeat.seq - this.#start.seq };
    const gap = this.#gap;
    if (gap !== undefined) {
      const missing = gap.seq - gap.line;
      return {
        ok: false,
        line: gap.line,
        problem: "removed",
        message: `line ${gap.line} carries seq ${gap.seq}: ${missing} line${missing === 1 ? "" : "s"} removed before it`,
        records: this.#records,
      };
    }
    const n = this.#seq + 1;
    if (tail > 0) {
      return {
        ok: false,
        line: n,
        problem: "truncated",
        message: `line ${n} has no newline: the log was cut short mid-line`,
        records: this.#records,
      };
    }
    this.#hashes.set(this.#seq, this.#hash);
    return {
      records: this.#records,
      anchor: { seq: this.#seq, hash: this.#hash },
      keyed: this.#keyed,
      hashes: this.#hashes,
    };
  }

  /** Settles a {@link Repeat}, given the hash the repeated line carries (`undefined`: it could not be read). */
  repeated(earlier: string | undefined): Failure {
    const repeat = this.#repeat;
    if (repeat === undefined) throw new Error("no repeated line to settle");
    this.#repeated(repeat.line, repeat.seq, repeat.hash, earlier ?? null);
    return this.#failure as Failure;
  }
}

/**
 * Hands every line in `data` to `visitor` (see {@link LineVisitor}); returns
 * how many bytes follow the last newline.
 */
function eachLine(data: Uint8Array, visitor: LineVisitor): number {
  let start = 0;
  for (let i = data.indexOf(NEWLINE); i !== -1; i = data.indexOf(NEWLINE, start)) {
    if (i - start > AUDIT_LINE_MAX_BYTES) {
      visitor.oversized(start);
      return 0;
    }
    if (!visitor.line(data.subarray(start, i))) return 0;
    start = i + 1;
  }
  if (data.length - start > AUDIT_LINE_MAX_BYTES) {
    visitor.oversized(start);
    return 0;
  }
  return data.length - start;
}

/**
 * Verifies the lines in `data` as the continuation of the chain at `start`;
 * see {@link ChainCheck}.
 */
export function verifyChain(data: Uint8Array, start: AuditAnchor, macs: MacCheck, keep: ChainKeep): Chain | Failure {
  const check = new ChainCheck(start, macs, keep);
  const outcome = check.end(eachLine(data, check));
  if (!("type" in outcome)) return outcome;
  let earlier: string | undefined;
  let index = 0;
  eachLine(data, {
    line(line) {
      index += 1;
      if (index === outcome.index) earlier = lineHash(line);
      return index < outcome.index;
    },
    oversized: () => undefined,
  });
  return check.repeated(earlier);
}
