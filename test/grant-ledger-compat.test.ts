import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  FileGrantStore,
  Grant,
  GrantPolicy,
  GrantScope,
  LedgerCorruptError,
  descriptorDigest,
  type ToolDescriptor,
} from "../src/grant/index.js";

const fixtures = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "grant");
const rustLedger = join(fixtures, "rust-ledger.json");

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "loopctl-compat-"));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A store whose ledger starts as a copy of `fixture`. */
function storeWith(fixture: string): FileGrantStore {
  const store = new FileGrantStore(root, join(root, "project"));
  mkdirSync(dirname(store.ledgerPath), { recursive: true, mode: 0o700 });
  copyFileSync(fixture, store.ledgerPath);
  return store;
}

const read: ToolDescriptor = {
  name: "read",
  description: "Read a file",
  inputSchema: { type: "object", properties: { path: { type: "string" } } },
};

describe("a ledger written by the original", () => {
  it("loads with every id equal to the one it recorded", async () => {
    const records = JSON.parse(readFileSync(rustLedger, "utf8")) as Array<{ id: string }>;
    const grants = await storeWith(rustLedger).load();
    expect(grants.map((g) => g.id)).toEqual(records.map((r) => r.id));
    expect(grants.map((g) => [g.tool, g.verdict, g.scope.type])).toEqual([
      ["read", "allow", "this_tool"],
      ["shell", "deny", "this_call"],
      ["write", "allow", "this_call"],
      ["fetch", "allow", "this_call"],
      ["read", "deny", "this_call"],
    ]);
    expect(grants[0]?.pinnedDescriptor).toBe(descriptorDigest(read));
    expect(grants[1]?.note).toBe("never");
    expect(grants[3]?.note).toBe('line\nbreak "quoted"');
    expect(grants[3]?.scope).toEqual({ type: "this_call", args: null });
    expect(grants[0]?.createdAtMs).toBe(1700000000000);
  });

  it("gives the same ids the original computed for the same rules", async () => {
    const grants = await storeWith(rustLedger).load();
    const rebuilt = new Grant(
      "shell",
      "deny",
      GrantScope.thisCall({ opts: { force: true, depth: 3 }, cmd: "rm -rf /" }),
    );
    expect(rebuilt.id).toBe(grants[1]?.id);
    expect(new Grant("read", "allow", GrantScope.thisTool()).id).toBe(grants[0]?.id);
  });

  it("decides by its legacy 16-hex pins", async () => {
    const policy = new GrantPolicy(storeWith(rustLedger));
    expect(await policy.decide(read, { path: "x" })).toMatchObject({ type: "allow" });
    expect(await policy.decide(read, [1, "two", null, { a: 2, b: 1 }])).toMatchObject({ type: "deny" });
    expect(await policy.decide({ ...read, description: "changed" }, { path: "x" })).toMatchObject({
      type: "ask",
      reason: "tool_changed",
    });
  });

  it("is written back byte for byte", async () => {
    const store = storeWith(rustLedger);
    const extra = new Grant("extra", "allow", GrantScope.thisTool());
    await store.save(extra);
    await store.revoke(extra.id);
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(readFileSync(rustLedger, "utf8"));
  });
});

