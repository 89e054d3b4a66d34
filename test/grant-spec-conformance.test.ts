/**
 * The grant layer against its contract (spec/approvals.md sections 2, 4 and 6,
 * and the pins of spec/integrations.md section 7), clause by clause, with the
 * values written out by hand rather than computed by the code under test.
 */
import { createHash } from "node:crypto";
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import * as root from "../src/index.js";
import {
  argsDigest,
  argsSha256,
  CanonicalJsonError,
  canonicalJson,
  descriptorDigest,
  descriptorFingerprint,
  digest16,
  FileGrantStore,
  Grant,
  GrantPolicy,
  GrantScope,
  LedgerCorruptError,
  MemoryGrantStore,
  projectIdentity,
} from "../src/grant/index.js";
import { Gate, LoopManagers, defineTool } from "../src/engine/index.js";

/** Textbook FNV-1a 64 with BigInt over UTF-8 bytes. */
function fnv(text: string): string {
  let hash = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(text, "utf8")) {
    hash ^= BigInt(byte);
    hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash.toString(16).padStart(16, "0");
}

const sha256 = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex");

function canonicalError(value: unknown): CanonicalJsonError {
  try {
    canonicalJson(value);
  } catch (error) {
    expect(error).toBeInstanceOf(CanonicalJsonError);
    expect(error).toMatchObject({ code: "CANONICAL_JSON" });
    return error as CanonicalJsonError;
  }
  throw new Error(`canonicalJson accepted ${String(value)}`);
}

describe("section 2: public names", () => {
  it("loopctl/grant and the package root export the named functions and classes", () => {
    for (const name of [
      "canonicalJson",
      "digest16",
      "argsDigest",
      "descriptorDigest",
      "descriptorFingerprint",
      "projectIdentity",
      "GrantScope",
      "Grant",
      "MemoryGrantStore",
      "FileGrantStore",
    ]) {
      expect(root, name).toHaveProperty(name);
    }
    expect(root.canonicalJson).toBe(canonicalJson);
    expect(root.Grant).toBe(Grant);
  });

  it("GrantScope builders give the two spelled-out shapes", () => {
    expect(GrantScope.thisTool()).toEqual({ type: "this_tool" });
    expect(GrantScope.thisCall({ a: 1 })).toEqual({ type: "this_call", args: { a: 1 } });
  });

  it("a new Grant has pin null, time 0 and note null; with… keep the id and change one field", () => {
    const g = new Grant("read", "allow", GrantScope.thisTool());
    expect(g).toMatchObject({ tool: "read", verdict: "allow", pinnedDescriptor: null, createdAtMs: 0, note: null });
    expect(g.scope).toEqual({ type: "this_tool" });
    const pinned = g.withPinnedDescriptor("sha256:" + "0".repeat(64));
    const timed = g.withCreatedAtMs(1234);
    const noted = g.withNote("why");
    for (const copy of [pinned, timed, noted]) {
      expect(copy).toBeInstanceOf(Grant);
      expect(copy).not.toBe(g);
      expect(copy.id).toBe(g.id);
    }
    expect(pinned.pinnedDescriptor).toBe("sha256:" + "0".repeat(64));
    expect(timed.createdAtMs).toBe(1234);
    expect(noted.note).toBe("why");
    expect(g).toMatchObject({ pinnedDescriptor: null, createdAtMs: 0, note: null });
  });

  it("toJSON gives the ledger record and fromJSON reads it back", () => {
    const g = new Grant("read", "deny", GrantScope.thisCall({ path: "a" })).withCreatedAtMs(5).withNote("n");
    expect(g.toJSON()).toEqual({
      id: g.id,
      tool: "read",
      verdict: "Deny",
      scope: { this_call: { args: { path: "a" } } },
      pinned_descriptor: null,
      created_at_ms: 5,
      note: "n",
    });
    const back = Grant.fromJSON(JSON.parse(JSON.stringify(g)));
    expect(back.toJSON()).toEqual(g.toJSON());
  });
});

