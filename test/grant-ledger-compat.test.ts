import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
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

  it("writes the canonical spelling back for a record with unknown fields", async () => {
    const store = storeWith(join(fixtures, "accept", "unknown-fields.json"));
    const extra = new Grant("extra", "allow", GrantScope.thisTool());
    await store.save(extra);
    await store.revoke(extra.id);
    expect(readFileSync(store.ledgerPath, "utf8")).toBe(
      '[{"id":"514e4d9b0eda7cf2","tool":"read","verdict":"Allow","scope":"this_tool","pinned_descriptor":null,"created_at_ms":5,"note":null}]',
    );
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
