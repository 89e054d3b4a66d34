import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ApprovalChannel } from "loopctl/ask";
import type { AskInbox, AskResolution, PendingAsk } from "loopctl/ask";
import { ServerInputError, createApprovalServer, signAnswerLink } from "loopctl/server";
import type { ApprovalServer } from "loopctl/server";
import { flush, makeAsk, outcomeNow, outliveEndings, track } from "./support/ask-fixtures.js";
import { BASE_URLS_WITH_CREDENTIALS, request } from "./support/http-client.js";
import type { Reply } from "./support/http-client.js";

const SECRET = "link-secret-of-at-least-32-bytes!";
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Setup {
  readonly server: ApprovalServer;
  readonly channel: ApprovalChannel;
  readonly ask: PendingAsk;
  readonly parked: Promise<AskResolution>;
  links(options?: { ttlMs?: number; nowMs?: number; secret?: string }): { approve: string; deny: string };
}

async function setup(
  prompt = "Deploy 1.4.0 to production?",
  options: Partial<Parameters<typeof createApprovalServer>[0]> = {},
  tool = "deploy",
): Promise<Setup> {
  const [channel, approver] = ApprovalChannel.pair(4);
  const server = await createApprovalServer({ approver, linkSecret: SECRET, ...options });
  cleanups.push(
    () => approver.close(),
    () => server.close(),
  );
  const ask = makeAsk(1, { tool, prompt });
  const parked = channel.resolve(ask, { signal: new AbortController().signal });
  parked.catch(() => undefined);
  await until(async () => (await listed(server)) === 1);
  return {
    server,
    channel,
    ask,
    parked,
    links: ({ ttlMs = 60_000, nowMs, secret = SECRET } = {}) =>
      signAnswerLink(ask, { secret, baseUrl: server.url, ttlMs, ...(nowMs === undefined ? {} : { nowMs }) }),
  };
}

/** A server over a channel's approver whose `resolve` is `resolve`, with one ask parked and listed. */
async function serveParked(
  resolve: AskInbox["resolve"],
  options: Partial<Parameters<typeof createApprovalServer>[0]> = {},
): Promise<{ server: ApprovalServer; ask: PendingAsk; parked: Promise<AskResolution> }> {
  const [channel, approver] = ApprovalChannel.pair(4);
  const inbox: AskInbox = {
    next: (next) => approver.next(next),
    ended: (id, ended) => approver.ended(id, ended),
    resolve,
    close: () => approver.close(),
  };
  const server = await createApprovalServer({ approver: inbox, linkSecret: SECRET, ...options });
  cleanups.push(
    () => approver.close(),
    () => server.close(),
  );
  const ask = makeAsk(1);
  const parked = channel.resolve(ask, { signal: new AbortController().signal });
  parked.catch(() => undefined);
  await until(async () => (await listed(server)) === 1);
  return { server, ask, parked };
}

const post = (url: string, headers: Record<string, string> = {}, body = ""): Promise<Reply> =>
  request(url, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", ...headers }, body });

/** The page's heading (its <title> and <h1> agree) and its text, entities decoded. */
function shown(reply: Reply): { readonly title: string; readonly text: string } {
  const decode = (html: string): string =>
    html.replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)));
  const title = /<title>([^<]*)<\/title>/.exec(reply.text)?.[1] ?? "";
  expect(/<h1>([^<]*)<\/h1>/.exec(reply.text)?.[1], "the heading is the title").toBe(title);
  return { title: decode(title), text: decode(/<p>([^<]*)<\/p>/.exec(reply.text)?.[1] ?? "") };
}

