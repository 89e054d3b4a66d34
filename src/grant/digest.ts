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

function hex4(limb: number): string {
  return limb.toString(16).padStart(4, "0");
}

/**
 * FNV-1a 64 over the UTF-8 bytes of `text`, as 16 lowercase hex digits.
 *
 * The 64-bit state is kept in 16-bit limbs so no BigInt is made per byte.
 * A lone surrogate has no UTF-8 form; like `TextEncoder` it is
 * hashed as U+FFFD. Text made by {@link canonicalJson} never holds one (it
 * escapes them as `\udxxx`), so the digests built on it are unaffected.
 *
 * @example
 * digest16("") // "cbf29ce484222325"
 */
export function digest16(text: string): string {
  // The 64-bit state as four 16-bit limbs (h0 lowest). The prime
  // 0x100000001b3 has limbs [0x1b3, 0, 0x100, 0], so every partial product
  // stays a small integer and no BigInt or float division is needed.
  let h0 = 0x2325;
  let h1 = 0x8422;
  let h2 = 0x9ce4;
  let h3 = 0xcbf2;
  const step = (byte: number): void => {
    h0 ^= byte;
    const t0 = h0 * 0x1b3;
    const t1 = h1 * 0x1b3 + (t0 >>> 16);
    const t2 = h2 * 0x1b3 + h0 * 0x100 + (t1 >>> 16);
    const t3 = h3 * 0x1b3 + h1 * 0x100 + (t2 >>> 16);
    h0 = t0 & 0xffff;
    h1 = t1 & 0xffff;
    h2 = t2 & 0xffff;
    h3 = t3 & 0xffff;
  };
  const length = text.length;
  for (let i = 0; i < length; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      step(c);
      continue;
    }
    if (c < 0x800) {
      step(0xc0 | (c >> 6));
      step(0x80 | (c & 0x3f));
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = i + 1 < length ? text.charCodeAt(i + 1) : 0;
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        const cp = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
        i++;
        step(0xf0 | (cp >> 18));
        step(0x80 | ((cp >> 12) & 0x3f));
        step(0x80 | ((cp >> 6) & 0x3f));
        step(0x80 | (cp & 0x3f));
        continue;
      }
      c = 0xfffd;
    }
    step(0xe0 | (c >> 12));
    step(0x80 | ((c >> 6) & 0x3f));
    step(0x80 | (c & 0x3f));
  }
  return hex4(h3) + hex4(h2) + hex4(h1) + hex4(h0);
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
