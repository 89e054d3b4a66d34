import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { canonicalJson } from "./canonical.js";

/** What a tool presents to the model: the descriptor a grant is pinned to. */
export interface ToolDescriptor {
  /** The tool's name, matched exactly (case-sensitive) by grants. */
  readonly name: string;
  /** The description the model is shown. */
  readonly description: string;
  /** The tool's input JSON Schema (any JSON value). */
  readonly inputSchema: unknown;
}

/** `HEX[b]`: the byte `b` as two lowercase hex digits. */
const HEX: readonly string[] = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

function hex8(word: number): string {
  return (
    (HEX[(word >>> 24) & 0xff] as string) +
    (HEX[(word >>> 16) & 0xff] as string) +
    (HEX[(word >>> 8) & 0xff] as string) +
    (HEX[word & 0xff] as string)
  );
}

/**
 * FNV-1a 64 over the UTF-8 bytes of `text`, as 16 lowercase hex digits.
 *
 * The 64-bit state is kept as two 32-bit halves so no BigInt is made per
 * byte. The prime is 2^40 + 0x1b3, so `h * prime` is `h * 0x1b3` plus the
 * low half shifted into the high one: the low half's new value is one
 * `Math.imul`, and the high half (which never feeds the low one) takes the
 * carry of that product. A lone surrogate has no UTF-8 form; like
 * `TextEncoder` it is hashed as U+FFFD. Text made by {@link canonicalJson}
 * never holds one (it escapes them as `\udxxx`), so the digests built on it
 * are unaffected.
 *
 * @example
 * digest16("") // "cbf29ce484222325"
 */
export function digest16(text: string): string {
  let lo = 0x84222325 | 0;
  let hi = 0xcbf29ce4 | 0;
  const length = text.length;
  // UTF-8 bytes of one non-ASCII character, hashed by the same step as ASCII.
  const bytes = [0, 0, 0, 0];
  for (let i = 0; i < length; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      const x = lo ^ c;
      lo = Math.imul(x, 0x1b3);
      // High half: hi * 0x1b3, plus the carry out of the low product
      // (x * 0x1b3 >>> 32, from 16-bit halves so it stays exact), plus the
      // low 24 bits of x shifted up by 40 - 32 = 8.
      hi = (Math.imul(hi, 0x1b3) + (((x >>> 16) * 0x1b3 + (((x & 0xffff) * 0x1b3) >>> 16)) >>> 16) + (x << 8)) | 0;
      continue;
    }
    let count: number;
    if (c < 0x800) {
      bytes[0] = 0xc0 | (c >> 6);
      bytes[1] = 0x80 | (c & 0x3f);
      count = 2;
    } else if (c >= 0xd800 && c <= 0xdbff && i + 1 < length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      const cp = 0x10000 + ((c - 0xd800) << 10) + (text.charCodeAt(i + 1) - 0xdc00);
      i++;
      bytes[0] = 0xf0 | (cp >> 18);
      bytes[1] = 0x80 | ((cp >> 12) & 0x3f);
      bytes[2] = 0x80 | ((cp >> 6) & 0x3f);
      bytes[3] = 0x80 | (cp & 0x3f);
      count = 4;
    } else {
      if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      bytes[0] = 0xe0 | (c >> 12);
      bytes[1] = 0x80 | ((c >> 6) & 0x3f);
      bytes[2] = 0x80 | (c & 0x3f);
      count = 3;
    }
    for (let k = 0; k < count; k++) {
      const x = lo ^ (bytes[k] as number);
      lo = Math.imul(x, 0x1b3);
      const carry = ((x >>> 16) * 0x1b3 + (((x & 0xffff) * 0x1b3) >>> 16)) >>> 16;
      hi = (Math.imul(hi, 0x1b3) + carry + (x << 8)) | 0;
    }
  }
  return hex8(hi) + hex8(lo);
}

/**
 * The digest a `PendingAsk` and an audit record carry instead of the call's
 * arguments: `digest16(canonicalJson(args))`.
 *
 * @throws {CanonicalJsonError} when `args` has no JSON form.
 * @example
 * argsDigest({ path: "/tmp/x", limit: 10 }) // "f1ed61cd8ca5e26b"
 */
export function argsDigest(args: unknown): string {
  return digest16(canonicalJson(args));
}

function descriptorText(descriptor: ToolDescriptor): string {
  const { name, description, inputSchema } = descriptor;
  return canonicalJson({
    name,
    description,
    schema: { tool: name, description, input_schema: inputSchema },
  });
}

/**
 * The original's 16-hex descriptor digest, used to honour pins in old ledgers.
 * FNV-1a is not collision resistant: new pins use {@link descriptorFingerprint}.
 *
 * @throws {CanonicalJsonError} when the input schema has no JSON form.
 */
export function descriptorDigest(descriptor: ToolDescriptor): string {
  return digest16(descriptorText(descriptor));
}

/**
 * `"sha256:"` + 64 lowercase hex over the same canonical text as
 * {@link descriptorDigest}: the pin this library writes.
 *
 * @throws {CanonicalJsonError} when the input schema has no JSON form.
 */
export function descriptorFingerprint(descriptor: ToolDescriptor): string {
  return `sha256:${createHash("sha256").update(descriptorText(descriptor), "utf8").digest("hex")}`;
}

/**
 * The name of a project's ledger folder: `digest16` of the most canonical form
 * of `dir` that can be had: its realpath; else its parent's realpath joined
 * with its name (so a project bound before its folder existed keeps its
 * ledger once the folder is created); else the absolute path; else `dir` as
 * given.
 */
export function projectIdentity(dir: string): string {
  return digest16(canonicalProjectPath(dir));
}

function canonicalProjectPath(dir: string): string {
  try {
    return realpathSync(dir);
  } catch {
    // fall through to the next rung
  }
  try {
    const absolute = resolve(dir);
    return join(realpathSync(dirname(absolute)), basename(absolute));
  } catch {
    // fall through
  }
  try {
    return resolve(dir);
  } catch {
    // process.cwd() throws when the working folder was deleted
  }
  return dir;
}