/** Polls (no timing assumption) until `check` holds. */
async function until(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (await check()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error("condition never held");
}

const listed = async (server: ApprovalServer): Promise<number> =>
  (
    (await request(`${server.url}api/asks`, { headers: { authorization: `Bearer ${server.token}` } })).json as {
      asks: unknown[];
    }
  ).asks.length;

describe("signAnswerLink", () => {
  it("makes an approve and a deny link under <baseUrl>/answer, signed over the ask, verdict and expiry", () => {
    const ask = makeAsk(1);
    const links = signAnswerLink(ask, {
      secret: SECRET,
      baseUrl: "https://approvals.example.com/loopctl",
      ttlMs: 1000,
      nowMs: 5000,
    });
    expect(links.expiresAtMs).toBe(6000);
    const approve = new URL(links.approve);
    expect(`${approve.origin}${approve.pathname}`).toBe("https://approvals.example.com/loopctl/answer");
    expect(Object.fromEntries(approve.searchParams)).toEqual({
      ask: ask.id,
      verdict: "approve",
      expires: "6000",
      digest: expect.stringMatching(/^[0-9a-f]{64}$/) as string,
      sig: expect.stringMatching(/^[0-9a-f]{64}$/) as string,
    });
    // Every field of the ask is signed: another call under the same id gets other links.
    const other = signAnswerLink(
      { ...ask, prompt: `${ask.prompt} ` },
      { secret: SECRET, baseUrl: "https://approvals.example.com/loopctl/", ttlMs: 1000, nowMs: 5000 },
    );
    expect(new URL(other.approve).searchParams.get("digest")).not.toBe(approve.searchParams.get("digest"));
    expect(new URL(other.approve).searchParams.get("sig")).not.toBe(approve.searchParams.get("sig"));
    const deny = new URL(links.deny);
    expect(deny.searchParams.get("verdict")).toBe("deny");
    expect(deny.searchParams.get("sig")).not.toBe(approve.searchParams.get("sig"));
    // Deterministic: the same inputs sign the same way; another secret does not.
    expect(
      signAnswerLink(ask, {
        secret: SECRET,
        baseUrl: "https://approvals.example.com/loopctl/",
        ttlMs: 1000,
        nowMs: 5000,
      }).approve,
    ).toBe(links.approve);
    expect(
      signAnswerLink(ask, {
        secret: `${SECRET}x`,
        baseUrl: "https://approvals.example.com/loopctl/",
        ttlMs: 1000,
        nowMs: 5000,
      }).approve,
    ).not.toBe(links.approve);
  });

  it("refuses bad input with a ServerInputError naming it", () => {
    const ask = makeAsk(1);
    const ok = { secret: SECRET, baseUrl: "http://127.0.0.1:1/", ttlMs: 1000 };
    const cases: [unknown, unknown, string][] = [
      [ask, undefined, "options"],
      [ask, "http://127.0.0.1:1/", "options"],
      [{ id: "nope" }, ok, "ask.id"],
      [null, ok, "ask.id"],
      [{ id: ask.id }, ok, "ask.sessionId"],
      [{ ...ask, tool: "" }, ok, "ask.tool"],
      [{ ...ask, argsDigest: "xyz" }, ok, "ask.argsDigest"],
      [ask, { ...ok, secret: "short" }, "secret"],
      [ask, { ...ok, secret: new Uint8Array(8) }, "secret"],
      [ask, { ...ok, baseUrl: "not a url" }, "baseUrl"],
      [ask, { ...ok, baseUrl: "javascript:alert(1)" }, "baseUrl"],
      // Neither a string nor a URL: one that cannot even be made a string is named too, not a TypeError.
      [ask, { ...ok, baseUrl: Object.create(null) as unknown }, "baseUrl"],
      [ask, { ...ok, baseUrl: 8080 }, "baseUrl"],
      [ask, { ...ok, ttlMs: 0 }, "ttlMs"],
      [ask, { ...ok, ttlMs: 1.5 }, "ttlMs"],
      [ask, { ...ok, nowMs: -1 }, "nowMs"],
    ];
    for (const [bad, options, option] of cases) {
      let error: unknown;
      try {
        signAnswerLink(bad as PendingAsk, options as typeof ok);
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe(option);
      expect((error as ServerInputError).code).toBe("SERVER_INPUT_INVALID");
    }
  });

  it("refuses a key that is none of its options, naming it, and an AbortSignal or an array in place of its options", () => {
    const ask = makeAsk(1);
    const ok = { secret: SECRET, baseUrl: "http://127.0.0.1:1/", ttlMs: 1000 };
    for (const [options, option, message] of [
      [{ ...ok, ttl: 1000 }, "ttl", "signAnswerLink: unknown option 'ttl' (did you mean ttlMs?)"],
      [{ ...ok, nowMS: 5 }, "nowMS", "signAnswerLink: unknown option 'nowMS' (did you mean nowMs?)"],
      [
        { ...ok, verdict: "approve" },
        "verdict",
        "signAnswerLink: unknown option 'verdict' (the options are secret, baseUrl, ttlMs and nowMs)",
      ],
      [
        new AbortController().signal,
        "options",
        "signAnswerLink: options must be an object: { secret, baseUrl, ttlMs }, got an AbortSignal",
      ],
      [[ok], "options", "signAnswerLink: options must be an object: { secret, baseUrl, ttlMs }, got an array"],
    ] as const) {
      let error: unknown;
      try {
        signAnswerLink(ask, options as never);
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe(option);
      expect((error as Error).message).toBe(message);
    }
  });

  it("refuses a baseUrl with a user name or password without repeating it: it would be in every chat or mail message that carries a link", () => {
    for (const baseUrl of BASE_URLS_WITH_CREDENTIALS) {
      let error: unknown;
      try {
        signAnswerLink(makeAsk(1), { secret: SECRET, baseUrl, ttlMs: 1000 });
      } catch (e) {
        error = e;
      }
      expect(error, String(baseUrl)).toBeInstanceOf(ServerInputError);
      expect((error as ServerInputError).option).toBe("baseUrl");
      expect((error as ServerInputError).message).toBe(
        "signAnswerLink: baseUrl must not carry a user name or password: it would be in every link sent",
      );
    }
  });
});

describe("a server with the same linkSecret", () => {
  it("GET shows a confirmation page and never answers, however often a previewer fetches it", async () => {
    const { links, parked } = await setup();
    for (let i = 0; i < 5; i++) {
      const page = await request(links().approve);
      expect(page.status).toBe(200);
      expect(page.text).toContain("Approve this call?");
      expect(page.text).toContain('<form method="post">');
      expect(page.text).toContain("Deploy 1.4.0 to production?");
      expect(page.headers["content-security-policy"]).toContain("script-src 'self'");
      expect(page.headers["content-security-policy"]).toMatch(/style-src 'sha256-[A-Za-z0-9+/]+=*'/);
      expect(page.text).not.toContain("<script");
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("shows the ask's text as text on the confirmation page", async () => {
    const hostile = `<img src=x onerror="alert(1)"> & <script>alert(2)</script>`;
    const { links } = await setup(hostile);
    const page = await request(links().deny);
    expect(page.text).not.toContain("<img");
    expect(page.text).not.toContain("<script>");
    expect(page.text).toContain(
      "&#60;img src=x onerror=&#34;alert(1)&#34;&#62; &#38; &#60;script&#62;alert(2)&#60;/script&#62;",
    );
    expect(page.text).toContain('name="reason"');
  });

  it("marks characters that render as nothing though they are no format character, as the CLI escapes them", async () => {
    // A Hangul filler, a combining grapheme joiner, and text smuggled in variation selectors
    // (U+E0100 onwards, one byte each) after an emoji: none shows, all are default-ignorable.
    const smuggled = [..."rm -rf"].map((c) => String.fromCodePoint(0xe0100 + c.charCodeAt(0) - 16)).join("");
    const { links } = await setup(`Read\u3164 the file\u034f? \u{1f600}${smuggled}\ud800`);
    const page = await request(links().approve);
    const marks = [...page.text.matchAll(/<span class="hidden-char"[^>]*>(U\+[0-9A-F]+)<\/span>/g)].map((m) => m[1]);
    expect(marks).toEqual([
      "U+3164",
      "U+034F",
      "U+E0162",
      "U+E015D",
      "U+E0110",
      "U+E011D",
      "U+E0162",
      "U+E0156",
      "U+D800",
    ]);
    expect(page.text).not.toMatch(/\p{Default_Ignorable_Code_Point}/u);
  });

  it("marks a letter that passes for a Latin one in a word of Latin letters, as the console does", async () => {
    // Cyrillic а, Greek ο, Armenian օ, Cherokee Ꭺ, Coptic ⲟ and Lisu ꓮ, each in a word that also
    // holds Latin letters; words all of one script (Russian, Greek) keep their letters.
    const prompt = "Open p\u0430ypal.com, g\u03bfogle, g\u0585, \u13aaB, l\u2c9fl and \ua4eepple? Привет, мир: αβγ.";
    const { links } = await setup(prompt, {}, "re\u0430d_file");
    const { approve, deny } = links();
    for (const url of [approve, deny]) {
      const page = await request(url);
      expect(page.status).toBe(200);
      const marks = [...page.text.matchAll(/<span class="hidden-char" title="([^"]*)">(U\+[0-9A-F]+)<\/span>/g)];
      expect(marks.map((m) => m[2])).toEqual(["U+0430", "U+0430", "U+03BF", "U+0585", "U+13AA", "U+2C9F", "U+A4EE"]);
      for (const m of marks)
        expect(m[1]).toBe("a letter of another script that looks like a Latin one, in a word of Latin letters");
      expect(page.text).toContain(
        `<code>re<span class="hidden-char" title="${marks[0]?.[1]}">U+0430</span>d_file</code>`,
      );
      expect(page.text).not.toMatch(/[\u0430\u03bf\u0585\u13aa\u2c9f\ua4ee]/u);
      expect(page.text).toContain("Привет, мир: αβγ.");
    }
  });

  it("keeps the letters of a word all of one script, where a hidden character ends a word", async () => {
    const { links } = await setup("Ρеаd \u0441\u200bat \u0430\u202e?", {}, "файл_чтения");
    const page = await request(links().approve);
    const marks = [...page.text.matchAll(/<span class="hidden-char"[^>]*>(U\+[0-9A-F]+)<\/span>/g)].map((m) => m[1]);
    // "Ρеаd": Greek Ρ and Cyrillic е, а beside a Latin d; "\u0441" then a zero width space: two words,
    // and "\u0441" alone is all Cyrillic; "at" is Latin; "\u0430" alone is all Cyrillic.
    expect(marks).toEqual(["U+03A1", "U+0435", "U+0430", "U+200B", "U+202E"]);
    expect(page.text).toContain("<code>файл_чтения</code>");
  });

  it("POST answers once: 200, then 409 for the same link replayed and for its opposite", async () => {
    const { links, parked } = await setup();
    const { approve, deny } = links();
    const first = await post(approve);
    expect(first.status).toBe(200);
    expect(first.text).toContain("Approved");
    await expect(parked).resolves.toEqual({ type: "approve" });
    const replay = await post(approve);
    expect(replay.status).toBe(409);
    expect(replay.text).toContain("already ended");
    expect((await post(deny)).status).toBe(409);
    expect((await request(approve)).status).toBe(409);
  });

  it("a link answers only the ask it was made for, not another call that holds its id now", async () => {
    const { links, parked, ask, server, channel } = await setup();
    const { approve, deny } = links();
    expect((await post(deny)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny" });
    // Ids from a seeded generator repeat across runs: the same id, another call. A channel refuses an
    // id among its last endings: past them, the id parks again.
    await outliveEndings(channel);
    const now = { ...ask, tool: "delete_file", prompt: "Delete the whole home folder?" };
    const second = channel.resolve(now, { signal: new AbortController().signal });
    second.catch(() => undefined);
    await until(async () => (await listed(server)) === 1);
    for (const reply of [await request(approve), await post(approve)]) {
      expect(reply.status).toBe(409);
      expect(shown(reply)).toEqual({
        title: "The ask changed",
        text:
          "this link was made for an earlier call under this ask's id, and another call holds the id now; " +
          "the link cannot answer it, and nothing was answered",
      });
      expect(reply.text).not.toContain("Delete the whole home folder?");
      expect(reply.text).not.toContain("<form");
    }
    expect((await outcomeNow(second)).state).toBe("pending");
    // The call's own links answer it.
    const fresh = signAnswerLink(now, { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 });
    expect((await request(fresh.approve)).text).toContain("Delete the whole home folder?");
    expect((await post(fresh.deny)).status).toBe(200);
    await expect(second).resolves.toEqual({ type: "deny" });
  });

  it("a link that answered never answers again, nor its twin: not even the same call parked anew under its id", async () => {
    const { links, parked, ask, server, channel } = await setup();
    const { approve, deny } = links();
    expect((await post(deny)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny" });
    // A seeded run again: the same id and every field the same, so the same digest the links were signed over.
    await outliveEndings(channel);
    const again = channel.resolve(ask, { signal: new AbortController().signal });
    again.catch(() => undefined);
    await until(async () => (await listed(server)) === 1);
    for (const reply of [await request(approve), await post(approve), await request(deny), await post(deny)]) {
      expect(reply.status).toBe(409);
      expect(shown(reply)).toEqual({
        title: "Link already used",
        text: "this link, or its twin, already answered this ask; a link answers once, and nothing was answered",
      });
      expect(reply.text).not.toContain("<form");
    }
    expect((await outcomeNow(again)).state).toBe("pending");
    // Links signed for the call anew answer it.
    const fresh = links({ ttlMs: 60_001 });
    expect((await post(fresh.approve)).status).toBe(200);
    await expect(again).resolves.toEqual({ type: "approve" });
  });

  it("a deny link carries the reason typed on its page", async () => {
    const { links, parked } = await setup();
    const reply = await post(links().deny, {}, "reason=not+on+a+Friday");
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "not on a Friday" });
  });

  it("a reason sent as anything but a form is refused with 415 and answers nothing, not read as no reason", async () => {
    const { links, parked } = await setup();
    const watched = track(parked);
    const bodies: [string, string][] = [
      ["application/json", JSON.stringify({ reason: "not on a Friday" })],
      [
        "multipart/form-data; boundary=b",
        '--b\r\nContent-Disposition: form-data; name="reason"\r\n\r\nnot on a Friday\r\n--b--\r\n',
      ],
      ["text/plain", "reason=not on a Friday"],
    ];
    for (const [type, body] of bodies) {
      const reply = await request(links().deny, { method: "POST", headers: { "content-type": type }, body });
      expect([type, reply.status, shown(reply)]).toEqual([
        type,
        415,
        {
          title: "Not a form",
          text: "send the reason as application/x-www-form-urlencoded, as the link's page does; nothing was answered",
        },
      ]);
      await flush();
      expect(watched.outcome.state, type).toBe("pending");
    }
    // A POST with no body needs no type (fetch(link, { method: "POST" })), and a form's may name its charset.
    const reply = await post(
      links().deny,
      { "content-type": "Application/X-WWW-Form-Urlencoded; charset=UTF-8" },
      "reason=no",
    );
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "no" });
  });

  it("an approve link POSTed with no body and no Content-Type answers", async () => {
    const { links, parked } = await setup();
    const reply = await request(links().approve, { method: "POST" });
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });

  it("a reason cut to 500 characters is never cut inside a character: no half of one reaches the call", async () => {
    const { links, parked } = await setup();
    // Sent by a client that ignores the page's maxlength: the 500th UTF-16 unit is the first half of 😀.
    const reason = `${"a".repeat(499)}\u{1F600} and more`;
    const reply = await post(links().deny, {}, `reason=${encodeURIComponent(reason)}`);
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "a".repeat(499) });
  });

  it("a reason that is not valid UTF-8, in raw bytes or in %-escapes, is refused with 400 and answers nothing", async () => {
    const { links, parked } = await setup();
    const watched = track(parked);
    const bodies: [string, Buffer][] = [
      ["raw 0xC3 0x28", Buffer.from([...Buffer.from("reason=no "), 0xc3, 0x28])],
      ["a raw lone 0xFF", Buffer.from([...Buffer.from("reason=no "), 0xff])],
      ["a raw overlong '/'", Buffer.from([...Buffer.from("reason=no "), 0xc0, 0xaf])],
      ["%C3%28", Buffer.from("reason=no+%C3%28")],
      ["a lone %FF", Buffer.from("reason=no+%ff")],
      ["an overlong %C0%AF", Buffer.from("reason=no+%C0%AF")],
      ["a sequence split by &", Buffer.from("reason=no+%C3&x=%A9")],
    ];
    for (const [label, body] of bodies) {
      const reply = await request(links().deny, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body,
      });
      expect([label, reply.status, shown(reply)]).toEqual([
        label,
        400,
        { title: "Not valid UTF-8", text: "the request body is not valid UTF-8" },
      ]);
      await flush();
      expect(watched.outcome.state, label).toBe("pending");
    }
    // A stray % that escapes nothing is text, as a browser's form never sends it but URLSearchParams reads it.
    const reply = await post(links().deny, {}, "reason=caf%C3%A9+100%+%E2%98%95");
    expect(reply.status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny", reason: "café 100% ☕" });
  });

  it("an expired link is refused with 410 and answers nothing", async () => {
    const { links, parked } = await setup();
    const old = links({ ttlMs: 1000, nowMs: Date.now() - 60_000 });
    expect((await request(old.approve)).status).toBe(410);
    const reply = await post(old.approve);
    expect(reply.status).toBe(410);
    expect(reply.text).toContain("expired");
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("a link that expires while its POST's body is still arriving answers nothing: 410 once the body is in", async () => {
    let clock = 1_000_000;
    const { server, links, parked } = await setup(undefined, { now: () => clock });
    const link = new URL(links({ ttlMs: 1_000, nowMs: clock }).approve);
    const body = "reason=";
    const socket = connect(server.port, "127.0.0.1");
    cleanups.push(() => void socket.destroy());
    let received = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => (received += chunk));
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    socket.write(
      `POST ${link.pathname}${link.search} HTTP/1.1\r\nHost: 127.0.0.1:${server.port}\r\n` +
        `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n` +
        `Connection: close\r\n\r\n`,
    );
    // The link is checked, current, on its headers; it runs out before its body is all in.
    await new Promise((resolve) => setTimeout(resolve, 100));
    clock += 2_000;
    socket.write(body);
    await closed;
    expect(received).toMatch(/^HTTP\/1\.1 410 /);
    expect(received).toContain("this answer link has expired; nothing was answered");
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("a server whose clock gives no number answers no link: an expired one is not taken for current", async () => {
    const errors: unknown[] = [];
    const { links, parked } = await setup(undefined, {
      now: () => Number.NaN,
      onError: (error) => void errors.push(error),
    });
    const old = links({ ttlMs: 1000, nowMs: Date.now() - 60_000 });
    expect((await request(old.approve)).status).toBe(500);
    expect((await post(old.approve)).status).toBe(500);
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect(String(errors[0])).toContain("now() returned NaN");
  });

  it("a forged or altered link is refused with 403 and answers nothing", async () => {
    const { links, parked, ask, server } = await setup();
    const { approve, deny } = links();
    const url = new URL(approve);
    const tampered = (edit: (u: URL) => void): string => {
      const copy = new URL(url);
      edit(copy);
      return copy.href;
    };
    const forged = [
      tampered((u) => u.searchParams.set("sig", "0".repeat(64))),
      tampered((u) => u.searchParams.set("verdict", "deny")),
      tampered((u) => u.searchParams.set("expires", String(Number(u.searchParams.get("expires")) + 86_400_000))),
      tampered((u) => u.searchParams.set("ask", makeAsk(2).id)),
      tampered((u) => u.searchParams.set("digest", "0".repeat(64))),
      tampered((u) => u.searchParams.delete("digest")),
      tampered((u) => u.searchParams.delete("sig")),
      tampered((u) => u.searchParams.set("sig", `${u.searchParams.get("sig") ?? ""}00`)),
      links({ secret: "another-secret-of-enough-length" }).approve,
      `${server.url}answer?ask=${ask.id}`,
    ];
    for (const link of forged) {
      expect((await request(link)).status, link).toBe(403);
      expect((await post(link)).status, link).toBe(403);
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect((await post(deny)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "deny" });
  });

  it("needs no token, but the Host check holds, a foreign Origin is refused, and the body limit applies", async () => {
    const { links, parked, server } = await setup();
    const { approve } = links();
    expect((await request(approve, { headers: { host: "evil.example" } })).status).toBe(421);
    expect((await post(approve, { origin: "https://evil.example" })).status).toBe(403);
    expect((await post(approve, {}, `reason=${"x".repeat(20_000)}`)).status).toBe(413);
    expect((await request(approve, { method: "PUT" })).status).toBe(405);
    expect((await outcomeNow(parked)).state).toBe("pending");
    expect((await post(approve, { origin: `http://127.0.0.1:${server.port}` })).status).toBe(200);
  });

  it("404 for a valid link to an ask the server never saw", async () => {
    const { server } = await setup();
    const stranger = signAnswerLink(makeAsk(9), { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 });
    expect((await post(stranger.approve)).status).toBe(404);
  });

  it("a server without linkSecret takes no links", async () => {
    const [, approver] = ApprovalChannel.pair(1);
    const server = await createApprovalServer({ approver });
    cleanups.push(
      () => approver.close(),
      () => server.close(),
    );
    const links = signAnswerLink(makeAsk(1), { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 });
    expect((await request(links.approve)).status).toBe(404);
    expect((await post(links.approve)).status).toBe(404);
  });
});

describe("a refused link's page says what happened", () => {
  it("an answered ask: already approved or denied, by this link or its twin", async () => {
    const first = await setup();
    const { approve, deny } = first.links();
    expect((await post(approve)).status).toBe(200);
    for (const reply of [await post(approve), await post(deny), await request(deny)]) {
      expect(reply.status).toBe(409);
      expect(shown(reply)).toEqual({
        title: "Already approved",
        text: "this ask already ended: it was approved; nothing was changed",
      });
    }
    const second = await setup();
    expect((await post(second.links().deny)).status).toBe(200);
    expect(shown(await post(second.links().approve))).toEqual({
      title: "Already denied",
      text: "this ask already ended: it was denied; nothing was changed",
    });
  });

  it("an ask the agent stopped waiting for: no longer waiting, and nothing answered", async () => {
    const { channel, server } = await setup();
    const ask = makeAsk(2, { tool: "deploy" });
    const stop = new AbortController();
    channel.resolve(ask, { signal: stop.signal }).catch(() => undefined);
    await until(async () => (await listed(server)) === 2);
    stop.abort();
    await until(async () => (await listed(server)) === 1);
    const links = signAnswerLink(ask, { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 });
    for (const reply of [await request(links.approve), await post(links.approve)]) {
      expect(reply.status).toBe(409);
      expect(shown(reply)).toEqual({
        title: "No longer waiting",
        text: "this ask already ended: the agent stopped waiting for it; nothing was answered",
      });
    }
  });

  it("every other refusal names its own cause", async () => {
    const { links, parked, server, ask } = await setup(undefined, { maxBodyBytes: 64 });
    const { approve } = links();
    const forged = new URL(approve);
    forged.searchParams.set("sig", "0".repeat(64));
    const stranger = signAnswerLink(makeAsk(9), { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 });
    const cases: [Reply, number, string, string][] = [
      [await request(approve, { headers: { host: "evil.example" } }), 421, "Wrong address", "Host"],
      [await request(approve, { method: "PUT" }), 405, "Method not allowed", "GET or POST"],
      [await post(approve, { origin: "https://evil.example" }), 403, "Sent from another site", "another site"],
      [await request(forged.href), 403, "Link not valid", "altered or signed with another secret"],
      [await post(forged.href), 403, "Link not valid", "nothing was answered"],
      [await post(links({ ttlMs: 1000, nowMs: Date.now() - 60_000 }).approve), 410, "Link expired", "expired"],
      [await post(stranger.approve), 404, "Ask not found", "does not know this ask"],
      [await post(approve, {}, `reason=${"x".repeat(100)}`), 413, "Too much sent", "at most 64 bytes"],
      [await post(approve, { "content-encoding": "gzip" }, "reason=x"), 415, "Encoding not taken", "as it is"],
    ];
    for (const [reply, status, title, text] of cases) {
      expect(reply.status, title).toBe(status);
      expect(shown(reply).title).toBe(title);
      expect(shown(reply).text).toContain(text);
    }
    expect((await outcomeNow(parked)).state).toBe("pending");

    const [, approver] = ApprovalChannel.pair(1);
    const plain = await createApprovalServer({ approver });
    cleanups.push(
      () => approver.close(),
      () => plain.close(),
    );
    const refused = await request(signAnswerLink(ask, { secret: SECRET, baseUrl: plain.url, ttlMs: 60_000 }).approve);
    expect(refused.status).toBe(404);
    expect(shown(refused)).toEqual({ title: "Links not taken here", text: "this server does not take answer links" });
  });

  it("an approver that fails, or a clock that gives no time: the server's fault, and nothing answered", async () => {
    const { server, ask, parked } = await serveParked(() => Promise.reject(new Error("the queue's database is gone")), {
      onError: () => undefined,
    });
    const reply = await post(signAnswerLink(ask, { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 }).approve);
    expect(reply.status).toBe(503);
    expect(shown(reply)).toEqual({
      title: "Approver unavailable",
      text: "the approver failed before saying whether the answer reached the call; it may have: check the ask before answering again",
    });

    const { links } = await setup(undefined, { now: () => Number.NaN, onError: () => undefined });
    const broken = await request(links().approve);
    expect(broken.status).toBe(500);
    expect(shown(broken).title).toBe("Something went wrong");
    expect((await outcomeNow(parked)).state).toBe("pending");
  });

  it("an answer the approver does not confirm within answerTimeoutMs: sent, not confirmed, and how to find out", async () => {
    const { server, ask, parked } = await serveParked(() => new Promise<boolean>(() => undefined), {
      answerTimeoutMs: 200,
    });
    const reply = await post(signAnswerLink(ask, { secret: SECRET, baseUrl: server.url, ttlMs: 60_000 }).approve);
    expect(reply.status).toBe(504);
    expect(shown(reply)).toEqual({
      title: "Answer not confirmed",
      text:
        "your answer was sent, but the approver did not confirm in time that it reached the call; it may still. " +
        "The console, or this link opened again, shows whether the ask has ended: answer again only if it is " +
        "still waiting",
    });
    expect((await outcomeNow(parked)).state).toBe("pending");
  });
});

/**
 * Sends `head` and the start of a body that never finishes over a raw
 * socket; resolves with everything the server sent once it closes the
 * connection (a server still waiting for the body never does).
 */
function unfinished(port: number, head: string, start: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let reply = "";
    socket.on("data", (chunk: Buffer) => (reply += chunk.toString("latin1")));
    socket.on("error", reject);
    socket.on("end", () => {
      socket.destroy();
      resolve(reply);
    });
    socket.write(`${head}\r\n\r\n${start}`);
  });
}

describe("a link that is not signed, or not current, is refused before its body is read", () => {
  it("a body that never finishes gets the refusal, and the connection closes", async () => {
    const { links, parked, server } = await setup();
    const { approve } = links();
    const forged = new URL(approve);
    forged.searchParams.set("sig", "0".repeat(64));
    const expired = links({ ttlMs: 1000, nowMs: Date.now() - 60_000 }).approve;
    const cases: [string, string][] = [
      [forged.href, "403 Forbidden"],
      [`${server.url}answer`, "403 Forbidden"],
      [`${server.url}answer?ask=x&sig=${"0".repeat(64)}`, "403 Forbidden"],
      [expired, "410 Gone"],
    ];
    for (const [link, status] of cases) {
      const target = new URL(link);
      const head = [
        `POST ${target.pathname}${target.search} HTTP/1.1`,
        `Host: ${target.host}`,
        "Content-Type: application/x-www-form-urlencoded",
      ];
      // Declared within maxBodyBytes, or chunked with no end: either way only its first bytes ever come.
      for (const [framing, start] of [
        ["Content-Length: 1000", "reason="],
        ["Transfer-Encoding: chunked", "7\r\nreason=\r\n"],
      ] as const) {
        const reply = await unfinished(server.port, [...head, framing].join("\r\n"), start);
        expect(reply.split("\r\n")[0], `${link} ${framing}`).toBe(`HTTP/1.1 ${status}`);
        expect(reply.toLowerCase()).toContain("\r\nconnection: close\r\n");
        expect(reply).toContain(status.startsWith("410") ? "<h1>Link expired</h1>" : "<h1>Link not valid</h1>");
      }
    }
    expect((await outcomeNow(parked)).state).toBe("pending");
    // A signed, current link still has its body read, bounded, and answers.
    expect((await post(approve, {}, `reason=${"x".repeat(20_000)}`)).status).toBe(413);
    expect((await post(approve)).status).toBe(200);
    await expect(parked).resolves.toEqual({ type: "approve" });
  });
});
