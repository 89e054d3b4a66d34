/**
 * FNV-1a 64 over the UTF-8 bytes of a string, two ways that give the same
 * digest: a WebAssembly loop (64-bit multiplies, about four times faster)
 * and plain JavaScript, used where WebAssembly is unavailable (`--jitless`,
 * a policy that forbids compiling it). A lone surrogate has no UTF-8 form;
 * both hash it as U+FFFD, as `TextEncoder` encodes it.
 */

const OFFSET_HI = 0xcbf29ce4;
const OFFSET_LO = 0x84222325;

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
 * The JavaScript form. The 64-bit state is kept as two 32-bit halves so no
 * BigInt is made per byte. The prime is 2^40 + 0x1b3, so `h * prime` is
 * `h * 0x1b3` plus the low half shifted into the high one: the low half's
 * new value is one `Math.imul`, and the high half (which never feeds the
 * low one) takes the carry of that product.
 */
export function fnv1a64Js(text: string): string {
  let lo = OFFSET_LO | 0;
  let hi = OFFSET_HI | 0;
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

/** Unsigned LEB128, as the WebAssembly binary format writes sizes and indexes. */
function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
}

function section(id: number, payload: readonly number[]): number[] {
  return [id, ...uleb(payload.length), ...payload];
}

function name(text: string): number[] {
  return [text.length, ...Array.from(text, (c) => c.charCodeAt(0))];
}

// The opcodes the module uses (WebAssembly core specification, binary format).
const I32 = 0x7f;
const I64 = 0x7e;
const op = {
  block: 0x02,
  loop: 0x03,
  br: 0x0c,
  brIf: 0x0d,
  end: 0x0b,
  localGet: 0x20,
  localSet: 0x21,
  i64Load: 0x29,
  i64Load8U: 0x31,
  i64Store: 0x37,
  i32Const: 0x41,
  i64Const: 0x42,
  i32GeU: 0x4f,
  i32Add: 0x6a,
  i64Mul: 0x7e,
  i64Xor: 0x85,
} as const;
const EMPTY_BLOCK = 0x40;
/** The FNV 64 prime, 0x100000001b3, as a signed LEB128 `i64.const` immediate. */
const PRIME_SLEB = [0xb3, 0x83, 0x80, 0x80, 0x80, 0x20];

/**
 * The module, in the text format:
 *
 * ```wat
 * (module
 *   (memory (export "m") 1)
 *   ;; hashes the bytes at [8, end) into the 64-bit state kept at [0, 8)
 *   (func (export "h") (param $end i32) (local $i i32) (local $h i64)
 *     (local.set $h (i64.load (i32.const 0)))
 *     (local.set $i (i32.const 8))
 *     (block $done
 *       (loop $next
 *         (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
 *         (local.set $h (i64.mul (i64.xor (local.get $h) (i64.load8_u (local.get $i)))
 *                                (i64.const 0x100000001b3)))
 *         (local.set $i (i32.add (local.get $i) (i32.const 1)))
 *         (br $next)))
 *     (i64.store (i32.const 0) (local.get $h))))
 * ```
 */
function moduleBytes(): Uint8Array {
  const [end, i, h] = [0, 1, 2];
  const body = [
    ...[2, 1, I32, 1, I64], // locals: $i i32, $h i64
    ...[op.i32Const, 0, op.i64Load, 3, 0, op.localSet, h],
    ...[op.i32Const, 8, op.localSet, i],
    ...[op.block, EMPTY_BLOCK, op.loop, EMPTY_BLOCK],
    ...[op.localGet, i, op.localGet, end, op.i32GeU, op.brIf, 1],
    ...[op.localGet, h, op.localGet, i, op.i64Load8U, 0, 0, op.i64Xor, op.i64Const, ...PRIME_SLEB, op.i64Mul, op.localSet, h],
    ...[op.localGet, i, op.i32Const, 1, op.i32Add, op.localSet, i, op.br, 0],
    ...[op.end, op.end],
    ...[op.i32Const, 0, op.localGet, h, op.i64Store, 3, 0],
    op.end,
  ];
  return Uint8Array.from([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00], // "\0asm", version 1
    ...section(1, [1, 0x60, 1, I32, 0]), // one type: (param i32) (result)
    ...section(3, [1, 0]), // one function, of that type
    ...section(5, [1, 0x00, 1]), // one memory of one 64 KiB page, no maximum
    ...section(7, [2, ...name("m"), 0x02, 0, ...name("h"), 0x00, 0]), // exports
    ...section(10, [1, ...uleb(body.length), ...body]), // the function's code
  ]);
}

/** Where the input bytes start; the state is at [0, 8). */
const INPUT = 8;

interface WasmHasher {
  readonly state: DataView;
  readonly input: Uint8Array;
  readonly hash: (end: number) => void;
}

/** The little of the WebAssembly JavaScript API used here (the package's types leave out the DOM lib). */
interface WebAssemblyApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { readonly exports: Record<string, unknown> };
}

function instantiate(): WasmHasher | undefined {
  try {
    const api = (globalThis as { WebAssembly?: WebAssemblyApi }).WebAssembly;
    if (api === undefined) return undefined;
    const instance = new api.Instance(new api.Module(moduleBytes()));
    const { m, h } = instance.exports as { m: { buffer: ArrayBuffer }; h: (end: number) => void };
    // The memory never grows, so its buffer is never detached.
    return { state: new DataView(m.buffer, 0, INPUT), input: new Uint8Array(m.buffer, INPUT), hash: h };
  } catch {
    return undefined;
  }
}

const wasm = instantiate();
const encoder = new TextEncoder();

function fnv1a64Wasm(hasher: WasmHasher, text: string): string {
  const { state, input, hash } = hasher;
  state.setUint32(0, OFFSET_LO, true);
  state.setUint32(4, OFFSET_HI, true);
  let rest = text;
  for (;;) {
    // encodeInto never splits a character, and writes a lone surrogate as U+FFFD.
    const { read, written } = encoder.encodeInto(rest, input);
    hash(INPUT + written);
    if (read >= rest.length) break;
    rest = rest.substring(read);
  }
  return hex8(state.getUint32(4, true)) + hex8(state.getUint32(0, true));
}

/** Whether {@link fnv1a64} runs on WebAssembly in this process. */
export const FNV_WASM = wasm !== undefined;

/** FNV-1a 64 of the UTF-8 bytes of `text`, as 16 lowercase hex digits. */
export const fnv1a64: (text: string) => string =
  wasm === undefined ? fnv1a64Js : (text) => fnv1a64Wasm(wasm, text);
