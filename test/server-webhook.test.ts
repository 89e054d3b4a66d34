import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { afterEach, describe, expect, it } from "vitest";
import { DuplicateAskError, InvalidPendingAskError } from "loopctl/ask";
import type { AskResolver } from "loopctl/ask";
import { Agent, CancelledError, Gate, LoopManagers, defineTool } from "loopctl/engine";
import type { Hook } from "loopctl/engine";
import { ScriptedModel } from "loopctl/testing";
import {
  ServerInputError,
  WEBHOOK_SIGNATURE_HEADER,
  WebhookDeliverySchema,
  WebhookResolver,
  createApprovalHandler,
  createApprovalServer,
  WebhookDeliveryError,
  signAnswerLink,
  verifyWebhookSignature,
} from "loopctl/server";
import type { WebhookDelivery } from "loopctl/server";
import { askingCall } from "./support/engine-fixtures.js";
import { makeAsk, stuckController, track, unreadableReasonSignal } from "./support/ask-fixtures.js";
import { BASE_URLS_WITH_CREDENTIALS, request } from "./support/http-client.js";
import { listen, stopping } from "./support/http-mount.js";
import { thrownBy } from "./support/thrown.js";

const SECRET = "webhook-secret-of-enough-length";
const LINK_SECRET = "link-secret-of-enough-length-too";
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The check docs/server.md shows a receiver, with node:crypto alone. */
function verifyAsDocumented(secret: string, header: string, rawBody: Buffer, nowMs = Date.now()): boolean {
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!match) return false;
  const timestamp = Number(match[1]);
  if (Math.abs(nowMs - timestamp) > 5 * 60_000) return false;
  const expected = createHmac("sha256", secret).update(`${timestamp}.`).update(rawBody).digest();
  return timingSafeEqual(Buffer.from(match[2] as string, "hex"), expected);
}

interface Received {
  readonly delivery: WebhookDelivery;
  readonly verified: boolean;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  /** Resolves when the resolver gives up the request (aborts it) before a reply. */
  readonly aborted: Promise<void>;
}

