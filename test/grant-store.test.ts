import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import {
  canonicalJson,
  FileGrantStore,
  Grant,
  GrantConfigError,
  GrantPolicy,
  GrantRecordError,
  GrantScope,
  MemoryGrantStore,
  type ToolDescriptor,
} from "../src/grant/index.js";
import { expectAbortedSignalFirst, expectBadCallOptionsRefused } from "./support/grant-call-options.js";

const allowRead = new Grant("read", "allow", GrantScope.thisTool());
const denyWrite = new Grant("write", "deny", GrantScope.thisCall({ path: "/etc/passwd" }));

describe("MemoryGrantStore", () => {
  it("starts empty, or with the grants given", async () => {
    expect(await new MemoryGrantStore().load()).toEqual([]);
    expect(await new MemoryGrantStore([allowRead, denyWrite]).load()).toEqual([allowRead, denyWrite]);
  });

  it("save resolves to the grant and replaces a grant with the same id", async () => {
    const store = new MemoryGrantStore([allowRead, denyWrite]);
    const renoted = allowRead.withNote("again");
    expect(await store.save(renoted)).toBe(renoted);
    const loaded = await store.load();
    expect(loaded).toHaveLength(2);
    expect(loaded.map((g) => g.note)).toEqual([null, "again"]);
  });

  it("revoke resolves to the removed grant, or undefined for an unknown id", async () => {
    const store = new MemoryGrantStore([allowRead, denyWrite]);
    expect(await store.revoke(allowRead.id)).toBe(allowRead);
    expect(await store.revoke(allowRead.id)).toBeUndefined();
    expect(await store.load()).toEqual([denyWrite]);
  });

  it("revoke refuses an id that is not a string (a Grant passed for its id) with GrantConfigError, removing nothing", async () => {
    const store = new MemoryGrantStore([allowRead]);
    for (const id of [allowRead, undefined, 7]) {
      const error: unknown = await store.revoke(id as never).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ argument: "id" });
      expect((error as Error).message).toMatch(/^MemoryGrantStore\.revoke: id must be a string, got /);
    }
    expect(await store.load()).toEqual([allowRead]);
  });

  it("clear resolves to how many grants it removed", async () => {
    const store = new MemoryGrantStore([allowRead, denyWrite]);
    expect(await store.clear()).toBe(2);
    expect(await store.clear()).toBe(0);
    expect(await store.load()).toEqual([]);
  });

  it("decides every call from its grants as they are now, through a policy", async () => {
    const store = new MemoryGrantStore([allowRead]);
    const policy = new GrantPolicy(store);
    const tool = (name: string): ToolDescriptor => ({ name, description: "", inputSchema: {} });
    expect(await policy.decide(tool("read"), {})).toEqual({ type: "allow", grant: allowRead });
    await store.save(denyWrite);
    expect(await policy.decide(tool("write"), { path: "/etc/passwd" })).toEqual({ type: "deny", grant: denyWrite });
    await store.revoke(allowRead.id);
    expect(await policy.decide(tool("read"), {})).toEqual({ type: "ask", reason: "no_grant" });
    await store.clear();
    expect(await policy.decide(tool("write"), { path: "/etc/passwd" })).toEqual({ type: "ask", reason: "no_grant" });
  });

  it("rejects every call with the signal's reason once it is aborted, changing nothing", async () => {
    const store = new MemoryGrantStore([allowRead]);
    const signal = AbortSignal.abort(new Error("stopped"));
    for (const call of [
      () => store.load({ signal }),
      () => store.save(denyWrite, { signal }),
      () => store.revoke(allowRead.id, { signal }),
      () => store.clear({ signal }),
      () => new GrantPolicy(store).decide({ name: "read", description: "", inputSchema: {} }, {}, { signal }),
    ]) {
      await expect(call()).rejects.toThrow("stopped");
    }
    expect(await store.load()).toEqual([allowRead]);
  });

  it("rejects with an aborted signal's reason before anything else is checked, as every store and its policy do", async () => {
    const store = new MemoryGrantStore([allowRead]);
    const policy = new GrantPolicy(store);
    const read = { name: "read", description: "", inputSchema: {} };
    await expectAbortedSignalFirst(store, (signal) => [
      ["decide of no descriptor", () => policy.decide(null as never, {}, { signal })],
      ["decide of arguments with no JSON form", () => policy.decide(read, { n: Number.NaN }, { signal })],
      ["remember of no descriptor", () => policy.remember(null as never, {}, "allow", "this_tool", { signal })],
      ["remember of no verdict", () => policy.remember(read, {}, "maybe" as never, "this_tool", { signal })],
      ["remember of no scope", () => policy.remember(read, {}, "allow", "always" as never, { signal })],
    ]);
  });

  it("rejects options that are not an object, or a signal that is not an AbortSignal or cannot be listened to, with GrantConfigError naming them", async () => {
    const store = new MemoryGrantStore([allowRead]);
    const policy = new GrantPolicy(store);
    const read = { name: "read", description: "", inputSchema: {} };
    await expectBadCallOptionsRefused((options) => [
      ["MemoryGrantStore.load", () => store.load(options)],
      ["MemoryGrantStore.save", () => store.save(denyWrite, options)],
      ["MemoryGrantStore.revoke", () => store.revoke(allowRead.id, options)],
      ["MemoryGrantStore.clear", () => store.clear(options)],
      ["MemoryGrantStore.covering", () => store.covering("read", "{}", options)],
      ["GrantPolicy.decide", () => policy.decide(read, {}, options)],
      ["GrantPolicy.remember", () => policy.remember(read, {}, "deny", "this_tool", options)],
    ]);
    expect(await store.load()).toEqual([allowRead]);
  });

  it("refuses a call option it does not take, or a signal in place of the options, with GrantConfigError naming it", async () => {
    const store = new MemoryGrantStore([allowRead]);
    const policy = new GrantPolicy(store);
    const read = { name: "read", description: "", inputSchema: {} };
    const signal = new AbortController().signal;
    const cases: [string, () => Promise<unknown>, string][] = [
      [
        "MemoryGrantStore.load",
        () => store.load({ sginal: signal } as never),
        "unknown option 'sginal' (did you mean signal?)",
      ],
      [
        "MemoryGrantStore.save",
        () => store.save(denyWrite, { Signal: signal } as never),
        "unknown option 'Signal' (did you mean signal?)",
      ],
      [
        "MemoryGrantStore.revoke",
        () => store.revoke(allowRead.id, { sginal: signal } as never),
        "unknown option 'sginal' (did you mean signal?)",
      ],
      [
        "MemoryGrantStore.clear",
        () => store.clear({ sginal: signal } as never),
        "unknown option 'sginal' (did you mean signal?)",
      ],
      [
        "MemoryGrantStore.covering",
        () => store.covering("read", "{}", { sginal: signal } as never),
        "unknown option 'sginal' (did you mean signal?)",
      ],
      [
        "GrantPolicy.decide",
        () => policy.decide(read, {}, { sginal: signal } as never),
        "unknown option 'sginal' (did you mean signal?)",
      ],
      [
        "GrantPolicy.decide",
        () => policy.decide(read, {}, { nowMs: 5 } as never),
        "unknown option 'nowMs' (the only option is signal)",
      ],
      [
        "GrantPolicy.remember",
        () => policy.remember(read, {}, "deny", "this_tool", { notes: "n" } as never),
        "unknown option 'notes' (did you mean note?)",
      ],
      [
        "GrantPolicy.remember",
        () => policy.remember(read, {}, "deny", "this_tool", { now: 5 } as never),
        "unknown option 'now' (did you mean nowMs?)",
      ],
      [
        "GrantPolicy.decide",
        () => policy.decide(read, {}, signal as never),
        "must be an object or undefined, got an AbortSignal (give it as { signal })",
      ],
      [
        "GrantPolicy.remember",
        () => policy.remember(read, {}, "deny", "this_tool", signal as never),
        "must be an object or undefined, got an AbortSignal (give it as { signal })",
      ],
      [
        "MemoryGrantStore.save",
        () => store.save(denyWrite, signal as never),
        "must be an object or undefined, got an AbortSignal (give it as { signal })",
      ],
      // An array has no signal of its own; a proxy whose keys cannot be listed has none that can be checked.
      ["MemoryGrantStore.load", () => store.load([signal] as never), "must be an object or undefined, got an array"],
      [
        "MemoryGrantStore.load",
        () =>
          store.load(
            new Proxy(
              {},
              {
                ownKeys: () => {
                  throw new Error("no keys here");
                },
              },
            ),
          ),
        "cannot be read: no keys here",
      ],
    ];
    for (const [where, call, problem] of cases) {
      const error: unknown = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, `${where}: ${problem}`).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument: "options" });
      expect((error as Error).message).toBe(
        `${where}: options ${problem.startsWith("unknown") ? `holds an ${problem}` : problem}`,
      );
    }
    expect(await store.load()).toEqual([allowRead]);
    // What each takes is still taken.
    const remembered = await policy.remember(read, {}, "allow", "this_call", { signal, nowMs: 5, note: "n" });
    expect([remembered.createdAtMs, remembered.note]).toEqual([5, "n"]);
    expect(await policy.decide(read, {}, { signal })).toMatchObject({ type: "allow" });
  });

  it("covering refuses a tool that is not a name, and arguments that are not their canonical JSON text, naming them", async () => {
    // A deny for these arguments beside an allow for the whole tool: a query that misses the deny hands out the allow.
    const args = { path: "/etc/passwd", mode: "w" };
    const grants = [
      new Grant("write", "deny", GrantScope.thisCall(args)),
      new Grant("write", "allow", GrantScope.thisTool()),
    ];
    const root = mkdtempSync(join(tmpdir(), "loopctl-covering-"));
    try {
      const file = new FileGrantStore(root, join(root, "project"));
      for (const grant of grants) await file.save(grant);
      for (const [name, store] of [
        ["MemoryGrantStore", new MemoryGrantStore(grants)],
        ["FileGrantStore", file],
      ] as const) {
        expect(await store.covering("write", canonicalJson(args))).toEqual(grants);
        for (const [tool, text, argument, problem] of [
          ["write", JSON.stringify(args), "canonicalArgs", "is not canonical JSON"],
          ["write", JSON.stringify(args, null, 2), "canonicalArgs", "is not canonical JSON"],
          ["write", "{", "canonicalArgs", "is not canonical JSON"],
          ["write", args, "canonicalArgs", "must be a string"],
          ["write", undefined, "canonicalArgs", "must be a string"],
          ["", "{}", "tool", "must be a non-empty string"],
          [{ name: "write" }, "{}", "tool", "must be a non-empty string"],
        ] as const) {
          const error: unknown = await store.covering(tool as never, text as never).then(
            () => undefined,
            (e: unknown) => e,
          );
          expect(error, `${name} ${JSON.stringify(text)}`).toBeInstanceOf(GrantConfigError);
          expect(error).toMatchObject({ argument });
          expect((error as Error).message).toContain(`${name}.covering: ${argument} ${problem}`);
        }
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("a decision after a save or a revoke reads the grants it changed, not every grant stored", async () => {
    const GRANTS = 2_000;
    const store = new MemoryGrantStore();
    const policy = new GrantPolicy(store);
    const tool = { name: "read", description: "", inputSchema: {} };
    // Every grant the store indexes has its canonical arguments read once: counting the reads counts that work.
    const reads = vi.spyOn(Grant.prototype, "canonicalArgs", "get");
    try {
      for (let i = 0; i < GRANTS; i++) {
        await store.save(new Grant("read", "allow", GrantScope.thisCall({ path: `f${i}` })));
        expect(await policy.decide(tool, { path: `f${i}` })).toMatchObject({ type: "allow" });
      }
      for (let i = 0; i < GRANTS; i += 2) {
        await store.revoke(new Grant("read", "allow", GrantScope.thisCall({ path: `f${i}` })).id);
        expect(await policy.decide(tool, { path: `f${i}` })).toMatchObject({ type: "ask", reason: "no_grant" });
        expect(await policy.decide(tool, { path: `f${i + 1}` })).toMatchObject({ type: "allow" });
      }
      // A handful per save, revoke and decision; a rebuild of the whole index after each change reads millions.
      expect(reads.mock.calls.length).toBeLessThan(20 * GRANTS);
    } finally {
      reads.mockRestore();
    }
    expect(await store.load()).toHaveLength(GRANTS / 2);
  });

  it("refuses to save something that is not a Grant", async () => {
    const store = new MemoryGrantStore();
    await expect(store.save(allowRead.toJSON() as unknown as Grant)).rejects.toBeInstanceOf(GrantRecordError);
    expect(() => new MemoryGrantStore([{} as Grant])).toThrow(GrantRecordError);
  });

  it("refuses grants that are not iterable, or hold something that is not a Grant, with GrantRecordError naming it", () => {
    for (const [grants, shown] of [
      [null, "expected an iterable of Grants, got null"],
      [5, "expected an iterable of Grants, got 5"],
      [{}, "expected an iterable of Grants, got an object"],
      [[allowRead, null], "expected a Grant, got null"],
      [new Set([allowRead.toJSON()]), "expected a Grant, got object"],
    ] as const) {
      let error: unknown;
      try {
        new MemoryGrantStore(grants as never);
      } catch (thrown) {
        error = thrown;
      }
      expect(error).toBeInstanceOf(GrantRecordError);
      expect(error).toMatchObject({ code: "GRANT_RECORD", message: `MemoryGrantStore: ${shown}` });
    }
  });
});
