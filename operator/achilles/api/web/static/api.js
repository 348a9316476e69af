// The JSON API as the page calls it: the session cookie rides along (same origin), every
// write echoes the CSRF cookie in its header, and a problem document becomes an ApiError.

import { announce } from "./dom.js";

const CSRF_COOKIE = "achilles_csrf";
const CSRF_HEADER = "X-CSRF-Token";

function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return "";
}

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export async function api(method, path, { body, headers } = {}) {
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

export const itemsOf = (page) => (page && Array.isArray(page.items) ? page.items : []);

// Reads of one list can overlap (a write's own re-read and an event's): only the newest
// is shown, and every caller waits until it is, so what a caller does next (moving the
// focus) sees the page as the newest read drew it. `read` resolves to the drawing step.
export function newestWins(read) {
  let started = 0;
  let newest = Promise.resolve();
  return () => {
    const mine = ++started;
    const promise = read().then(
      (draw) => (mine === started ? draw() : newest),
      (error) => {
        if (mine === started) throw error;
        return newest;
      },
    );
    newest = promise;
    return promise;
  };
}

export function showLoadProblem(error) {
  if (error instanceof ApiError && error.status === 401) return;
  announce(`Could not load: ${error.message}`);
}
