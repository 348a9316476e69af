// The inbox: what waits for the person (blocked, no reply pending) and the other items,
// each a card; a reply posts over the revision the card shows (If-Match).
//
// Cards are kept while their item does not change, so a live update never disturbs a
// reply being typed; drafts, problems and notes live here, not in the cards.

import { ApiError, api, itemsOf, newestWins } from "./api.js";
import { announce, byId, el, focusSnapshot, newKey, placeNodes, restoreFocus, when } from "./dom.js";

const INBOX_LIMIT = 200; // the API's largest page

const state = {
  items: [], // the inbox, as the server last listed it (blocked first)
  drafts: new Map(), // item id -> reply text not sent yet
  problems: new Map(), // item id -> the last problem to show on its card
  notes: new Map(), // item id -> the last success note
  cards: new Map(), // item id -> {signature, node}
  approvals: new Map(), // item id -> the call an approval item asks (GET .../approval)
  approvalReads: new Set(), // item ids whose approval is being read
};

// An approval (issue 38): an item an agent asked to make one tool call; the card shows
// the tool and its arguments (model-written: shown as text) and approve / reject.
const APPROVAL_PREFIX = "approval-";
const isApproval = (item) => typeof item.key === "string" && item.key.startsWith(APPROVAL_PREFIX);

// The person's turn: blocked, and no reply of theirs waiting for the agent.
function isAwaitingMe(item) {
  return item.state === "blocked" && !item.unprocessed;
}

const itemAgentName = (item) => item.agent_name || `agent ${item.agent_id}`;

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
    JSON.stringify(state.approvals.get(item.id) || null),
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

function readApproval(item) {
  if (state.approvalReads.has(item.id)) return;
  state.approvalReads.add(item.id);
  api("GET", `/v1/inbox/${encodeURIComponent(item.id)}/approval`)
    .then((approval) => state.approvals.set(item.id, approval))
    .catch((error) => state.problems.set(item.id, `Could not read the call: ${error.message}`))
    .finally(() => {
      state.approvalReads.delete(item.id);
      renderInbox();
    });
}

function argumentValue(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function approvalStatus(approval) {
  switch (approval.state) {
    case "pending":
      return "Waiting for your decision. Approve: the agent's next run makes this call once, with exactly these arguments. Reject: it is never made.";
    case "approved":
      return "Approved: the agent's next run makes the call.";
    case "executing":
      return "Approved: the call is being made.";
    case "executed":
      return "Approved: the call was made.";
    case "failed":
      return `Approved, but the call failed: ${approval.error || "unknown error"}`;
    case "rejected":
      return "Rejected: the call was not made.";
    case "expired":
      return "Expired unanswered: the call was not made.";
    default:
      return approval.state;
  }
}

function approvalBlock(item, headingId) {
  const approval = state.approvals.get(item.id);
  if (!approval) {
    readApproval(item);
    return el("p", { class: "meta", text: "Reading the call…" });
  }
  const argumentRows = Object.entries(approval.arguments || {})
    .sort(([a], [b]) => a.localeCompare(b))
    .flatMap(([name, value]) => [
    el("dt", { text: name }),
    el("dd", {}, el("pre", { class: "argument", text: argumentValue(value) })),
  ]);
  const block = el(
    "div",
    { class: "approval", id: `approval-${item.id}` },
    el("p", { class: "approval-tool" }, "Tool: ", el("code", { text: `${approval.agent_tool} / ${approval.tool}` })),
    argumentRows.length
      ? el("dl", { class: "arguments", "aria-label": "Arguments" }, ...argumentRows)
      : el("p", { class: "meta", text: "No arguments." }),
    approval.reason ? el("p", { class: "reason" }, "The agent's reason: ", el("q", { text: approval.reason })) : null,
    el("p", { class: "meta approval-state", text: approvalStatus(approval) }),
    approval.result ? el("pre", { class: "context", "aria-label": "Result", text: approval.result }) : null,
  );
  if (approval.state === "pending") block.append(decisionForm(item, headingId));
  return block;
}

function decisionForm(item, headingId) {
  const approve = el("button", { type: "submit", id: `approve-${item.id}`, value: "approve", text: "Approve" });
  const reject = el("button", {
    type: "submit",
    id: `reject-${item.id}`,
    value: "reject",
    class: "secondary",
    text: "Reject",
  });
  const form = el(
    "form",
    { class: "reply-form", "aria-labelledby": headingId, novalidate: true },
    el("p", { class: "problem", role: "alert", text: state.problems.get(item.id) || "" }),
    el("div", { class: "actions" }, approve, reject),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const decision = event.submitter && event.submitter.value === "reject" ? "reject" : "approve";
    sendDecision(item, decision, form);
  });
  return form;
}

async function sendDecision(item, decision, form) {
  const buttons = form.querySelectorAll("button");
  buttons.forEach((button) => {
    button.disabled = true;
  });
  state.problems.delete(item.id);
  try {
    const outcome = await api("POST", `/v1/inbox/${encodeURIComponent(item.id)}/approval`, {
      body: { decision },
    });
    state.approvals.set(item.id, outcome.approval);
    const woken = outcome.wake_requested ? " The agent will run again." : "";
    const note = `${decision === "approve" ? "Approved" : "Rejected"}.${woken}`;
    state.notes.set(item.id, note);
    announce(`${itemAgentName(item)}: ${note}`);
    await loadInbox();
  } catch (error) {
    if (!(error instanceof ApiError) || error.status === 401) throw error;
    state.problems.set(item.id, problemText(error));
    state.approvals.delete(item.id);
    await loadInbox().catch(() => renderInbox());
    announce(problemText(error));
  } finally {
    buttons.forEach((button) => {
      button.disabled = false;
    });
  }
}

function itemCard(item) {
  const awaiting = isAwaitingMe(item);
  const approval = isApproval(item);
  const headingId = `item-${item.id}-heading`;
  const agent = itemAgentName(item);
  const card = el(
    "li",
    { class: awaiting ? "card waiting" : "card", id: `item-${item.id}`, "data-item": item.id },
    el("h3", {
      id: headingId,
      text: approval ? `${agent} asks to make a call` : awaiting ? `${agent} asks` : `${agent}: ${item.key}`,
    }),
    el("p", { class: "question", id: `item-${item.id}-question`, text: item.question }),
    item.context && !approval ? el("pre", { class: "context", "aria-label": "Context", text: item.context }) : null,
    approval ? approvalBlock(item, headingId) : null,
    el(
      "p",
      { class: "meta" },
      el("span", { class: "badge", text: item.state }),
      ` ${item.key} · revision ${item.revision} · `,
      when(item.updated_at || item.created_at),
    ),
    replyBlock(item),
    state.notes.get(item.id) ? el("p", { class: "note", text: state.notes.get(item.id) }) : null,
    awaiting && !approval ? replyForm(item, headingId) : null,
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

export const loadInbox = newestWins(async () => {
  const page = await api("GET", `/v1/inbox?limit=${INBOX_LIMIT}`);
  return () => {
    state.items = itemsOf(page);
    byId("inbox-more").hidden = !page.next_cursor;
    renderInbox();
  };
});

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
