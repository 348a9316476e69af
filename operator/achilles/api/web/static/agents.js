// My agents: what `kubectl get agents` shows of each, its latest runs (the whole output
// on demand) and Run now.

import { ApiError, api, itemsOf, newestWins, showLoadProblem } from "./api.js";
import { announce, byId, el, focusSnapshot, newKey, restoreFocus, when } from "./dom.js";

const RUNS_PER_AGENT = 5;
const AGENTS_LIMIT = 500;

const state = {
  agents: [],
  runsByAgent: new Map(), // agent key -> runs, newest first
  agentNotes: new Map(), // agent key -> {text, problem}
};

const agentKey = (agent) => String(agent.id);

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

export const loadAgents = newestWins(async () => {
  const agents = itemsOf(await api("GET", `/v1/agents?limit=${AGENTS_LIMIT}`));
  const runs = await Promise.all(
    agents.map((agent) =>
      api("GET", `/v1/runs?agent=${encodeURIComponent(agent.id)}&limit=${RUNS_PER_AGENT}`),
    ),
  );
  return () => {
    state.agents = agents;
    state.runsByAgent = new Map(agents.map((agent, i) => [agentKey(agent), itemsOf(runs[i])]));
    renderAgents();
  };
});

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
