import { timingSafeEqual } from "node:crypto";
import { PendingAskSchema } from "../ask/types.js";
import type { PendingAsk } from "../ask/types.js";
import { askDigest } from "../ask/ask-digest.js";
import { shownValue } from "../errors.js";
import { ServerInputError } from "./errors.js";
import { httpUrl } from "./http-url.js";
import { inputFault, readOptions } from "./options.js";
import { hmacHex, isStrongSecret, MIN_SECRET_BYTES, secretBytes } from "./secrets.js";

/** Options of {@link signAnswerLink}. */
export interface AnswerLinkOptions {
  /** The server's `linkSecret`: a string or bytes of at least 16 bytes (32 random bytes are best). */
  readonly secret: string | Uint8Array;
  /**
   * The URL the approval server is reached at, as the person clicking will
   * reach it (e.g. `https://approvals.example.com/loopctl/`). Links go to
   * `answer` under it.
   */
  readonly baseUrl: string | URL;
  /** How long the links work, in milliseconds from `nowMs`. */
  readonly ttlMs: number;
  /** The time the links are made at, epoch ms. @default Date.now() */
  readonly nowMs?: number;
}

/** A pair of answer links for one ask: each approves or denies it once, until `expiresAtMs`. */
export interface AnswerLinks {
  readonly approve: string;
  readonly deny: string;
  readonly expiresAtMs: number;
}

/** The verdict a signed link carries. */
export type LinkVerdict = "approve" | "deny";

/** What a link's query says, once checked. `askDigest` is the {@link askDigest} of the ask it was made for. */
export type LinkCheck =
  | {
      readonly type: "valid";
      readonly askId: string;
      readonly askDigest: string;
      readonly verdict: LinkVerdict;
      readonly expiresAtMs: number;
    }
  | { readonly type: "expired"; readonly askId: string; readonly verdict: LinkVerdict }
  | { readonly type: "invalid" };

/** The path, relative to the server's base URL, that signed links go to. */
export const ANSWER_PATH = "answer";

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const EXPIRES = /^[0-9]{1,16}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;

function signedText(askId: string, digest: string, verdict: LinkVerdict, expiresAtMs: number): string {
  return `loopctl answer link v2\n${askId}\n${digest}\n${verdict}\n${expiresAtMs}`;
}

/**
 * Makes the approve and deny links for `ask`, to send by chat or mail. Each
 * carries an HMAC-SHA256 over the ask (its id and a SHA-256 of every field),
 * its verdict and its expiry, so it cannot be altered or made for another
 * ask, nor answer another call that holds the ask's id later (ids from a
 * seeded generator repeat across runs). Opening one (GET) only shows a
 * confirmation page, since chat and mail previewers fetch every URL they
 * see; the button on that page (a POST) answers. A link works until it
 * expires, and answers at most once: an ask takes one answer, and the
 * server remembers a link that answered (and its twin) until it expires, so
 * the same call parked anew under the ask's id is not answered by it again.
 *
 * The approval server that receives them must be created with
 * `linkSecret` equal to `secret`.
 *
 * @throws {ServerInputError} for an ask that is not a `PendingAsk` (naming
 * the field at fault), a weak secret, a base URL that is not http(s), or a
 * ttl that is not a positive integer.
 *
 * @example
 * ```ts
 * const links = signAnswerLink(ask, { secret: process.env.LINK_SECRET!, baseUrl: "https://approvals.example.com/", ttlMs: 15 * 60_000 });
 * await chat.post(`${ask.prompt}\nApprove: ${links.approve}\nDeny: ${links.deny}`);
 * ```
 */
export function signAnswerLink(ask: PendingAsk, given: AnswerLinkOptions): AnswerLinks {
  const where = "signAnswerLink";
  const askId = (ask as { id?: unknown } | null)?.id;
  if (typeof askId !== "string" || !UUID.test(askId)) throw new ServerInputError(where, "ask.id", "must be a UUID");
  const parsed = PendingAskSchema.safeParse(ask);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = ["ask", ...(issue?.path ?? []).map(String)].join(".");
    throw new ServerInputError(
      where,
      field,
      `is invalid (${issue?.message ?? "not a PendingAsk"}): a link is signed over the whole PendingAsk`,
    );
  }
  const digest = askDigest(parsed.data);
  const options = readOptions(
    given,
    ["secret", "baseUrl", "ttlMs", "nowMs"],
    inputFault(where),
    "an object: { secret, baseUrl, ttlMs }",
  );
  if (!isStrongSecret(options.secret)) {
    throw new ServerInputError(where, "secret", `must be a string or bytes of at least ${MIN_SECRET_BYTES} bytes`);
  }
  const ttlMs = linkTtlMs(where, "ttlMs", options.ttlMs);
  const nowMs = options.nowMs ?? Date.now();
  if (!Number.isSafeInteger(nowMs) || nowMs < 0) {
    throw new ServerInputError(where, "nowMs", `must be a non-negative integer, got ${shownValue(nowMs)}`);
  }
  const base = linkBaseUrl(where, "baseUrl", options.baseUrl);
  const key = secretBytes(options.secret);
  const expiresAtMs = nowMs + ttlMs;
  const link = (verdict: LinkVerdict): string => {
    const url = new URL(ANSWER_PATH, base);
    url.searchParams.set("ask", askId);
    url.searchParams.set("verdict", verdict);
    url.searchParams.set("expires", String(expiresAtMs));
    url.searchParams.set("digest", digest);
    url.searchParams.set("sig", hmacHex(key, signedText(askId, digest, verdict, expiresAtMs)));
    return url.href;
  };
  return { approve: link("approve"), deny: link("deny"), expiresAtMs };
}