describe("section 4: ids", () => {
  it("the id is digest16 of the ledger spelling of {tool, verdict, scope}", () => {
    expect(new Grant("read", "allow", GrantScope.thisTool()).id).toBe(
      fnv('{"scope":"this_tool","tool":"read","verdict":"Allow"}'),
    );
    expect(new Grant("read", "deny", GrantScope.thisCall({ path: "/tmp/x", limit: 10 })).id).toBe(
      fnv('{"scope":{"this_call":{"args":{"limit":10,"path":"/tmp/x"}}},"tool":"read","verdict":"Deny"}'),
    );
    expect(new Grant("read", "allow", GrantScope.thisCall(null)).id).toBe(
      fnv('{"scope":{"this_call":{"args":null}},"tool":"read","verdict":"Allow"}'),
    );
  });

  it("metadata never changes the id; key order of args never does either", () => {
    const a = new Grant("t", "allow", GrantScope.thisCall({ b: 1, a: 2 }));
    const b = new Grant("t", "allow", GrantScope.thisCall({ a: 2, b: 1 }), {
      pinnedDescriptor: "0123456789abcdef",
      createdAtMs: 99,
      note: "x",
    });
    expect(b.id).toBe(a.id);
  });

  it("re-granting the same rule replaces its entry in both stores", async () => {
    const memory = new MemoryGrantStore();
    const dir = mkdtempSync(join(tmpdir(), "loopctl-conf-"));
    try {
      const file = new FileGrantStore(dir, join(dir, "project"));
      for (const store of [memory, file]) {
        await store.save(new Grant("t", "allow", GrantScope.thisTool()).withNote("first"));
        await store.save(new Grant("t", "allow", GrantScope.thisTool()).withNote("second"));
        const grants = await store.load();
        expect(grants).toHaveLength(1);
        expect(grants[0]?.note).toBe("second");
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("section 4: covers", () => {
  it("matches the tool exactly, any args for this_tool, canonically equal args for this_call", () => {
    const tool = new Grant("Read", "deny", GrantScope.thisTool()).withPinnedDescriptor("0123456789abcdef");
    expect(tool.covers("Read", { anything: [1] })).toBe(true);
    expect(tool.covers("read", {})).toBe(false);
    expect(tool.covers("Read ", {})).toBe(false);
    const call = new Grant("read", "allow", GrantScope.thisCall({ a: { y: 1, x: 2 }, b: [1, 2] }));
    expect(call.covers("read", { b: [1, 2], a: { x: 2, y: 1 } })).toBe(true);
    expect(call.covers("read", { b: [2, 1], a: { x: 2, y: 1 } })).toBe(false);
    expect(call.covers("read", { b: [1, 2], a: { x: 2, y: 1 }, c: null })).toBe(false);
    expect(call.covers("read", { b: [1, 2], a: { x: 2, y: 1, z: undefined } })).toBe(true);
  });
});

describe("section 4: the ledger file", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "loopctl-conf-"));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("lives at <root>/projects/<projectIdentity>/grants.json", () => {
    const project = join(dir, "p");
    mkdirSync(project);
    const store = new FileGrantStore(dir, project);
    expect(store.ledgerPath).toBe(join(dir, "projects", fnv(realpathSync(project)), "grants.json"));
    expect(projectIdentity(project)).toBe(fnv(realpathSync(project)));
  });

  it("is a compact array of records in the original's field order, null where absent, 0600", async () => {
    const store = new FileGrantStore(dir, join(dir, "p"));
    const a = new Grant("read", "allow", GrantScope.thisTool());
    const b = new Grant("shell", "deny", GrantScope.thisCall({ z: 1, "10": 2, "9": 3, é: 4 }))
      .withPinnedDescriptor("sha256:" + "a".repeat(64))
      .withCreatedAtMs(1700000000000)
      .withNote("no");
    expect(await store.save(a)).toBe(a);
    expect(await store.save(b)).toBe(b);
    const text = readFileSync(store.ledgerPath, "utf8");
    expect(text).toBe(
      `[{"id":"${a.id}","tool":"read","verdict":"Allow","scope":"this_tool","pinned_descriptor":null,"created_at_ms":0,"note":null},` +
        `{"id":"${b.id}","tool":"shell","verdict":"Deny","scope":{"this_call":{"args":{"10":2,"9":3,"z":1,"é":4}}},` +
        `"pinned_descriptor":"sha256:${"a".repeat(64)}","created_at_ms":1700000000000,"note":"no"}]`,
    );
    expect(statSync(store.ledgerPath).mode & 0o777).toBe(0o600);
  });

  it("reads a record with unknown fields, ignoring them; missing metadata reads as null / 0", async () => {
    const store = new FileGrantStore(dir, join(dir, "p"));
    mkdirSync(join(dir, "projects", projectIdentity(join(dir, "p"))), { recursive: true, mode: 0o700 });
    const id = fnv('{"scope":"this_tool","tool":"read","verdict":"Allow"}');
    writeFileSync(
      store.ledgerPath,
      `[{"id":"${id}","tool":"read","verdict":"Allow","scope":"this_tool","extra":{"x":1},"origin":"rust"}]`,
      { mode: 0o600 },
    );
    const grants = await store.load();
    expect(grants).toHaveLength(1);
    expect(grants[0]).toMatchObject({ id, tool: "read", pinnedDescriptor: null, createdAtMs: 0, note: null });
  });

  it("missing loads empty; revoke of an unknown id writes nothing; an empty file is a typed error, never overwritten", async () => {
    const store = new FileGrantStore(dir, join(dir, "p"));
    expect(await store.load()).toEqual([]);
    expect(await store.revoke("0123456789abcdef")).toBeUndefined();
    expect(() => statSync(store.ledgerPath)).toThrow();
    const g = await store.save(new Grant("t", "allow", GrantScope.thisTool()));
    const before = statSync(store.ledgerPath);
    expect(await store.revoke("0123456789abcdef")).toBeUndefined();
    const after = statSync(store.ledgerPath);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
    expect(await store.revoke(g.id)).toBe(g);

    writeFileSync(store.ledgerPath, "");
    await expect(store.load()).rejects.toSatisfy(
      (e: unknown) =>
        e instanceof LedgerCorruptError && e.path === store.ledgerPath && e.message.includes(store.ledgerPath),
    );
    await expect(store.save(g)).rejects.toBeInstanceOf(LedgerCorruptError);
    expect(readFileSync(store.ledgerPath, "utf8")).toBe("");
  });

  it("project identity: realpath, else the parent's realpath joined with the name, else the absolute path", () => {
    const real = join(dir, "real");
    mkdirSync(real);
    const link = join(dir, "link");
    symlinkSync(real, link);
    expect(projectIdentity(link)).toBe(fnv(realpathSync(real)));
    const later = join(link, "not-yet");
    expect(projectIdentity(later)).toBe(fnv(join(realpathSync(real), "not-yet")));
    mkdirSync(join(real, "not-yet"));
    expect(projectIdentity(later)).toBe(fnv(join(realpathSync(real), "not-yet")));
    const nowhere = join(dir, "no", "such", "dir");
    expect(projectIdentity(nowhere)).toBe(fnv(resolve(nowhere)));
  });
});

describe("section 6: digest16", () => {
  it.each([
    ["", "cbf29ce484222325"],
    ["a", "af63dc4c8601ec8c"],
    ["foobar", "85944171f73967e8"],
    ["é", fnv("é")],
    ["😀", fnv("😀")],
  ])("digest16(%j) = %s", (text, hex) => {
    expect(digest16(text)).toBe(hex);
  });

  it("pads to 16 digits when the hash starts with zeros", () => {
    let text = "";
    for (let i = 0; ; i++) {
      if (fnv(`k${i}`).startsWith("00")) {
        text = `k${i}`;
        break;
      }
    }
    expect(digest16(text)).toBe(fnv(text));
    expect(digest16(text)).toMatch(/^00[0-9a-f]{14}$/);
  });
});

describe("section 6: canonicalJson", () => {
  it("sorts keys by code point, not by UTF-16 unit or by JavaScript's integer-key order", () => {
    expect(canonicalJson({ "\u{1F600}": 1, "\uE000": 2, a: 3 })).toBe('{"a":3,"\uE000":2,"\u{1F600}":1}');
    expect(canonicalJson({ "2": 0, "10": 1, "-0": 2, "1": 3, "": 4 })).toBe('{"":4,"-0":2,"1":3,"10":1,"2":0}');
    expect(canonicalJson({ b: { d: 1, c: 2 }, a: [{ z: 1, y: 2 }] })).toBe('{"a":[{"y":2,"z":1}],"b":{"c":2,"d":1}}');
  });

  it("writes numbers and strings as JSON.stringify does", () => {
    for (const n of [-0, 0, 1e21, 1e-7, 5e-324, Number.MAX_VALUE, -1.5, 2 ** 53 + 2, 0.1 + 0.2]) {
      expect(canonicalJson(n)).toBe(JSON.stringify(n));
    }
    expect(canonicalJson(-0)).toBe("0");
    expect(canonicalJson(1e21)).toBe("1e+21");
    expect(canonicalJson(5e-324)).toBe("5e-324");
    for (const s of ["\u2028\u2029", "\ud800", "a\udc00b", "\udbff\udfff", '"\\\n\t\u0000\u001f\u007f', "é😀"]) {
      expect(canonicalJson(s)).toBe(JSON.stringify(s));
    }
    expect(canonicalJson("\u2028")).toBe('"\u2028"');
    expect(canonicalJson("\ud800")).toBe('"\\ud800"');
  });

  it("keeps keys named __proto__ and constructor as the data they are", () => {
    const parsed = JSON.parse('{"constructor":1,"__proto__":{"x":2},"a":0}') as unknown;
    expect(canonicalJson(parsed)).toBe('{"__proto__":{"x":2},"a":0,"constructor":1}');
    const bare = Object.create(null) as Record<string, unknown>;
    bare["b"] = 1;
    bare["a"] = 2;
    expect(canonicalJson(bare)).toBe('{"a":2,"b":1}');
    const g = new Grant("t", "allow", GrantScope.thisCall(parsed));
    expect(g.canonicalArgs).toBe('{"__proto__":{"x":2},"a":0,"constructor":1}');
    expect(g.covers("t", JSON.parse('{"a":0,"__proto__":{"x":2},"constructor":1}'))).toBe(true);
    expect(g.covers("t", { a: 0, constructor: 1 })).toBe(false);
    expect(Grant.fromJSON(JSON.parse(g.toLedgerText())).id).toBe(g.id);
  });

  it("handles deep nesting with a typed error, never a stack overflow", () => {
    let deep: unknown = 0;
    for (let i = 0; i < 200_000; i++) deep = [deep];
    canonicalError(deep);
    let ok: unknown = 0;
    for (let i = 0; i < 500; i++) ok = { a: ok };
    expect(canonicalJson(ok)).toBe(JSON.stringify(ok));
  });

  it.each([
    ["NaN", Number.NaN],
    ["Infinity", Number.POSITIVE_INFINITY],
    ["-Infinity", Number.NEGATIVE_INFINITY],
    ["a BigInt", 1n],
    ["a function", () => 1],
    ["a symbol", Symbol("s")],
  ])("%s, at the top, in an array or as a property, is a typed error naming where", (_name, bad) => {
    canonicalError(bad);
    expect(canonicalError({ a: [0, { b: bad }] }).jsonPath).toBe("$.a[1].b");
    expect(canonicalError([bad]).jsonPath).toBe("$[0]");
  });

  it("undefined is a typed error at the top and in an array; a property holding it is omitted, never null", () => {
    canonicalError(undefined);
    expect(canonicalError([0, undefined]).jsonPath).toBe("$[1]");
    expect(canonicalJson({ a: undefined, b: 1 })).toBe('{"b":1}');
  });

  it("cycles and objects that are not plain data are typed errors", () => {
    const cycle: Record<string, unknown> = { a: 1 };
    cycle["self"] = cycle;
    expect(canonicalError(cycle).jsonPath).toBe("$.self");
    class Point {
      x = 1;
    }
    for (const bad of [new Map([[1, 2]]), new Set([1]), new Point(), new Uint8Array(2), /x/, Promise.resolve()]) {
      canonicalError({ v: bad });
    }
  });
});

describe("section 6: digests", () => {
  it("argsDigest golden values", () => {
    expect(argsDigest({ path: "/tmp/x", limit: 10 })).toBe("f1ed61cd8ca5e26b");
    expect(fnv('{"limit":10,"path":"/tmp/x"}')).toBe("f1ed61cd8ca5e26b");
    expect(digest16('{"path":"/tmp/x","limit":10}')).toBe("8b6cb9110c0422ab");
  });

  it("argsSha256 is sha256 over the same canonical text", () => {
    expect(argsSha256({ path: "/tmp/x", limit: 10 })).toBe(sha256('{"limit":10,"path":"/tmp/x"}'));
  });

  const read = { name: "read", description: "Read a file", inputSchema: { type: "object" } };
  const originalText =
    '{"description":"Read a file","name":"read","schema":{"description":"Read a file","input_schema":{"type":"object"},"tool":"read"}}';

  it("descriptorDigest and descriptorFingerprint hash the original's shape", () => {
    expect(descriptorDigest(read)).toBe(fnv(originalText));
    expect(descriptorFingerprint(read)).toBe(`sha256:${sha256(originalText)}`);
  });

  it.each([
    ["title", { title: "Read" }],
    ["annotations", { annotations: { readOnlyHint: true } }],
    ["outputSchema", { outputSchema: { type: "string" } }],
  ])("%s changes the fingerprint but not descriptorDigest, which stays the original's", (_part, extra) => {
    const withPart = { ...read, ...extra };
    expect(descriptorFingerprint(withPart)).not.toBe(descriptorFingerprint(read));
    expect(descriptorDigest(withPart)).toBe(fnv(originalText));
  });

  it("an allow grant pinned by the original (16-hex) still decides for a tool that has annotations", async () => {
    const mcp = { ...read, annotations: { readOnlyHint: true } };
    const policy = new GrantPolicy(
      new MemoryGrantStore([new Grant("read", "allow", GrantScope.thisTool()).withPinnedDescriptor(fnv(originalText))]),
    );
    await expect(policy.explain("read", {}, mcp)).resolves.toMatchObject({
      covering: [{ pin: { type: "match", kind: "legacy_digest" } }],
    });
    await expect(policy.decide(mcp, {})).resolves.toMatchObject({ type: "allow" });
  });

  it("a deny grant pinned by the original (16-hex) still refuses a hook-allowed call of a tool that has annotations", async () => {
    const tool = defineTool({
      name: "read",
      description: "Read a file",
      input: { type: "object" },
      annotations: { readOnlyHint: true },
      execute: () => "ran",
    });
    const deny = new Grant("read", "deny", GrantScope.thisTool()).withPinnedDescriptor(fnv(originalText));
    const gate = new Gate(
      new LoopManagers()
        .withGrantStore(new MemoryGrantStore([deny]))
        .withHook({ preToolUse: () => ({ type: "allow" }) }),
    );
    const outcome = await gate.call({ tool, callId: "c1", input: {} }, () => "ran");
    expect(outcome).toMatchObject({
      type: "refused",
      record: { verdict: "deny", ruleId: "grant", ruleSource: "context", matchedPattern: deny.id },
    });
  });
});

describe("section 4 and 6 together: hostile values through the ledger", () => {
  it("orders lone surrogates among keys by code point", () => {
    expect(canonicalJson({ "\u{1F600}": 0, "\uFFFF": 1, "\uE000": 2, "\uD800": 3, "\uDC00": 4 })).toBe(
      '{"\\ud800":3,"\\udc00":4,"\uE000":2,"\uFFFF":1,"\u{1F600}":0}',
    );
  });

  it("a grant with lone surrogates, U+2028, __proto__, -0, 1e21 and 5e-324 survives the file ledger with its id", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopctl-conf-"));
    try {
      const args = JSON.parse('{"__proto__":{"constructor":-0},"n":[1e21,5e-324],"s":"\\ud800\u2028"}') as unknown;
      const g = new Grant("t\udfff\u2028", "deny", GrantScope.thisCall(args)).withNote("\u2029\ud83d");
      expect(g.id).toBe(
        fnv(
          '{"scope":{"this_call":{"args":{"__proto__":{"constructor":0},"n":[1e+21,5e-324],"s":"\\ud800\u2028"}}},' +
            '"tool":"t\\udfff\u2028","verdict":"Deny"}',
        ),
      );
      const store = new FileGrantStore(dir, join(dir, "p"));
      await store.save(g);
      const text = readFileSync(store.ledgerPath, "utf8");
      expect(text).toContain('"tool":"t\\udfff\u2028"');
      expect(text).toContain('"args":{"__proto__":{"constructor":0},"n":[1e+21,5e-324],"s":"\\ud800\u2028"}');
      expect(text).toContain('"note":"\u2029\\ud83d"');
      const [back] = await new FileGrantStore(dir, join(dir, "p")).load();
      expect(back?.id).toBe(g.id);
      expect(back?.tool).toBe("t\udfff\u2028");
      expect(back?.note).toBe("\u2029\ud83d");
      expect(back?.covers("t\udfff\u2028", args)).toBe(true);
      expect(back?.toLedgerText()).toBe(g.toLedgerText());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("section 4: the policy above the store", () => {
  const read = { name: "read", description: "Read a file", inputSchema: { type: "object" } };

  it("deny wins over allow whatever the scope; a changed pin asks again", async () => {
    const pinned = descriptorFingerprint(read);
    const policy = new GrantPolicy(
      new MemoryGrantStore([
        new Grant("read", "allow", GrantScope.thisCall({ p: 1 })).withPinnedDescriptor(pinned),
        new Grant("read", "deny", GrantScope.thisTool()),
      ]),
    );
    await expect(policy.decide(read, { p: 1 })).resolves.toMatchObject({ type: "deny" });
    const allowOnly = new GrantPolicy(
      new MemoryGrantStore([new Grant("read", "allow", GrantScope.thisCall({ p: 1 })).withPinnedDescriptor(pinned)]),
    );
    await expect(allowOnly.decide(read, { p: 1 })).resolves.toMatchObject({ type: "allow" });
    await expect(allowOnly.decide(read, { p: 2 })).resolves.toEqual({ type: "ask", reason: "no_grant" });
    await expect(allowOnly.decide({ ...read, title: "Read" }, { p: 1 })).resolves.toMatchObject({
      type: "ask",
      reason: "tool_changed",
    });
  });
});
