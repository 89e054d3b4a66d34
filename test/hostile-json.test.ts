import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { NIL_UUID, PendingAskSchema } from "../src/ask/index.js";
import {
  CanonicalJsonError,
  FileGrantStore,
  Grant,
  GrantScope,
  LedgerCorruptError,
  argsDigest,
  canonicalJson,
  digest16,
} from "../src/grant/index.js";
import { referenceFnv1a64 } from "./support/fnv-reference.js";

/** Fuzz cases per property; raise with LOOPCTL_FUZZ_RUNS. */
const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);
const FIXTURES = fileURLToPath(new URL("./fixtures/hostile/", import.meta.url));
const DEPTH = 100_000;

const prototypes = [Object.prototype, Array.prototype, Function.prototype, String.prototype];
const pristine = prototypes.map((p) => Object.getOwnPropertyNames(p).sort());
afterEach(() => {
  // Nothing parsed or loaded may have added a property to a shared prototype.
  expect(prototypes.map((p) => Object.getOwnPropertyNames(p).sort())).toEqual(pristine);
  expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
});

const temp = mkdtempSync(join(tmpdir(), "loopctl-hostile-json-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));
let projects = 0;
/** A fresh store whose ledger holds exactly `bytes`. */
function ledgerWith(bytes: Uint8Array | string): FileGrantStore {
  projects += 1;
  const store = new FileGrantStore(join(temp, "root"), join(temp, `project-${projects}`));
  mkdirSync(dirname(store.ledgerPath), { recursive: true, mode: 0o700 });
  writeFileSync(store.ledgerPath, bytes, { mode: 0o600 });
  return store;
}

/** Loads, and requires a list of grants or a LedgerCorruptError naming the file: nothing else. */
async function loadOrCorrupt(store: FileGrantStore): Promise<Grant[] | LedgerCorruptError> {
  try {
    const grants = await store.load();
    for (const grant of grants) expect(grant).toBeInstanceOf(Grant);
    return grants;
  } catch (error) {
    if (!(error instanceof LedgerCorruptError)) throw new Error(`load threw ${String(error)}`, { cause: error });
    expect(error.code).toBe("LEDGER_CORRUPT");
    expect(error.path).toBe(store.ledgerPath);
    expect(error.message).toContain(store.ledgerPath);
    return error;
  }
}

/** A corrupt ledger is never overwritten: save, revoke and clear refuse, and its bytes stay. */
async function expectUntouchable(store: FileGrantStore): Promise<void> {
  const before = readFileSync(store.ledgerPath);
  const grant = new Grant("read", "allow", GrantScope.thisTool());
  await expect(store.save(grant)).rejects.toBeInstanceOf(LedgerCorruptError);
  await expect(store.revoke(grant.id)).rejects.toBeInstanceOf(LedgerCorruptError);
  await expect(store.clear()).rejects.toBeInstanceOf(LedgerCorruptError);
  expect(readFileSync(store.ledgerPath).equals(before)).toBe(true);
}

/** 100k levels built without recursion, as text. */
const deepText = (open: string, leaf: string, close: string): string => open.repeat(DEPTH) + leaf + close.repeat(DEPTH);

// ---------------------------------------------------------------- asks

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const FIELDS = ["id", "sessionId", "runId", "turn", "callId", "tool", "argsDigest", "prompt"] as const;

/** The contract, written independently of the schema. */
function isValidAsk(value: unknown): boolean {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const v = value as Record<string, unknown>;
  const str = (k: string): boolean => Object.hasOwn(v, k) && typeof v[k] === "string";
  return (
    str("id") &&
    UUID.test(v["id"] as string) &&
    str("sessionId") &&
    UUID.test(v["sessionId"] as string) &&
    str("runId") &&
    UUID.test(v["runId"] as string) &&
    Object.hasOwn(v, "turn") &&
    Number.isSafeInteger(v["turn"]) &&
    (v["turn"] as number) >= 0 &&
    str("callId") &&
    str("tool") &&
    (v["tool"] as string).length > 0 &&
    str("argsDigest") &&
    /^[0-9a-f]{16}$/.test(v["argsDigest"] as string) &&
    str("prompt")
  );
}

const validAsk = {
  id: "6f1c1e7a-3c0b-4f7e-9a51-0d2b8e0f4c11",
  sessionId: "0f8fad5b-d9cb-469f-a165-70867728950e",
  runId: NIL_UUID,
  turn: 3,
  callId: "call_1",
  tool: "write_file",
  argsDigest: "f1ed61cd8ca5e26b",
  prompt: "Write /etc/hosts?",
};

const hostileValue = fc.oneof(
  fc.jsonValue(),
  fc.constantFrom(
    -1,
    1.5,
    2 ** 53,
    -0,
    1e308,
    "",
    "A".repeat(16),
    "F1ED61CD8CA5E26B",
    "6F1C1E7A-3C0B-4F7E-9A51-0D2B8E0F4C11",
    "\ud800",
    [],
    {},
  ),
);
const hostileKey = fc.constantFrom(
  "__proto__",
  "constructor",
  "prototype",
  "args",
  "input",
  "toString",
  "hasOwnProperty",
);

/** Parses `text` as a wire body would be, and checks the schema's answer against the contract. */
function checkAskText(text: string): void {
  const value: unknown = JSON.parse(text);
  let parsed: unknown;
  try {
    parsed = PendingAskSchema.parse(value);
  } catch (error) {
    expect(error).toBeInstanceOf(z.ZodError);
    expect(isValidAsk(value)).toBe(false);
    return;
  }
  expect(isValidAsk(value)).toBe(true);
  expect(Object.getPrototypeOf(parsed)).toBe(Object.prototype);
  expect(Object.keys(parsed as object).sort()).toEqual([...FIELDS].sort());
  for (const field of FIELDS)
    expect((parsed as Record<string, unknown>)[field]).toEqual((value as Record<string, unknown>)[field]);
}

describe("PendingAskSchema on untrusted JSON", () => {
  it("arbitrary JSON values: a ZodError or a valid ask, never another exception", () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.jsonValue(), fc.dictionary(fc.constantFrom(...FIELDS, "__proto__"), hostileValue)),
        (value) => {
          checkAskText(JSON.stringify(value));
        },
      ),
      { numRuns: RUNS },
    );
  });

  it("mutated valid asks (fields dropped, retyped, hostile keys added): parsed exactly when the contract holds", () => {
    const mutation = fc.record({
      drop: fc.subarray([...FIELDS]),
      replace: fc.dictionary(fc.constantFrom(...FIELDS), hostileValue, { maxKeys: 3 }),
      extra: fc.dictionary(hostileKey, fc.jsonValue(), { maxKeys: 3 }),
    });
    fc.assert(
      fc.property(mutation, ({ drop, replace, extra }) => {
        const fields: [string, unknown][] = Object.entries({ ...validAsk, ...replace }).filter(
          ([k]) => !drop.includes(k as never),
        );
        // Hostile keys go in as JSON text, so "__proto__" arrives as an own key, as from a wire.
        const members = [...fields, ...Object.entries(extra)].map(
          ([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`,
        );
        checkAskText(`{${members.join(",")}}`);
      }),
      { numRuns: RUNS },
    );
  });

  it("a __proto__ member never becomes the parsed ask's prototype or leaks its fields", () => {
    const { prompt: _prompt, ...withoutPrompt } = validAsk;
    const text = `{"__proto__":{"polluted":"yes","prompt":"from the prototype"},${JSON.stringify(withoutPrompt).slice(1)}`;
    expect(PendingAskSchema.safeParse(JSON.parse(text)).success).toBe(false);
    const parsed = PendingAskSchema.parse(
      JSON.parse(`{"__proto__":{"polluted":"yes"},${JSON.stringify(validAsk).slice(1)}`),
    );
    expect(Object.getPrototypeOf(parsed)).toBe(Object.prototype);
    expect((parsed as { polluted?: unknown }).polluted).toBeUndefined();
  });

  it(`${DEPTH} levels of nesting, as the body or as an unknown member: a ZodError or a clean parse, never a RangeError`, () => {
    expect(() => PendingAskSchema.parse(JSON.parse(deepText('{"a":', "1", "}")))).toThrow(z.ZodError);
    expect(() => PendingAskSchema.parse(JSON.parse(deepText("[", "1", "]")))).toThrow(z.ZodError);
    const withDeepExtra = JSON.parse(
      `{${JSON.stringify(validAsk).slice(1, -1)},"extra":${deepText("[", "1", "]")}}`,
    ) as unknown;
    expect(PendingAskSchema.parse(withDeepExtra)).toEqual(validAsk);
    const deepPrompt = JSON.parse(
      `{${JSON.stringify({ ...validAsk, prompt: 0 }).slice(1, -2)}${deepText("[", "1", "]")}}`,
    ) as unknown;
    expect(() => PendingAskSchema.parse(deepPrompt)).toThrow(z.ZodError);
  });

  it("lone surrogates in text fields parse and survive a JSON round trip", () => {
    const ask = { ...validAsk, callId: "call\udc00", tool: "w\ud800rite", prompt: "ok? \ud83d" };
    const wire = JSON.stringify(ask);
    expect(wire).toContain("\\ud800");
    expect(PendingAskSchema.parse(JSON.parse(wire))).toEqual(ask);
  });
});

// ---------------------------------------------------------------- ledgers

const REAL_LEDGER = readFileSync(join(FIXTURES, "ledger-valid.json"));

type Path = (string | number)[];
function nodes(value: unknown, path: Path = [], out: Path[] = []): Path[] {
  out.push(path);
  if (Array.isArray(value)) value.forEach((v, i) => nodes(v, [...path, i], out));
  else if (value !== null && typeof value === "object")
    for (const [k, v] of Object.entries(value)) nodes(v, [...path, k], out);
  return out;
}
function setAt(
  root: unknown,
  path: Path,
  update: (parent: Record<string | number, unknown>, key: string | number) => void,
): unknown {
  if (path.length === 0) return root;
  let parent = root as Record<string | number, unknown>;
  for (const key of path.slice(0, -1)) parent = parent[key] as Record<string | number, unknown>;
  update(parent, path.at(-1)!);
  return root;
}

const ledgerMutation = fc.oneof(
  fc.record({
    type: fc.constant("flip" as const),
    flips: fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }),
  }),
  fc.record({ type: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ type: fc.constant("swap" as const), node: fc.nat(), value: hostileValue }),
  fc.record({ type: fc.constant("inject" as const), node: fc.nat(), key: hostileKey, value: fc.jsonValue() }),
  fc.record({ type: fc.constant("drop" as const), node: fc.nat() }),
  fc.record({ type: fc.constant("duplicate" as const), record: fc.nat() }),
);
type LedgerMutation = typeof ledgerMutation extends fc.Arbitrary<infer T> ? T : never;

function mutate(base: Buffer, m: LedgerMutation): Buffer {
  switch (m.type) {
    case "flip": {
      const bytes = Buffer.from(base);
      for (const [at, byte] of m.flips) bytes[at % bytes.length] = byte;
      return bytes;
    }
    case "truncate":
      return base.subarray(0, m.at % base.length);
    case "duplicate": {
      const records = JSON.parse(base.toString("utf8")) as unknown[];
      records.push(structuredClone(records[m.record % records.length]));
      return Buffer.from(JSON.stringify(records));
    }
    default: {
      const root = JSON.parse(base.toString("utf8")) as unknown;
      const all = nodes(root);
      const path = all[m.node % all.length]!;
      const changed =
        m.type === "swap"
          ? path.length === 0
            ? m.value
            : setAt(root, path, (p, k) => (p[k] = m.value))
          : m.type === "drop"
            ? setAt(root, path, (p, k) => (Array.isArray(p) ? p.splice(k as number, 1) : delete p[k]))
            : setAt(root, path, (p, k) => {
                const target = p[k];
                if (target !== null && typeof target === "object" && !Array.isArray(target)) {
                  // An own member, as JSON.parse would make it: never the prototype.
                  Object.defineProperty(target, m.key, {
                    value: m.value,
                    enumerable: true,
                    writable: true,
                    configurable: true,
                  });
                }
              });
      return Buffer.from(JSON.stringify(changed) ?? "");
    }
  }
}

describe("ledger files", () => {
  it("the real ledger loads, and every record rewrites to the same bytes", async () => {
    const store = ledgerWith(REAL_LEDGER);
    const grants = await store.load();
    expect(grants).toHaveLength(5);
    expect(`[${grants.map((g) => g.toLedgerText()).join(",")}]`).toBe(REAL_LEDGER.toString("utf8"));
  });

  it("a UTF-8 byte-order mark is read past: the ledger under it loads", async () => {
    expect(await ledgerWith(readFileSync(join(FIXTURES, "ledger-bom.json"))).load()).toEqual([]);
  });

  const corrupt = readdirSync(join(FIXTURES, "corrupt")).sort();
  it.each(corrupt)(
    "corrupt/%s is a LedgerCorruptError naming the file, and no save, revoke or clear touches it",
    async (name) => {
      const store = ledgerWith(readFileSync(join(FIXTURES, "corrupt", name)));
      expect(await loadOrCorrupt(store)).toBeInstanceOf(LedgerCorruptError);
      await expectUntouchable(store);
    },
  );

  it("mutated real ledgers (byte flips, truncations, type swaps, dropped or duplicated records, hostile keys): a valid load or LedgerCorruptError", async () => {
    const tally = { loaded: 0, corrupt: 0 };
    await fc.assert(
      fc.asyncProperty(ledgerMutation, async (m) => {
        const bytes = mutate(REAL_LEDGER, m);
        const store = ledgerWith(bytes);
        const outcome = await loadOrCorrupt(store);
        if (outcome instanceof LedgerCorruptError) {
          tally.corrupt += 1;
          await expectUntouchable(store);
          return;
        }
        tally.loaded += 1;
        expect(new Set(outcome.map((g) => g.id)).size).toBe(outcome.length);
        for (const grant of outcome) {
          // What loaded is a grant the ledger spelling carries exactly.
          expect(Grant.fromJSON(JSON.parse(grant.toLedgerText())).toLedgerText()).toBe(grant.toLedgerText());
        }
      }),
      { numRuns: RUNS },
    );
    expect(tally.loaded).toBeGreaterThan(0);
    expect(tally.corrupt).toBeGreaterThan(0);
    console.log(
      `ledger fuzz: ${RUNS} mutated ledgers, ${tally.loaded} loaded, ${tally.corrupt} refused as corrupt and left untouched`,
    );
  });

  it("__proto__, constructor and prototype keys load as plain data, pollute nothing and round-trip canonically", async () => {
    const text = readFileSync(join(FIXTURES, "ledger-proto-keys.json"), "utf8");
    const store = ledgerWith(text);
    const grants = await store.load();
    expect(grants.map((g) => [g.tool, g.verdict])).toEqual([
      ["write", "allow"],
      ["read", "deny"],
    ]);
    const args = (grants[0]!.scope as { args: Record<string, unknown> }).args;
    expect(Object.keys(args).sort()).toEqual(["__proto__", "constructor", "prototype"]);
    expect(Object.getPrototypeOf(args)).toBe(Object.prototype);
    expect(Object.hasOwn(args, "__proto__")).toBe(true);
    const canonical =
      '{"__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}},"prototype":{"polluted":"yes"}}';
    expect(grants[0]!.canonicalArgs).toBe(canonical);
    expect(grants[0]!.toLedgerText()).toContain(`"args":${canonical}`);
    expect(grants[0]!.covers("write", JSON.parse(canonical))).toBe(true);
    expect(grants[0]!.covers("write", {})).toBe(false);
    // A record's own __proto__ member never supplies its fields.
    expect(grants.some((g) => g.tool === "evil")).toBe(false);
    // Saving over it keeps the keys as data.
    await store.save(new Grant("read", "allow", GrantScope.thisTool()));
    expect(readFileSync(store.ledgerPath, "utf8")).toContain(`"args":${canonical}`);
  });

  it(`${DEPTH} levels of nesting in a record's args: LedgerCorruptError, not a stack overflow`, async () => {
    for (const deep of [deepText("[", "1", "]"), deepText('{"k":', "1", "}")]) {
      const store = ledgerWith(`[{"id":"x","tool":"t","verdict":"Allow","scope":{"this_call":{"args":${deep}}}}]`);
      expect(await loadOrCorrupt(store)).toBeInstanceOf(LedgerCorruptError);
    }
    const whole = ledgerWith(deepText("[", "", "]"));
    expect(await loadOrCorrupt(whole)).toBeInstanceOf(LedgerCorruptError);
  });
});

// ---------------------------------------------------------------- arguments

/**
 * FNV-1a 64 in four 16-bit limbs: an implementation independent of the
 * library's (two 32-bit halves), itself checked against BigInt below.
 */
function fnvLimbs(bytes: Uint8Array): string {
  let a0 = 0x2325,
    a1 = 0x8422,
    a2 = 0x9ce4,
    a3 = 0xcbf2;
  for (const byte of bytes) {
    a0 ^= byte;
    // × 0x100000001b3 = × 0x1b3 plus × 2^40 (two limbs up, then 8 bits).
    const t0 = a0 * 0x1b3;
    let t1 = a1 * 0x1b3;
    let t2 = a2 * 0x1b3 + (a0 << 8);
    let t3 = a3 * 0x1b3 + (a1 << 8);
    t1 += t0 >>> 16;
    t2 += t1 >>> 16;
    t3 += t2 >>> 16;
    a0 = t0 & 0xffff;
    a1 = t1 & 0xffff;
    a2 = t2 & 0xffff;
    a3 = t3 & 0xffff;
  }
  return [a3, a2, a1, a0].map((x) => x.toString(16).padStart(4, "0")).join("");
}

describe("arguments", () => {
  it("the limb reference agrees with BigInt FNV-1a on every byte value and the spec's golden digest", () => {
    const sample = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 7919) % 256));
    expect(fnvLimbs(sample)).toBe(referenceFnv1a64(sample));
    expect(fnvLimbs(Buffer.from('{"limit":10,"path":"/tmp/x"}'))).toBe("f1ed61cd8ca5e26b");
  });

  it("10 MB arguments digest to the reference over their canonical text, built by hand", () => {
    const unit = 'ab"c\\d\ne\u00e9\u20ac\ud83d\ude00 \u0001/';
    const blob = unit.repeat(Math.ceil((10 * 1024 * 1024) / unit.length));
    const args = { z: { y: 1, x: [true, null] }, blob, a: 2.5, "\u00e9": "last", B: "upper first" };
    // Keys by code point: "B" < "a" < "blob" < "z" < "é"; nested "x" < "y".
    const text = `{"B":"upper first","a":2.5,"blob":${JSON.stringify(blob)},"z":{"x":[true,null],"y":1},"\u00e9":"last"}`;
    expect(Buffer.byteLength(text)).toBeGreaterThan(10 * 1024 * 1024);
    const canonical = canonicalJson(args);
    expect(canonical.length).toBe(text.length);
    expect(canonical === text).toBe(true);
    const reference = fnvLimbs(Buffer.from(text, "utf8"));
    expect(argsDigest(args)).toBe(reference);
    expect(digest16(text)).toBe(reference);
  });

  it("lone surrogates: canonical text escapes them, so no digest collides with U+FFFD, and a grant round-trips through a ledger", async () => {
    const lone = { cmd: "rm \ud800 -rf", tail: "\udfff" };
    const replaced = { cmd: "rm \ufffd -rf", tail: "\ufffd" };
    expect(canonicalJson(lone)).toBe('{"cmd":"rm \\ud800 -rf","tail":"\\udfff"}');
    expect(argsDigest(lone)).toBe(fnvLimbs(Buffer.from(canonicalJson(lone), "utf8")));
    expect(argsDigest(lone)).not.toBe(argsDigest(replaced));
    // Raw text with a lone surrogate hashes as U+FFFD would (TextEncoder's reading).
    expect(digest16("a\ud800b")).toBe(fnvLimbs(new TextEncoder().encode("a\ud800b")));

    const store = ledgerWith("[]");
    const grant = new Grant("shell", "deny", GrantScope.thisCall(lone));
    await store.save(grant);
    const bytes = readFileSync(store.ledgerPath);
    expect(() => new TextDecoder("utf-8", { fatal: true }).decode(bytes)).not.toThrow();
    const [loaded] = await new FileGrantStore(join(temp, "root"), join(temp, `project-${projects}`)).load();
    expect(loaded?.id).toBe(grant.id);
    expect(loaded?.covers("shell", lone)).toBe(true);
    expect(loaded?.covers("shell", replaced)).toBe(false);
  });

  it(`${DEPTH} levels of nesting in arguments: a typed CanonicalJsonError from every entry point`, () => {
    let deep: unknown = "leaf";
    for (let i = 0; i < DEPTH; i += 1) deep = i % 2 === 0 ? [deep] : { k: deep };
    expect(() => argsDigest(deep)).toThrow(CanonicalJsonError);
    expect(() => new Grant("t", "allow", GrantScope.thisCall(deep))).toThrow(CanonicalJsonError);
    expect(new Grant("t", "allow", GrantScope.thisTool()).covers("t", deep)).toBe(true);
    expect(new Grant("t", "allow", GrantScope.thisCall({})).covers("t", deep)).toBe(false);
  });

  it("arguments holding an object whose every read throws (a proxy): a CanonicalJsonError naming its path, from every entry point", () => {
    const fail = (): never => {
      throw new Error("trap bomb");
    };
    const bomb = (): object =>
      new Proxy({}, { get: fail, has: fail, ownKeys: fail, getOwnPropertyDescriptor: fail, getPrototypeOf: fail });
    for (const [args, path] of [
      [bomb(), "$"],
      [{ a: [1, { b: bomb() }] }, "$.a[1].b"],
    ] as const) {
      let thrown: unknown;
      try {
        canonicalJson(args);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(CanonicalJsonError);
      expect((thrown as CanonicalJsonError).jsonPath).toBe(path);
      expect(() => argsDigest(args)).toThrow(CanonicalJsonError);
      expect(() => new Grant("t", "allow", GrantScope.thisCall(args))).toThrow(CanonicalJsonError);
      expect(new Grant("t", "allow", GrantScope.thisCall({})).covers("t", args)).toBe(false);
    }
  });

  it("__proto__, constructor and prototype keys in arguments are data: same digest whatever the order, no pollution", () => {
    const text = '{"prototype":{"x":1},"__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}}}';
    const args = JSON.parse(text) as unknown;
    const canonical = canonicalJson(args);
    expect(canonical).toBe(
      '{"__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}},"prototype":{"x":1}}',
    );
    expect(argsDigest(args)).toBe(argsDigest(JSON.parse(canonical)));
    const grant = new Grant("t", "allow", GrantScope.thisCall(args));
    expect(grant.covers("t", JSON.parse(canonical))).toBe(true);
    expect(Grant.fromJSON(JSON.parse(grant.toLedgerText())).id).toBe(grant.id);
  });
});
