import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LoopctlError } from "../src/index.js";
import { CanonicalJsonError as SrcCanonicalJsonError } from "../src/grant/index.js";
import { bundleGrantBuilds, type GrantBuilds } from "./support/reliability-bundle.js";

type GrantModule = typeof import("../src/grant/index.js");

describe("LoopctlError", () => {
  it("carries a stable code and its subclass name", () => {
    class ExampleError extends LoopctlError {}
    const err = new ExampleError("EXAMPLE", "example failed", { cause: new Error("root") });
    expect(err).toBeInstanceOf(Error);
    expect(err).toBeInstanceOf(LoopctlError);
    expect(err).toBeInstanceOf(ExampleError);
    expect(err.code).toBe("EXAMPLE");
    expect(err.name).toBe("ExampleError");
    expect((err.cause as Error).message).toBe("root");
    expect(new LoopctlError("X", "x")).not.toBeInstanceOf(ExampleError);
    for (const other of [
      new Error("x"),
      null,
      undefined,
      "LoopctlError",
      1,
      Object.create(null),
      { name: "LoopctlError" },
    ])
      expect(other instanceof LoopctlError).toBe(false);
  });

  describe("across copies of the package (the ESM and the CommonJS build in one process)", () => {
    let builds: GrantBuilds;
    let esm: GrantModule;
    let cjs: GrantModule;
    beforeAll(async () => {
      builds = await bundleGrantBuilds();
      esm = (await import(pathToFileURL(builds.esm).href)) as GrantModule;
      cjs = createRequire(import.meta.url)(builds.cjs) as GrantModule;
    }, 60_000);
    afterAll(() => builds?.dispose());

    const refusal = (mod: GrantModule): unknown => {
      try {
        mod.canonicalJson({ n: Number.NaN });
      } catch (error) {
        return error;
      }
      throw new Error("canonicalJson accepted NaN");
    };

    it("an error of one copy is an instance of the same class, and of LoopctlError, in the other", () => {
      expect(esm.CanonicalJsonError).not.toBe(cjs.CanonicalJsonError);
      const fromCjs = refusal(cjs);
      const fromEsm = refusal(esm);
      expect(fromCjs instanceof esm.CanonicalJsonError).toBe(true);
      expect(fromEsm instanceof cjs.CanonicalJsonError).toBe(true);
      expect(fromCjs instanceof SrcCanonicalJsonError).toBe(true);
      expect(fromCjs instanceof LoopctlError).toBe(true);
      expect(fromCjs instanceof Error).toBe(true);
    });

    it("and of no other class: subclasses and siblings stay apart", () => {
      const fromCjs = refusal(cjs);
      expect(fromCjs instanceof esm.CanonicalJsonLimitError).toBe(false);
      expect(fromCjs instanceof esm.LedgerIoError).toBe(false);
      const limit = new cjs.CanonicalJsonLimitError("$", "depth", 1000);
      expect(limit instanceof esm.CanonicalJsonLimitError).toBe(true);
      expect(limit instanceof esm.CanonicalJsonError).toBe(true);
      expect(limit instanceof esm.GrantRecordError).toBe(false);
    });

    it("a look-alike that is not a loopctl error is no instance", () => {
      class CanonicalJsonError extends Error {}
      expect(new CanonicalJsonError("x") instanceof esm.CanonicalJsonError).toBe(false);
      expect(new CanonicalJsonError("x") instanceof LoopctlError).toBe(false);
    });
  });
});

