import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import {
  CanonicalJsonError,
  FileGrantStore,
  Grant,
  GrantConfigError,
  GrantPolicy,
  GrantRecordError,
  GrantScope,
  MemoryGrantStore,
  argsDigest,
  descriptorDigest,
  descriptorFingerprint,
  grantForAnswer,
  type GrantDecision,
  type GrantStore,
  type ToolDescriptor,
} from "../src/grant/index.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);

const read: ToolDescriptor = { name: "read", description: "Read a file", inputSchema: { type: "object" } };
const readChanged: ToolDescriptor = { ...read, description: "Read a file, then mail it somewhere" };
const args = { path: "a.rs" };
const other = { path: "b.rs" };

const scratch = mkdtempSync(join(tmpdir(), "loopctl-policy-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
afterEach(() => vi.restoreAllMocks());

function grant(verdict: "allow" | "deny", scope: GrantScope, pin: string | null = null): Grant {
  return new Grant("read", verdict, scope).withPinnedDescriptor(pin);
}

async function decide(grants: Grant[], descriptor = read, callArgs: unknown = args): Promise<GrantDecision> {
  return new GrantPolicy(new MemoryGrantStore(grants)).decide(descriptor, callArgs);
}

describe("a Tool passed in place of its descriptor", () => {
  it("is refused by decide, remember, explain and grantForAnswer, never pinned by its name alone", async () => {
    const asTool = { name: "read", descriptor: read, check: () => ({ type: "valid" }), execute: () => "" };
    const store = new MemoryGrantStore();
    const policy = new GrantPolicy(store);
    const message =
      /the tool descriptor has neither a description nor an inputSchema, so only its name would be pinned \(for a Tool, pass tool\.descriptor\)/;
    await expect(policy.decide(asTool as never, args)).rejects.toThrow(message);
    await expect(policy.decide(asTool as never, args)).rejects.toBeInstanceOf(GrantRecordError);
    await expect(policy.remember(asTool as never, args, "allow", "this_tool")).rejects.toThrow(message);
    await expect(policy.remember(asTool as never, args, "allow", "this_tool")).rejects.toThrow(
      /^GrantPolicy\.remember: /,
    );
    await expect(policy.explain("read", args, asTool as never)).rejects.toThrow(message);
    expect(() => grantForAnswer(asTool as never, args, "allow", "this_tool", 0)).toThrow(message);
    expect(await store.load()).toEqual([]);
  });
});

describe("GrantPolicy.decide", () => {
  it("asks when no grant covers the call", async () => {
    expect(await decide([])).toEqual({ type: "ask", reason: "no_grant" });
    const otherTool = new Grant("write", "allow", GrantScope.thisTool());
    const otherArgs = grant("allow", GrantScope.thisCall(other));
    expect(await decide([otherTool, otherArgs])).toEqual({ type: "ask", reason: "no_grant" });
  });

  it("allows by an unpinned this_tool or this_call grant", async () => {
    const tool = grant("allow", GrantScope.thisTool());
    expect(await decide([tool])).toEqual({ type: "allow", grant: tool });
    const call = grant("allow", GrantScope.thisCall({ path: "a.rs" }));
    expect(await decide([call], read, { path: "a.rs" })).toEqual({ type: "allow", grant: call });
  });

  it("lets deny win over allow in either scope", async () => {
    const callDeny = grant("deny", GrantScope.thisCall(args));
    const toolAllow = grant("allow", GrantScope.thisTool());
    expect(await decide([toolAllow, callDeny])).toEqual({ type: "deny", grant: callDeny });
    const toolDeny = grant("deny", GrantScope.thisTool());
    const callAllow = grant("allow", GrantScope.thisCall(args));
    expect(await decide([callAllow, toolDeny])).toEqual({ type: "deny", grant: toolDeny });
    expect(await decide([callAllow, toolDeny], read, other)).toEqual({ type: "deny", grant: toolDeny });
  });

  it("honours a fingerprint pin and asks again when the tool changed", async () => {
    const pinned = grant("allow", GrantScope.thisTool(), descriptorFingerprint(read));
    expect(await decide([pinned])).toEqual({ type: "allow", grant: pinned });
    expect(await decide([pinned], readChanged)).toEqual({ type: "ask", reason: "tool_changed", grant: pinned });
    const schemaChanged = { ...read, inputSchema: { type: "object", properties: {} } };
    expect((await decide([pinned], schemaChanged)).type).toBe("ask");
  });

  it("compares a 16-hex legacy pin with descriptorDigest", async () => {
    const legacy = grant("allow", GrantScope.thisCall(args), descriptorDigest(read));
    expect(legacy.pinnedDescriptor).toMatch(/^[0-9a-f]{16}$/);
    expect(await decide([legacy])).toEqual({ type: "allow", grant: legacy });
    expect(await decide([legacy], readChanged)).toEqual({ type: "ask", reason: "tool_changed", grant: legacy });
  });

  it("treats a pin in an unknown format as not matching", async () => {
    const odd = grant("allow", GrantScope.thisTool(), "md5:abc");
    expect(await decide([odd])).toEqual({ type: "ask", reason: "tool_changed", grant: odd });
    const fingerprintAsLegacy = grant("allow", GrantScope.thisTool(), descriptorFingerprint(read).slice(7, 23));
    expect((await decide([fingerprintAsLegacy])).type).toBe("ask");
  });

  it("keeps a deny in force after the tool changed", async () => {
    const deny = grant("deny", GrantScope.thisTool(), descriptorFingerprint(read));
    expect(await decide([deny], readChanged)).toEqual({ type: "deny", grant: deny });
  });

  it("allows by a current allow when another covering allow is stale", async () => {
    const staleCall = grant("allow", GrantScope.thisCall(args), descriptorFingerprint(readChanged));
    const currentTool = grant("allow", GrantScope.thisTool(), descriptorFingerprint(read));
    expect(await decide([staleCall, currentTool])).toEqual({ type: "allow", grant: currentTool });
  });

  it("refuses arguments JSON cannot carry instead of deciding", async () => {
    const tool = grant("allow", GrantScope.thisTool());
    await expect(decide([tool], read, { n: Number.NaN })).rejects.toBeInstanceOf(CanonicalJsonError);
    await expect(new GrantPolicy(new MemoryGrantStore()).decide({ ...read, name: "" }, {})).rejects.toBeInstanceOf(
      GrantRecordError,
    );
  });

  it("refuses a store that is not one when constructed, naming it, instead of a TypeError at the first decision", () => {
    const methods = {
      load: () => Promise.resolve([]),
      save: (g: Grant) => Promise.resolve(g),
      revoke: () => Promise.resolve(undefined),
      clear: () => Promise.resolve(0),
    };
    const { clear: _, ...noClear } = methods;
    for (const [value, shown] of [
      [undefined, "undefined"],
      [null, "null"],
      ["grants.json", '"grants.json"'],
      [{}, "an object"],
      [noClear, "an object"],
      [{ ...methods, load: [] }, "an object"],
    ] as const) {
      let error: unknown;
      try {
        new GrantPolicy(value as never);
      } catch (thrown) {
        error = thrown;
      }
      expect(error, shown).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({
        code: "GRANT_CONFIG",
        argument: "store",
        message: `GrantPolicy: store must be a GrantStore (load, save, revoke and clear as functions), got ${shown}`,
      });
    }
    expect(() => new GrantPolicy(methods)).not.toThrow();
  });

  it("works over a store that offers no index", async () => {
    const inner = new MemoryGrantStore([grant("allow", GrantScope.thisTool())]);
    const foreign: GrantStore = {
      load: () => inner.load(),
      save: (g) => inner.save(g),
      revoke: (id) => inner.revoke(id),
      clear: () => inner.clear(),
    };
    const policy = new GrantPolicy(foreign);
    expect((await policy.decide(read, args)).type).toBe("allow");
    await policy.remember(read, args, "deny", "this_call", { nowMs: 1 });
    expect((await policy.decide(read, args)).type).toBe("deny");
  });

  it("refuses to decide over a store that resolves to records it did not make grants of, a deny among them", async () => {
    const record = { ...grant("deny", GrantScope.thisTool()).toJSON() };
    const plain = { tool: "read", verdict: "deny", scope: { type: "this_tool" } };
    const unusable: [string, unknown, RegExp][] = [
      ["a ledger record", [record], /GrantStore\.load resolved to an array whose item 0 is not a Grant/],
      ["a plain object", [plain], /item 0 is not a Grant \(an object\); build stored records into grants/],
      ["null", [grant("allow", GrantScope.thisTool()), null], /item 1 is not a Grant \(null\)/],
      ["no array", undefined, /GrantStore\.load resolved to undefined, not an array of grants/],
    ];
    for (const [label, loaded, message] of unusable) {
      const store: GrantStore = {
        load: () => Promise.resolve(loaded as Grant[]),
        save: (g) => Promise.resolve(g),
        revoke: () => Promise.resolve(undefined),
        clear: () => Promise.resolve(0),
      };
      const policy = new GrantPolicy(store);
      await expect(policy.decide(read, args), label).rejects.toThrow(message);
      await expect(policy.decide(read, args), label).rejects.toBeInstanceOf(GrantRecordError);
      await expect(policy.explain("read", args, read), label).rejects.toBeInstanceOf(GrantRecordError);
      const covering: GrantStore = { ...store, covering: () => Promise.resolve(loaded as Grant[]) };
      await expect(new GrantPolicy(covering).decide(read, args), label).rejects.toThrow(
        /GrantStore\.covering resolved/,
      );
    }
  });

  it("decides from a store's covering() without loading it, and ignores a grant covering() returns that does not cover the call", async () => {
    const inner = new MemoryGrantStore([grant("deny", GrantScope.thisCall(args))]);
    const stray = [
      new Grant("write", "allow", GrantScope.thisTool()),
      grant("allow", GrantScope.thisCall(other)),
      grant("deny", GrantScope.thisCall(other)),
    ];
    const asked: [string, string][] = [];
    const store: GrantStore = {
      load: () => Promise.reject(new Error("load() must not be called when covering() exists")),
      save: (g) => inner.save(g),
      revoke: (id) => inner.revoke(id),
      clear: () => inner.clear(),
      covering: async (tool, canonicalArgs, options) => {
        asked.push([tool, canonicalArgs]);
        return [...stray, ...(await inner.covering(tool, canonicalArgs, options))];
      },
    };
    const policy = new GrantPolicy(store);
    expect((await policy.decide(read, args)).type).toBe("deny");
    // Only stray grants for these arguments: none of them covers the call.
    expect(await policy.decide(read, { path: "c.rs" })).toEqual({ type: "ask", reason: "no_grant" });
    expect(asked).toEqual([
      ["read", '{"path":"a.rs"}'],
      ["read", '{"path":"c.rs"}'],
    ]);
    expect((await policy.explain("read", { path: "c.rs" }, read)).covering).toEqual([]);
  });

  it("gets from the built-in stores' covering() exactly the stored grants that cover the call", async () => {
    const stored = [
      grant("allow", GrantScope.thisTool()),
      grant("deny", GrantScope.thisCall(args)),
      grant("allow", GrantScope.thisCall(other)),
      new Grant("write", "deny", GrantScope.thisTool()),
    ];
    const file = new FileGrantStore(join(scratch, "covering"), join(scratch, "covering-project"));
    for (const g of stored) await file.save(g);
    for (const store of [new MemoryGrantStore(stored), file]) {
      const covering = await store.covering("read", '{"path":"a.rs"}');
      const ids = (grants: readonly Grant[]): string[] => grants.map((g) => g.id).sort();
      expect(ids(covering)).toEqual(ids(stored.filter((g) => g.covers("read", args))));
      expect(covering).toHaveLength(2);
      await expect(store.covering("read", "{}", { signal: AbortSignal.abort(new Error("stop")) })).rejects.toThrow(
        "stop",
      );
    }
  });

  it("finds the deciding grant among 10,000 without a covers scan", async () => {
    const grants: Grant[] = [];
    for (let i = 0; i < 10_000; i++) {
      grants.push(new Grant(`tool-${i % 50}`, i % 7 === 0 ? "deny" : "allow", GrantScope.thisCall({ i })));
    }
    const target = new Grant("tool-3", "allow", GrantScope.thisCall({ i: 10_003 }));
    grants.push(target);
    const policy = new GrantPolicy(new MemoryGrantStore(grants));
    const covers = vi.spyOn(Grant.prototype, "covers");
    const tool = { name: "tool-3", description: "", inputSchema: {} };
    expect(await policy.decide(tool, { i: 10_003 })).toEqual({ type: "allow", grant: target });
    expect(await policy.decide(tool, { i: 3 })).toEqual({ type: "allow", grant: grants[3] });
    expect(await policy.decide(tool, { i: 10_053 })).toEqual({ type: "ask", reason: "no_grant" });
    expect(covers).not.toHaveBeenCalled();
  });

  it("does not reparse an unchanged ledger between decisions", async () => {
    const store = new FileGrantStore(join(scratch, "root"), join(scratch, "p1"));
    const policy = new GrantPolicy(store);
    await policy.remember(read, args, "allow", "this_call", { nowMs: 5 });
    expect(
      (await new GrantPolicy(new FileGrantStore(join(scratch, "root"), join(scratch, "p1"))).decide(read, args)).type,
    ).toBe("allow");
    const parse = vi.spyOn(Grant, "fromJSON");
    for (let i = 0; i < 5; i++) expect((await policy.decide(read, args)).type).toBe("allow");
    expect(parse).not.toHaveBeenCalled();
  });

  it("agrees with a plain scan over covers for every set of grants", async () => {
    const tools = ["read", "write"];
    const argSets = [{ path: "a.rs" }, { path: "b.rs" }];
    const pins = [
      null,
      descriptorFingerprint(read),
      descriptorFingerprint(readChanged),
      descriptorDigest(read),
      descriptorDigest(readChanged),
    ];
    const grantArb = fc
      .record({
        tool: fc.constantFrom(...tools),
        verdict: fc.constantFrom("allow" as const, "deny" as const),
        scope: fc.option(fc.constantFrom(...argSets), { nil: undefined }),
        pin: fc.constantFrom(...pins),
      })
      .map(({ tool, verdict, scope, pin }) =>
        new Grant(
          tool,
          verdict,
          scope === undefined ? GrantScope.thisTool() : GrantScope.thisCall(scope),
        ).withPinnedDescriptor(pin),
      );
    const pinOk = (g: Grant): boolean =>
      g.pinnedDescriptor === null ||
      g.pinnedDescriptor === descriptorFingerprint(read) ||
      g.pinnedDescriptor === descriptorDigest(read);
    await fc.assert(
      fc.asyncProperty(fc.array(grantArb, { maxLength: 12 }), fc.constantFrom(...argSets), async (grants, callArgs) => {
        const decision = await decide(grants, read, callArgs);
        const stored = await new MemoryGrantStore(grants).load();
        const covering = stored.filter((g) => g.covers("read", callArgs));
        const denies = covering.filter((g) => g.verdict === "deny");
        const allows = covering.filter((g) => g.verdict === "allow");
        if (denies.length > 0) {
          expect(decision.type).toBe("deny");
        } else if (allows.some(pinOk)) {
          expect(decision.type).toBe("allow");
        } else if (allows.length > 0) {
          expect(decision).toMatchObject({ type: "ask", reason: "tool_changed" });
        } else {
          expect(decision).toEqual({ type: "ask", reason: "no_grant" });
        }
        if (decision.type !== "ask" || decision.reason === "tool_changed") {
          expect(covering).toContain(decision.grant);
        }
      }),
      { numRuns: RUNS },
    );
  });
});

describe("GrantPolicy.remember and grantForAnswer", () => {
  it("builds the narrowest grant for this_call, pinned with the fingerprint", () => {
    const g = grantForAnswer(read, args, "allow", "this_call", 1234, "from the CLI");
    expect(g.tool).toBe("read");
    expect(g.verdict).toBe("allow");
    expect(g.scope).toEqual({ type: "this_call", args });
    expect(g.pinnedDescriptor).toBe(descriptorFingerprint(read));
    expect(g.createdAtMs).toBe(1234);
    expect(g.note).toBe("from the CLI");
    expect(grantForAnswer(read, args, "deny", "this_tool", 0).scope).toEqual({ type: "this_tool" });
    expect(() => grantForAnswer(read, args, "allow", "everything" as "this_tool", 0)).toThrow(GrantRecordError);
    const unprintable = {
      toString: (): string => {
        throw new Error("no text");
      },
    };
    expect(() => grantForAnswer(read, args, "allow", unprintable as never, 0)).toThrow(
      new GrantRecordError(`grant for tool 'read': scope must be "this_call" or "this_tool", got an object`),
    );
    expect(() => grantForAnswer(read, args, "allow", Symbol("s") as never, 0)).toThrow(GrantRecordError);
  });

  it("saves the grant, after which the call is decided without asking", async () => {
    const store = new MemoryGrantStore();
    const policy = new GrantPolicy(store);
    const saved = await policy.remember(read, args, "allow", "this_call", { nowMs: 99, note: "ok" });
    expect(await store.load()).toEqual([saved]);
    expect(saved.createdAtMs).toBe(99);
    expect(await policy.decide(read, { path: "a.rs" })).toEqual({ type: "allow", grant: saved });
    expect(await policy.decide(read, other)).toEqual({ type: "ask", reason: "no_grant" });
    expect(await policy.decide(readChanged, args)).toEqual({ type: "ask", reason: "tool_changed", grant: saved });
  });

  it("widens to the whole tool on request, and re-remembering replaces the entry", async () => {
    const store = new MemoryGrantStore();
    const policy = new GrantPolicy(store);
    await policy.remember(read, args, "deny", "this_tool", { nowMs: 1 });
    await policy.remember(read, other, "deny", "this_tool", { nowMs: 2 });
    const all = await store.load();
    expect(all).toHaveLength(1);
    expect(all[0]?.createdAtMs).toBe(2);
    expect((await policy.decide(read, { anything: [1, 2] })).type).toBe("deny");
  });

  it("stamps the clock when no time is given", async () => {
    vi.spyOn(Date, "now").mockReturnValue(777);
    const saved = await new GrantPolicy(new MemoryGrantStore()).remember(read, args, "allow", "this_call");
    expect(saved.createdAtMs).toBe(777);
  });
});

describe("GrantPolicy.explain", () => {
  it("quotes a tool name that holds controls in JSON's escapes in its explanation lines and refusals", async () => {
    const tool = "read\n\u001b[32mdecision: allow\u001b[0m";
    const named: ToolDescriptor = { ...read, name: tool };
    const explanation = await new GrantPolicy(new MemoryGrantStore([])).explain(tool, args, named);
    expect(explanation.lines[0]).toBe(`tool ${JSON.stringify(tool)} with args ${argsDigest(args)}: 0 covering grants`);
    for (const line of explanation.lines) expect(line).not.toMatch(/[\u0000-\u001f\u007f]/);
    const refusals: string[] = [];
    try {
      grantForAnswer(named, args, "allow", "everything" as "this_tool", 0);
    } catch (error) {
      refusals.push((error as Error).message);
    }
    await new GrantPolicy(new MemoryGrantStore([]))
      .explain("other", args, named)
      .catch((error: unknown) => refusals.push((error as Error).message));
    expect(refusals).toHaveLength(2);
    for (const message of refusals) {
      expect(message).not.toMatch(/[\u0000-\u001f\u007f]/);
      expect(message).toContain(JSON.stringify(tool));
    }
  });

  it("lists every covering grant with its pin status and the deciding one", async () => {
    const callAllow = grant("allow", GrantScope.thisCall(args), descriptorFingerprint(readChanged));
    const toolAllow = grant("allow", GrantScope.thisTool(), descriptorDigest(read));
    const unrelated = grant("deny", GrantScope.thisCall(other));
    const policy = new GrantPolicy(new MemoryGrantStore([callAllow, toolAllow, unrelated]));
    const explanation = await policy.explain("read", args, read);
    expect(explanation.tool).toBe("read");
    expect(explanation.argsDigest).toBe(argsDigest(args));
    expect(explanation.decision).toEqual({ type: "allow", grant: toolAllow });
    expect(explanation.deciding).toBe(toolAllow);
    expect(explanation.covering).toEqual([
      { grant: callAllow, pin: { type: "mismatch", kind: "fingerprint" } },
      { grant: toolAllow, pin: { type: "match", kind: "legacy_digest" } },
    ]);
    expect(explanation.lines[0]).toContain("2 covering grants");
    expect(explanation.lines.some((l) => l.includes(toolAllow.id) && l.includes("[deciding]"))).toBe(true);
    expect(explanation.lines.at(-1)).toBe(`decision: allow, by grant ${toolAllow.id}`);
  });

  it("lists the covering denies before the allows, each this_call before this_tool, as documented", async () => {
    const toolAllow = grant("allow", GrantScope.thisTool());
    const callAllow = grant("allow", GrantScope.thisCall(args));
    const toolDeny = grant("deny", GrantScope.thisTool());
    const callDeny = grant("deny", GrantScope.thisCall(args));
    const policy = new GrantPolicy(new MemoryGrantStore([toolAllow, callAllow, toolDeny, callDeny]));
    const explanation = await policy.explain("read", args, read);
    expect(explanation.covering.map((c) => c.grant)).toEqual([callDeny, toolDeny, callAllow, toolAllow]);
    expect(explanation.deciding).toBe(callDeny);
  });

  it("says when the outcome needs the descriptor to check a pin", async () => {
    const pinned = grant("allow", GrantScope.thisTool(), descriptorFingerprint(read));
    const policy = new GrantPolicy(new MemoryGrantStore([pinned]));
    const explanation = await policy.explain("read", args);
    expect(explanation.decision).toBeNull();
    expect(explanation.deciding).toBeNull();
    expect(explanation.covering).toEqual([{ grant: pinned, pin: { type: "unchecked" } }]);
    expect(explanation.lines.at(-1)).toContain("depends on the tool's current descriptor");
    const deny = grant("deny", GrantScope.thisCall(args), descriptorFingerprint(read));
    const withDeny = new GrantPolicy(new MemoryGrantStore([pinned, deny]));
    expect((await withDeny.explain("read", args)).decision).toEqual({ type: "deny", grant: deny });
  });

  it("explains a call nothing covers, and refuses a descriptor of another tool", async () => {
    const policy = new GrantPolicy(new MemoryGrantStore());
    const explanation = await policy.explain("read", args, read);
    expect(explanation.decision).toEqual({ type: "ask", reason: "no_grant" });
    expect(explanation.covering).toEqual([]);
    await expect(policy.explain("write", args, read)).rejects.toThrow(/'read', not 'write'/);
  });

  it("refuses a tool that is not a name, naming the argument: a descriptor there would explain nothing", async () => {
    const deny = grant("deny", GrantScope.thisTool(), descriptorFingerprint(read));
    const policy = new GrantPolicy(new MemoryGrantStore([deny]));
    for (const tool of [read, "", undefined, 7]) {
      const error = await policy.explain(tool as never, args).catch((e: unknown) => e);
      expect(error, JSON.stringify(tool) ?? "undefined").toBeInstanceOf(GrantConfigError);
      expect((error as GrantConfigError).argument).toBe("tool");
      expect((error as Error).message).toMatch(/^GrantPolicy\.explain: tool must be the tool's name/);
    }
    await expect(policy.explain(read as never, args, read)).rejects.toThrow(/pass descriptor\.name/);
    expect((await policy.explain("read", args, read)).decision).toEqual({ type: "deny", grant: deny });
  });
});
