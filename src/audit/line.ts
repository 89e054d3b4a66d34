import { escapeHidden, shownText } from "../shown.js";
import { createHash } from "node:crypto";
import { shownValue } from "../errors.js";
import type { GateDecision } from "../engine/records.js";
import { AuditAnchorError } from "./errors.js";
import { lineMac } from "./key.js";

/**
 * The `prev` of line 1: 64 zeros. A log whose first line links to anything
 * else did not start where the writer started it.
 */
export const AUDIT_GENESIS: string = "0".repeat(64);

/**
 * A point in the chain the writer vouched for: the `seq` and `hash` of the
 * last line it wrote (`{ seq: 0, hash: AUDIT_GENESIS }` for an empty log).
 * Kept somewhere the log's editor cannot reach, it lets
 * {@link verifyAuditLog} detect what a chain alone cannot: whole trailing
 * lines removed, or the chain rewritten and re-hashed from some line on.
 */
export interface AuditAnchor {
  readonly seq: number;
  readonly hash: string;
}

/**
 * The longest line, in bytes without its newline, that the log may hold:
 * 4 MiB. A record is a few hundred bytes of JSON, so no writer comes near
 * it; a longer line (a corrupt or hostile file, gigabytes without a newline)
 * is reported `"malformed"` as soon as it passes the limit, without reading
 * the rest of it, so that verifying or opening any file holds at most this
 * much of one line. {@link AuditSink.append} refuses a record whose line
 * could be longer.
 */
export const AUDIT_LINE_MAX_BYTES: number = 4 * 1024 * 1024;

/** The most bytes a line takes besides its record's JSON: the widest `seq`, then `prev`, `hash` and `mac`. */
const LINE_FRAME_MAX_BYTES = '{"seq":,"prev":"","record":,"hash":"","mac":""}'.length + 16 + 3 * 64;

/** The most bytes a record's JSON may take, so that its line fits in {@link AUDIT_LINE_MAX_BYTES}. */
export const RECORD_MAX_BYTES: number = AUDIT_LINE_MAX_BYTES - LINE_FRAME_MAX_BYTES;

/** The empty log's anchor. */
export const AUDIT_EMPTY_ANCHOR: AuditAnchor = Object.freeze({ seq: 0, hash: AUDIT_GENESIS });

const HEX64 = /^[0-9a-f]{64}$/;

/**
 * Prints an anchor as `<seq>:<hash>`, the form the CLI's `--anchor` takes.
 * @throws AuditAnchorError when `anchor` is not a seq with a 64-hex hash.
 */
export function formatAuditAnchor(anchor: AuditAnchor): string {
  assertAuditAnchor(anchor);
  return `${anchor.seq}:${anchor.hash}`;
}

/**
 * Parses `<seq>:<64 lowercase hex>` into an anchor.
 * @throws AuditAnchorError when the text has another shape.
 */
export function parseAuditAnchor(text: string): AuditAnchor {
  const match = /^(0|[1-9][0-9]{0,15}):([0-9a-f]{64})$/.exec(text);
  const seq = match ? Number(match[1]) : Number.NaN;
  if (!match || !Number.isSafeInteger(seq)) {
    throw new AuditAnchorError(`audit anchor ${shownText(text)} is not <seq>:<64 lowercase hex digits>`);
  }
  return { seq, hash: match[2] as string };
}

/**
 * Refuses an anchor that is not a non-negative safe-integer `seq` with a
 * 64-lowercase-hex `hash`: a bad anchor is the caller's mistake, not a
 * finding about the log.
 * @throws AuditAnchorError naming the value.
 */
export function assertAuditAnchor(value: unknown): asserts value is AuditAnchor {
  const anchor = value as { seq?: unknown; hash?: unknown } | null;
  const ok =
    typeof anchor === "object" &&
    anchor !== null &&
    typeof anchor.seq === "number" &&
    Number.isSafeInteger(anchor.seq) &&
    anchor.seq >= 0 &&
    typeof anchor.hash === "string" &&
    HEX64.test(anchor.hash);
  if (!ok) {
    throw new AuditAnchorError(
      `audit anchor ${shownAnchor(value)} is not { seq: a non-negative integer, hash: 64 lowercase hex }`,
    );
  }
}

/** An anchor as its error shows it: its JSON, or its type where it has none (a BigInt, a cycle, a throwing getter). */
function shownAnchor(value: unknown): string {
  try {
    const json = JSON.stringify(value);
    return json === undefined ? shownValue(value) : escapeHidden(json);
  } catch {
    return shownValue(value);
  }
}

/** sha256 as lowercase hex. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/**
 * Builds line `seq` of the chain. The body is the line without its `hash`
 * member (and `mac`); `hash` is sha256 over the body's UTF-8 bytes.
 * `JSON.stringify` escapes lone surrogates, so the body encodes to UTF-8
 * without loss and the verifier, which hashes raw file bytes, sees exactly
 * what was hashed here. With a key, a `mac` member follows the hash (see
 * {@link lineMac}).
 */
export function encodeAuditLine(
  seq: number,
  prev: string,
  record: GateDecision,
  key: Buffer | undefined,
): { readonly text: string; readonly hash: string } {
  const body = `{"seq":${seq},"prev":"${prev}","record":${JSON.stringify(record)}`;
  const hash = sha256Hex(`${body}}`);
  const mac = key === undefined ? "" : `,"mac":"${lineMac(key, hash)}"`;
  return { text: `${body},"hash":"${hash}"${mac}}\n`, hash };
}