describe("ledger fixtures", () => {
  it.each(readdirSync(join(fixtures, "accept")))("accepts %s", async (name) => {
    const grants = await storeWith(join(fixtures, "accept", name)).load();
    for (const g of grants) {
      expect(g.id).toBe(new Grant(g.tool, g.verdict, g.scope).id);
    }
    if (name !== "empty-array.json") {
      expect(grants.map((g) => [g.id, g.tool])).toEqual([["514e4d9b0eda7cf2", "read"]]);
    }
  });

  it("keeps a record's unknown fields through saves of other records", async () => {
    const fixture = join(fixtures, "accept", "unknown-fields.json");
    const store = storeWith(fixture);
    const extra = new Grant("extra", "allow", GrantScope.thisTool());
    await store.save(extra);
    expect(readFileSync(store.ledgerPath, "utf8")).toContain('"expires_at_ms":99,"origin":{"host":"x"}');
    await store.revoke(extra.id);
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(readFileSync(fixture, "utf8"));
  });

  it("writes a record a save replaces as the grant given, without the old record's unknown fields", async () => {
    const store = storeWith(join(fixtures, "accept", "unknown-fields.json"));
    const [loaded] = await store.load();
    await store.save(loaded!.withNote("again"));
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(
      '[{"id":"514e4d9b0eda7cf2","tool":"read","verdict":"Allow","scope":"this_tool","pinned_descriptor":null,"created_at_ms":5,"note":"again"}]',
    );
  });

  it("keeps numbers JavaScript cannot hold exactly, and 1.0, in records a save does not change", async () => {
    const store = storeWith(rustLedger);
    const original =
      '{"id":"0123456789abcdef","tool":"big","verdict":"Allow","scope":{"this_call":{"args":' +
      '{"n":12345678901234567890,"x":1.0,"s":"a , ] } \\" [ {"}}},' +
      '"pinned_descriptor":null,"created_at_ms":1.0,"note":null,"later":[1e400]}';
    writeFileSync(store.ledgerPath, `[${original}]`);
    const extra = new Grant("extra", "allow", GrantScope.thisTool());
    await store.save(extra);
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(`[${original},${extra.toLedgerText()}]`);
  });

  it("keeps any JSON in an unknown field, compact or pretty-printed, through a save of another record", async () => {
    const extra = new Grant("extra", "allow", GrantScope.thisTool());
    await fc.assert(
      fc.asyncProperty(fc.jsonValue(), fc.boolean(), async (value, pretty) => {
        const store = storeWith(rustLedger);
        const record = { id: "514e4d9b0eda7cf2", tool: "read", verdict: "Allow", scope: "this_tool", later: value };
        writeFileSync(store.ledgerPath, JSON.stringify([record], null, pretty ? 2 : undefined));
        await store.save(extra);
        expect(readFileSync(store.ledgerPath, "utf8")).toBe(`[${JSON.stringify(record)},${extra.toLedgerText()}]`);
      }),
      { numRuns: 60 },
    );
  });

  it("writes a pretty-printed record back compact, its strings untouched", async () => {
    const store = storeWith(rustLedger);
    writeFileSync(
      store.ledgerPath,
      '[\n  {\n    "id": "0000000000000000",\n    "tool": "a b",\n    "verdict": "Deny",\n    "scope": "this_tool",\n    "x": [ 1, "\\" ] " ]\n  }\n]\n',
    );
    const [grant] = await store.load();
    const extra = new Grant("extra", "allow", GrantScope.thisTool());
    await store.save(extra);
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(
      `[{"id":"0000000000000000","tool":"a b","verdict":"Deny","scope":"this_tool","x":[1,"\\" ] "]},${extra.toLedgerText()}]`,
    );
    expect((await store.load()).map((g) => g.id)).toEqual([grant!.id, extra.id]);
  });

  it("reads and keeps a pretty-printed record holding a string of millions of characters", async () => {
    // Within canonicalJson's 32 MiB: a grant this library itself can save, then pretty-printed by `jq .`.
    const store = storeWith(rustLedger);
    const deny = new Grant("write", "deny", GrantScope.thisCall({ content: "x".repeat(9_000_000) }));
    writeFileSync(store.ledgerPath, JSON.stringify([deny.toJSON()], null, 2));
    expect((await store.load()).map((g) => g.id)).toEqual([deny.id]);
    const extra = new Grant("extra", "allow", GrantScope.thisTool());
    await store.save(extra);
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(`[${deny.toLedgerText()},${extra.toLedgerText()}]`);
  });

  it.each(readdirSync(join(fixtures, "reject")))("rejects %s, naming the file, and keeps it", async (name) => {
    const store = storeWith(join(fixtures, "reject", name));
    const before = readFileSync(store.ledgerPath);
    await expect(store.load()).rejects.toSatisfy(
      (e: unknown) =>
        e instanceof LedgerCorruptError && e.path === store.ledgerPath && e.message.includes(store.ledgerPath),
    );
    await expect(store.save(new Grant("t", "allow", GrantScope.thisTool()))).rejects.toBeInstanceOf(LedgerCorruptError);
    expect(readFileSync(store.ledgerPath)).toEqual(before);
  });
});