/**
 * A links' base URL as links are made under it: http(s), the path ending in
 * a slash, no query or fragment.
 * @throws {ServerInputError} naming `option` (`where` is the caller), for a
 * URL with a user name or password too: every link, and so every chat or
 * mail message that carries one, would hold it.
 */
export function linkBaseUrl(where: string, option: string, baseUrl: unknown): URL {
  const base = httpUrl(where, option, baseUrl);
  if (base.username !== "" || base.password !== "") {
    throw new ServerInputError(where, option, "must not carry a user name or password: it would be in every link sent");
  }
  if (!base.pathname.endsWith("/")) base.pathname = `${base.pathname}/`;
  base.search = "";
  base.hash = "";
  return base;
}

/**
 * A links' lifetime: a positive integer of milliseconds.
 * @throws {ServerInputError} naming `option` (`where` is the caller).
 */
export function linkTtlMs(where: string, option: string, ttlMs: unknown): number {
  if (typeof ttlMs !== "number" || !Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new ServerInputError(where, option, `must be a positive integer of milliseconds, got ${shownValue(ttlMs)}`);
  }
  return ttlMs;
}

/** Checks a link's query against `key`: the signature first (in constant time), then the expiry. */
export function checkAnswerLink(query: URLSearchParams, key: Uint8Array, nowMs: number): LinkCheck {
  const askId = query.get("ask") ?? "";
  const verdict = query.get("verdict");
  const expires = query.get("expires") ?? "";
  const digest = query.get("digest") ?? "";
  const sig = query.get("sig") ?? "";
  if (
    !UUID.test(askId) ||
    (verdict !== "approve" && verdict !== "deny") ||
    !EXPIRES.test(expires) ||
    !SHA256_HEX.test(digest) ||
    !SHA256_HEX.test(sig)
  ) {
    return { type: "invalid" };
  }
  const expiresAtMs = Number(expires);
  const expected = Buffer.from(hmacHex(key, signedText(askId, digest, verdict, expiresAtMs)), "hex");
  if (!timingSafeEqual(Buffer.from(sig, "hex"), expected)) return { type: "invalid" };
  if (nowMs > expiresAtMs) return { type: "expired", askId, verdict };
  return { type: "valid", askId, askDigest: digest, verdict, expiresAtMs };
}

/** How many answered links a server remembers at most; past it, the oldest go first. */
const MAX_SPENT_LINKS = 4096;

/**
 * The links that answered an ask, kept until they expire, so that one never
 * answers again: not even the same call parked anew under its id (a seeded
 * run again), whose every field, and so its digest, is the same. A link's
 * twin (the other verdict, signed with it) shares its ask digest and expiry,
 * and is spent with it; links signed for that call anew are not.
 */
export class SpentLinks {
  /** Expiry (epoch ms) by `<ask digest> <expiry>`, oldest first. */
  readonly #links = new Map<string, number>();

  has(check: { readonly askDigest: string; readonly expiresAtMs: number }): boolean {
    return this.#links.has(spentKey(check));
  }

  add(check: { readonly askDigest: string; readonly expiresAtMs: number }, nowMs: number): void {
    if (this.#links.size >= MAX_SPENT_LINKS) {
      for (const [key, expiresAtMs] of this.#links) if (expiresAtMs < nowMs) this.#links.delete(key);
    }
    if (this.#links.size >= MAX_SPENT_LINKS) {
      const oldest = this.#links.keys().next();
      if (oldest.done !== true) this.#links.delete(oldest.value);
    }
    this.#links.set(spentKey(check), check.expiresAtMs);
  }
}

function spentKey(check: { readonly askDigest: string; readonly expiresAtMs: number }): string {
  return `${check.askDigest} ${check.expiresAtMs}`;
}
