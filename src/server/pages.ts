import { createHash } from "node:crypto";
import type { AskEnding, PendingAsk, WithdrawnReason } from "../ask/types.js";
import { CONTENT_SECURITY_POLICY, escapeHtml } from "./http.js";
import type { HttpError } from "./http.js";
import type { LinkVerdict } from "./answer-links.js";
import { lookAlikeParts } from "../look-alike.js";

/**
 * The few rules the server's own pages need. They are inline so a page
 * reached by a signed link needs no token for a stylesheet; the policy
 * allows exactly this text by its hash, and still no script at all.
 */
const PAGE_STYLE =
  "body{font:16px/1.5 system-ui,sans-serif;margin:0;padding:2rem 1rem;background:#f6f7f9;color:#1b1f24}" +
  "main{max-width:34rem;margin:0 auto;background:#fff;border:1px solid #d8dde3;border-radius:8px;padding:1.5rem}" +
  "h1{font-size:1.3rem;margin:0 0 1rem}dl{display:grid;grid-template-columns:auto 1fr;gap:.25rem 1rem;margin:0 0 1rem}" +
  "dt{color:#57606a}dd{margin:0;overflow-wrap:anywhere;white-space:pre-wrap}code{font:14px ui-monospace,monospace}" +
  ".tool{max-height:5.6em;overflow-y:auto}.prompt{max-height:min(40vh,24rem);overflow-y:auto}" +
  "label{display:block;margin:0 0 .25rem}input{font:inherit;width:100%;box-sizing:border-box;padding:.4rem;margin:0 0 1rem}" +
  "button{font:inherit;padding:.5rem 1.25rem;border-radius:6px;border:1px solid #1b1f24;cursor:pointer}" +
  ".approve{background:#1a7f37;color:#fff;border-color:#1a7f37}.deny{background:#cf222e;color:#fff;border-color:#cf222e}" +
  "button:focus-visible,input:focus-visible{outline:3px solid #0969da;outline-offset:2px}" +
  ".hidden-char{display:inline-block;margin:0 .1em;padding:0 .2em;border:1px solid #9a6700;border-radius:3px;" +
  "color:#9a6700;font:600 .75em/1.3 ui-monospace,monospace;white-space:nowrap}";

const STYLE_HASH = createHash("sha256").update(PAGE_STYLE).digest("base64");

/** The policy of the server's own pages: the console's, plus their one inline style. */
export const PAGE_CSP = CONTENT_SECURITY_POLICY.replace("style-src 'self'", `style-src 'sha256-${STYLE_HASH}'`);

function page(title: string, body: string, head = ""): string {
  return (
    `<!doctype html><html lang="en"><head><meta charset="utf-8">` +
    `<meta name="viewport" content="width=device-width,initial-scale=1">` +
    `<meta name="referrer" content="same-origin">${head}<title>${escapeHtml(title)}</title>` +
    `<style>${PAGE_STYLE}</style></head><body><main>${body}</main></body></html>`
  );
}

/**
 * A character that renders as nothing or reorders the text around it (a bidi
 * control, a zero-width or tag character, any other control, and every other
 * default-ignorable one: Hangul fillers, variation selectors, which can spell
 * out a message nobody sees) could make an ask read as something else; a lone
 * surrogate shows as U+FFFD, so two names would look alike. So could a letter
 * that passes for a Latin one in a word of Latin letters (see look-alike.ts).
 * Each is shown as a mark naming its code point, as the console shows it and
 * the CLI escapes it. A prompt keeps its line breaks and tabs.
 */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}]|\p{Cs}/gu;

const MARK_TITLES = {
  hidden: "a character that would not show, or would reorder the text around it",
  alike: "a letter of another script that looks like a Latin one, in a word of Latin letters",
} as const;

function mark(char: string, why: keyof typeof MARK_TITLES): string {
  const code = (char.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, "0");
  return `<span class="hidden-char" title="${MARK_TITLES[why]}">U+${code}</span>`;
}

function showHtml(text: string, keepLines = false): string {
  let html = "";
  for (const part of lookAlikeParts(text)) {
    html += part.alike
      ? mark(part.text, "alike")
      : escapeHtml(part.text).replace(HIDDEN, (char) =>
          keepLines && (char === "\n" || char === "\t") ? char : mark(char, "hidden"),
        );
  }
  return html;
}

/**
 * The ask as its page shows it. A tool name or prompt of any length scrolls in
 * a box of its own, so the heading, the start of the prompt and the button
 * stay on one screen: no tail of a long text, far below the heading, can pass
 * for the ask beside the button.
 */
