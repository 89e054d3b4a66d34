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
  /** id -> { li, receivedLocal, ageMs, timeLeftMs } */
  const cards = new Map();
  let cardSerial = 0;
  let liveRecords = false;

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  function say(text) {
    announce.textContent = text;
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
  // zero-width or tag character, any other control) could make what is asked read as
  // something else: "gpj.exe" behind a right-to-left override reads as "exe.jpg". Each one
  // is shown as a mark naming its code point instead. Prompts keep their line breaks and tabs.
  const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

  function codePoint(char) {
    return `U+${char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
  }

  function isHidden(char, keepLines) {
    return HIDDEN.test(char) && !(keepLines && (char === "\n" || char === "\t"));
  }

  /** Sets an element's text, each hidden character shown as a mark. */
  function showText(element, text, keepLines = false) {
    const parts = [];
    let run = "";
    for (const char of text) {
      if (!isHidden(char, keepLines)) {
        run += char;
        continue;
      }
      if (run !== "") parts.push(run);
      run = "";
      const mark = document.createElement("span");
      mark.className = "hidden-char";
      mark.textContent = codePoint(char);
      mark.title = "a character that would not show, or would reorder the text around it";
      parts.push(mark);
    }
    if (run !== "") parts.push(run);
    element.replaceChildren(...parts);
  }

  /** The same text as a plain string, for labels and announcements. */
  function plain(text) {
    let out = "";
    for (const char of text) out += isHidden(char, false) ? codePoint(char) : char;
    return out;
  }

  function short(text, max) {
    return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
  }

  async function api(path, init) {
    const response = await fetch(path, { credentials: "same-origin", cache: "no-store", ...init });
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    return { status: response.status, body };
  }

  // ---- asks ---------------------------------------------------------------

  function updateCount() {
    $("ask-count").textContent = String(cards.size);
    $("asks-empty").hidden = cards.size > 0;
    document.title = cards.size > 0 ? `(${cards.size}) loopctl approvals` : "loopctl approvals";
  }

  function tick() {
    const now = Date.now();
    for (const card of cards.values()) {
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
    if (existing !== undefined && sameAsk(existing.ask, ask)) return;
    const li = template.content.firstElementChild.cloneNode(true);
    const serial = ++cardSerial;
    li.dataset.askId = ask.id;
    showText(li.querySelector(".tool"), ask.tool);
    showText(li.querySelector(".prompt"), ask.prompt, true);
    li.querySelector(".digest").textContent = ask.argsDigest;
    const callId = document.createElement("bdi");
    showText(callId, ask.callId);
    li.querySelector(".call").replaceChildren(callId, ` (turn ${ask.turn})`);
    li.querySelector(".ask-id").textContent = ask.id;
    const article = li.querySelector("article");
    const heading = li.querySelector(".tool");
    heading.id = `ask-${serial}-tool`;
    article.setAttribute("aria-labelledby", heading.id);
    for (const radio of li.querySelectorAll('input[type="radio"]')) radio.name = `remember-${serial}`;
    const form = li.querySelector("form");
    form.setAttribute("aria-label", `Answer the ask for ${plain(ask.tool)}`);
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
    if (existing === undefined) {
      asksList.append(li);
    } else {
      const focused = existing.li.contains(document.activeElement);
      existing.li.replaceWith(li);
      if (focused) heading.focus();
    }
    cards.set(ask.id, { ask, li, receivedLocal: Date.now(), ageMs: view.ageMs, timeLeftMs: view.timeLeftMs });
    updateCount();
    tick();
    say(
      `${existing === undefined ? "New ask" : "This ask changed, read it again"}: ${plain(ask.tool)}: ${plain(ask.prompt)}`,
    );
  }

  function removeAsk(id, ending) {
    const card = cards.get(id);
    if (card === undefined) return;
    const focused = card.li.contains(document.activeElement);
    const neighbour = card.li.nextElementSibling || card.li.previousElementSibling;
    card.li.remove();
    cards.delete(id);
    updateCount();
    const tool = card.li.querySelector(".tool").textContent;
    say(`Ask for ${tool} ended: ${describeEnding(ending)}`);
    // Focus goes to a heading, never to a button: a key pressed for the ask that just ended
    // must not answer another one the person has not read yet.
    if (focused) (neighbour ? neighbour.querySelector(".tool") : $("asks-title")).focus();
  }

  function describeEnding(ending) {
    if (ending === "offline") return "ended while the page was not connected";
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
    const buttons = li.querySelectorAll("button");
    const remember = li.querySelector('input[type="radio"]:checked');
    const reason = li.querySelector(".reason").value.trim();
    // The ask rides along: the server refuses the answer if another call holds this id by now.
    const body = { type: verdict, ask };
    if (remember && remember.value !== "") body.remember = remember.value;
    if (verdict === "deny" && reason !== "") body.reason = reason;
    // A disabled button drops the focus to the page itself: keep it in the card, on its heading.
    if (li.contains(document.activeElement)) li.querySelector(".tool").focus();
    for (const b of buttons) b.disabled = true;
    result.classList.remove("error");
    result.textContent = "Sending…";
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
    if (reply.status === 200) {
      result.textContent = verdict === "approve" ? "Approved: the call goes ahead." : "Denied: the call is refused.";
      if (cards.get(ask.id)?.li === li) removeAsk(ask.id, { type: "answered", verdict });
      void refreshGrants();
      return;
    }
    result.classList.add("error");
    if (reply.status === 409 && reply.body && reply.body.error === "ask_changed" && reply.body.ask) {
      addAsk(reply.body.ask);
      const fresh = cards.get(ask.id).li.querySelector(".result");
      fresh.classList.add("error");
      fresh.textContent = "This ask changed before your answer arrived; nothing was answered. Read it again.";
      return;
    }
    if (reply.status === 409) {
      const ending = reply.body && reply.body.ending;
      const how = ending ? `: ${describeEnding(ending)}` : "";
      result.textContent = `This ask already ended${how}. This answer changed nothing.`;
      setTimeout(() => {
        if (cards.get(ask.id)?.li === li) removeAsk(ask.id, ending);
      }, 4000);
      return;
    }
    if (reply.status === 401) signedOut();
    // No reply is not "not answered": the request may have reached the server before the
    // connection went. Trying again is safe, since an ask takes one answer.
    result.textContent =
      reply.status === 0
        ? "No reply from the server: the answer may not have arrived. Try again; an answer that did arrive is not taken twice."
        : `Not answered (${reply.status}): ${(reply.body && reply.body.message) || "unexpected reply"}`;
    for (const b of buttons) b.disabled = false;
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

  // One load at a time; one asked for while a load is in flight runs after it,
  // since the list that load reads may predate what prompted the request.
  let grantsRefresh = null;
  let grantsAgain = false;
  function refreshGrants() {
    if (grantsRefresh) {
      grantsAgain = true;
      return grantsRefresh;
    }
    grantsRefresh = (async () => {
      do {
        grantsAgain = false;
        await loadGrants();
      } while (grantsAgain);
    })().finally(() => {
      grantsRefresh = null;
    });
    return grantsRefresh;
  }

  async function loadGrants() {
    let reply;
    try {
      reply = await api("api/grants");
    } catch {
      return;
    }
    if (reply.status === 401) return signedOut();
    const panel = $("grants-panel");
    if (reply.status !== 200 || !reply.body) return;
    panel.hidden = reply.body.available === false;
    const tbody = $("grants").querySelector("tbody");
    const rows = [];
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
      const args = grant.scope === "this_tool" ? "any arguments" : JSON.stringify(grant.args);
      const covers = cell(
        tr,
        "Covers",
        grant.scope === "this_tool" ? "this tool, any arguments" : `these arguments: ${short(args, 80)}`,
      );
      covers.title = plain(args);
      cell(tr, "Pin", pinText(grant), grant.pin.type === "mismatch" ? "pin-mismatch" : "");
      cell(tr, "Made", grant.createdAtMs > 0 ? new Date(grant.createdAtMs).toLocaleString() : "unknown");
      const actions = cell(tr, "Actions", "");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "revoke";
      button.textContent = "Revoke";
      button.setAttribute(
        "aria-label",
        `Revoke the remembered ${grant.verdict === "allow" ? "approval" : "denial"} for ${plain(grant.tool)}`,
      );
      button.addEventListener("click", () => void revoke(grant, button));
      actions.append(button);
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
    $("grants-empty").hidden = rows.length > 0;
    $("grants").hidden = rows.length === 0;
  }

  async function revoke(grant, button) {
    button.disabled = true;
    let reply;
    try {
      reply = await api(`api/grants/${encodeURIComponent(grant.id)}`, { method: "DELETE" });
    } catch {
      reply = { status: 0, body: null };
    }
    if (reply.status === 200 || reply.status === 404) {
      say(`Revoked: ${plain(grant.tool)} will be asked about again.`);
      await refreshGrants();
      const first = $("grants").querySelector("button.revoke");
      (first || $("grants-title")).focus?.();
      return;
    }
    if (reply.status === 401) signedOut();
    button.disabled = false;
    say(`Could not revoke the grant for ${plain(grant.tool)} (${reply.status || "server unreachable"}).`);
  }

  // ---- records ------------------------------------------------------------

  const GOOD = new Set(["allow", "allow_modified", "ask_allowed"]);
  const records = [];

  function renderRecords() {
    const tbody = $("records").querySelector("tbody");
    const rows = records
      .slice()
      .reverse()
      .map((record) => {
        const tr = document.createElement("tr");
        cell(tr, "Time", clock(record.ts));
        cell(tr, "Tool", record.tool, "tool-name");
        cell(tr, "Verdict", record.verdict, `verdict ${GOOD.has(record.verdict) ? "good" : "bad"}`);
        cell(tr, "Decided by", `${record.ruleId} (${record.ruleSource})`);
        cell(tr, "Reason", record.reason ?? "");
        return tr;
      });
    tbody.replaceChildren(...rows);
    $("records-empty").hidden = rows.length > 0;
    $("records").hidden = rows.length === 0;
  }

  async function loadRecords() {
    let reply;
    try {
      reply = await api("api/records?limit=50");
    } catch {
      return;
    }
    if (reply.status === 401) return signedOut();
    if (reply.status !== 200 || !reply.body) return;
    $("records-panel").hidden = reply.body.available === false;
    liveRecords = reply.body.live === true;
    records.splice(0, records.length, ...reply.body.records);
    renderRecords();
  }

  function addRecord(record) {
    records.push(record);
    if (records.length > 50) records.shift();
    renderRecords();
    void refreshGrants();
  }

  // ---- the live stream ----------------------------------------------------

  let stream = null;

  function signedOut() {
    if (stream) stream.close();
    setStatus("down", "Signed out: open the console link (with ?token=) that the server printed.");
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
    if (reply === null || reply.status !== 200 || !reply.body) {
      if (reply && reply.status === 401) signedOut();
      return;
    }
    const pending = new Set(reply.body.asks.map((view) => view.ask.id));
    for (const id of [...cards.keys()]) {
      if (!pending.has(id) && !mine.added.has(id)) removeAsk(id, "offline");
    }
    for (const view of reply.body.asks) {
      if (!mine.settled.has(view.ask.id)) addAsk(view);
    }
  }

  function connect() {
    stream = new EventSource("api/asks/stream");
    stream.addEventListener("open", () => {
      setStatus("live", "Live");
      void resync();
      void loadRecords();
      void refreshGrants();
    });
    stream.addEventListener("ask", (event) => {
      const view = JSON.parse(event.data);
      if (sync) sync.added.add(view.ask.id);
      addAsk(view);
    });
    stream.addEventListener("settled", (event) => {
      const data = JSON.parse(event.data);
      if (sync) sync.settled.add(data.id);
      removeAsk(data.id, data.ending);
      void refreshGrants();
    });
    stream.addEventListener("record", (event) => addRecord(JSON.parse(event.data)));
    stream.addEventListener("error", () => {
      if (stream.readyState === EventSource.CLOSED) {
        // The server refused the stream (a new token, or it is gone for good): find out which.
        void api("api/asks").then(
          (reply) => (reply.status === 401 ? signedOut() : setTimeout(connect, 3000)),
          () => {
            setStatus("down", "The server is not reachable; retrying…");
            setTimeout(connect, 3000);
          },
        );
      } else {
        setStatus("connecting", "Connection lost; reconnecting…");
      }
    });
  }

  setInterval(tick, 1000);
  setInterval(() => {
    if (!liveRecords) void loadRecords();
    void refreshGrants();
  }, 10_000);
  updateCount();
  connect();
})();
