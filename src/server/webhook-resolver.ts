import { createHmac, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import { abortReason, isAbortSignal, unlisten } from "../abort-signal.js";
import { ApprovalChannel } from "../ask/approval-channel.js";
import type { Approver } from "../ask/approver.js";
import { InvalidPendingAskError } from "../ask/errors.js";
import { answerNotice, passAnswerNotice } from "../ask/park-signal.js";
import { describeError } from "../engine/errors.js";
import { PendingAskSchema } from "../ask/types.js";
import type { AskResolution, AskResolver, PendingAsk, ResolveOptions } from "../ask/types.js";
import { shownValue } from "../errors.js";
import { linkBaseUrl, linkTtlMs, signAnswerLink } from "./answer-links.js";
import { ServerInputError, WebhookDeliveryError } from "./errors.js";
import { inputFault, readOptions } from "./options.js";
import { httpUrl } from "./http-url.js";
import { isStrongSecret, MIN_SECRET_BYTES, secretBytes } from "./secrets.js";
import { MAX_TIMER_MS } from "./timers.js";
import { zodIssuesLine } from "../zod-issues.js";

/** The header a webhook delivery's signature travels in: `t=<epoch ms>,v1=<hex HMAC-SHA256>`. */
export const WEBHOOK_SIGNATURE_HEADER = "loopctl-signature";

/** How far a delivery's timestamp may be from the receiver's clock before it is refused as a replay. */
export const WEBHOOK_TOLERANCE_MS = 300_000;

/** What a {@link WebhookResolver} POSTs, as JSON. Parse it with this schema on the receiving side. */
export const WebhookDeliverySchema = z.object({
  type: z.literal("loopctl.ask"),
  ask: PendingAskSchema,
  /** Signed approve/deny links for this ask, when the resolver was given `links`; else null. */
  links: z.object({ approve: z.string(), deny: z.string(), expiresAtMs: z.number() }).nullable(),
});

/** A webhook delivery: the ask, and its answer links if any. */
export type WebhookDelivery = z.infer<typeof WebhookDeliverySchema>;

/** Options of {@link WebhookResolver}. */
export interface WebhookResolverOptions {
  /** Where each ask is POSTed: http or https, with no user name or password in it. */
  readonly url: string | URL;
  /** The secret deliveries are signed with; the receiver verifies with the same one (at least 16 bytes). */
  readonly secret: string | Uint8Array;
  /**
   * How long the receiver has to accept a delivery (any 2xx); after that
   * `resolve` rejects with a `WebhookDeliveryError`. At most 2147483647 (about 24.8 days). @default 10000
   */
  readonly timeoutMs?: number;
  /** The `fetch` to POST with; `timeoutMs` holds even if it ignores the signal. @default globalThis.fetch */
  readonly fetch?: typeof fetch;
  /**
   * Put signed approve/deny links in each delivery: the approval server's
   * URL as people reach it and its `linkSecret` (see `signAnswerLink`).
   */
  readonly links?: { readonly baseUrl: string | URL; readonly secret: string | Uint8Array; readonly ttlMs: number };
  /** How many asks the inbox holds delivered but not yet taken by a server, a non-negative integer. @default 64 */
  readonly capacity?: number;
  /** The clock for signature timestamps and link expiry, epoch ms. @default Date.now */
  readonly now?: () => number;
}

/**
 * An {@link AskResolver} for agents whose approvers are elsewhere: each ask
 * is POSTed, signed, to a webhook (a chat bot, a paging service, a ticket
 * system), and waits for the answer to come back through an approval server
 * that serves {@link WebhookResolver.inbox}: the console, the HTTP API, or
 * the signed links the delivery carries.
 *
 * The delivery is a JSON {@link WebhookDelivery} with the header
 * `loopctl-signature: t=<epoch ms>,v1=<hex>`, the HMAC-SHA256 of
 * `` `${t}.${body}` `` under `secret` ({@link verifyWebhookSignature} checks
 * one). Fail-closed: a network failure, a reply other than 2xx, or no reply
 * within `timeoutMs` makes `resolve` reject with a {@link WebhookDeliveryError}
 * saying so, unless an answer already came: the engine refuses the call as a
 * failed resolver (`ask resolver failed: <cause>`), not as a person's denial,
 * and the ask is withdrawn from the inbox. When the engine's signal aborts (deadline, cancel),
 * the POST and the wait are abandoned and the promise rejects with the
 * signal's reason. `close()` denies every ask still waiting, and later ones
 * at once without a delivery. An ask whose id is still waiting here, or is
 * among the last 256 to end here, rejects with a `DuplicateAskError`, without
 * a delivery: the ask is put in the inbox first, and POSTed only once it is there.
 * An ask that is not a {@link PendingAsk}, or an ask or options that cannot
 * be read (a proxy, a getter that throws), rejects with an
 * `InvalidPendingAskError`, without a delivery.
 *
 * @example
 * ```ts
 * const resolver = new WebhookResolver({ url: "https://hooks.example.com/loopctl", secret: process.env.HOOK_SECRET! });
 * const server = await createApprovalServer({ approver: resolver.inbox, port: 8080 });
 * const managers = new LoopManagers().withAskResolver(resolver).withAskTimeout(15 * 60_000);
 * ```
 */
export class WebhookResolver implements AskResolver, Disposable {
  /** The asks waiting for an answer: serve it with `createApprovalServer({ approver: resolver.inbox })`. */
  readonly inbox: Approver;
  readonly #channel: ApprovalChannel;
  readonly #url: string;
  /** The webhook's host (and port), which its failures name: its path and query may hold a secret. */
  readonly #host: string;
  readonly #key: Buffer;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;
  readonly #links: WebhookResolverOptions["links"];
  readonly #now: () => number;

  /** @throws {ServerInputError} naming an unusable option. */
  constructor(given: WebhookResolverOptions) {
    const where = "WebhookResolver";
    const options = readOptions(
      given,
      ["url", "secret", "timeoutMs", "fetch", "links", "capacity", "now"],
      inputFault(where),
    );
    const url = httpUrl(where, "url", options.url);
    // fetch refuses such a URL with an error that repeats it, which would become every ask's failure reason.
    if (url.username !== "" || url.password !== "") {
      throw new ServerInputError(
        where,
        "url",
        "must not carry a user name or password (fetch refuses it): add credentials in the fetch option",
      );
    }
    if (!isStrongSecret(options.secret)) {
      throw new ServerInputError(where, "secret", `must be a string or bytes of at least ${MIN_SECRET_BYTES} bytes`);
    }
    const timeoutMs = options.timeoutMs ?? 10_000;
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs <= 0 || timeoutMs > MAX_TIMER_MS) {
      throw new ServerInputError(
        where,
        "timeoutMs",
        `must be a positive integer of milliseconds, at most ${MAX_TIMER_MS}, got ${shownValue(timeoutMs)}`,
      );
    }
    const doFetch = options.fetch ?? globalThis.fetch;
    if (typeof doFetch !== "function") throw new ServerInputError(where, "fetch", "must be a function");
    const now = options.now ?? Date.now;
    if (typeof now !== "function") throw new ServerInputError(where, "now", "must be a function returning epoch ms");
    const links =
      options.links === undefined
        ? undefined
        : readOptions(
            options.links,
            ["baseUrl", "secret", "ttlMs"],
            inputFault(where, "links."),
            "an object: { baseUrl, secret, ttlMs }",
          );
    let linkBase: URL | undefined;
    if (links !== undefined) {
      // Checked here as signAnswerLink checks them, so no ask finds them unusable at delivery.
      if (!isStrongSecret(links.secret)) {
        throw new ServerInputError(
          where,
          "links.secret",
          `must be a string or bytes of at least ${MIN_SECRET_BYTES} bytes`,
        );
      }
      // The receiver holds `secret` to verify deliveries: with the same bytes it could sign answer
      // links of its own, for any verdict and any expiry, and approve asks long after their links lapse.
      if (secretBytes(links.secret).equals(secretBytes(options.secret))) {
        throw new ServerInputError(
          where,
          "links.secret",
          "must differ from secret: the webhook's receiver holds secret, and could sign answer links with it",
        );
      }
      linkBase = linkBaseUrl(where, "links.baseUrl", links.baseUrl);
      linkTtlMs(where, "links.ttlMs", links.ttlMs);
    }
    const capacity: unknown = options.capacity ?? 64;
    if (typeof capacity !== "number" || !Number.isSafeInteger(capacity) || capacity < 0) {
      throw new ServerInputError(
        where,
        "capacity",
        `must be a non-negative integer, got ${typeof capacity === "number" ? String(capacity) : typeof capacity}`,
      );
    }
    const [channel, inbox] = ApprovalChannel.pair(capacity);
    this.#channel = channel;
    this.inbox = inbox;
    this.#url = url.href;
    this.#host = url.host;
    this.#key = secretBytes(options.secret);
    this.#timeoutMs = timeoutMs;
    this.#fetch = doFetch;
    // Copies of what was checked: a URL object or key bytes the caller changes later must not move
    // the links elsewhere or sign them with other bytes.
    this.#links =
      links === undefined || linkBase === undefined
        ? undefined
        : {
            baseUrl: linkBase.href,
            secret: secretBytes(links.secret as string | Uint8Array),
            ttlMs: links.ttlMs as number,
          };
    this.#now = now;
  }

  /** Delivers `ask` and waits for its answer; see the class notes for every outcome. */
  async resolve(ask: PendingAsk, options: ResolveOptions): Promise<AskResolution> {
    let signal: unknown;
    let notice: ReturnType<typeof answerNotice>;
    try {
      signal = (options as ResolveOptions | undefined)?.signal;
      notice = answerNotice(options, this);
    } catch (error) {
      // A proxy or a throwing getter handed in by an untyped caller: still its invalid options, typed.
      throw new InvalidPendingAskError("the options could not be read", { cause: error });
    }
    if (!isAbortSignal(signal)) throw new InvalidPendingAskError("options.signal must be an AbortSignal");
    // A reason that cannot be read (a getter that throws) is said as the signal's fault, not thrown from a listener.
    const reason = (): unknown =>
      abortReason(
        signal,
        (cause) => new InvalidPendingAskError("options.signal aborted, and its reason could not be read", { cause }),
      );
    if (signal.aborted) throw reason();
    let parsed: ReturnType<typeof PendingAskSchema.safeParse>;
    try {
      parsed = PendingAskSchema.safeParse(ask);
    } catch (error) {
      throw new InvalidPendingAskError("the ask could not be read", { cause: error });
    }
    if (!parsed.success) throw new InvalidPendingAskError(`not a PendingAsk: ${zodIssuesLine(parsed.error)}`);
    if (this.#channel.closed) return this.#channel.resolve(parsed.data, { signal });

    // The wait ends on the engine's abort, or on a failed delivery; the POST ends on either, or once answered.
    const wait = new AbortController();
    const post = new AbortController();
    const onAbort = (): void => {
      const why = reason();
      wait.abort(why);
      post.abort(why);
    };
    try {
      signal.addEventListener("abort", onAbort, { once: true });
    } catch (error) {
      throw new InvalidPendingAskError("options.signal cannot be listened to", { cause: error });
    }
    try {
      const before = this.#channel.size;
      // The engine's park takes the answer as the inbox is told `true`, before a cancel can come between.
      const answered = this.#channel.resolve(parsed.data, passAnswerNotice(wait.signal, notice));
      // Posted only once the channel took the ask (it parks before resolve() returns): one it refused,
      // an id still parked or among its last endings, is nobody's to be asked about.
      if (this.#channel.size > before) {
        void this.#deliver(parsed.data, post.signal).then((failure) => {
          if (failure !== undefined) wait.abort(failure);
        });
      }
      try {
        return await answered;
      } catch (error) {
        if (signal.aborted) throw reason();
        // A delivery failure is the resolver's, not a person's denial: it rejects, and the engine
        // ends the call as a failed resolver (still refused, never run).
        throw error;
      }
    } finally {
      unlisten(signal, onAbort);
      post.abort(new Error("the ask was answered"));
    }
  }

  /** Denies every ask still waiting, and every later one at once. Idempotent. */
  close(): void {
    this.inbox.close();
  }

  /** Same as {@link WebhookResolver.close}. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** POSTs the ask; resolves `undefined` once a 2xx came back, else the failure (never rejects). */
  async #deliver(ask: PendingAsk, signal: AbortSignal): Promise<WebhookDeliveryError | undefined> {
    if (signal.aborted) return undefined;
    const delivery = this.#delivery(ask);
    if (delivery instanceof WebhookDeliveryError) return delivery;
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), this.#timeoutMs);
    const both = AbortSignal.any([signal, timeout.signal]);
    try {
      const posted = this.#fetch(this.#url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "user-agent": "loopctl-webhook",
          [WEBHOOK_SIGNATURE_HEADER]: delivery.signature,
        },
        body: delivery.body,
        signal: both,
        redirect: "error",
      });
      // A fetch given by the caller may ignore the signal: the timeout and the abort must not wait for it.
      const response = await unlessAborted(posted, both);
      release(response);
      if (response.status >= 200 && response.status < 300) return undefined;
      return new WebhookDeliveryError(`webhook at ${this.#host} answered HTTP ${response.status}`);
    } catch (error) {
      if (signal.aborted) return undefined;
      if (timeout.signal.aborted)
        return new WebhookDeliveryError(`webhook at ${this.#host} did not answer within ${this.#timeoutMs} ms`);
      return new WebhookDeliveryError(`webhook at ${this.#host} unreachable: ${describe(error)}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
  }

  /** The body and signature header of the ask's delivery, or why none could be made. */
  #delivery(ask: PendingAsk): { readonly body: string; readonly signature: string } | WebhookDeliveryError {
    try {
      const nowMs: unknown = this.#now();
      if (typeof nowMs !== "number" || !Number.isSafeInteger(nowMs) || nowMs < 0) {
        return new WebhookDeliveryError(
          `webhook at ${this.#host} not delivered: the resolver's now() returned ${shownValue(nowMs)}, not epoch ms`,
        );
      }
      const links =
        this.#links === undefined
          ? null
          : signAnswerLink(ask, {
              secret: this.#links.secret,
              baseUrl: this.#links.baseUrl,
              ttlMs: this.#links.ttlMs,
              nowMs,
            });
      const body = JSON.stringify({ type: "loopctl.ask", ask, links } satisfies WebhookDelivery);
      return { body, signature: signatureHeader(this.#key, nowMs, body) };
    } catch (error) {
      // The options were checked when the resolver was made; whatever fails here must still refuse the call.
      return new WebhookDeliveryError(`webhook at ${this.#host} not delivered: ${describe(error)}`, { cause: error });
    }
  }
}

