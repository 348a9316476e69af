// The web inbox's script (an ES module; the page loads it with type="module").
//
// Safety rules kept throughout: every piece of server text (an agent's question is
// untrusted) reaches the page through textContent / text nodes, never innerHTML; no
// token is ever stored (the session cookie is HttpOnly; the CSRF cookie is read only
// to echo it in a header, which is its purpose).
//
// This module follows /v1/events and starts the page; items.js and agents.js draw and
// write their parts, api.js and dom.js are what they share.

import { loadAgents } from "./agents.js";
import { api, showLoadProblem } from "./api.js";
import { byId } from "./dom.js";
import { loadInbox } from "./items.js";

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
