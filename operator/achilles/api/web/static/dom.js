// Building the page: elements from data (text only, never HTML), announcements, and
// keeping the focus where the person left it while parts of the page are rebuilt.

export const byId = (id) => document.getElementById(id);

export function el(tag, attrs, ...children) {
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


// A fresh idempotency key (crypto.randomUUID needs a secure context; this does not).
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function when(iso) {
  if (!iso) return null;
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return el("span", { text: iso });
  return el("time", { datetime: iso, text: date.toLocaleString() });
}

export function announce(text) {
  const region = byId("announce");
  region.textContent = "";
  // A new text node each time, so a repeated message is announced again.
  window.setTimeout(() => {
    region.textContent = text;
  }, 50);
}


// Put `nodes` in `list`, moving only what must move, and give the focus back if a
// move (or a rebuilt card) took it away.
export function placeNodes(list, nodes) {
  const current = Array.from(list.children);
  const same = current.length === nodes.length && current.every((node, i) => node === nodes[i]);
  if (same) return;
  list.replaceChildren(...nodes);
}

export function focusSnapshot() {
  const active = document.activeElement;
  if (!active || !active.id || active === document.body) return null;
  const snapshot = { id: active.id };
  if (active.tagName === "TEXTAREA") {
    snapshot.start = active.selectionStart;
    snapshot.end = active.selectionEnd;
  }
  return snapshot;
}

export function restoreFocus(snapshot) {
  if (!snapshot) return;
  const target = byId(snapshot.id);
  if (!target || document.activeElement === target) return;
  target.focus();
  if (snapshot.start !== undefined && target.tagName === "TEXTAREA") {
    target.setSelectionRange(snapshot.start, snapshot.end);
  }
}
