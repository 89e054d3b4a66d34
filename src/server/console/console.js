// The loopctl console. Every text that comes from an ask, a grant or a record
// is untrusted (a model or a tool server may have written it): it reaches the
// page only through textContent and attribute values, never as markup.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const asksList = $("asks");
  const template = $("ask-template");
  const status = $("status");
  const announce = $("announce");
  /** id -> { ask, li, receivedLocal, ageMs, timeLeftMs, top, left, holdTimer, heldWhy, endedUnseen } */
  const cards = new Map();
  let cardSerial = 0;
  let liveRecords = false;
  // Whether the server has a grant store to keep a remembered answer in (its grants list says):
  // until it has said so, the remember choices are not offered, and no answer carries one.
  let canRemember = false;
  // How often the server promised to say something on the stream (its first event tells).
  let heartbeatMs = 15_000;
  // While the page is not sure that what it shows is what is pending (the stream went quiet or
  // dropped, and the list has not been re-read since), every card is stale and cannot be answered.
  let offline = true;
  // A card that moved or appeared within this long takes no pointer click: a press aimed at one
  // card must not land on another that slid under the pointer as an ask above it ended.
  const HOLD_MS = 1000;

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function say(text) {
    announce.textContent = text;
  }

  // What became of an ask or of an answer: read out, and shown at the foot of the window, newest
  // first, so that one who pressed Approve, or whose card went as it ended elsewhere, sees it too.
  // The list is no live region: the announcement reads it, once.
  const noticeList = $("notice-list");
  const NOTICES = 3;

  /** Tells `before`, the tool's name as read out, then `after`: its text is what is announced. */
  function tell(before, tool, after) {
    say(`${before}${tool}${after}`);
    const li = document.createElement("li");
    li.className = "notice";
    const time = document.createElement("time");
    time.className = "notice-time";
    const now = Date.now();
    time.dateTime = new Date(now).toISOString();
    time.textContent = clock(now);
    const text = document.createElement("span");
    text.className = "notice-text";
    // The name set apart from the words around it: one that reads as a message of its own shows as a name.
    const name = document.createElement("code");
    name.textContent = tool;
    text.append(before, name, after);
    li.append(time, " ", text);
    noticeList.prepend(li);
    while (noticeList.children.length > NOTICES) noticeList.lastElementChild.remove();
    noticeList.parentElement.scrollTop = 0;
  }

  function duration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${s % 60} s`;
    return `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  function clock(ms) {
    return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }

  // A character that renders as nothing or reorders the text around it (a bidi control, a
  // zero-width or tag character, any other control, and every other default-ignorable one:
  // Hangul fillers, variation selectors, which can spell out a message nobody sees) could make
  // what is asked read as something else: "gpj.exe" behind a right-to-left override reads as
  // "exe.jpg". A lone surrogate shows as U+FFFD, so two names would look alike. Each one is
  // shown as a mark naming its code point instead. Prompts keep their line breaks and tabs.
  const HIDDEN = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}]|\p{Cs}/u;

  function codePoint(char) {
    return `U+${char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
  }

  function isHidden(char, keepLines) {
    return HIDDEN.test(char) && !(keepLines && (char === "\n" || char === "\t"));
  }

  // A letter of a script whose letters pass for Latin ones (a Cyrillic "а", a Greek "ο"), in a word
  // of Latin letters, makes the word read as the all-Latin one it copies: "reаd_file" as the
  // read_file the person trusts, "pаypal.com" as the site they know. Each such letter is shown as a
  // mark naming its code point too. A word all of one script is text, not a disguise: it keeps its letters.
  const WORD = /[\p{L}\p{M}\p{N}_]+/gu;
  const LATIN = /\p{Script=Latin}/u;
  const LOOK_ALIKE =
    /[\p{Script=Cyrillic}\p{Script=Greek}\p{Script=Armenian}\p{Script=Cherokee}\p{Script=Coptic}\p{Script=Lisu}]/u;

  /** Where in `text` (UTF-16 offsets) a letter passes for a Latin one, in a word of Latin letters. */
  function lookAlikes(text) {
    const at = new Set();
    for (const match of text.matchAll(WORD)) {
      const word = match[0];
      if (!LATIN.test(word) || !LOOK_ALIKE.test(word)) continue;
      let offset = match.index;
      for (const char of word) {
        if (LOOK_ALIKE.test(char)) at.add(offset);
        offset += char.length;
      }
    }
    return at;
  }

  const MARK_TITLES = {
    hidden: "a character that would not show, or would reorder the text around it",
    alike: "a letter of another script that looks like a Latin one, in a word of Latin letters",
  };

  /** Each character of `text`, and why it is shown as a mark ("hidden", "alike") or null. */
  function* characters(text, keepLines) {
    const alike = lookAlikes(text);
    let offset = 0;
    for (const char of text) {
      yield [char, isHidden(char, keepLines) ? "hidden" : alike.has(offset) ? "alike" : null];
      offset += char.length;
    }
  }

  /** Sets an element's text, each hidden or look-alike character shown as a mark. */
  function showText(element, text, keepLines = false) {
    const parts = [];
    let run = "";
    for (const [char, why] of characters(text, keepLines)) {
      if (why === null) {
        run += char;
        continue;
      }
      if (run !== "") parts.push(run);
      run = "";
      const mark = document.createElement("span");
      mark.className = "hidden-char";
      mark.textContent = codePoint(char);
      mark.title = MARK_TITLES[why];
      parts.push(mark);
    }
    if (run !== "") parts.push(run);
    element.replaceChildren(...parts);
  }

  /** The same text as a plain string, for labels and announcements. */
  function plain(text) {
    let out = "";
    for (const [char, why] of characters(text, false)) out += why === null ? char : codePoint(char);
    return out;
  }

  // How much of a tool's name and of a prompt is read out: the card holds the rest. A prompt read
  // whole (megabytes, or a tail far below its start dressed up as another, harmless ask) would
  // hold the screen reader for as long as it takes, each new ask cutting in.
  const SPOKEN_TOOL = 100;
  const SPOKEN_PROMPT = 300;

  /**
   * Text to read out: its first `max` characters, line breaks and tabs as spaces (a hidden
   * character still a mark), then how many more `where` (the card, or a grant's row) holds.
   */
  function spoken(text, max, where = "the card") {
    let out = "";
    let count = 0;
    for (const [char, why] of characters(text, true)) {
      if (count === max) {
        const more = [...text].length - max;
        return `${out.replace(/\s+/g, " ").trim()}… (${more} more characters in ${where})`;
      }
      count += 1;
      out += char === "\n" || char === "\t" ? " " : why === null ? char : codePoint(char);
    }
    return out.replace(/\s+/g, " ").trim();
  }

  /** A server that stops answering (the network swallows the request) must not leave a request open for good. */
  function requestTimeoutMs() {
    return Math.min(Math.max(3 * heartbeatMs, 2_000), 60_000);
  }

  /**
   * Why a reply to a list's reload is not the list: no reply at all, the server's refusal, or a
   * 200 that is not the server's list (a proxy in front, its own session over, answering with its
   * sign-in page or JSON of its own).
   */
  function notTheList(reply) {
    if (reply.status === 0) return "no reply";
    return reply.status === 200 ? "the reply was not the approval server's" : reply.status;
  }

  async function api(path, init) {
    const response = await fetch(path, {
      credentials: "same-origin",
      cache: "no-store",
      signal: AbortSignal.timeout(requestTimeoutMs()),
      ...init,
    });
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    return { status: response.status, body };
  }

  // ---- asks ---------------------------------------------------------------

  // What the empty list says: that nothing is waiting only while the page is up to date.
  const NOTHING_WAITING = $("asks-empty").textContent;
  let caughtUpOnce = false;
  function emptyText() {
    if (signedOutNow) {
      return "Signed out: asks parked now are not shown. Open the console link (with ?token=) that the server printed.";
    }
    if (!offline) return NOTHING_WAITING;
    return caughtUpOnce
      ? "Not up to date: the page lost touch with the server, and asks parked meanwhile are not shown. They appear once the page has caught up."
      : "Not up to date yet: asks waiting appear once the page has caught up with the server.";
  }

  function updateCount() {
    $("ask-count").textContent = String(cards.size);
    const empty = $("asks-empty");
    empty.hidden = cards.size > 0;
    const text = emptyText();
    if (empty.textContent !== text) empty.textContent = text;
    document.title = cards.size > 0 ? `(${cards.size}) loopctl approvals` : "loopctl approvals";
  }

  function tick(only) {
    const now = Date.now();
    for (const card of only === undefined ? cards.values() : [only]) {
      const elapsed = now - card.receivedLocal;
      card.li.querySelector(".age").textContent = `parked ${duration(card.ageMs + elapsed)} ago`;
      const left = card.li.querySelector(".left");
      if (card.timeLeftMs === null) {
        left.textContent = "no deadline known";
      } else {
        const ms = card.timeLeftMs - elapsed;
        left.textContent = ms > 0 ? `${duration(ms)} left` : "deadline passed";
        left.classList.toggle("soon", ms < 30_000);
      }
    }
  }

  // Once the server has signed the page out, catching up brings nothing back: the link does.
  let signedOutNow = false;
  const STALE_NOTE = template.content.querySelector(".stale-note").textContent;
  const SIGNED_OUT_NOTE =
    "Signed out: the page no longer hears from the server, and this ask may have ended meanwhile. To answer it, open the console link (with ?token=) that the server printed.";

  /** A card's buttons answer only while the page is up to date and no answer of its own is on its way. */
  function paint(li) {
    li.classList.toggle("stale", offline);
    const note = li.querySelector(".stale-note");
    note.hidden = !offline;
    const text = signedOutNow ? SIGNED_OUT_NOTE : STALE_NOTE;
    if (note.textContent !== text) note.textContent = text;
    const sending = li.dataset.sending !== undefined;
    for (const button of li.querySelectorAll("button")) button.disabled = offline || sending;
  }

  function paintAll() {
    for (const card of cards.values()) paint(card.li);
    updateCount();
    layoutChanged();
  }

  /** Offers a card's remember choices only while the server can keep what they choose. */
  function paintRemember(li) {
    const fieldset = li.querySelector(".remember");
    if (fieldset.hidden === !canRemember) return;
    fieldset.hidden = !canRemember;
    // A choice hidden is no choice: what the card shows is what an answer sends.
    if (!canRemember) li.querySelector('.remember input[value=""]').checked = true;
  }

  // ---- cards that move ----------------------------------------------------

  // A place is what the page remembers of an element that takes presses: where it was last seen
  // (document-relative) and the timer of its hold.
  function hold(place, el, why = "") {
    el.dataset.held = why;
    place.heldWhy = why;
    clearTimeout(place.holdTimer);
    place.holdTimer = setTimeout(() => {
      place.holdTimer = null;
      delete el.dataset.held;
    }, HOLD_MS);
  }

  /**
   * Holds `el` if it, or `inner` (where its buttons are), is not where it was last seen: a card
   * that stays put while what is above its buttons in it grows or shrinks (its stale note going,
   * the remember choices coming) moves Approve under a pointer aimed at the reason field.
   */
  function notePlace(place, el, inner = el) {
    const rect = el.getBoundingClientRect();
    const top = rect.top + window.scrollY;
    const left = rect.left + window.scrollX;
    const innerRect = inner.getBoundingClientRect();
    const offset = `${innerRect.top - rect.top},${innerRect.left - rect.left}`;
    if (top === place.top && left === place.left && offset === place.offset) return;
    place.top = top;
    place.left = left;
    place.offset = offset;
    hold(place, el);
  }

  // A scroll the person did not make moves every card under the pointer though none moved on the
  // page: a list scrolled to its end scrolls back by a card's height when its last card goes, so
  // the card above drops into its place, and a heading given the focus is scrolled to. A scroll
  // that follows a wheel, a touch or a scrolling key within this long is the person's own.
  const OWN_SCROLL_MS = 1000;
  const SCROLL_KEYS = new Set([
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
    "PageUp",
    "PageDown",
    "Home",
    "End",
    " ",
  ]);
  let ownScrollAt = -Infinity;
  let seenScroll = { x: window.scrollX, y: window.scrollY };
  const ownScroll = () => {
    ownScrollAt = performance.now();
  };
  window.addEventListener("wheel", ownScroll, { capture: true, passive: true });
  window.addEventListener("touchmove", ownScroll, { capture: true, passive: true });
  window.addEventListener(
    "keydown",
    (event) => {
      // In a control, these keys move a caret or a choice, or press a button: they scroll nothing.
      const control = event.target instanceof Element && event.target.closest("input, button, select, textarea");
      if (SCROLL_KEYS.has(event.key) && !control) ownScroll();
    },
    { capture: true },
  );

  /**
   * Holds every card and grant row if the page scrolled since it was last looked at, unless the
   * person scrolled it; `changed` says the page itself has just changed, which such a scroll follows,
   * whatever the person did just before.
   */
  function noteScroll(changed = false) {
    const x = window.scrollX;
    const y = window.scrollY;
    if (x === seenScroll.x && y === seenScroll.y) return;
    seenScroll = { x, y };
    if (changed || performance.now() - ownScrollAt > OWN_SCROLL_MS) holdAll("");
  }
  window.addEventListener("scroll", () => noteScroll(), { passive: true });
  // Read once the page has changed, before anything else runs: a press already on its way is judged
  // by the scroll the change made.
  new MutationObserver(() => noteScroll(true)).observe(document.body, {
    subtree: true,
    childList: true,
    attributes: true,
    characterData: true,
  });

  /** Holds every card and grant row whose place on the page changed since it was last looked at (a new one included). */
  function noteLayout() {
    noteScroll(true);
    for (const card of cards.values()) {
      paintOverflow(card.li);
      notePlace(card, card.li, card.li.querySelector(".buttons"));
    }
    for (const row of grantRows.values()) notePlace(row, row.tr);
    // A grant's or a decision's tool name too long for its box scrolls too, and takes a tab stop then.
    for (const name of document.querySelectorAll(".grid .tool-name")) {
      const tabIndex = name.scrollHeight > name.clientHeight ? 0 : -1;
      if (name.tabIndex !== tabIndex) name.tabIndex = tabIndex;
    }
  }

  // The boxes of a card whose text scrolls in them, and how the card names each.
  const BOXES = [
    [".tool", "the tool's name"],
    [".prompt", "the prompt"],
    [".call", "the call id"],
  ];

  /**
   * Says on a card which of its texts goes on past its box. A scroll bar may not show (an overlay
   * one hides until scrolled), and a text whose rest was pushed out of its box (blank lines, em
   * spaces, Braille blanks) then looks like all there is: "Read README.md?" above a blank, with
   * what else the call does below. A box that scrolls takes a tab stop, so the keyboard can scroll
   * it; a heading that does not takes none, though the page may still focus it.
   */
  function paintOverflow(li) {
    const longer = [];
    for (const [selector, name] of BOXES) {
      const box = li.querySelector(selector);
      const over = box.scrollHeight > box.clientHeight;
      if (over) longer.push(name);
      if (selector === ".tool") {
        const tabIndex = over ? 0 : -1;
        if (box.tabIndex !== tabIndex) box.tabIndex = tabIndex;
      } else if (over !== box.hasAttribute("tabindex")) {
        if (over) box.tabIndex = 0;
        else box.removeAttribute("tabindex");
      }
    }
    const note = li.querySelector(".overflow-note");
    note.hidden = longer.length === 0;
    if (longer.length === 0) return;
    const list = longer.length === 1 ? longer[0] : `${longer.slice(0, -1).join(", ")} and ${longer.at(-1)}`;
    const text = `Longer than shown: ${list}. Scroll ${longer.length === 1 ? "it" : "each"} to read it all before you answer.`;
    if (note.textContent !== text) note.textContent = text;
  }

  /** Holds every card and grant row, each as if it had just appeared; `why` goes in its data-held. */
  function holdAll(why) {
    for (const card of cards.values()) hold(card, card.li, why);
    for (const row of grantRows.values()) hold(row, row.tr, why);
  }

  // A window that comes to the front again (a pop-up over it closed, its tab chosen again) may come
  // under a press already on its way, aimed at what covered it: every card and row is held.
  window.addEventListener("focus", () => holdAll("front"));
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") holdAll("front");
  });

  /** What a refused press says of `el`, by why it was held. */
  function heldText(el, what) {
    return el.dataset.held === "front"
      ? "This page came to the front just now: look again, then press."
      : `This ${what} moved just now: look again, then press.`;
  }

  /**
   * A pointer press (a click with a count: the keyboard's has none, and its focus is on the
   * button already) on `el` while it is held is refused, and `refused` says why and takes the
   * focus off the button, which the press put there: a key pressed next must not do what the
   * press was refused for.
   */
  function holdPointer(button, el, refused) {
    button.addEventListener("click", (event) => {
      if (event.detail === 0) return;
      noteLayout();
      if (el.dataset.held === undefined) return;
      event.preventDefault();
      event.stopImmediatePropagation();
      refused();
    });
  }

  let layoutFrame = 0;
  function layoutChanged() {
    if (layoutFrame === 0) {
      layoutFrame = requestAnimationFrame(() => {
        layoutFrame = 0;
        noteLayout();
      });
    }
  }

  function sameAsk(a, b) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    return [...keys].every((key) => a[key] === b[key]);
  }

  // An ask id can come back with another call behind it (ids from a seeded generator repeat
  // across runs), heard of only after a reconnect: the card then shows the new ask, so that what
  // an answer to this id approves is what the card says.
  function addAsk(view) {
    const ask = view.ask;
    const existing = cards.get(ask.id);
    if (existing !== undefined && sameAsk(existing.ask, ask)) {
      // The same ask sent again (a reconnect re-sends the pending ones; or it ended unseen and a
      // call just like it parked under the id): the card and what was typed in it stay, but its
      // age and deadline are the server's latest word.
      existing.receivedLocal = Date.now();
      existing.ageMs = view.ageMs;
      existing.timeLeftMs = view.timeLeftMs;
      tick(existing);
      return;
    }
    const li = template.content.firstElementChild.cloneNode(true);
    const serial = ++cardSerial;
    li.dataset.askId = ask.id;
    showText(li.querySelector(".tool"), ask.tool);
    showText(li.querySelector(".prompt"), ask.prompt, true);
    showText(li.querySelector(".digest"), ask.argsDigest);
    const callId = document.createElement("bdi");
    showText(callId, ask.callId);
    li.querySelector(".call").replaceChildren(callId, ` (turn ${ask.turn})`);
    // An ask id comes from whatever parked the ask: a hidden character in it is marked as in a name.
    showText(li.querySelector(".ask-id"), ask.id);
    const article = li.querySelector("article");
    const heading = li.querySelector(".tool");
    heading.id = `ask-${serial}-tool`;
    article.setAttribute("aria-labelledby", heading.id);
    for (const radio of li.querySelectorAll('input[type="radio"]')) radio.name = `remember-${serial}`;
    paintRemember(li);
    const form = li.querySelector("form");
    form.setAttribute("aria-label", `Answer the ask for ${spoken(ask.tool, SPOKEN_TOOL)}`);
    // Read out of context (a list of the page's buttons), each Approve and Deny names its ask's tool.
    for (const button of li.querySelectorAll("button")) button.setAttribute("aria-describedby", heading.id);
    // Enter in the reason field or on a remember choice would submit with the first button, Approve:
    // only a press on a button itself answers.
    form.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !(event.target instanceof HTMLButtonElement)) event.preventDefault();
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const verdict = event.submitter && event.submitter.value === "approve" ? "approve" : "deny";
      void answer(ask, li, verdict);
    });
    // A press on a card that just moved or appeared is refused, with a word why.
    for (const button of li.querySelectorAll("button")) {
      holdPointer(button, li, () => {
        const result = li.querySelector(".result");
        result.classList.add("error");
        result.textContent = heldText(li, "card");
        heading.focus({ preventScroll: true });
      });
    }
    if (existing === undefined) {
      asksList.append(li);
    } else {
      const focused = existing.li.contains(document.activeElement);
      clearTimeout(existing.holdTimer);
      existing.li.replaceWith(li);
      if (focused) heading.focus();
    }
    const card = { ask, li, receivedLocal: Date.now(), ageMs: view.ageMs, timeLeftMs: view.timeLeftMs };
    cards.set(ask.id, card);
    paint(li);
    layoutChanged();
    updateCount();
    tick(card);
    say(
      `${existing === undefined ? "New ask" : "This ask changed, read it again"}: ${spoken(ask.tool, SPOKEN_TOOL)}: ${spoken(ask.prompt, SPOKEN_PROMPT)}`,
    );
  }

  // Each end of an ask heard (on the stream, or as its absence from the pending list read again),
  // numbered in the order heard, by id: what the page heard after an answer went is newer than that
  // answer's reply. The oldest are forgotten past a bound.
  let endsHeard = 0;
  const lastEndHeard = new Map();
  function heardEnd(id) {
    endsHeard += 1;
    lastEndHeard.delete(id);
    lastEndHeard.set(id, endsHeard);
    if (lastEndHeard.size > 1024) lastEndHeard.delete(lastEndHeard.keys().next().value);
  }

  // The ending told for a card that went while an answer of this page was on its way (its end heard
  // on the stream first): the answer's confirmation, when it comes, is not told a second time.
  const toldWhileSending = new WeakMap();

  function removeAsk(id, ending, note = "") {
    const card = cards.get(id);
    if (card === undefined) return;
    if (card.li.dataset.sending !== undefined) toldWhileSending.set(card.li, ending);
    const focused = card.li.contains(document.activeElement);
    const neighbour = card.li.nextElementSibling || card.li.previousElementSibling;
    card.li.remove();
    clearTimeout(card.holdTimer);
    cards.delete(id);
    layoutChanged();
    updateCount();
    tell("Ask for ", spoken(card.ask.tool, SPOKEN_TOOL), ` ended: ${describeEnding(ending)}${note}`);
    // Focus goes to a heading, never to a button: a key pressed for the ask that just ended
    // must not answer another one the person has not read yet.
    if (focused) (neighbour ? neighbour.querySelector(".tool") : $("asks-title")).focus();
  }

  function describeEnding(ending) {
    if (ending === "offline") return "ended while the page was not connected";
    if (ending === "unknown") return "the server no longer knows it";
    if (!ending) return "ended";
    if (ending.type === "answered") return ending.verdict === "approve" ? "approved" : "denied";
    switch (ending.reason) {
      case "expired":
        return "expired unanswered";
      case "cancelled":
        return "cancelled by the agent";
      case "closed":
        return "withdrawn, the approver closed";
      case "abandoned":
        return "withdrawn, the approver went away";
      default:
        return "withdrawn: the agent stopped waiting (deadline or cancel)";
    }
  }

  async function answer(ask, li, verdict) {
    const result = li.querySelector(".result");
    const remember = li.querySelector(".remember").hidden ? null : li.querySelector('input[type="radio"]:checked');
    const reason = li.querySelector(".reason").value.trim();
    // The ask rides along: the server refuses the answer if another call holds this id by now.
    const body = { type: verdict, ask };
    if (remember && remember.value !== "") body.remember = remember.value;
    if (verdict === "deny" && reason !== "") body.reason = reason;
    // A disabled button drops the focus to the page itself: keep it in the card, on its heading.
    if (li.contains(document.activeElement)) li.querySelector(".tool").focus();
    li.dataset.sending = verdict;
    paint(li);
    result.classList.remove("error");
    result.textContent = "Sending…";
    const sentAfter = endsHeard;
    let reply;
    try {
      reply = await api(`api/asks/${encodeURIComponent(ask.id)}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch {
      reply = { status: 0, body: null };
    }
    // The card may have gone meanwhile (its end heard on the stream): the outcome is then told all the
    // same. One the pending list no longer had on a reconnect waited for this reply (endedUnseen).
    const card = cards.get(ask.id);
    const shown = card !== undefined && card.li === li ? card : undefined;
    // Only the server's own word is an answer: a proxy in front of it (its sign-in page, once its own
    // session ended) can reply 200 with a page of its own, having passed nothing on.
    if (reply.status === 200 && reply.body !== null && reply.body.delivered === true) {
      result.textContent = verdict === "approve" ? "Approved: the call goes ahead." : "Denied: the call is refused.";
      const told = toldWhileSending.get(li);
      if (shown) removeAsk(ask.id, { type: "answered", verdict });
      // Its ending, heard on the stream before this reply, was told already as this answer.
      else if (!(told && told.type === "answered" && told.verdict === verdict)) {
        tell("Your answer for ", spoken(ask.tool, SPOKEN_TOOL), ` arrived. ${result.textContent}`);
      }
      void refreshGrants();
      return;
    }
    result.classList.add("error");
    if (reply.status === 409 && reply.body && reply.body.error === "ask_changed" && reply.body.ask) {
      // The reply shows the call that held the id when the server refused: an end under the id heard
      // since the answer went is newer, and that call may be over too. The stream (or the pending list
      // read again) then shows whichever call still waits under the id; none is shown from the reply.
      if ((lastEndHeard.get(ask.id) ?? 0) <= sentAfter) addAsk(reply.body.ask);
      const now = cards.get(ask.id);
      if (now !== undefined && now.li !== li) {
        const fresh = now.li.querySelector(".result");
        fresh.classList.add("error");
        fresh.textContent = "This ask changed before your answer arrived; nothing was answered. Read it again.";
        return;
      }
      const changed = "this ask changed before it did; nothing was answered.";
      if (now !== undefined)
        return removeAsk(ask.id, now.endedAs ?? "offline", `. Your answer did not arrive: ${changed}`);
      tell("Your answer for ", spoken(ask.tool, SPOKEN_TOOL), ` did not arrive: ${changed}`);
      return;
    }
    // The server's own 409 only: a proxy's page with that status ended nothing.
    if (reply.status === 409 && reply.body && reply.body.error === "ask_ended") {
      const ending = reply.body.ending;
      const how = ending ? `: ${describeEnding(ending)}` : "";
      result.textContent = `This ask already ended${how}. This answer changed nothing.`;
      setTimeout(() => {
        if (cards.get(ask.id)?.li === li) removeAsk(ask.id, ending);
      }, 4000);
      return;
    }
    // The server's own 404 only: it no longer knows this ask (it ended long ago, or the server restarted),
    // so no answer here can reach it. A proxy's 404 page says nothing of the ask.
    if (reply.status === 404 && reply.body && reply.body.error === "ask_unknown") {
      result.textContent = "The server no longer knows this ask: it ended, and nothing was answered.";
      setTimeout(() => {
        if (cards.get(ask.id)?.li === li) removeAsk(ask.id, "unknown");
      }, 4000);
      return;
    }
    if (reply.status === 401) signedOut();
    // No reply is not "not answered": the request may have reached the server before the
    // connection went. Nor is an approver that failed or did not say in time (503, 504): the
    // answer may have reached the call. Trying again is safe, since an ask takes one answer.
    const error = reply.body && reply.body.error;
    const message = (reply.body && reply.body.message) || "unexpected reply";
    result.textContent =
      reply.status === 0
        ? "No reply from the server: the answer may not have arrived. Try again; an answer that did arrive is not taken twice."
        : reply.status === 200
          ? "Not confirmed: the reply was not the approval server's (a proxy in front of it may want you to sign in again), so the answer may not have arrived. Try again; an answer that did arrive is not taken twice."
          : error === "approver_unavailable" || error === "answer_unconfirmed"
            ? `Not confirmed (${reply.status}): ${message}. Try again; an answer that did arrive is not taken twice.`
            : `Not answered (${reply.status}): ${message}`;
    // The pending list no longer had this ask when the page re-read it: the card goes now, saying
    // what became of the answer.
    if (shown && shown.endedAs !== undefined)
      return removeAsk(ask.id, shown.endedAs, `. Your answer: ${result.textContent}`);
    if (shown && shown.endedUnseen) return removeAsk(ask.id, "offline", `. Your answer: ${result.textContent}`);
    delete li.dataset.sending;
    paint(li);
  }

  // ---- grants -------------------------------------------------------------

  function cell(row, label, text, className) {
    const td = document.createElement("td");
    td.dataset.label = label;
    if (className) {
      const span = document.createElement("span");
      span.className = className;
      showText(span, text);
      td.append(span);
    } else {
      showText(td, text);
    }
    row.append(td);
    return td;
  }

  function pinText(grant) {
    switch (grant.pin.type) {
      case "unpinned":
        return "not pinned";
      case "match":
        return "matches the tool";
      case "mismatch":
        return grant.verdict === "allow" ? "tool changed: asks again" : "tool changed (deny still holds)";
      default:
        return "pinned (tool not known here)";
    }
  }

  /**
   * `load`, one at a time: one asked for while a load is in flight runs after it, since what
   * that load reads may predate what prompted the request; any number asked for meanwhile are
   * that one run. Each caller gets the promise of the run that covers its request.
   */
  function coalesced(load) {
    let running = null;
    let again = false;
    return () => {
      if (running) {
        again = true;
        return running;
      }
      running = (async () => {
        do {
          again = false;
          await load();
        } while (again);
      })().finally(() => {
        running = null;
      });
      return running;
    };
  }

  /** grant id -> { tr, top, left, holdTimer, heldWhy }: a row rebuilt at the same place is not held. */
  const grantRows = new Map();
  const refreshGrants = coalesced(() => loadGrants());

  // When the grants were last read, and why the last reload failed while it has not succeeded since.
  let grantsReadAt = null;
  let grantsFailure = null;

  /** Says above the grants whether they are as just read; none read says nothing of there being none. */
  function paintGrantsCheck() {
    const note = $("grants-check");
    note.hidden = grantsFailure === null;
    if (grantsFailure === null) delete note.dataset.state;
    else note.dataset.state = "broken";
    // A status region is read out when its text is set: set only when it says something new.
    if (grantsFailure !== null && note.dataset.said !== grantsFailure) {
      note.dataset.said = grantsFailure;
      note.textContent = grantsFailure;
    }
    if (grantsFailure === null) delete note.dataset.said;
    const count = $("grants").querySelector("tbody").rows.length;
    $("grants-empty").hidden = count > 0 || grantsReadAt === null;
  }

  async function loadGrants() {
    let reply;
    try {
      reply = await api("api/grants");
    } catch {
      reply = { status: 0, body: null };
    }
    if (reply.status === 401) return signedOut();
    const panel = $("grants-panel");
    if (reply.status !== 200 || !reply.body || !Array.isArray(reply.body.grants)) {
      // Never silently stale (as the decisions): the list shown is as last read.
      const why = notTheList(reply);
      grantsFailure =
        grantsReadAt === null
          ? `The remembered answers could not be read (${why}).`
          : `The remembered answers could not be read again (${why}): those shown are as read at ${clock(grantsReadAt)}.`;
      paintGrantsCheck();
      return;
    }
    grantsFailure = null;
    grantsReadAt = Date.now();
    panel.hidden = reply.body.available === false;
    if (canRemember !== (reply.body.available === true)) {
      canRemember = reply.body.available === true;
      for (const card of cards.values()) paintRemember(card.li);
      layoutChanged();
    }
    const tbody = $("grants").querySelector("tbody");
    const rows = [];
    const seen = new Map();
    for (const grant of reply.body.grants) {
      const tr = document.createElement("tr");
      tr.dataset.grantId = grant.id;
      cell(tr, "Tool", grant.tool, "tool-name");
      cell(
        tr,
        "Answer",
        grant.verdict === "allow" ? "approve" : "deny",
        `verdict ${grant.verdict === "allow" ? "good" : "bad"}`,
      );
      // The arguments in full, in a box that scrolls: cut short, two grants whose arguments differ
      // only far along (a path's last part) would read alike, and a revoke could take the wrong one.
      cell(
        tr,
        "Covers",
        grant.scope === "this_tool" ? "this tool, any arguments" : `these arguments: ${JSON.stringify(grant.args)}`,
        "covers",
      );
      cell(tr, "Pin", pinText(grant), grant.pin.type === "mismatch" ? "pin-mismatch" : "");
      cell(tr, "Made", grant.createdAtMs > 0 ? new Date(grant.createdAtMs).toLocaleString() : "unknown");
      const actions = cell(tr, "Actions", "");
      actions.classList.add("actions");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "revoke";
      button.textContent = "Revoke";
      button.setAttribute(
        "aria-label",
        `Revoke the remembered ${grant.verdict === "allow" ? "approval" : "denial"} for ${spoken(grant.tool, SPOKEN_TOOL, "the row")}`,
      );
      const note = document.createElement("span");
      note.className = "row-note";
      holdPointer(button, tr, () => {
        note.textContent = heldText(tr, "row");
        say(
          tr.dataset.held === "front"
            ? "Not revoked: the page came to the front just now. Look again, then press."
            : `Not revoked: the row for ${spoken(grant.tool, SPOKEN_TOOL, "the row")} moved just now. Look again, then press.`,
        );
        $("grants-title").focus({ preventScroll: true });
      });
      button.addEventListener("click", () => void revoke(grant, button));
      actions.append(button, note);
      rows.push(tr);
      const row = grantRows.get(grant.id) ?? { top: undefined, left: undefined, holdTimer: null };
      row.tr = tr;
      if (row.holdTimer !== null) hold(row, tr, row.heldWhy);
      seen.set(grant.id, row);
    }
    for (const [id, row] of grantRows) if (!seen.has(id)) clearTimeout(row.holdTimer);
    grantRows.clear();
    for (const [id, row] of seen) grantRows.set(id, row);
    tbody.replaceChildren(...rows);
    layoutChanged();
    $("grants").hidden = rows.length === 0;
    paintGrantsCheck();
  }

  async function revoke(grant, button) {
    button.disabled = true;
    // What became of a revoke shows above the rows, not over them: a note laid over the row below
    // would hide its Revoke, and one in a row would go as the list is read again.
    const result = $("grants-result");
    result.textContent = "";
    let reply;
    try {
      reply = await api(`api/grants/${encodeURIComponent(grant.id)}`, { method: "DELETE" });
    } catch {
      reply = { status: 0, body: null };
    }
    // The server's own word only: a proxy's page (200 or 404) is no revoke.
    const gone =
      reply.body !== null &&
      ((reply.status === 200 && reply.body.revoked !== undefined) ||
        (reply.status === 404 && reply.body.error === "grant_unknown"));
    if (gone) {
      say(`Revoked: ${spoken(grant.tool, SPOKEN_TOOL, "the row")} will be asked about again.`);
      await refreshGrants();
      // Onto the heading, never the next row's Revoke: a second key press meant for the row that
      // went would revoke another.
      if (document.activeElement === button || document.activeElement === document.body) $("grants-title").focus();
      return;
    }
    if (reply.status === 401) signedOut();
    button.disabled = false;
    const error = reply.body !== null && typeof reply.body.error === "string" ? reply.body.error : null;
    const message = error !== null && typeof reply.body.message === "string" ? reply.body.message : null;
    let text;
    if (reply.status === 503 && error === "grants_unavailable" && message !== null) {
      // The store did not answer, or failed: the revoke may still be made (the server's message says
      // when it may). The list read again shows whether it was.
      text = `Revoke not confirmed for ${spoken(grant.tool, SPOKEN_TOOL, "the row")} (503): ${message}.`;
    } else {
      const why =
        reply.status === 0
          ? "server unreachable"
          : reply.body === null || reply.status === 200 || reply.status === 404
            ? "the reply was not the approval server's"
            : message !== null
              ? `${reply.status}: ${message}`
              : reply.status;
      text = `Could not revoke the grant for ${spoken(grant.tool, SPOKEN_TOOL, "the row")} (${why}).`;
    }
    showText(result, text);
    say(plain(text));
    if (error === "grants_unavailable") await refreshGrants();
  }

  // ---- records ------------------------------------------------------------

  const GOOD = new Set(["allow", "allow_modified", "ask_allowed"]);
  const records = [];
  // The check of the audit log the records were read from, when they were (the server says).
  let auditCheck = null;
  // Why the last reload of the records failed, while it has not succeeded since; and when they were read.
  let recordsFailure = null;
  let recordsReadAt = null;

  // What the log's checks vouch for a line, in words: what the "Log" column says, and its tooltip.
  const VOUCHED = {
    sealed: ["sealed", "its mac is the key's, and the seal vouches for it"],
    mac: ["key, not sealed", "its mac is the key's, but no seal vouches for it: removing it would not be told"],
    chain: ["chain only", "its hash and link hold, which anyone who can write the log can make: no key checked it"],
    none: ["NOT VOUCHED FOR", "it is at or after the line where the log failed its checks: it is shown as written"],
  };

  /** The check of the lines read, in words: what the records panel says above them. */
  function checkText(check) {
    const parts = [];
    if (check.ok !== true) {
      const message = typeof check.message === "string" ? check.message : "a line failed its checks";
      parts.push(
        `The audit log does not verify: ${message}. Decisions from that line on are shown as written, and nothing vouches for them.`,
      );
    } else if (check.by === "key") {
      parts.push("Checked with the key: every line read carries the key's mac.");
      if (Number.isSafeInteger(check.sealed) && check.sealed < check.last) {
        parts.push(
          `The seal vouches for line ${check.sealed} only: lines ${check.sealed + 1} to ${check.last} rest on their macs alone, and removing them would not be told.`,
        );
      }
    } else {
      parts.push(
        "Hash chain checked, without the key: anyone who can write the log can write lines that pass, so no decision here is authenticated.",
      );
      if (check.keyed === true) parts.push("Its lines carry macs: give the console the log's key to check them.");
      else if (check.sealBeside === true)
        parts.push("A seal lies beside it, though no line carries a mac: give the console the log's key to check it.");
    }
    if (check.whole === false && check.first > 1) {
      parts.push(`Lines before line ${check.first} were not read here; loopctl audit verify checks the whole log.`);
    }
    if (check.partial === true) {
      parts.push("The log ends in a line without its newline: one being written, or one cut short.");
    }
    return parts.join(" ");
  }

  function renderRecords() {
    const tbody = $("records").querySelector("tbody");
    const audited = auditCheck !== null;
    const rows = records
      .slice()
      .reverse()
      .map((record) => {
        const tr = document.createElement("tr");
        const vouched = audited
          ? Object.hasOwn(VOUCHED, record.audit?.vouched ?? "")
            ? record.audit.vouched
            : "none"
          : null;
        cell(tr, "Time", clock(record.ts));
        cell(tr, "Tool", record.tool, "tool-name");
        const good = GOOD.has(record.verdict) ? "good" : "bad";
        // A verdict nothing vouches for is not shown in the colors of a decision that happened.
        cell(tr, "Verdict", record.verdict, `verdict ${vouched === "none" ? "unvouched" : good}`);
        cell(tr, "Decided by", `${record.ruleId} (${record.ruleSource})`);
        cell(tr, "Reason", record.reason ?? "");
        if (vouched !== null) {
          const [text, why] = VOUCHED[vouched];
          const seq = record.audit?.seq;
          const td = cell(tr, "Log", text, `vouched vouched-${vouched}`);
          td.title = `${Number.isSafeInteger(seq) ? `line ${seq}: ` : ""}${why}`;
          if (vouched === "none") tr.classList.add("unvouched");
        }
        return tr;
      });
    tbody.replaceChildren(...rows);
    $("records-log").hidden = !audited;
    const note = $("records-check");
    note.hidden = !audited && recordsFailure === null;
    let said = null;
    if (recordsFailure !== null) {
      note.dataset.state = "broken";
      said = audited ? `${recordsFailure} ${checkText(auditCheck)}` : recordsFailure;
    } else if (audited) {
      note.dataset.state = auditCheck.ok === true ? (auditCheck.by === "key" ? "key" : "chain") : "broken";
      said = checkText(auditCheck);
    }
    // A status region is read out when its text is set: set only when it says something new, not at every reload.
    if (said !== null && note.dataset.said !== said) {
      note.dataset.said = said;
      showText(note, said);
    }
    $("records-empty").hidden = rows.length > 0;
    $("records").hidden = rows.length === 0;
    layoutChanged();
  }

  // As the grants: one load at a time, and one asked for while a load is in flight runs after it.
  // A burst of decisions (parallel calls) is then two reads of the list, each of which has the
  // server read its source (an audit log's tail, checked), not one per decision; and no reply to
  // an older read lands after a newer one.
  const refreshRecords = coalesced(() => loadRecords());

  async function loadRecords() {
    let reply;
    try {
      reply = await api("api/records?limit=50");
    } catch {
      // No reply at all (the connection cut, or the request gave up): as stale as a refusal.
      reply = { status: 0, body: null };
    }
    if (reply.status === 401) return signedOut();
    if (reply.status !== 200 || !reply.body || !Array.isArray(reply.body.records)) {
      // Never silently stale: what is shown, and what its log's check said, are as last read.
      const why = notTheList(reply);
      recordsFailure =
        recordsReadAt === null
          ? `The decisions could not be read (${why}).`
          : `The decisions could not be read again (${why}): those shown, and what was said of them, are as read at ${clock(recordsReadAt)}.`;
      renderRecords();
      return;
    }
    recordsFailure = null;
    recordsReadAt = Date.now();
    $("records-panel").hidden = reply.body.available === false;
    liveRecords = reply.body.live === true;
    auditCheck = reply.body.audit !== null && typeof reply.body.audit === "object" ? reply.body.audit : null;
    records.splice(0, records.length, ...reply.body.records);
    renderRecords();
  }

  function addRecord(record) {
    // A decision from an audit log is shown with what its checks vouch for it, which only the list says.
    if (auditCheck !== null) {
      void refreshRecords();
      void refreshGrants();
      return;
    }
    records.push(record);
    if (records.length > 50) records.shift();
    renderRecords();
    void refreshGrants();
  }

  // ---- the live stream ----------------------------------------------------

  let stream = null;
  let reconnectTimer = null;
  // When the stream last said anything (a heartbeat included), or was opened.
  let lastHeard = 0;

  /** The server refused the page's session: it hears nothing more, so every card goes stale for good. */
  function signedOut() {
    if (stream) stream.close();
    stream = null;
    sync = null;
    clearTimeout(reconnectTimer);
    reconnectTimer = null;
    setStatus("down", "Signed out: open the console link (with ?token=) that the server printed.");
    if (offline && signedOutNow) return;
    offline = true;
    signedOutNow = true;
    paintAll();
    if (cards.size > 0) {
      say("Signed out: the asks shown may not be up to date. Open the console link again to answer them.");
    }
  }

  /** The page can no longer tell what is pending: every card goes stale until the list is re-read. */
  function lost(text) {
    sync = null;
    setStatus("connecting", text);
    if (offline) return;
    offline = true;
    paintAll();
    if (cards.size > 0) {
      say(
        "Connection lost: the asks shown may not be up to date. Approve and Deny come back once the page has caught up.",
      );
    }
  }

  function caughtUp() {
    setStatus("live", "Live");
    signedOutNow = false;
    caughtUpOnce = true;
    if (!offline) return;
    offline = false;
    paintAll();
    if (cards.size > 0) say("Up to date again: the asks shown are the pending ones.");
  }

  function reconnectSoon() {
    if (reconnectTimer === null) reconnectTimer = setTimeout(connect, 3000);
  }

  // After a reconnect the page re-reads the pending list: an ask that ended
  // while the stream was down goes, one that came meanwhile is added, and a
  // card still pending stays as it is (with what was typed or chosen in it).
  // Events that arrive while the list is in flight are newer than it.
  let sync = null;

  async function resync() {
    const mine = { added: new Set(), settled: new Set() };
    sync = mine;
    let reply;
    try {
      reply = await api("api/asks");
    } catch {
      reply = null;
    }
    if (sync !== mine) return;
    sync = null;
    // A 200 that is not the server's list (a proxy's JSON of its own) is no list either.
    if (reply === null || reply.status !== 200 || !reply.body || !Array.isArray(reply.body.asks)) {
      if (reply && reply.status === 401) return signedOut();
      // The cards stay stale: without the list, the page cannot tell which of them still wait.
      setStatus("down", "Could not read the pending asks; retrying…");
      if (stream) stream.close();
      stream = null;
      reconnectSoon();
      return;
    }
    const pending = new Set(reply.body.asks.map((view) => view.ask.id));
    for (const [id, card] of [...cards]) {
      card.endedUnseen = !pending.has(id) && !mine.added.has(id);
      if (card.endedUnseen) heardEnd(id);
      // A card with an answer of this page on its way stays until the reply tells what became of it.
      if (card.endedUnseen && card.li.dataset.sending === undefined) removeAsk(id, "offline");
    }
    for (const view of reply.body.asks) {
      if (!mine.settled.has(view.ask.id)) addAsk(view);
    }
    caughtUp();
  }

  function connect() {
    clearTimeout(reconnectTimer);
    reconnectTimer = null;
    if (stream) stream.close();
    const source = new EventSource("api/asks/stream");
    stream = source;
    lastHeard = performance.now();
    // Every listener is for this stream only: one replaced by a reconnect says nothing more.
    const on = (type, listener) =>
      source.addEventListener(type, (event) => {
        if (stream !== source) return;
        if (type !== "error") lastHeard = performance.now();
        listener(event);
      });
    on("open", () => {
      setStatus("connecting", "Connected; catching up…");
      void resync();
      void refreshRecords();
      void refreshGrants();
    });
    on("heartbeat", (event) => {
      const promised = JSON.parse(event.data).heartbeatMs;
      if (Number.isFinite(promised) && promised > 0) heartbeatMs = promised;
    });
    on("ask", (event) => {
      const view = JSON.parse(event.data);
      if (sync) sync.added.add(view.ask.id);
      addAsk(view);
    });
    on("settled", (event) => {
      const data = JSON.parse(event.data);
      heardEnd(data.id);
      if (sync) sync.settled.add(data.id);
      const card = cards.get(data.id);
      const mine = card?.li.dataset.sending;
      const ending = data.ending;
      if (mine !== undefined && !(ending && ending.type === "answered" && ending.verdict === mine)) {
        // An answer of this page is on its way, and the ask ended otherwise (answered the other way
        // elsewhere, expired): gone now, the card would read as answered by it. It stays until the
        // reply says this answer changed nothing.
        card.endedAs = ending;
      } else {
        removeAsk(data.id, ending);
      }
      void refreshGrants();
    });
    on("record", (event) => addRecord(JSON.parse(event.data)));
    on("error", () => {
      lost("Connection lost; reconnecting…");
      if (source.readyState !== EventSource.CLOSED) return;
      stream = null;
      // The server refused the stream (a new token, too many streams open, or it is gone for good):
      // find out which.
      void api("api/asks").then(
        async (reply) => {
          if (reply.status === 401) return signedOut();
          const why = await streamRefusal();
          if (why !== null && stream === null) {
            setStatus("down", `The server refused to keep this page up to date (${why}); retrying…`);
          }
          reconnectSoon();
        },
        () => {
          setStatus("down", "The server is not reachable; retrying…");
          reconnectSoon();
        },
      );
    });
  }

  /**
   * Why the server refuses the event stream, in its own words (`503: too many event streams are
   * open`), or null when it takes it now or does not say: EventSource tells a page nothing of a
   * refusal, so the stream is asked for once more, and dropped at once if taken.
   */
  async function streamRefusal() {
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), requestTimeoutMs());
    try {
      const response = await fetch("api/asks/stream", {
        credentials: "same-origin",
        cache: "no-store",
        signal: stop.signal,
      });
      if (response.status === 200) return null;
      const body = await response.json().catch(() => null);
      return body !== null && typeof body.error === "string" && typeof body.message === "string"
        ? `${response.status}: ${body.message}`
        : null;
    } catch {
      return null;
    } finally {
      clearTimeout(timer);
      stop.abort();
    }
  }

  // A stream can go silent without closing (a network that drops packets, a proxy that holds the
  // connection): the page hears a heartbeat every heartbeatMs, so three missed ones mean it is
  // no longer being told what happens, and it starts over.
  setInterval(() => {
    if (stream === null || performance.now() - lastHeard <= Math.max(3 * heartbeatMs, 1000)) return;
    lost("The server went silent; reconnecting…");
    connect();
  }, 1000);

  setInterval(tick, 1000);
  setInterval(() => {
    if (!liveRecords) void refreshRecords();
    void refreshGrants();
  }, 10_000);
  const layoutWatch = new ResizeObserver(layoutChanged);
  layoutWatch.observe(asksList);
  layoutWatch.observe(document.body);
  window.addEventListener("resize", layoutChanged);
  updateCount();
  connect();
})();