/** A real receiving server on 127.0.0.1; `reply` decides what each delivery gets (undefined: hold it open). */
async function receiver(
  reply: (got: Received) => number | undefined,
): Promise<{ url: string; deliveries: Received[]; next(): Promise<Received> }> {
  const deliveries: Received[] = [];
  const waiters: ((r: Received) => void)[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      const header = String(req.headers[WEBHOOK_SIGNATURE_HEADER] ?? "");
      const aborted = new Promise<void>((resolve) => res.on("close", () => !res.writableFinished && resolve()));
      const got: Received = {
        delivery: WebhookDeliverySchema.parse(JSON.parse(raw.toString("utf8"))),
        verified:
          verifyAsDocumented(SECRET, header, raw) && verifyWebhookSignature({ secret: SECRET, header, body: raw }),
        req,
        res,
        aborted,
      };
      deliveries.push(got);
      const status = reply(got);
      if (status !== undefined) res.writeHead(status).end();
      for (const wake of waiters.splice(0)) wake(got);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return {
    url,
    deliveries,
    next: () => {
      const seen = deliveries.length;
      return new Promise<Received>((resolve) => {
        if (deliveries.length > seen) resolve(deliveries[seen] as Received);
        else waiters.push(resolve);
      });
    },
  };
}

function resolver(url: string, extra: Partial<ConstructorParameters<typeof WebhookResolver>[0]> = {}): WebhookResolver {
  const r = new WebhookResolver({ url, secret: SECRET, ...extra });
  cleanups.push(() => r.close());
  return r;
}

/**
 * A resolver posting to `url` with signed answer links to a handler serving its inbox. The links
 * must name the server before the resolver exists: it listens first, and the handler is mounted after.
 */
async function linkedResolver(
  url: string,
  extra: Partial<ConstructorParameters<typeof WebhookResolver>[0]> = {},
): Promise<{ webhook: WebhookResolver; base: string }> {
  const app = createServer();
  const { base } = await listen(app);
  const webhook = resolver(url, { links: { baseUrl: base, secret: LINK_SECRET, ttlMs: 60_000 }, ...extra });
  const handler = createApprovalHandler({
    approver: webhook.inbox,
    linkSecret: LINK_SECRET,
    allowedHosts: [new URL(base).host],
  });
  app.on("request", handler.handle);
  cleanups.push(stopping(app, handler));
  return { webhook, base };
}

const live = (): { signal: AbortSignal } => ({ signal: new AbortController().signal });

/**
 * An agent whose model calls `deploy` for production once, a hook asking about every call, and
 * `resolver` answering; `ran` holds each env the tool ran for, `model` what the model was shown.
 */
function deployingAgent(resolver: WebhookResolver): { agent: Agent; model: ScriptedModel; ran: string[] } {
  const ran: string[] = [];
  const deploy = defineTool({
    name: "deploy",
    description: "Deploy",
    input: z.object({ env: z.string() }),
    execute: ({ env }) => {
      ran.push(env);
      return "ok";
    },
  });
  const ask: Hook = { preToolUse: () => ({ type: "ask", prompt: "Deploy to production?" }) };
  const model = new ScriptedModel([
    { toolCalls: [{ id: "c1", name: "deploy", input: { env: "production" } }] },
    { text: "done" },
  ]);
  const agent = new Agent({
    model,
    tools: [deploy],
    managers: new LoopManagers().withHook(ask).withAskResolver(resolver),
  });
  return { agent, model, ran };
}

describe("WebhookResolver with an approval server serving its inbox", () => {
  it("an agent's ask is POSTed signed, and the answer sent to the server's API resumes the run", async () => {
    let serverUrl = "";
    let token = "";
    const hook = await receiver((got) => {
      // The receiver accepts, then a person answers through the approval server.
      void fetch(`${serverUrl}api/asks/${got.delivery.ask.id}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ type: "approve" }),
      });
      return 202;
    });
    const webhook = resolver(hook.url);
    const server = await createApprovalServer({ approver: webhook.inbox });
    cleanups.push(() => server.close());
    serverUrl = server.url;
    token = server.token;

    const { agent, ran } = deployingAgent(webhook);
    const result = await agent.run("ship it");
    expect(ran).toEqual(["production"]);
    expect(result.records.map((r) => r.verdict)).toEqual(["ask_allowed"]);
    const [got] = hook.deliveries;
    expect(got?.verified).toBe(true);
    expect(got?.delivery).toMatchObject({
      type: "loopctl.ask",
      ask: { tool: "deploy", prompt: "Deploy to production?" },
      links: null,
    });
    expect(got?.req.headers["content-type"]).toBe("application/json");
  });

  it("puts signed answer links in the delivery when given links; following one answers", async () => {
    const hook = await receiver(() => 200);
    const { webhook, base } = await linkedResolver(hook.url);
    const ask = makeAsk(1);
    const answer = webhook.resolve(ask, live());
    const got = await hook.next();
    expect(got.verified).toBe(true);
    expect(got.delivery.links?.approve).toContain(`${base}answer?ask=${ask.id}&verdict=approve`);
    const deny = got.delivery.links?.deny ?? "";
    expect((await request(deny)).status).toBe(200);
    expect(
      (
        await request(deny, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: "reason=no",
        })
      ).status,
    ).toBe(200);
    await expect(answer).resolves.toEqual({ type: "deny", reason: "no" });
  });
  it("an answer the inbox was told landed (true) is the call's, even when the caller cancels in the same breath: ask_allowed or ask_denied, and the tool does not run", async () => {
    const hook = await receiver(() => 200);
    for (const [type, verdict] of [
      ["approve", "ask_allowed"],
      ["deny", "ask_denied"],
    ] as const) {
      const webhook = resolver(hook.url);
      const { calling, caller, records, executed } = askingCall(webhook);
      const got = await hook.next();
      expect(got.verified).toBe(true);
      // What the approval server does with an answer; it replies 200 because this returned true.
      expect(webhook.inbox.resolve(got.delivery.ask.id, { type })).toBe(true);
      caller.abort();
      const ended = await calling.catch((e: unknown) => e);
      expect(executed()).toBe(0);
      expect(
        records.map((r) => [r.verdict, r.ruleSource]),
        type,
      ).toEqual([[verdict, "ask_resolver"]]);
      if (type === "approve") {
        // An approved call that stopped: the run is cancelled.
        expect(ended).toBeInstanceOf(CancelledError);
        expect((ended as CancelledError).records).toEqual(records);
      } else {
        // A refused call has nothing left to cancel.
        expect(ended).toMatchObject({ type: "refused", record: { verdict: "ask_denied" } });
      }
    }
  });
  it("a resolver that turns the webhook's approval into a denial is the one whose answer counts", async () => {
    const hook = await receiver(() => 200);
    const webhook = resolver(hook.url);
    const vetoing: AskResolver = {
      resolve: async (ask, options) => {
        const answer = await webhook.resolve(ask, options);
        return answer.type === "approve" ? { type: "deny", reason: "deploys are frozen" } : answer;
      },
    };
    const gate = new Gate(
      new LoopManagers().withHook({ preToolUse: () => ({ type: "ask", prompt: "Deploy?" }) }).withAskResolver(vetoing),
    );
    let executed = 0;
    const calling = gate.call(
      { tool: { name: "deploy", description: "Deploy", inputSchema: { type: "object" } }, callId: "c1", input: {} },
      () => (executed += 1),
    );
    const got = await hook.next();
    expect(webhook.inbox.resolve(got.delivery.ask.id, { type: "approve" })).toBe(true);
    const outcome = await calling;
    expect(executed).toBe(0);
    expect(outcome.record).toMatchObject({ verdict: "ask_denied", reason: "denied by approver: deploys are frozen" });
  });
});

describe("WebhookResolver refuses a duplicate ask id before anything is POSTed", () => {
  it("refuses an id still parked, or among the last endings, with DuplicateAskError and no delivery; a new ask is posted once and answered through its link", async () => {
    const hook = await receiver(() => 202);
    const posted: string[] = [];
    const { webhook } = await linkedResolver(hook.url, {
      // A wrapper that does not pass the signal on: a POST once started reaches the receiver.
      fetch: (input, init) => {
        const { signal: _dropped, ...rest } = init ?? {};
        posted.push(WebhookDeliverySchema.parse(JSON.parse(rest.body as string)).ask.id);
        return fetch(input, rest);
      },
    });
    const follow = async (link: string): Promise<void> => {
      expect((await request(link)).status).toBe(200);
      const form = { "content-type": "application/x-www-form-urlencoded" };
      expect((await request(link, { method: "POST", headers: form, body: "" })).status).toBe(200);
    };

    const first = makeAsk(1);
    const answer = webhook.resolve(first, live());
    const delivered = await hook.next();
    expect(delivered.delivery.ask.id).toBe(first.id);

    // Another call under the same id while the first is parked: refused, nobody pinged about it.
    const other = makeAsk(2, { id: first.id, argsDigest: "fedcba9876543210" });
    const parked = await webhook.resolve(other, live()).catch((e: unknown) => e);
    expect(parked).toBeInstanceOf(DuplicateAskError);
    expect(parked).toMatchObject({ code: "ASK_DUPLICATE_ID", askId: first.id });
    expect(webhook.inbox.pending).toBe(1);

    await follow(delivered.delivery.links?.approve ?? "");
    await expect(answer).resolves.toEqual({ type: "approve" });

    // The same id once it ended: refused too, still without a delivery.
    const ended = await webhook.resolve(other, live()).catch((e: unknown) => e);
    expect(ended).toBeInstanceOf(DuplicateAskError);
    expect((ended as DuplicateAskError).message).toContain("already ended");
    expect(webhook.inbox.pending).toBe(0);

    // A new ask is posted once, and its own link answers it.
    const next = makeAsk(3);
    const nextAnswer = webhook.resolve(next, live());
    const nextDelivered = await hook.next();
    expect(nextDelivered.delivery.ask.id).toBe(next.id);
    await follow(nextDelivered.delivery.links?.approve ?? "");
    await expect(nextAnswer).resolves.toEqual({ type: "approve" });
    expect(posted).toEqual([first.id, next.id]);
    // Deliveries are received in the order they were POSTed: none came in between.
    expect(hook.deliveries.map((got) => got.delivery.ask.id)).toEqual([first.id, next.id]);
  });
});

describe("WebhookResolver fails closed", () => {
  it("fails with WebhookDeliveryError when the receiver answers other than 2xx, and withdraws the ask from the inbox", async () => {
    for (const [n, status] of [500, 404, 400].entries()) {
      const hook = await receiver(() => status);
      const webhook = resolver(hook.url);
      const ask = makeAsk(n);
      const failed = webhook.resolve(ask, live());
      await expect(failed).rejects.toBeInstanceOf(WebhookDeliveryError);
      await expect(failed).rejects.toMatchObject({
        name: "WebhookDeliveryError",
        code: "WEBHOOK_DELIVERY_FAILED",
        message: `webhook at ${new URL(hook.url).host} answered HTTP ${status}`,
      });
      expect(webhook.inbox.pending).toBe(0);
      expect(hook.deliveries).toHaveLength(1);
      await expect(webhook.inbox.ended(ask.id)).resolves.toEqual({ type: "withdrawn", reason: "unknown" });
      expect(webhook.inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    }
  });

  it("an agent's call whose delivery failed ends as a resolver failure, not a person's denial, and never runs", async () => {
    const hook = await receiver(() => 500);
    const webhook = resolver(hook.url);
    const { agent, model, ran } = deployingAgent(webhook);
    const result = await agent.run("ship it");
    expect(ran).toEqual([]);
    expect(result.records).toHaveLength(1);
    expect(result.records[0]).toMatchObject({
      tool: "deploy",
      verdict: "ask_denied",
      ruleId: "ask",
      ruleSource: "ask_resolver",
      reason: `ask resolver failed: webhook at ${new URL(hook.url).host} answered HTTP 500`,
    });
    expect(JSON.stringify(model.requests[1])).toContain("Permission denied by approver for tool 'deploy'");
    // Nothing is left on the inbox for a console to answer.
    expect(webhook.inbox.pending).toBe(0);
    const [got] = hook.deliveries;
    await expect(webhook.inbox.ended(got?.delivery.ask.id ?? "")).resolves.toEqual({
      type: "withdrawn",
      reason: "unknown",
    });
  });

  it("names the webhook's host in each failure, never its path or query, which may hold a secret", async () => {
    const hook = await receiver(() => 503);
    const host = new URL(hook.url).host;
    // A chat service's incoming webhook: the path and the query are the credential.
    const url = `${hook.url}/T0001/B0002/path-secret-xyz?token=query-secret-abc`;
    const webhook = resolver(url);
    const error = await webhook.resolve(makeAsk(1), live()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WebhookDeliveryError);
    expect((error as Error).message).toBe(`webhook at ${host} answered HTTP 503`);
    const stuck = await receiver(() => undefined);
    const slow = resolver(`${stuck.url}/path-secret-xyz?token=query-secret-abc`, { timeoutMs: 50 });
    await expect(slow.resolve(makeAsk(2), live())).rejects.toThrow(
      new WebhookDeliveryError(`webhook at ${new URL(stuck.url).host} did not answer within 50 ms`),
    );
    const closedHost = await receiver(() => 200);
    const gone = closedHost.url;
    await cleanups.pop()?.();
    const unreachable = resolver(`${gone}/path-secret-xyz?token=query-secret-abc`);
    const failed = await unreachable.resolve(makeAsk(3), live()).catch((e: unknown) => e);
    expect((failed as Error).message).toMatch(new RegExp(`^webhook at ${new URL(gone).host} unreachable: `));
    for (const message of [(error as Error).message, (failed as Error).message]) {
      expect(message).not.toContain("secret");
      expect(message).not.toContain("/hook");
    }
  });

  it("fails with WebhookDeliveryError when the receiver cannot be reached", async () => {
    const hook = await receiver(() => 200);
    const url = hook.url;
    await cleanups.pop()?.();
    const webhook = resolver(url);
    const failed = webhook.resolve(makeAsk(1), live());
    await expect(failed).rejects.toBeInstanceOf(WebhookDeliveryError);
    await expect(failed).rejects.toThrow(
      new RegExp(`^webhook at ${new URL(url).host} unreachable: fetch failed \\(.*ECONNREFUSED`),
    );
  });

  it("fails when the receiver does not answer within timeoutMs, and abandons the request", async () => {
    const hook = await receiver(() => undefined);
    const webhook = resolver(hook.url, { timeoutMs: 100 });
    const answer = webhook.resolve(makeAsk(1), live());
    const got = await hook.next();
    await expect(answer).rejects.toThrow(
      new WebhookDeliveryError(`webhook at ${new URL(hook.url).host} did not answer within 100 ms`),
    );
    await got.aborted;
  });

  it("fails at timeoutMs even through a fetch that ignores the signal, and its late end goes nowhere", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    cleanups.push(() => void process.off("unhandledRejection", onUnhandled));
    const hook = await receiver(() => undefined);
    const late: Promise<Response>[] = [];
    // A wrapper (retries, metrics) that does not pass the signal on: the request outlives the timeout.
    const webhook = resolver(hook.url, {
      timeoutMs: 100,
      fetch: (input, init) => {
        const { signal: _dropped, ...rest } = init ?? {};
        const response = fetch(input, rest);
        late.push(response);
        return response;
      },
    });
    const first = webhook.resolve(makeAsk(1), live());
    const held = await hook.next();
    await expect(first).rejects.toThrow(
      new WebhookDeliveryError(`webhook at ${new URL(hook.url).host} did not answer within 100 ms`),
    );
    expect(webhook.inbox.pending).toBe(0);
    held.res.destroy();
    await expect(late[0]).rejects.toThrow("fetch failed");

    const second = webhook.resolve(makeAsk(2), live());
    const answered = await hook.next();
    await expect(second).rejects.toBeInstanceOf(WebhookDeliveryError);
    answered.res.writeHead(200).end("accepted, too late");
    expect((await late[1])?.status).toBe(200);
    await new Promise((resolve) => setImmediate(resolve));
    expect(unhandled).toEqual([]);
  });

  it("fails on a redirect rather than following it", async () => {
    const hook = await receiver((got) => {
      got.res.setHeader("location", "http://127.0.0.1:1/");
      return 307;
    });
    const webhook = resolver(hook.url);
    await expect(webhook.resolve(makeAsk(1), live())).rejects.toBeInstanceOf(WebhookDeliveryError);
  });

  it("an answer that came first wins over a delivery that fails after it", async () => {
    const hook = await receiver(() => undefined);
    // A timeout longer than the test's own: only the answer can abandon the POST in time.
    const webhook = resolver(hook.url, { timeoutMs: 120_000 });
    const ask = makeAsk(1);
    const answer = webhook.resolve(ask, live());
    const got = await hook.next();
    expect(webhook.inbox.resolve(ask.id, { type: "approve", remember: "this_call" })).toBe(true);
    await expect(answer).resolves.toEqual({ type: "approve", remember: "this_call" });
    // The delivery still in flight is abandoned.
    await got.aborted;
  });

  it("the engine's abort cancels the POST and the wait, and rejects with its reason", async () => {
    const hook = await receiver(() => undefined);
    const webhook = resolver(hook.url);
    const stop = new AbortController();
    const ask = makeAsk(1);
    const answer = webhook.resolve(ask, { signal: stop.signal });
    const got = await hook.next();
    stop.abort(new Error("ask expired"));
    await expect(answer).rejects.toThrow("ask expired");
    await got.aborted;
    expect(webhook.inbox.pending).toBe(0);
    await expect(webhook.resolve(makeAsk(2), { signal: stop.signal })).rejects.toThrow("ask expired");
    expect(hook.deliveries).toHaveLength(1);
  });

  it("close() denies what waits and everything later, without another delivery", async () => {
    const hook = await receiver(() => 202);
    const webhook = resolver(hook.url);
    const waiting = track(webhook.resolve(makeAsk(1), live()));
    await hook.next();
    webhook.close();
    await expect(webhook.resolve(makeAsk(2), live())).resolves.toMatchObject({ type: "deny" });
    for (let i = 0; i < 10 && waiting.outcome.state === "pending"; i++) await new Promise((r) => setImmediate(r));
    expect(waiting.outcome).toMatchObject({ state: "fulfilled", value: { type: "deny" } });
    expect(hook.deliveries).toHaveLength(1);
  });

  it("fails without a delivery when its clock gives no epoch ms", async () => {
    const hook = await receiver((got) => (got.verified ? 202 : 401));
    const webhook = resolver(hook.url, { now: () => Number.NaN });
    await expect(webhook.resolve(makeAsk(1), live())).rejects.toThrow(
      new WebhookDeliveryError(
        `webhook at ${new URL(hook.url).host} not delivered: the resolver's now() returned NaN, not epoch ms`,
      ),
    );
    const broken = resolver(hook.url, {
      now: () => {
        throw new Error("clock unavailable");
      },
    });
    await expect(broken.resolve(makeAsk(2), live())).rejects.toThrow(
      new WebhookDeliveryError(`webhook at ${new URL(hook.url).host} not delivered: clock unavailable`),
    );
    expect(hook.deliveries).toHaveLength(0);
  });

  it("fails when its fetch or clock throws an error that cannot be printed, leaving nothing unhandled", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    cleanups.push(() => void process.off("unhandledRejection", onUnhandled));
    const hostile = new Error("x");
    Object.defineProperty(hostile, "message", {
      get() {
        throw new Error("message unavailable");
      },
    });
    const fetching = resolver("http://127.0.0.1:9/hook", { fetch: () => Promise.reject(hostile) });
    await expect(fetching.resolve(makeAsk(1), live())).rejects.toThrow(
      new WebhookDeliveryError("webhook at 127.0.0.1:9 unreachable: unprintable error"),
    );
    const clock = resolver("http://127.0.0.1:9/hook", {
      now: () => {
        throw hostile;
      },
    });
    await expect(clock.resolve(makeAsk(2), live())).rejects.toThrow(
      new WebhookDeliveryError("webhook at 127.0.0.1:9 not delivered: unprintable error"),
    );
    await new Promise((resolve) => setImmediate(resolve));
    expect(unhandled).toEqual([]);
  });

  it("POSTs with the fetch it is given", async () => {
    const hook = await receiver(() => 500);
    const urls: string[] = [];
    const webhook = resolver(hook.url, {
      fetch: (input, init) => {
        urls.push(input instanceof Request ? input.url : String(input));
        return fetch(input, init);
      },
    });
    await expect(webhook.resolve(makeAsk(1), live())).rejects.toThrow(
      new WebhookDeliveryError(`webhook at ${new URL(hook.url).host} answered HTTP 500`),
    );
    expect(urls).toEqual([hook.url]);
  });

  it("refuses unusable options and a non-ask", async () => {
    const links = { baseUrl: "https://approvals.example.com/", secret: LINK_SECRET, ttlMs: 60_000 };
    for (const [options, option] of [
      [undefined, "options"],
      [{ url: "nope", secret: SECRET }, "url"],
      [{ url: "ftp://x/", secret: SECRET }, "url"],
      [{ url: Object.create(null) as unknown, secret: SECRET }, "url"],
      [{ url: null, secret: SECRET }, "url"],
      [{ url: "http://x/", secret: "short" }, "secret"],
      [{ url: "http://x/", secret: SECRET, timeoutMs: 0 }, "timeoutMs"],
      // Node runs a longer timer after 1 ms: every ask would be denied at once.
      [{ url: "http://x/", secret: SECRET, timeoutMs: 2_147_483_648 }, "timeoutMs"],
      [{ url: "http://x/", secret: SECRET, fetch: "fetch" }, "fetch"],
      [{ url: "http://x/", secret: SECRET, now: 5 }, "now"],
      [{ url: "http://x/", secret: SECRET, links: "https://approvals.example.com/" }, "links"],
      [{ url: "http://x/", secret: SECRET, links: { ...links, secret: "s" } }, "links.secret"],
      [{ url: "http://x/", secret: SECRET, links: { ...links, baseUrl: "ftp://x/" } }, "links.baseUrl"],
      [{ url: "http://x/", secret: SECRET, links: { ...links, baseUrl: "not a url" } }, "links.baseUrl"],
      [
        { url: "http://x/", secret: SECRET, links: { ...links, baseUrl: Object.create(null) as unknown } },
        "links.baseUrl",
      ],
      [{ url: "http://x/", secret: SECRET, links: { ...links, ttlMs: -1 } }, "links.ttlMs"],
      [{ url: "http://x/", secret: SECRET, links: { ...links, ttlMs: undefined } }, "links.ttlMs"],
      [{ url: "http://x/", secret: SECRET, capacity: -1 }, "capacity"],
      [{ url: "http://x/", secret: SECRET, capacity: 1.5 }, "capacity"],
      [{ url: "http://x/", secret: SECRET, capacity: "64" }, "capacity"],
      [{ url: "http://x/", secret: SECRET, capacity: Object.create(null) as unknown }, "capacity"],
    ] as const) {
      const error = thrownBy(() => new WebhookResolver(options as never));
      expect(error, option).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe(option);
    }
    const webhook = resolver("http://127.0.0.1:1/");
    await expect(webhook.resolve({ id: "x" } as never, live())).rejects.toMatchObject({ code: "ASK_INVALID" });
    await expect(webhook.resolve(makeAsk(1), {} as never)).rejects.toMatchObject({ code: "ASK_INVALID" });
  });

  it("refuses a key that is none of its options, in links too, naming it; and an AbortSignal or an array in place of its options", () => {
    const links = { baseUrl: "https://approvals.example.com/", secret: LINK_SECRET, ttlMs: 60_000 };
    const base = { url: "http://x/", secret: SECRET };
    for (const [options, option, message] of [
      [
        { ...base, timeoutMS: 5_000 },
        "timeoutMS",
        "WebhookResolver: unknown option 'timeoutMS' (did you mean timeoutMs?)",
      ],
      [{ ...base, fecth: fetch }, "fecth", "WebhookResolver: unknown option 'fecth' (did you mean fetch?)"],
      [{ ...base, link: links }, "link", "WebhookResolver: unknown option 'link' (did you mean links?)"],
      [
        { ...base, links: { ...links, baseURL: "https://other.example/" } },
        "links.baseURL",
        "WebhookResolver: links: unknown option 'baseURL' (did you mean baseUrl?)",
      ],
      [
        { ...base, links: { ...links, expiresMs: 1 } },
        "links.expiresMs",
        "WebhookResolver: links: unknown option 'expiresMs' (the options are baseUrl, secret and ttlMs)",
      ],
      [
        new AbortController().signal,
        "options",
        "WebhookResolver: options must be an object of options, got an AbortSignal",
      ],
      [[base], "options", "WebhookResolver: options must be an object of options, got an array"],
      [
        { ...base, links: new AbortController().signal },
        "links",
        "WebhookResolver: links must be an object: { baseUrl, secret, ttlMs }, got an AbortSignal",
      ],
      [
        { ...base, links: [links] },
        "links",
        "WebhookResolver: links must be an object: { baseUrl, secret, ttlMs }, got an array",
      ],
    ] as const) {
      const error = thrownBy(() => new WebhookResolver(options as never));
      expect(error, option).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe(option);
      expect((error as Error).message).toBe(message);
    }
  });

  it("reads each option once: a links.baseUrl or secret whose getter answers otherwise later is used as it was checked", async () => {
    const hook = await receiver(() => 200);
    const app = createServer();
    const { base } = await listen(app);
    const twice = <T>(first: T, later: unknown): { get(): T } => {
      let reads = 0;
      return { get: () => (++reads === 1 ? first : (later as T)) };
    };
    const links = Object.defineProperties(
      { ttlMs: 60_000 },
      {
        baseUrl: { enumerable: true, ...twice(base, "https://evil.example/") },
        secret: { enumerable: true, ...twice(LINK_SECRET, "another-link-secret-of-length") },
      },
    );
    const options = Object.defineProperties(
      { url: hook.url, links },
      { secret: { enumerable: true, ...twice(SECRET, "another-webhook-secret-of-length") } },
    );
    const webhook = new WebhookResolver(options as never);
    cleanups.push(() => webhook.close());
    const handler = createApprovalHandler({
      approver: webhook.inbox,
      linkSecret: LINK_SECRET,
      allowedHosts: [new URL(base).host],
    });
    app.on("request", handler.handle);
    cleanups.push(stopping(app, handler));
    const answer = webhook.resolve(makeAsk(1), live());
    const got = await hook.next();
    // Signed with the secret that was checked, the links under the base that was checked, with its key.
    expect(got.verified).toBe(true);
    const approve = got.delivery.links?.approve ?? "";
    expect(approve.startsWith(`${base}answer?`)).toBe(true);
    const form = { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "" };
    expect((await request(approve, form)).status).toBe(200);
    await expect(answer).resolves.toEqual({ type: "approve" });
  });

  it("refuses a url with a user name or password without repeating it: fetch refuses such a url with an error that names it, which became every ask's denial reason", () => {
    for (const url of [
      "https://bot:hunter2-secret@hooks.example.com/loopctl",
      "https://hunter2-secret@hooks.example.com/loopctl",
      "https://:hunter2-secret@hooks.example.com/loopctl",
      // Ones that do not parse are repeated in the error, masked.
      "https://bot:hunter2-secret@hooks example.com/loopctl",
      "https://bot:hunter2/secret@hooks.example.com/loopctl",
    ]) {
      let error: unknown;
      try {
        new WebhookResolver({ url, secret: SECRET });
      } catch (e) {
        error = e;
      }
      expect(error, url).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe("url");
      expect((error as ServerInputError).message).not.toContain("hunter2");
    }
  });

  it("signs links with the links.secret and links.baseUrl it was given, even if the caller changes those objects later", async () => {
    const hook = await receiver(() => 200);
    const app = createServer();
    const { base } = await listen(app);
    const baseUrl = new URL(base);
    const secret = new TextEncoder().encode(LINK_SECRET);
    const webhook = resolver(hook.url, { links: { baseUrl, secret, ttlMs: 60_000 } });
    const handler = createApprovalHandler({
      approver: webhook.inbox,
      linkSecret: LINK_SECRET,
      allowedHosts: [baseUrl.host],
    });
    app.on("request", handler.handle);
    cleanups.push(stopping(app, handler));
    // Key material wiped once handed over, and the URL object reused for something else.
    secret.fill(0);
    baseUrl.host = "elsewhere.example";
    const answer = webhook.resolve(makeAsk(1), live());
    const got = await hook.next();
    const approve = got.delivery.links?.approve ?? "";
    expect(approve.startsWith(`${base}answer?`)).toBe(true);
    const form = { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "" };
    expect((await request(approve, form)).status).toBe(200);
    await expect(answer).resolves.toEqual({ type: "approve" });
  });

  it("refuses a links.secret equal to secret, as a string or bytes, without repeating it: the receiver, which holds secret, could sign its own answer links", async () => {
    for (const secret of [LINK_SECRET, new TextEncoder().encode(LINK_SECRET)]) {
      let error: unknown;
      try {
        new WebhookResolver({
          url: "http://127.0.0.1:1/",
          secret,
          links: { baseUrl: "https://approvals.example.com/", secret: LINK_SECRET, ttlMs: 60_000 },
        });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe("links.secret");
      expect((error as Error).message).not.toContain(LINK_SECRET);
    }
    // What it would allow: a receiver that knows the link secret signs an approval of its own, with
    // an expiry of its choosing, and the approval server takes it.
    const hook = await receiver(() => 200);
    const { webhook } = await linkedResolver(hook.url);
    const ask = makeAsk(1);
    const answer = webhook.resolve(ask, live());
    const got = await hook.next();
    const forged = signAnswerLink(got.delivery.ask, {
      secret: LINK_SECRET,
      baseUrl: new URL(".", got.delivery.links?.approve ?? "").href,
      ttlMs: 365 * 24 * 3_600_000,
    });
    expect(forged.expiresAtMs).toBeGreaterThan(got.delivery.links?.expiresAtMs ?? Infinity);
    const form = { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "" };
    expect((await request(forged.approve, form)).status).toBe(200);
    await expect(answer).resolves.toEqual({ type: "approve" });
  });

  it("refuses a links.baseUrl with a user name or password without repeating it: it would be in every link each delivery carries", () => {
    for (const baseUrl of BASE_URLS_WITH_CREDENTIALS) {
      let error: unknown;
      try {
        new WebhookResolver({
          url: "http://127.0.0.1:1/",
          secret: SECRET,
          links: { baseUrl, secret: LINK_SECRET, ttlMs: 60_000 },
        });
      } catch (e) {
        error = e;
      }
      expect(error, String(baseUrl)).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe("links.baseUrl");
      expect((error as ServerInputError).message).toBe(
        "WebhookResolver: links.baseUrl must not carry a user name or password: it would be in every link sent",
      );
    }
  });

  it("refuses what is not a PendingAsk in one line naming the field at fault, without a delivery", async () => {
    let posts = 0;
    const webhook = new WebhookResolver({
      url: "http://127.0.0.1:1/",
      secret: SECRET,
      fetch: () => ((posts += 1), Promise.resolve(new Response(null, { status: 204 }))),
    });
    const error = await webhook
      .resolve({ ...makeAsk(1), turn: -1 }, { signal: new AbortController().signal })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPendingAskError);
    expect((error as Error).message).toBe(
      "cannot park on the approval channel: not a PendingAsk: turn: Too small: expected number to be >=0",
    );
    expect(posts).toBe(0);
  });

  it("refuses an ask or options it cannot read (a proxy, a getter that throws) with InvalidPendingAskError carrying what was thrown, without a delivery", async () => {
    let posts = 0;
    const webhook = new WebhookResolver({
      url: "http://127.0.0.1:1/",
      secret: SECRET,
      fetch: () => ((posts += 1), Promise.resolve(new Response(null, { status: 204 }))),
    });
    const trap = new Error("unreadable");
    const unreadable = new Proxy(
      {},
      {
        get() {
          throw trap;
        },
      },
    );
    const throwingId = Object.defineProperty({ ...makeAsk(1) }, "id", {
      enumerable: true,
      get() {
        throw trap;
      },
    });
    const throwingSignal = Object.defineProperty({}, "signal", {
      get() {
        throw trap;
      },
    });
    for (const [label, call] of [
      ["a proxy as the ask", () => webhook.resolve(unreadable as never, live())],
      ["an ask whose id getter throws", () => webhook.resolve(throwingId, live())],
      ["a proxy as the options", () => webhook.resolve(makeAsk(2), unreadable as never)],
      ["options whose signal getter throws", () => webhook.resolve(makeAsk(3), throwingSignal as never)],
    ] as const) {
      const error = await call().catch((e: unknown) => e);
      expect(error, label).toBeInstanceOf(InvalidPendingAskError);
      expect(error, label).toMatchObject({ code: "ASK_INVALID", cause: trap });
    }
    expect(webhook.inbox.pending).toBe(0);
    expect(posts).toBe(0);
    webhook.close();
  });

  it("refuses a signal that only inherits from AbortSignal with InvalidPendingAskError, without a delivery", async () => {
    let posts = 0;
    const webhook = new WebhookResolver({
      url: "http://127.0.0.1:1/",
      secret: SECRET,
      fetch: () => ((posts += 1), Promise.resolve(new Response(null, { status: 204 }))),
    });
    const signal = Object.create(AbortSignal.prototype) as AbortSignal;
    const error = await webhook.resolve(makeAsk(1), { signal }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPendingAskError);
    expect(error).toMatchObject({
      code: "ASK_INVALID",
      message: "cannot park on the approval channel: options.signal must be an AbortSignal",
    });
    expect(webhook.inbox.pending).toBe(0);
    expect(posts).toBe(0);
  });

  it("refuses a signal it cannot listen to with InvalidPendingAskError, without a delivery; nothing is left waiting", async () => {
    let posts = 0;
    const webhook = new WebhookResolver({
      url: "http://127.0.0.1:1/",
      secret: SECRET,
      fetch: () => ((posts += 1), Promise.resolve(new Response(null, { status: 204 }))),
    });
    const ask = makeAsk(1);
    const signal = new AbortController().signal;
    const trap = new Error("cannot listen");
    signal.addEventListener = () => {
      throw trap;
    };
    const error = await webhook.resolve(ask, { signal }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPendingAskError);
    expect(error).toMatchObject({
      code: "ASK_INVALID",
      message: "cannot park on the approval channel: options.signal cannot be listened to",
      cause: trap,
    });
    expect(webhook.inbox.pending).toBe(0);
    expect(posts).toBe(0);
    // Nothing of the call is left: the same ask is delivered and answered once.
    const parked = webhook.resolve(ask, live());
    expect((await webhook.inbox.next())?.id).toBe(ask.id);
    expect(webhook.inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
    expect(posts).toBe(1);
    webhook.close();
  });

  it("ends with InvalidPendingAskError when a signal whose reason cannot be read aborts, before or during the wait", async () => {
    const webhook = new WebhookResolver({
      url: "http://127.0.0.1:1/",
      secret: SECRET,
      fetch: () => Promise.resolve(new Response(null, { status: 204 })),
    });
    const trap = new Error("reason unreadable");
    const refusal = {
      code: "ASK_INVALID",
      message: "cannot park on the approval channel: options.signal aborted, and its reason could not be read",
      cause: trap,
    };
    const before = unreadableReasonSignal(trap);
    before.controller.abort();
    await expect(webhook.resolve(makeAsk(1), { signal: before.signal })).rejects.toMatchObject(refusal);
    const during = unreadableReasonSignal(trap);
    const ask = makeAsk(2);
    const parked = webhook.resolve(ask, { signal: during.signal });
    expect((await webhook.inbox.next())?.id).toBe(ask.id);
    during.controller.abort();
    const error = await parked.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPendingAskError);
    expect(error).toMatchObject(refusal);
    expect(webhook.inbox.pending).toBe(0);
    expect(webhook.inbox.resolve(ask.id, { type: "approve" })).toBe(false);
    webhook.close();
  });

  it("settles with the answer when the signal's removeEventListener throws", async () => {
    const webhook = new WebhookResolver({
      url: "http://127.0.0.1:1/",
      secret: SECRET,
      fetch: () => Promise.resolve(new Response(null, { status: 204 })),
    });
    const ask = makeAsk(1);
    const parked = webhook.resolve(ask, { signal: stuckController().signal });
    expect((await webhook.inbox.next())?.id).toBe(ask.id);
    expect(webhook.inbox.resolve(ask.id, { type: "approve" })).toBe(true);
    expect(await parked).toEqual({ type: "approve" });
    webhook.close();
  });
});

describe("verifyWebhookSignature", () => {
  const body = JSON.stringify({ type: "loopctl.ask" });
  const sign = (secret: string, t: number, text: string): string =>
    `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${text}`).digest("hex")}`;

  it("accepts the right secret within the window, as a string or bytes", () => {
    const now = 1_800_000_000_000;
    const header = sign(SECRET, now - 1000, body);
    expect(verifyWebhookSignature({ secret: SECRET, header, body, nowMs: now })).toBe(true);
    expect(verifyWebhookSignature({ secret: Buffer.from(SECRET), header, body: Buffer.from(body), nowMs: now })).toBe(
      true,
    );
  });

  it("refuses a changed body, another secret, a replay outside the window, a malformed header", () => {
    const now = 1_800_000_000_000;
    const header = sign(SECRET, now, body);
    expect(verifyWebhookSignature({ secret: SECRET, header, body: `${body} `, nowMs: now })).toBe(false);
    expect(verifyWebhookSignature({ secret: `${SECRET}!`, header, body, nowMs: now })).toBe(false);
    expect(verifyWebhookSignature({ secret: SECRET, header, body, nowMs: now + 5 * 60_000 + 1 })).toBe(false);
    expect(verifyWebhookSignature({ secret: SECRET, header, body, nowMs: now + 1000, toleranceMs: 500 })).toBe(false);
    for (const bad of [undefined, null, "", "t=1", `v1=${"0".repeat(64)}`, header.toUpperCase(), `${header},v0=00`]) {
      expect(verifyWebhookSignature({ secret: SECRET, header: bad, body, nowMs: now })).toBe(false);
    }
  });

  it("takes the header as node:http gives it, and refuses one sent more than once (an array)", async () => {
    const now = Date.now();
    const header = sign(SECRET, now, body);
    // A repeated header is two claims, not one signature: never accepted, even when each copy is valid.
    for (const repeated of [[header], [header, header], [header, sign(`${SECRET}!`, now, body)]]) {
      expect(verifyWebhookSignature({ secret: SECRET, header: repeated, body, nowMs: now })).toBe(false);
    }
    const seen: boolean[] = [];
    const receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        seen.push(
          verifyWebhookSignature({
            secret: SECRET,
            header: req.headers[WEBHOOK_SIGNATURE_HEADER],
            body: Buffer.concat(chunks),
          }),
        );
        res.end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`;
      await fetch(url, { method: "POST", body, headers: { [WEBHOOK_SIGNATURE_HEADER]: header } });
      await fetch(url, { method: "POST", body });
    } finally {
      receiver.close();
    }
    expect(seen).toEqual([true, false]);
  });

  it("throws a ServerInputError for a tolerance or clock that is not a finite non-negative number, or an unusable secret, never accepting", () => {
    const old = Date.UTC(2015, 0, 1);
    const header = sign(SECRET, old, body);
    const cases: [Partial<Parameters<typeof verifyWebhookSignature>[0]>, string][] = [
      // Number(process.env.X) of an unset variable: NaN compares false with everything.
      [{ toleranceMs: Number(undefined) }, "toleranceMs"],
      [{ toleranceMs: Infinity }, "toleranceMs"],
      [{ toleranceMs: -1 }, "toleranceMs"],
      [{ toleranceMs: "300000" as never }, "toleranceMs"],
      [{ nowMs: NaN }, "nowMs"],
      [{ nowMs: -Infinity }, "nowMs"],
      [{ nowMs: -1 }, "nowMs"],
      [{ nowMs: "now" as never }, "nowMs"],
      [{ body: 42 as never, nowMs: old }, "body"],
      [{ body: null as never, nowMs: old }, "body"],
      [{ body: { type: "loopctl.ask" } as never, nowMs: old }, "body"],
      // process.env.HOOK_SECRET unset or cut short: every delivery refused, with no word why.
      [{ secret: undefined as never, nowMs: old }, "secret"],
      [{ secret: "", nowMs: old }, "secret"],
      [{ secret: "short", nowMs: old }, "secret"],
      [{ secret: [1, 2, 3] as never, nowMs: old }, "secret"],
    ];
    for (const [options, option] of cases) {
      let error: unknown;
      try {
        verifyWebhookSignature({ secret: SECRET, header, body, ...options });
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe(option);
      expect((error as ServerInputError).code).toBe("SERVER_INPUT_INVALID");
    }
    expect(() => verifyWebhookSignature(undefined as never)).toThrow(ServerInputError);
    expect(verifyWebhookSignature({ secret: SECRET, header, body, toleranceMs: 0, nowMs: old })).toBe(true);
  });

  it("throws a ServerInputError for a key that is none of its options, naming it: a misspelt toleranceMs or nowMs would check another window", () => {
    const old = Date.UTC(2015, 0, 1);
    const header = sign(SECRET, old, body);
    for (const [extra, option, message] of [
      [{ now: old }, "now", "verifyWebhookSignature: unknown option 'now' (did you mean nowMs?)"],
      [
        { toleranceMS: 0 },
        "toleranceMS",
        "verifyWebhookSignature: unknown option 'toleranceMS' (did you mean toleranceMs?)",
      ],
      [{ headers: header }, "headers", "verifyWebhookSignature: unknown option 'headers' (did you mean header?)"],
    ] as const) {
      let error: unknown;
      try {
        verifyWebhookSignature({ secret: SECRET, header, body, ...extra });
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe(option);
      expect((error as Error).message).toBe(message);
    }
    expect(() => verifyWebhookSignature(new AbortController().signal as never)).toThrow(
      "verifyWebhookSignature: options must be an object of options, got an AbortSignal",
    );
  });
});
