import { createServer } from "node:http";
import { describe, expectTypeOf, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { AskEnding, AskInbox, AskResolver, PendingAsk } from "loopctl/ask";
import { LoopManagers } from "loopctl/engine";
import type { Observer } from "loopctl/engine";
import { MemoryGrantStore } from "loopctl/grant";
import {
  RecentRecords,
  WebhookResolver,
  auditLogRecords,
  createApprovalHandler,
  createApprovalServer,
  signAnswerLink,
} from "loopctl/server";
import type {
  AnswerLinks,
  ApprovalServer,
  ApprovalServerOptions,
  AuditLogRecordSource,
  AuditedRecords,
  RecordSource,
} from "loopctl/server";

describe("createApprovalServer", () => {
  it("serves any AskInbox: the channel's approver or one of your own", () => {
    expectTypeOf<ApprovalServerOptions["approver"]>().toEqualTypeOf<AskInbox | undefined>();
    const [, approver] = ApprovalChannel.pair(16);
    const records = new RecentRecords();
    expectTypeOf(
      createApprovalServer({ approver, grants: new MemoryGrantStore(), records, askTimeoutMs: 300_000 }),
    ).toEqualTypeOf<Promise<ApprovalServer>>();
    const mine: AskInbox = {
      next: async (): Promise<PendingAsk | undefined> => undefined,
      resolve: async () => false,
      ended: async (): Promise<AskEnding> => ({ type: "withdrawn", reason: "unknown" }),
      close: () => undefined,
    };
    void createApprovalServer({ approver: mine, host: "127.0.0.1", port: 0 });
  });

  it("does not take an AskResolver as its approver", () => {
    const [channel] = ApprovalChannel.pair(1);
    // @ts-expect-error the channel end parks asks; the server needs the approver end
    void createApprovalServer({ approver: channel });
  });

  it("resolves a server with its console link", () => {
    expectTypeOf<ApprovalServer["consoleUrl"]>().toBeString();
    expectTypeOf<ApprovalServer["close"]>().returns.toEqualTypeOf<Promise<void>>();
  });
});

describe("createApprovalHandler", () => {
  it("mounts into a node:http server and names the hosts it answers to", () => {
    const handler = createApprovalHandler({ allowedHosts: ["approvals.example.com"] });
    createServer(handler.handle).close();
    // @ts-expect-error a handler mounted elsewhere must be told the Host names it serves
    void createApprovalHandler({});
  });
});

describe("records", () => {
  it("come from a RecentRecords observer or an audit log", () => {
    expectTypeOf<RecentRecords>().toExtend<Observer>();
    expectTypeOf<RecentRecords>().toExtend<RecordSource>();
    void new LoopManagers().withObserver(new RecentRecords({ capacity: 100 }));
    expectTypeOf(auditLogRecords).returns.toEqualTypeOf<AuditLogRecordSource>();
    expectTypeOf<AuditLogRecordSource>().toExtend<RecordSource>();
    expectTypeOf<ReturnType<AuditLogRecordSource["audited"]>>().toEqualTypeOf<Promise<AuditedRecords>>();
  });

  it("a source of your own may take the signal the server passes, or leave it", () => {
    const withSignal: RecordSource = {
      recent: async (_limit: number, options?: { readonly signal?: AbortSignal }) => {
        options?.signal?.throwIfAborted();
        return [];
      },
    };
    const without: RecordSource = { recent: () => [] };
    void createApprovalServer({ records: withSignal, recordsTimeoutMs: 5_000 });
    void createApprovalServer({ records: without, grants: new MemoryGrantStore(), grantsTimeoutMs: 5_000 });
    expectTypeOf<ApprovalServerOptions["grantsTimeoutMs"]>().toEqualTypeOf<number | undefined>();
    expectTypeOf<ApprovalServerOptions["recordsTimeoutMs"]>().toEqualTypeOf<number | undefined>();
  });
});

describe("signAnswerLink and WebhookResolver", () => {
  it("sign links for a whole ask", () => {
    const ask = {} as PendingAsk;
    const links = signAnswerLink(ask, { secret: "s", baseUrl: "https://a.example/", ttlMs: 60_000 });
    expectTypeOf(links).toEqualTypeOf<AnswerLinks>();
    // @ts-expect-error a link expires: ttlMs is required
    void signAnswerLink(ask, { secret: "s", baseUrl: "https://a.example/" });
    const idOnly = { id: "00000000-0000-0000-0000-000000000000" };
    // @ts-expect-error a link is bound to every field of its ask, not to its id alone
    void signAnswerLink(idOnly, { secret: "s", baseUrl: "https://a.example/", ttlMs: 60_000 });
  });

  it("a WebhookResolver is a resolver whose answers arrive through its inbox", () => {
    const webhook = new WebhookResolver({ url: "https://hooks.example/asks", secret: "s" });
    expectTypeOf(webhook).toExtend<AskResolver>();
    expectTypeOf(webhook.inbox).toExtend<AskInbox>();
    void createApprovalServer({ approver: webhook.inbox });
  });
});