describe("typed option errors naming a value with no string form", () => {
  // String() of these throws: naming them must not turn the typed error into a TypeError.
  const unprintable = [
    Object.create(null) as object,
    {
      toString: () => {
        throw new Error("no");
      },
    },
  ];

  it.each(unprintable.map((value, i) => [i, value]))(
    "keep their class and name the option (value %i)",
    async (_, value) => {
      const { defineTool, EngineConfigError, LoopManagers, ToolDefinitionError } =
        await import("../src/engine/index.js");
      const { ApprovalChannel } = await import("../src/ask/index.js");
      const {
        auditLogRecords,
        createApprovalHandler,
        createApprovalServer,
        RecentRecords,
        ServerConfigError,
        ServerInputError,
        WebhookResolver,
      } = await import("../src/server/index.js");
      const { AiSdkModelError, AiSdkToolError, fromLanguageModel, gateTools } = await import("../src/ai-sdk/index.js");
      const { AgentApprovals, AgentsConfigError } = await import("../src/openai-agents/index.js");
      const { Gate } = await import("../src/engine/index.js");
      const { MockLanguageModelV3 } = await import("ai/test");
      const { PostgresAskQueue, PostgresConfigError } = await import("../src/postgres/index.js");
      const { verifyAuditBytes, AuditAnchorError } = await import("../src/audit/index.js");
      const pg = await import("pg");
      const { z } = await import("zod");
      const [approverResolver, approver] = ApprovalChannel.pair(1);
      const pool = new pg.default.Pool({ max: 4 });
      const secret = "s".repeat(32);
      const cases: [string, () => unknown, abstract new (...args: never[]) => Error, RegExp][] = [
        ["server port", () => createApprovalServer({ approver, port: value as never }), ServerConfigError, /port/],
        [
          "RecentRecords capacity",
          () => new RecentRecords({ capacity: value as never }),
          ServerConfigError,
          /capacity/,
        ],
        [
          "auditLogRecords tailBytes",
          () => auditLogRecords("audit.jsonl", { tailBytes: value as never }),
          ServerConfigError,
          /tailBytes/,
        ],
        [
          "WebhookResolver timeoutMs",
          () => new WebhookResolver({ url: "https://example.com/hook", secret, timeoutMs: value as never }),
          ServerInputError,
          /timeoutMs/,
        ],
        [
          "fromLanguageModel refusals",
          () => fromLanguageModel(new MockLanguageModelV3(), { refusals: value as never }),
          AiSdkModelError,
          /refusals/,
        ],
        [
          "gateTools refusals",
          () => gateTools({}, new Gate(new LoopManagers()), { refusals: value as never }),
          AiSdkToolError,
          /refusals/,
        ],
        [
          "AgentApprovals sessionId",
          () => new AgentApprovals({ resolver: approverResolver, sessionId: value as never }),
          AgentsConfigError,
          /sessionId/,
        ],
        [
          "defineTool name",
          () => defineTool({ name: value as never, description: "d", input: z.object({}), execute: () => 1 }),
          ToolDefinitionError,
          /the name must be/,
        ],
        ["LoopManagers", () => new LoopManagers().withAskTimeout(value as never), EngineConfigError, /must be/],
        [
          "server maxBodyBytes",
          () => createApprovalHandler({ approver, allowedHosts: ["localhost"], maxBodyBytes: value as never }),
          ServerConfigError,
          /maxBodyBytes/,
        ],
        [
          "server askTimeoutMs",
          () => createApprovalHandler({ approver, allowedHosts: ["localhost"], askTimeoutMs: value as never }),
          ServerConfigError,
          /askTimeoutMs/,
        ],
        [
          "PostgresAskQueue leaseMs",
          () => new PostgresAskQueue(pool, { leaseMs: value as never }),
          PostgresConfigError,
          /leaseMs/,
        ],
        [
          "audit anchor",
          () => verifyAuditBytes(new Uint8Array(), { anchor: { seq: 1n, hash: value } as never }),
          AuditAnchorError,
          /audit anchor/,
        ],
      ];
      const wrong: string[] = [];
      try {
        for (const [what, make, type, message] of cases) {
          let thrown: unknown;
          try {
            await make();
          } catch (error) {
            thrown = error;
          }
          const typed = thrown instanceof type && message.test(thrown.message);
          if (!typed) wrong.push(`${what}: ${String(thrown)}`);
        }
        expect(wrong).toEqual([]);
      } finally {
        await pool.end();
      }
    },
  );
});
