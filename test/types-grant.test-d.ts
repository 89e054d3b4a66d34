import { describe, expectTypeOf, it } from "vitest";
import { FileGrantStore, Grant, GrantPolicy, GrantScope, MemoryGrantStore } from "loopctl/grant";
import type {
  GrantDecision,
  GrantMetadata,
  GrantStore,
  GrantVerdict,
  StoreCallOptions,
  ToolDescriptor,
} from "loopctl/grant";
import { LoopManagers } from "loopctl/engine";

/** A store of the user's own, with only the four required methods. */
class KeyValueStore {
  readonly #grants = new Map<string, Grant>();
  async load(): Promise<Grant[]> {
    return [...this.#grants.values()];
  }
  async save(grant: Grant, options?: StoreCallOptions): Promise<Grant> {
    options?.signal?.throwIfAborted();
    this.#grants.set(grant.id, grant);
    return grant;
  }
  async revoke(id: string): Promise<Grant | undefined> {
    const grant = this.#grants.get(id);
    this.#grants.delete(id);
    return grant;
  }
  async clear(): Promise<number> {
    const count = this.#grants.size;
    this.#grants.clear();
    return count;
  }
}

describe("GrantStore", () => {
  it("is satisfied by a store with load, save, revoke and clear: covering and revokeTool are optional", () => {
    const store: GrantStore = new KeyValueStore();
    void new LoopManagers().withGrantStore(store);
    void new GrantPolicy(new KeyValueStore());
    expectTypeOf<GrantStore["covering"]>().toEqualTypeOf<
      ((tool: string, canonicalArgs: string, options?: StoreCallOptions) => Promise<readonly Grant[]>) | undefined
    >();
    expectTypeOf<GrantStore["revokeTool"]>().toEqualTypeOf<
      ((tool: string, options?: StoreCallOptions) => Promise<Grant[]>) | undefined
    >();
    expectTypeOf<FileGrantStore["revokeTool"]>().toExtend<NonNullable<GrantStore["revokeTool"]>>();
  });

  it("takes a signal on every method", () => {
    expectTypeOf<StoreCallOptions>().toEqualTypeOf<{ readonly signal?: AbortSignal | undefined }>();
    expectTypeOf<GrantStore["load"]>().parameters.toEqualTypeOf<[options?: StoreCallOptions]>();
    expectTypeOf<GrantStore["revoke"]>().returns.toEqualTypeOf<Promise<Grant | undefined>>();
    expectTypeOf<GrantStore["clear"]>().returns.toEqualTypeOf<Promise<number>>();
  });

  it("is not satisfied by a store missing a method or answering synchronously", () => {
    // @ts-expect-error clear is required
    const partial: GrantStore = {
      load: async () => [],
      save: async (grant: Grant) => grant,
      revoke: async () => undefined,
    };
    const sync: GrantStore = {
      // @ts-expect-error every method returns a promise
      load: () => [],
      save: async (grant: Grant) => grant,
      revoke: async () => undefined,
      clear: async () => 0,
    };
    void [partial, sync];
  });

  it("includes the built-in stores, which answer covering", () => {
    expectTypeOf<MemoryGrantStore>().toExtend<GrantStore>();
    expectTypeOf<FileGrantStore>().toExtend<GrantStore>();
    expectTypeOf<MemoryGrantStore["covering"]>().toBeFunction();
    expectTypeOf<FileGrantStore["covering"]>().toBeFunction();
  });
});

describe("Grant", () => {
  it("is made from a tool, a verdict, a scope and optional metadata", () => {
    expectTypeOf(Grant).constructorParameters.toEqualTypeOf<
      [tool: string, verdict: GrantVerdict, scope: GrantScope, metadata?: GrantMetadata]
    >();
    expectTypeOf<GrantVerdict>().toEqualTypeOf<"allow" | "deny">();
    const grant = new Grant("deploy", "allow", GrantScope.thisCall({ env: "staging" }), { note: "release train" })
      .withPinnedDescriptor("sha256:00")
      .withCreatedAtMs(0);
    expectTypeOf(grant).toEqualTypeOf<Grant>();
    expectTypeOf(grant.pinnedDescriptor).toEqualTypeOf<string | null>();
    void new Grant("read", "deny", { type: "this_tool" });
  });

  it("does not compile with a wrong verdict or scope", () => {
    // @ts-expect-error a grant's verdict is allow or deny ("approve" is an answer to an ask)
    void new Grant("deploy", "approve", GrantScope.thisTool());
    // @ts-expect-error a this_call scope carries the arguments
    void new Grant("deploy", "allow", { type: "this_call" });
    // @ts-expect-error scopes are objects built by GrantScope, not names
    void new Grant("deploy", "allow", "this_tool");
  });

  it("is immutable and cannot be faked by a look-alike object", () => {
    const grant = new Grant("deploy", "allow", GrantScope.thisTool());
    // @ts-expect-error a grant never changes: the with… methods return copies
    grant.verdict = "deny";
    const { id, tool, verdict, scope, pinnedDescriptor, createdAtMs, note } = grant;
    // @ts-expect-error only a real Grant is a Grant (stores refuse anything else)
    const fake: Grant = { id, tool, verdict, scope, pinnedDescriptor, createdAtMs, note };
    void fake;
  });
});

describe("GrantPolicy", () => {
  it("decides allow, deny or ask, saying why it asks", async () => {
    const policy = new GrantPolicy(new MemoryGrantStore());
    const descriptor: ToolDescriptor = { name: "deploy", description: "", inputSchema: {} };
    const decision = await policy.decide(descriptor, { env: "staging" });
    expectTypeOf(decision).toEqualTypeOf<GrantDecision>();
    if (decision.type === "ask") expectTypeOf(decision.reason).toEqualTypeOf<"no_grant" | "tool_changed">();
    else expectTypeOf(decision.grant).toEqualTypeOf<Grant>();
  });
});

describe("the grant module's public surface", () => {
  it("keeps its index internal", () => {
    // @ts-expect-error the stores' index is internal: a store answers covering instead
    type _Index = import("loopctl/grant").GrantIndex;
  });
});