function askDetails(ask: PendingAsk | undefined, askId: string): string {
  if (ask === undefined) return `<dl><dt>Ask</dt><dd><code>${escapeHtml(askId)}</code></dd></dl>`;
  return (
    `<dl><dt>Tool</dt><dd class="tool"><code>${showHtml(ask.tool)}</code></dd>` +
    `<dt>Asks</dt><dd class="prompt">${showHtml(ask.prompt, true)}</dd>` +
    `<dt>Arguments</dt><dd><code>${escapeHtml(ask.argsDigest)}</code> (digest)</dd>` +
    `<dt>Ask</dt><dd><code>${escapeHtml(ask.id)}</code></dd></dl>`
  );
}

/** What a signed link's GET shows: the ask and one button that POSTs the answer. */
export function confirmPage(verdict: LinkVerdict, askId: string, ask: PendingAsk | undefined): string {
  const word = verdict === "approve" ? "Approve" : "Deny";
  const reason =
    verdict === "deny"
      ? `<label for="reason">Reason (optional, shown to the agent's records)</label><input id="reason" name="reason" maxlength="500" autocomplete="off">`
      : "";
  return page(
    `${word} this call?`,
    `<h1>${word} this call?</h1>${askDetails(ask, askId)}` +
      (ask === undefined ? `<p>This server does not list the ask as waiting; it may have ended.</p>` : "") +
      `<form method="post">${reason}<button type="submit" class="${verdict}">${word}</button></form>`,
  );
}

/**
 * What the console's login link answers when another site's page opened it:
 * a page that moves on to the console at once (no script needed). A redirect
 * would not do: a browser sends no `SameSite=Strict` cookie along a redirect
 * chain another site began, and the console would refuse the link just clicked.
 */
export function signInPage(location: string): string {
  const to = escapeHtml(location);
  return page(
    "Signing in",
    `<h1>Signing in</h1><p><a href="${to}">Open the console</a></p>`,
    `<meta http-equiv="refresh" content="0;url=${to}">`,
  );
}

/** The page after a link's POST, or for a link that cannot answer. */
export function messagePage(title: string, text: string): string {
  return page(title, `<h1>${escapeHtml(title)}</h1><p>${escapeHtml(text)}</p>`);
}

/**
 * The heading of the page a refusal gets, by its code: what happened, in a
 * few words. Only the console's own page and the answer links get pages;
 * every other route answers JSON.
 */
const REFUSAL_TITLES: Readonly<Record<string, string>> = {
  bad_request: "Not a valid request",
  unauthorized: "Sign in with the console link",
  forbidden_origin: "Sent from another site",
  method_not_allowed: "Method not allowed",
  misdirected_request: "Wrong address",
  body_too_large: "Too much sent",
  body_not_utf8: "Not valid UTF-8",
  unsupported_content_encoding: "Encoding not taken",
  unsupported_transfer_encoding: "Encoding not taken",
  closing: "Server closing",
  links_disabled: "Links not taken here",
  link_invalid: "Link not valid",
  link_expired: "Link expired",
  ask_changed: "The ask changed",
  ask_ended: "Ask already ended",
  ask_unknown: "Ask not found",
  approver_unavailable: "Approver unavailable",
  answer_unconfirmed: "Answer not confirmed",
  expectation_failed: "Expectation not met",
};

/** The heading of `error`'s page: its own title, else the one for its code. */
export function refusalTitle(error: HttpError): string {
  return (
    error.title ??
    (Object.hasOwn(REFUSAL_TITLES, error.code) ? REFUSAL_TITLES[error.code] : undefined) ??
    "Something went wrong"
  );
}

const WITHDRAWN: Readonly<Record<WithdrawnReason, string>> = {
  expired: "the agent stopped waiting, its deadline passed",
  cancelled: "the agent's run was cancelled",
  closed: "the approver it waited on closed",
  abandoned: "the agent that asked went away",
  unknown: "the agent stopped waiting for it",
};

/**
 * What a link's page says of an ask that already ended, as the server saw it
 * end: answered (by this link's twin, the console, another approver) or
 * withdrawn without an answer. An ending the server does not know (none, or
 * one an inbox made up) says only that it ended.
 */
export function endedText(ending: AskEnding | undefined): { readonly title: string; readonly text: string } {
  if (ending?.type === "answered" && (ending.verdict === "approve" || ending.verdict === "deny")) {
    const word = ending.verdict === "approve" ? "approved" : "denied";
    return {
      title: ending.verdict === "approve" ? "Already approved" : "Already denied",
      text: `this ask already ended: it was ${word}; nothing was changed`,
    };
  }
  if (ending?.type === "withdrawn" && Object.hasOwn(WITHDRAWN, ending.reason)) {
    return {
      title: "No longer waiting",
      text: `this ask already ended: ${WITHDRAWN[ending.reason]}; nothing was answered`,
    };
  }
  return {
    title: "Ask already ended",
    text: "this ask already ended (answered, expired or cancelled); nothing was changed",
  };
}
