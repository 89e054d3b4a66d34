import { describe, expect, it } from "vitest";
import {
  CanonicalJsonError,
  Grant,
  GrantRecordError,
  GrantScope,
  canonicalJson,
  digest16,
  type GrantMetadata,
} from "../src/grant/index.js";
import { thrownBy } from "./support/thrown.js";

describe("Grant", () => {
  it("derives its id from tool, verdict and scope in the ledger spelling", () => {
    const tool = new Grant("read", "allow", GrantScope.thisTool());
    expect(tool.id).toBe(digest16('{"scope":"this_tool","tool":"read","verdict":"Allow"}'));
    const call = new Grant("read", "deny", GrantScope.thisCall({ path: "a.rs" }));
    expect(call.id).toBe(digest16('{"scope":{"this_call":{"args":{"path":"a.rs"}}},"tool":"read","verdict":"Deny"}'));
    expect(call.id).toBe(
      digest16(canonicalJson({ tool: "read", verdict: "Deny", scope: { this_call: { args: { path: "a.rs" } } } })),
    );
  });

  it("gives the same rule the same id whatever the key order, and other rules other ids", () => {
    const a = new Grant("t", "allow", GrantScope.thisCall({ x: 1, y: [1, { b: 2, a: 1 }] }));
    const b = new Grant("t", "allow", GrantScope.thisCall({ y: [1, { a: 1, b: 2 }], x: 1 }));
    expect(b.id).toBe(a.id);
    const others = [
      new Grant("T", "allow", GrantScope.thisCall({ x: 1, y: [1, { b: 2, a: 1 }] })),
      new Grant("t", "deny", GrantScope.thisCall({ x: 1, y: [1, { b: 2, a: 1 }] })),
      new Grant("t", "allow", GrantScope.thisTool()),
      new Grant("t", "allow", GrantScope.thisCall({ x: 2 })),
    ];
    expect(new Set([a.id, ...others.map((g) => g.id)]).size).toBe(5);
  });

  it("keeps the id through the with… builders, which return new grants", () => {
    const g = new Grant("read", "allow", GrantScope.thisTool());
    const h = g
      .withPinnedDescriptor("sha256:" + "0".repeat(64))
      .withCreatedAtMs(42)
      .withNote("ok");
    expect(h).not.toBe(g);
    expect(h.id).toBe(g.id);
    expect([h.pinnedDescriptor, h.createdAtMs, h.note]).toEqual(["sha256:" + "0".repeat(64), 42, "ok"]);
    expect([g.pinnedDescriptor, g.createdAtMs, g.note]).toEqual([null, 0, null]);
    expect(h.withNote(null).withPinnedDescriptor(null).note).toBeNull();
    expect(h.withNote(null).covers("read", 1)).toBe(true);
    expect(Object.isFrozen(h)).toBe(true);
  });

  it("takes pin, time and note as a fourth argument, checked as the with… builders check them", () => {
    const pin = "sha256:" + "1".repeat(64);
    const g = new Grant("read", "allow", GrantScope.thisTool(), { pinnedDescriptor: pin, createdAtMs: 7, note: "n" });
    expect(g.id).toBe(new Grant("read", "allow", GrantScope.thisTool()).id);
    expect(g.toJSON()).toEqual(
      new Grant("read", "allow", GrantScope.thisTool())
        .withPinnedDescriptor(pin)
        .withCreatedAtMs(7)
        .withNote("n")
        .toJSON(),
    );
    expect(new Grant("read", "allow", GrantScope.thisTool(), { note: "only" }).createdAtMs).toBe(0);
    for (const bad of [
      { pinnedDescriptor: "" },
      { createdAtMs: -1 },
      { createdAtMs: 2 ** 53 },
      { note: 5 as unknown as string },
    ]) {
      expect(() => new Grant("read", "allow", GrantScope.thisTool(), bad), JSON.stringify(bad)).toThrow(
        GrantRecordError,
      );
    }
  });

  it("refuses metadata that is not an object with GrantRecordError naming the tool", () => {
    for (const [bad, shown] of [
      [null, "null"],
      // A string is named, never shown: given in the wrong place, it may be a secret.
      ["note", "a string"],
      [5, "5"],
      // Neither has keys to read: taken for no metadata, a pin given in one would be dropped.
      [[{ pinnedDescriptor: `sha256:${"a".repeat(64)}` }], "an array"],
      [new AbortController().signal, "an AbortSignal"],
    ] as const) {
      const error = thrownBy(() => new Grant("read", "allow", GrantScope.thisTool(), bad as unknown as GrantMetadata));
      expect(error).toBeInstanceOf(GrantRecordError);
      expect((error as Error).message).toBe(
        `grant 514e4d9b0eda7cf2 for tool 'read': metadata must be an object or undefined, got ${shown}`,
      );
    }
    expect(new Grant("read", "allow", GrantScope.thisTool(), undefined).note).toBeNull();
    // Keys that cannot be listed are the metadata's fault, named as such, not an untyped TypeError.
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const error = thrownBy(() => new Grant("read", "allow", GrantScope.thisTool(), proxy));
    expect(error).toBeInstanceOf(GrantRecordError);
    expect((error as Error).message).toBe(
      "grant 514e4d9b0eda7cf2 for tool 'read': metadata cannot be read: " +
        "Cannot perform 'IsArray' on a proxy that has been revoked",
    );
    expect((error as Error).cause).toBeInstanceOf(TypeError);
  });

  it("refuses a metadata key it does not take, naming it: a misspelt pin would leave the grant unpinned", () => {
    const pin = `sha256:${"a".repeat(64)}`;
    for (const [bad, message] of [
      [{ pinned_descriptor: pin }, "unknown option 'pinned_descriptor' (did you mean pinnedDescriptor?)"],
      [{ pinnedDescripter: pin }, "unknown option 'pinnedDescripter' (did you mean pinnedDescriptor?)"],
      [{ createdAt: 5 }, "unknown option 'createdAt' (did you mean createdAtMs?)"],
      [{ notes: "n" }, "unknown option 'notes' (did you mean note?)"],
    ] as const) {
      const error = thrownBy(() => new Grant("read", "allow", GrantScope.thisTool(), bad as unknown as GrantMetadata));
      expect(error, JSON.stringify(bad)).toBeInstanceOf(GrantRecordError);
      expect((error as Error).message).toBe(`grant 514e4d9b0eda7cf2 for tool 'read': metadata has ${message}`);
    }
    // Every key it takes is still taken, one left undefined (from an untyped caller) included.
    const metadata = { pinnedDescriptor: pin, createdAtMs: undefined, note: null };
    const g = new Grant("read", "allow", GrantScope.thisTool(), metadata as unknown as GrantMetadata);
    expect([g.pinnedDescriptor, g.createdAtMs, g.note]).toEqual([pin, 0, null]);
  });

  it("refuses a this_tool scope that carries args: it would cover every call, not the one it names", () => {
    const scope = { type: "this_tool", args: { path: "a.rs" } } as unknown as GrantScope;
    expect(() => new Grant("read", "allow", scope)).toThrow(GrantRecordError);
    expect(() => new Grant("read", "allow", scope)).toThrow(
      "grant for tool 'read': a this_tool scope covers every call and takes no args (for these args only, use GrantScope.thisCall(args))",
    );
  });

  it("covers the exact tool name, any args for this_tool, canonically equal args for this_call", () => {
    const tool = new Grant("read", "deny", GrantScope.thisTool());
    expect(tool.covers("read", { anything: true })).toBe(true);
    expect(tool.covers("Read", {})).toBe(false);
    // Any arguments, those without a JSON form included: a deny for the tool is not passed over for them.
    expect(tool.covers("read", { bad: Number.NaN })).toBe(true);
    const call = new Grant("read", "allow", GrantScope.thisCall({ path: "a.rs", opts: { a: 1, b: 2 } }));
    expect(call.covers("read", { opts: { b: 2, a: 1 }, path: "a.rs" })).toBe(true);
    expect(call.covers("read", { path: "b.rs", opts: { a: 1, b: 2 } })).toBe(false);
    expect(call.covers("read2", { path: "a.rs", opts: { a: 1, b: 2 } })).toBe(false);
    expect(call.covers("read", { path: "a.rs", opts: { a: 1, b: 2 }, extra: null })).toBe(false);
    expect(call.covers("read", { bad: Number.NaN })).toBe(false);
  });

  it("copies its args, so later mutation by the caller changes nothing", () => {
    const args = { path: "a.rs" };
    const g = new Grant("read", "allow", GrantScope.thisCall(args));
    args.path = "b.rs";
    expect(g.covers("read", { path: "a.rs" })).toBe(true);
    expect(g.scope).toEqual({ type: "this_call", args: { path: "a.rs" } });
    expect(Object.isFrozen((g.scope as { args: object }).args)).toBe(true);
  });

  it("refuses bad input with typed errors naming the tool", () => {
    expect(() => new Grant("", "allow", GrantScope.thisTool())).toThrow(GrantRecordError);
    expect(() => new Grant("t", "maybe" as "allow", GrantScope.thisTool())).toThrow(/tool 't'/);
    expect(() => new Grant("t", "allow", { type: "other" } as unknown as GrantScope)).toThrow(GrantRecordError);
    expect(() => new Grant("t", "allow", GrantScope.thisCall({ n: Number.NaN }))).toThrow(CanonicalJsonError);
    expect(() => new Grant("t", "allow", GrantScope.thisCall({ n: Number.NaN }))).toThrow(
      "cannot write canonical JSON at $.n: NaN has no JSON form (args of a grant for tool 't')",
    );
    const g = new Grant("t", "allow", GrantScope.thisTool());
    expect(() => g.withCreatedAtMs(-1)).toThrow(GrantRecordError);
    expect(() => g.withCreatedAtMs(1.5)).toThrow(new RegExp(g.id));
    expect(() => g.withPinnedDescriptor("")).toThrow(GrantRecordError);
  });

  it.each([
    ["a symbol", Symbol("x"), "a symbol"],
    [
      "an object whose toString throws",
      {
        toString: () => {
          throw new Error("no text");
        },
      },
      "an object",
    ],
    ["an object without a string form", Object.create(null) as object, "an object"],
  ])("refuses a tool, verdict or creation time that is %s with GrantRecordError naming it", (_label, value, shown) => {
    const cases: [() => Grant, string][] = [
      [
        () => new Grant(value as never, "allow", GrantScope.thisTool()),
        `grant tool must be a non-empty string, got ${shown}`,
      ],
      [() => new Grant("t", value as never, GrantScope.thisTool()), `verdict must be "allow" or "deny", got ${shown}`],
      [
        () => new Grant("t", "allow", GrantScope.thisTool(), { createdAtMs: value as never }),
        `createdAtMs must be a non-negative integer, got ${shown}`,
      ],
    ];
    for (const [make, message] of cases) {
      let error: unknown;
      try {
        make();
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(GrantRecordError);
      expect((error as Error).message).toContain(message);
    }
  });

  it("serializes to the ledger record spelling, in the original's field order", () => {
    const g = new Grant("read", "allow", GrantScope.thisCall({ path: "a.rs" }))
      .withPinnedDescriptor("0123456789abcdef")
      .withCreatedAtMs(1700000000000);
    expect(JSON.stringify(g)).toBe(
      `{"id":"${g.id}","tool":"read","verdict":"Allow","scope":{"this_call":{"args":{"path":"a.rs"}}},` +
        `"pinned_descriptor":"0123456789abcdef","created_at_ms":1700000000000,"note":null}`,
    );
    expect(g.toLedgerText()).toBe(JSON.stringify(g));
    const t = new Grant("x", "deny", GrantScope.thisTool()).withNote('say "hi"');
    expect(JSON.stringify(t)).toBe(
      `{"id":"${t.id}","tool":"x","verdict":"Deny","scope":"this_tool","pinned_descriptor":null,"created_at_ms":0,"note":"say \\"hi\\""}`,
    );
    expect(t.toLedgerText()).toBe(JSON.stringify(t));
  });

  it("writes ledger text with args in canonical order, even for integer-like keys", () => {
    const g = new Grant("t", "allow", GrantScope.thisCall({ 9: "a", 10: "b" }));
    expect(g.toLedgerText()).toContain('{"this_call":{"args":{"10":"b","9":"a"}}}');
  });

  it("round-trips through fromJSON, ignoring unknown fields", () => {
    const g = new Grant("read", "deny", GrantScope.thisCall([1, "two", null]))
      .withPinnedDescriptor("sha256:" + "a".repeat(64))
      .withCreatedAtMs(5)
      .withNote("n");
    const back = Grant.fromJSON({ ...(JSON.parse(JSON.stringify(g)) as object), future_field: { x: 1 } });
    expect(back.toLedgerText()).toBe(g.toLedgerText());
    expect(back.scope).toEqual(g.scope);
  });

  it("reads absent metadata as null / 0", () => {
    const g = Grant.fromJSON({ id: "x", tool: "t", verdict: "Allow", scope: "this_tool" });
    expect([g.pinnedDescriptor, g.createdAtMs, g.note]).toEqual([null, 0, null]);
  });

  it("recomputes an id that does not match the record's content", () => {
    const real = new Grant("t", "allow", GrantScope.thisTool());
    const g = Grant.fromJSON({ ...real.toJSON(), id: "ffffffffffffffff" });
    expect(g.id).toBe(real.id);
  });

  it("accepts null as a this_call argument set but not a missing one", () => {
    const g = Grant.fromJSON({ id: "x", tool: "t", verdict: "Deny", scope: { this_call: { args: null } } });
    expect(g.covers("t", null)).toBe(true);
    expect(g.covers("t", {})).toBe(false);
    expect(() => Grant.fromJSON({ id: "x", tool: "t", verdict: "Deny", scope: { this_call: {} } })).toThrow(
      GrantRecordError,
    );
  });

  it("refuses a scope object holding a member beside this_call, which names no one scope, naming the member", () => {
    const scopes = [
      { this_tool: null, this_call: { args: { path: "a.rs" } } },
      { this_call: { args: { path: "a.rs" } }, this_tool: null },
      { this_call: { args: 1 }, ThisCall: { args: 2 } },
    ];
    for (const scope of scopes) {
      const extra = Object.keys(scope).find((key) => key !== "this_call") as string;
      expect(() => Grant.fromJSON({ id: "x", tool: "t", verdict: "Deny", scope }), JSON.stringify(scope)).toThrow(
        new RegExp(`scope: .*"${extra}"`),
      );
    }
    // Unknown fields of the record, and of the this_call member, are still ignored.
    const g = Grant.fromJSON({
      id: "x",
      tool: "t",
      verdict: "Deny",
      scope: { this_call: { args: 1, why: "?" } },
      v: 2,
    });
    expect(g.scope).toEqual(GrantScope.thisCall(1));
  });

  it("refuses records that are not grants, naming the record", () => {
    const bad: unknown[] = [
      null,
      [],
      "grant",
      { id: "a1", tool: "t", verdict: "allow", scope: "this_tool" },
      { id: "a1", tool: "t", verdict: "Allow", scope: "this_call" },
      { id: "a1", tool: "", verdict: "Allow", scope: "this_tool" },
      { id: "a1", tool: 3, verdict: "Allow", scope: "this_tool" },
      { id: "a1", tool: "t", verdict: "Allow", scope: "this_tool", created_at_ms: -1 },
      { id: "a1", tool: "t", verdict: "Allow", scope: "this_tool", created_at_ms: 1.5 },
      { id: "a1", tool: "t", verdict: "Allow", scope: "this_tool", pinned_descriptor: 7 },
      { tool: "t", verdict: "Allow", scope: "this_tool" },
    ];
    for (const record of bad) {
      expect(() => Grant.fromJSON(record), JSON.stringify(record)).toThrow(GrantRecordError);
    }
    expect(() => Grant.fromJSON({ id: "a1", tool: "t", verdict: "allow", scope: "this_tool" })).toThrow(/"a1"/);
  });

  it("quotes a tool name that holds controls or a quote in JSON's escapes in every message naming it, so no name can forge a line", () => {
    // A newline and an escape sequence would start a line of their own in a log or on a terminal;
    // a quote would end the name early and let the rest pass for the message's own words.
    for (const tool of ["rd\n\u001b[31mloopctl: ledger verified\u001b[0m", "it's fine', and 'read"]) {
      const quoted = JSON.stringify(tool);
      const messages: string[] = [];
      const caught = (make: () => unknown): void => {
        try {
          make();
        } catch (error) {
          messages.push((error as Error).message);
          return;
        }
        throw new Error("expected a refusal");
      };
      caught(() => new Grant(tool, "maybe" as "allow", GrantScope.thisTool()));
      caught(() => new Grant(tool, "allow", { type: "this_tool", args: {} } as unknown as GrantScope));
      caught(() => new Grant(tool, "allow", GrantScope.thisCall({ n: Number.NaN })));
      caught(() => new Grant(tool, "allow", { type: "other" } as unknown as GrantScope));
      caught(() => new Grant(tool, "allow", GrantScope.thisTool(), { createdAtMs: -1 }));
      caught(() => Grant.fromJSON({ id: "a1", tool, verdict: "Allow", scope: "this_tool", pinned_descriptor: "" }));
      for (const message of messages) {
        expect(message).not.toMatch(/[\u0000-\u001f\u007f]/);
        expect(message).toContain(`tool ${quoted}`);
      }
    }
    // A plain name keeps its plain quotes.
    expect(() => new Grant("read", "maybe" as "allow", GrantScope.thisTool())).toThrow("grant for tool 'read':");
  });
});