/**
 * `work`'s outcome, or a rejection with `signal`'s reason once it aborts,
 * whichever comes first. A response that comes after is released; a late
 * failure is dropped.
 */
function unlessAborted(work: Promise<Response>, signal: AbortSignal): Promise<Response> {
  return new Promise<Response>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    Promise.resolve(work).then(
      (response) => {
        signal.removeEventListener("abort", onAbort);
        if (signal.aborted) release(response);
        resolve(response);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** The reply's body is not ours to read: cancel it, releasing the connection, without waiting. */
function release(response: Response): void {
  try {
    response.body?.cancel().catch(() => undefined);
  } catch {
    // A fetch given by the caller may return something that only looks like a Response.
  }
}

/** An error's message, and its cause's, for a delivery failure's message. Never throws: a caller's fetch or clock may throw anything. */
function describe(error: unknown): string {
  let cause = "";
  try {
    if (error instanceof Error && error.cause instanceof Error) cause = ` (${describeError(error.cause)})`;
  } catch {
    // A cause that cannot be read is left out.
  }
  return `${describeError(error)}${cause}`;
}

/** HMAC-SHA256 over `<timestamp>.<body bytes>`, hex. */
function signature(key: Uint8Array, timestampMs: number, body: string | Uint8Array): Buffer {
  return createHmac("sha256", key).update(`${timestampMs}.`).update(body).digest();
}

function signatureHeader(key: Uint8Array, timestampMs: number, body: string): string {
  return `t=${timestampMs},v1=${signature(key, timestampMs, body).toString("hex")}`;
}

/** Options of {@link verifyWebhookSignature}. */
export interface VerifyWebhookOptions {
  /** The secret the resolver signs with. */
  readonly secret: string | Uint8Array;
  /**
   * The `loopctl-signature` header as received: `req.headers[WEBHOOK_SIGNATURE_HEADER]` of a
   * `node:http` request will do. A header sent more than once (an array) never verifies.
   */
  readonly header: string | readonly string[] | null | undefined;
  /** The request body exactly as received (before any JSON parsing). */
  readonly body: string | Uint8Array;
  /** How far the timestamp may be from `nowMs`, finite and non-negative. @default {@link WEBHOOK_TOLERANCE_MS} (5 minutes) */
  readonly toleranceMs?: number;
  /** The receiver's clock, epoch ms, finite and non-negative. @default Date.now() */
  readonly nowMs?: number;
}

/**
 * Checks a {@link WebhookResolver} delivery on the receiving side: the
 * header parses, its timestamp is within `toleranceMs` of now (an old
 * delivery replayed is refused), and its HMAC matches the body, compared in
 * constant time. Returns true only if all hold.
 *
 * @throws {ServerInputError} for a body that is not a string or bytes, a
 * `toleranceMs` or `nowMs` that is not a finite non-negative number (a NaN
 * would turn the replay check off), or a `secret` that is not a string or
 * bytes of at least 16 bytes (an unset environment variable would refuse
 * every delivery, with no word why).
 */
export function verifyWebhookSignature(given: VerifyWebhookOptions): boolean {
  const where = "verifyWebhookSignature";
  const options = readOptions(given, ["secret", "header", "body", "toleranceMs", "nowMs"], inputFault(where));
  const body: unknown = options.body;
  if (typeof body !== "string" && !(body instanceof Uint8Array)) {
    throw new ServerInputError(where, "body", "must be the raw request body, as a string or bytes");
  }
  const toleranceMs: unknown = options.toleranceMs ?? WEBHOOK_TOLERANCE_MS;
  if (!isFiniteNonNegative(toleranceMs)) {
    throw new ServerInputError(
      where,
      "toleranceMs",
      `must be a finite non-negative number, got ${shownValue(toleranceMs)}`,
    );
  }
  const nowMs: unknown = options.nowMs ?? Date.now();
  if (!isFiniteNonNegative(nowMs)) {
    throw new ServerInputError(where, "nowMs", `must be a finite non-negative number, got ${shownValue(nowMs)}`);
  }
  // An unset or cut secret would refuse every delivery with no word why.
  if (!isStrongSecret(options.secret)) {
    throw new ServerInputError(where, "secret", `must be a string or bytes of at least ${MIN_SECRET_BYTES} bytes`);
  }
  // Only one header is one signature: an array (the header sent twice) would otherwise be read as its text.
  const header: unknown = options.header;
  if (typeof header !== "string") return false;
  const match = /^t=(\d{1,16}),v1=([0-9a-f]{64})$/.exec(header);
  if (match === null) return false;
  const timestampMs = Number(match[1]);
  // Written so that anything not a number in range refuses.
  if (!(Math.abs(nowMs - timestampMs) <= toleranceMs)) return false;
  const expected = signature(secretBytes(options.secret), timestampMs, body);
  return timingSafeEqual(Buffer.from(match[2] as string, "hex"), expected);
}

function isFiniteNonNegative(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value) && value >= 0;
}
