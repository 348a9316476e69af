// The web inbox's script: reads the JSON API with the session cookie, follows
// /v1/events, and writes replies and run requests with the CSRF header.
//
// Safety rules kept throughout: every piece of server text (an agent's question is
// untrusted) reaches the page through textContent / text nodes, never innerHTML; no
// token is ever stored (the session cookie is HttpOnly; the CSRF cookie is read only
// to echo it in a header, which is its purpose).
"use strict";

(() => {
  const CSRF_COOKIE = "achilles_csrf";
  const CSRF_HEADER = "X-CSRF-Token";
  const RUNS_PER_AGENT = 5;
  const INBOX_LIMIT = 200; // the API's largest page
  const AGENTS_LIMIT = 500;

  const state = {
    items: [], // the inbox, as the server last listed it (blocked first)
    agents: [],
    runsByAgent: new Map(), // agent key -> runs, newest first
    drafts: new Map(), // item id -> reply text not sent yet
    problems: new Map(), // item id -> the last problem to show on its card
    notes: new Map(), // item id -> the last success note
    cards: new Map(), // item id -> {signature, node}
    agentNotes: new Map(), // agent key -> {text, problem}
  };

  // --- small helpers ---

  const byId = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child); // strings become text nodes: never parsed as HTML
    }
    return node;
  }

  function cookie(name) {
    for (const part of document.cookie.split(";")) {
      const [key, ...rest] = part.trim().split("=");
      if (key === name) return decodeURIComponent(rest.join("="));
    }
    return "";
  }

  // A fresh idempotency key (crypto.randomUUID needs a secure context; this does not).
  function newKey() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function when(iso) {
    if (!iso) return null;
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return el("span", { text: iso });
    return el("time", { datetime: iso, text: date.toLocaleString() });
  }

  function announce(text) {
    const region = byId("announce");
    region.textContent = "";
    // A new text node each time, so a repeated message is announced again.
    window.setTimeout(() => {
      region.textContent = text;
    }, 50);
  }

  class ApiError extends Error {
    constructor(status, problem) {
      super(problem.detail || problem.title || `HTTP ${status}`);
      this.status = status;
      this.problem = problem;
    }
  }

  async function api(method, path, { body, headers } = {}) {
    const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (method !== "GET") init.headers[CSRF_HEADER] = cookie(CSRF_COOKIE);
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    Object.assign(init.headers, headers || {});
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiError(0, { detail: "the server cannot be reached; check your connection" });
    }
    if (response.status === 401) {
      // The session ended (expired, or signed out in another tab): back to sign-in.
      window.location.assign("/");
      throw new ApiError(401, { detail: "signed out" });
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (error) {
      data = { detail: text };
    }
    if (!response.ok) throw new ApiError(response.status, data || {});
    return data;
  }

  // --- what the API's documents say, read in one place ---

  const itemsOf = (page) => (page && Array.isArray(page.items) ? page.items : []);
  const agentKey = (agent) => String(agent.id);

  // The person's turn: blocked, and no reply of theirs waiting for the agent.
  function isAwaitingMe(item) {
    return item.state === "blocked" && !item.unprocessed;
  }

  const itemAgentName = (item) => item.agent_name || `agent ${item.agent_id}`;

  // --- the inbox ---

  function itemSignature(item) {
    const reply = item.reply || {};
    return JSON.stringify([
      item.revision,
      item.state,
      reply.serial,
      reply.seen_at,
      reply.outcome,
      state.problems.get(item.id) || "",
      state.notes.get(item.id) || "",
    ]);
  }

  function replyBlock(item) {
    const reply = item.reply;
    if (!reply) return null;
    const verb = reply.kind === "clarify" ? "Asked to clarify" : "Answered";
    const by = reply.by ? ` by ${reply.by}` : "";
    let status = "waiting for the agent to read it";
    if (reply.outcome) status = `the agent processed it: ${reply.outcome}`;
    else if (reply.seen_at) status = "the agent is working on it";
    return el(
      "div",
      { class: "reply" },
      el("p", { class: "meta" }, `${verb}${by} via ${reply.channel} `, when(reply.handled_at)),
      el("p", { text: reply.text }),
      el("p", { class: "meta", text: status }),
    );
  }

  function replyForm(item, headingId) {
    const fieldId = `reply-${item.id}`;
    const problemId = `reply-problem-${item.id}`;
    const textarea = el("textarea", {
      id: fieldId,
      name: "text",
      rows: 4,
      maxlength: 20000,
      "aria-describedby": `item-${item.id}-question ${problemId}`,
    });
    textarea.value = state.drafts.get(item.id) || "";
    textarea.addEventListener("input", () => state.drafts.set(item.id, textarea.value));
    const answer = el("button", {
      type: "submit",
      id: `answer-${item.id}`,
      name: "kind",
      value: "answer",
      text: "Send answer",
    });
    const clarify = el("button", {
      type: "submit",
      id: `clarify-${item.id}`,
      name: "kind",
      value: "clarify",
      class: "secondary",
      text: "Ask to clarify",
    });
    const form = el(
      "form",
      { class: "reply-form", "aria-labelledby": headingId, novalidate: true },
      el("label", { for: fieldId, text: "Your reply" }),
      textarea,
      el("p", { id: problemId, class: "problem", role: "alert", text: state.problems.get(item.id) || "" }),
      el("div", { class: "actions" }, answer, clarify),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const kind = event.submitter && event.submitter.value === "clarify" ? "clarify" : "answer";
      sendReply(item, kind, form, textarea);
    });
    return form;
  }

  function itemCard(item) {
    const awaiting = isAwaitingMe(item);
    const headingId = `item-${item.id}-heading`;
    const agent = itemAgentName(item);
    const card = el(
      "li",
      { class: awaiting ? "card waiting" : "card", id: `item-${item.id}`, "data-item": item.id },
      el("h3", { id: headingId, text: awaiting ? `${agent} asks` : `${agent}: ${item.key}` }),
      el("p", { class: "question", id: `item-${item.id}-question`, text: item.question }),
      item.context ? el("pre", { class: "context", "aria-label": "Context", text: item.context }) : null,
      el(
        "p",
        { class: "meta" },
        el("span", { class: "badge", text: item.state }),
        ` ${item.key} · revision ${item.revision} · `,
        when(item.updated_at || item.created_at),
      ),
      replyBlock(item),
      state.notes.get(item.id) ? el("p", { class: "note", text: state.notes.get(item.id) }) : null,
      awaiting ? replyForm(item, headingId) : null,
    );
    if (!awaiting && state.problems.get(item.id)) {
      card.append(el("p", { class: "problem", role: "alert", text: state.problems.get(item.id) }));
    }
    return card;
  }

  function cardFor(item) {
    const signature = itemSignature(item);
    const cached = state.cards.get(item.id);
    if (cached && cached.signature === signature) return cached.node;
    const node = itemCard(item);
    state.cards.set(item.id, { signature, node });
    return node;
  }

  // Put `nodes` in `list`, moving only what must move, and give the focus back if a
  // move (or a rebuilt card) took it away.
  function placeNodes(list, nodes) {
    const current = Array.from(list.children);
    const same = current.length === nodes.length && current.every((node, i) => node === nodes[i]);
    if (same) return;
    list.replaceChildren(...nodes);
  }

  function focusSnapshot() {
    const active = document.activeElement;
    if (!active || !active.id || active === document.body) return null;
    const snapshot = { id: active.id };
    if (active.tagName === "TEXTAREA") {
      snapshot.start = active.selectionStart;
      snapshot.end = active.selectionEnd;
    }
    return snapshot;
  }

  function restoreFocus(snapshot) {
    if (!snapshot) return;
    const target = byId(snapshot.id);
    if (!target || document.activeElement === target) return;
    target.focus();
    if (snapshot.start !== undefined && target.tagName === "TEXTAREA") {
      target.setSelectionRange(snapshot.start, snapshot.end);
    }
  }

  function renderInbox() {
    const snapshot = focusSnapshot();
    const waiting = state.items.filter(isAwaitingMe);
    const other = state.items.filter((item) => !isAwaitingMe(item));
    placeNodes(byId("waiting"), waiting.map(cardFor));
    placeNodes(byId("other"), other.map(cardFor));
    byId("waiting-count").textContent = `(${waiting.length})`;
    // A tab left open says how many questions wait.
    document.title = waiting.length ? `(${waiting.length}) Achilles inbox` : "Achilles inbox";
    byId("waiting-empty").hidden = waiting.length > 0;
    byId("other-empty").hidden = other.length > 0;
    const shown = new Set(state.items.map((item) => item.id));
    for (const id of state.cards.keys()) if (!shown.has(id)) state.cards.delete(id);
    restoreFocus(snapshot);
  }

  let inboxReads = 0;

  async function loadInbox() {
    const read = ++inboxReads;
    const page = await api("GET", `/v1/inbox?limit=${INBOX_LIMIT}`);
    if (read !== inboxReads) return; // a newer read is on its way: show that one
    state.items = itemsOf(page);
    byId("inbox-more").hidden = !page.next_cursor;
    renderInbox();
  }

  async function sendReply(item, kind, form, textarea) {
    const text = textarea.value.trim();
    if (!text) {
      state.problems.set(item.id, "Write your reply first.");
      renderInbox();
      byId(`reply-${item.id}`).focus();
      return;
    }
    const buttons = form.querySelectorAll("button");
    buttons.forEach((button) => {
      button.disabled = true;
    });
    state.problems.delete(item.id);
    const key = newKey();
    try {
      const outcome = await api("POST", `/v1/inbox/${encodeURIComponent(item.id)}/reply`, {
        body: { kind, text, channel: "inbox" },
        headers: { "If-Match": `"${item.revision}"`, "Idempotency-Key": key },
      });
      state.drafts.delete(item.id);
      const what = kind === "clarify" ? "Clarification request" : "Answer";
      const note = `${what} sent.${wakeNote(outcome && outcome.wake)}`;
      state.notes.set(item.id, note);
      announce(`${itemAgentName(item)}: ${note}`);
      await loadInbox();
      focusAfterReply();
    } catch (error) {
      if (!(error instanceof ApiError) || error.status === 401) throw error;
      state.problems.set(item.id, problemText(error));
      // Show the item as the server has it now; the draft is kept.
      try {
        await loadInbox();
      } catch (reloadError) {
        renderInbox();
      }
      const field = byId(`reply-${item.id}`);
      if (field) field.focus();
      announce(problemText(error));
    } finally {
      buttons.forEach((button) => {
        button.disabled = false;
      });
    }
  }

  function wakeNote(wake) {
    if (!wake || !wake.requested) return "";
    if (wake.delivered) return " The agent will run again to read it.";
    return wake.detail ? ` The agent was not woken: ${wake.detail}.` : "";
  }

  function problemText(error) {
    if (error.status === 412) {
      return (
        "This item changed while you were writing (a new reply or a re-asked question). " +
        "It now shows the latest version; your text is kept. Check it and send again."
      );
    }
    if (error.status === 409) return `Not sent: ${error.message}`;
    if (error.status === 0) return `Not sent: ${error.message}.`;
    return `Not sent (${error.status}): ${error.message}`;
  }

  // After a reply, the next question waiting (or the list's heading) gets the focus.
  function focusAfterReply() {
    const next = byId("waiting").querySelector("textarea");
    if (next) next.focus();
    else byId("waiting-heading").focus();
  }

  // --- agents and runs ---

  const openRuns = new Set(); // run ids whose output the person opened
  const outputs = new Map(); // run id -> full output, once fetched

  function agentFacts(agent) {
    const last = agent.last_run;
    const tokens = agent.weekly_tokens;
    let status = agent.phase;
    if (agent.admin_paused) status = `${agent.phase} (paused by an admin)`;
    else if (!agent.enabled) status = `${agent.phase} (disabled)`;
    const facts = [
      ["Status", status],
      ["Model", agent.model || "none"],
      ["Schedule", agent.schedule],
      ["Next run", agent.next_run_at ? when(agent.next_run_at) : "none"],
      ["Last run", last ? el("span", {}, `${last.state} `, when(last.finished_at || last.started_at)) : "none"],
      ["Tokens this week", tokens ? `${tokens.used} of ${tokens.limit} (all your agents)` : null],
    ];
    const list = el("dl", { class: "facts" });
    for (const [name, value] of facts) {
      if (value === null || value === undefined || value === "") continue;
      list.append(el("dt", { text: name }), el("dd", {}, value));
    }
    return list;
  }

  function runOutput(run) {
    if (run.output_preview === null || run.output_preview === undefined) return null;
    const pre = el("pre", { class: "output", text: outputs.get(run.id) || run.output_preview });
    const details = el("details", { open: openRuns.has(run.id) }, el("summary", { id: `run-output-${run.id}`, text: "Output" }), pre);
    details.addEventListener("toggle", async () => {
      if (!details.open) {
        openRuns.delete(run.id);
        return;
      }
      openRuns.add(run.id);
      if (outputs.has(run.id)) return;
      try {
        const full = await api("GET", `/v1/runs/${encodeURIComponent(run.id)}`);
        outputs.set(run.id, full.output || "");
        pre.textContent = full.output || "";
      } catch (error) {
        showLoadProblem(error);
      }
    });
    return details;
  }

  function runEntry(run) {
    return el(
      "li",
      { "data-run": run.id },
      el(
        "p",
        { class: "meta" },
        el("span", { class: "badge", text: run.state }),
        ` ${run.trigger} · `,
        when(run.finished_at || run.started_at || run.queued_at),
        run.reason ? ` · ${run.reason}` : null,
        run.tokens_used ? ` · ${run.tokens_used} tokens` : null,
      ),
      run.error ? el("p", { class: "problem", text: run.error }) : null,
      runOutput(run),
    );
  }

  function agentCard(agent) {
    const key = agentKey(agent);
    const headingId = `agent-${key}-heading`;
    const note = state.agentNotes.get(key) || {};
    let action;
    if (agent.namespace) {
      action = el("button", {
        type: "button",
        id: `run-now-${key}`,
        class: "secondary",
        "aria-describedby": headingId,
        text: "Run now",
      });
      action.addEventListener("click", () => runNow(agent, action));
    } else {
      action = el("p", { class: "meta", text: "No Agent resource: it cannot be run from here." });
    }
    const runs = state.runsByAgent.get(key) || [];
    return el(
      "li",
      { class: "card", "data-agent": key },
      el("h3", { id: headingId, text: agent.name }),
      el("p", { class: "meta", text: agent.namespace ? `namespace ${agent.namespace}` : `agent ${agent.id}` }),
      agent.description ? el("p", { text: agent.description }) : null,
      agentFacts(agent),
      el("div", { class: "actions" }, action),
      el("p", { class: "note", role: "status", text: note.text || "" }),
      el("p", { class: "problem", role: "alert", text: note.problem || "" }),
      el("h4", { text: runs.length ? "Recent runs" : "No runs yet" }),
      runs.length ? el("ul", { class: "runs" }, ...runs.map(runEntry)) : null,
    );
  }

  function renderAgents() {
    const snapshot = focusSnapshot();
    byId("agents").replaceChildren(...state.agents.map(agentCard));
    byId("agents-empty").hidden = state.agents.length > 0;
    restoreFocus(snapshot);
  }

  let agentReads = 0;

  async function loadAgents() {
    const read = ++agentReads;
    const agents = itemsOf(await api("GET", `/v1/agents?limit=${AGENTS_LIMIT}`));
    const runs = await Promise.all(
      agents.map((agent) =>
        api("GET", `/v1/runs?agent=${encodeURIComponent(agent.id)}&limit=${RUNS_PER_AGENT}`),
      ),
    );
    if (read !== agentReads) return;
    state.agents = agents;
    state.runsByAgent = new Map(agents.map((agent, i) => [agentKey(agent), itemsOf(runs[i])]));
    renderAgents();
  }

  async function runNow(agent, button) {
    const key = agentKey(agent);
    button.disabled = true;
    state.agentNotes.set(key, {});
    try {
      const path = `/v1/agents/${encodeURIComponent(agent.namespace)}/${encodeURIComponent(agent.name)}/runs`;
      await api("POST", path, { headers: { "Idempotency-Key": newKey() } });
      state.agentNotes.set(key, { text: "Run requested: it appears below when the operator starts it." });
      announce(`Run of ${agent.name} requested.`);
    } catch (error) {
      if (!(error instanceof ApiError) || error.status === 401) throw error;
      state.agentNotes.set(key, { problem: `Not started: ${error.message}` });
      announce(`Run of ${agent.name} not started: ${error.message}`);
    }
    button.disabled = false;
    await loadAgents().catch(showLoadProblem);
    const again = byId(`run-now-${key}`);
    if (again) again.focus();
  }

  // --- live updates ---

  let refreshTimer = null;
  const pending = new Set();

  // Coalesce a burst of events into one re-read of what changed.
  function refreshSoon(what) {
    pending.add(what);
    if (refreshTimer) return;
    refreshTimer = window.setTimeout(async () => {
      refreshTimer = null;
      const todo = new Set(pending);
      pending.clear();
      try {
        if (todo.has("inbox")) await loadInbox();
        if (todo.has("runs")) await loadAgents();
      } catch (error) {
        showLoadProblem(error);
      }
    }, 100);
  }

  function setLive(liveState, text) {
    const badge = byId("live");
    badge.dataset.state = liveState;
    badge.textContent = text;
  }

  // EventSource reconnects by itself after a dropped connection (sending Last-Event-ID);
  // an error answer (a 503 while the server starts) closes it for good, so then we open
  // a new one, a little later each time, and re-read everything once it is open.
  let retryDelay = 1000;

  function follow() {
    const source = new EventSource("/v1/events");
    let opened = false;
    source.addEventListener("open", () => {
      setLive("live", "live");
      retryDelay = 1000;
      if (opened) {
        refreshSoon("inbox");
        refreshSoon("runs");
      }
      opened = true;
    });
    source.addEventListener("ready", () => setLive("live", "live"));
    source.addEventListener("inbox_item", () => refreshSoon("inbox"));
    source.addEventListener("run", () => refreshSoon("runs"));
    source.addEventListener("error", () => {
      setLive("reconnecting", "reconnecting…");
      if (source.readyState !== EventSource.CLOSED) return;
      window.setTimeout(() => {
        follow();
        refreshSoon("inbox");
        refreshSoon("runs");
      }, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 30000);
    });
  }

  // --- start ---

  function showLoadProblem(error) {
    if (error instanceof ApiError && error.status === 401) return;
    announce(`Could not load: ${error.message}`);
  }

  async function signOut() {
    try {
      await api("POST", "/auth/logout");
    } finally {
      window.location.assign("/");
    }
  }

  async function start() {
    byId("sign-out").addEventListener("click", () => signOut().catch(() => {}));
    try {
      const me = await api("GET", "/v1/me");
      byId("whoami").textContent = `Signed in as ${me.user_key}`;
    } catch (error) {
      showLoadProblem(error);
      return;
    }
    follow();
    await Promise.all([loadInbox(), loadAgents()]).catch(showLoadProblem);
  }

  start();
})();
