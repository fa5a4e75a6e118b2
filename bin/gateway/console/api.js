// The gateway's public API, with the operator token from this tab's session storage.

import { h } from './dom.js';

const TOKEN_KEY = 'agent-gateway.admin-token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** A refused request: the HTTP status and the gateway's error body (`reason`, `detail`). */
export class ApiError extends Error {
  constructor(status, body) {
    const reason = body && typeof body === 'object' ? body.reason : null;
    super(reason ? `${status} ${reason}` : `HTTP ${status}`);
    this.status = status;
    this.reason = reason ?? null;
    this.detail = body && typeof body === 'object' && typeof body.detail === 'string' ? body.detail : null;
    this.body = body;
  }
}

/** Called when the gateway refuses the token: the app goes back to sign-in. */
let onUnauthorized = () => {};

export function whenUnauthorized(callback) {
  onUnauthorized = callback;
}

/** For a 401 met outside api() (an event stream): signs the tab out like any other. */
export function reportUnauthorized(error) {
  onUnauthorized(error);
}

/**
 * One API call. Resolves to the parsed JSON body of a 2xx answer (and of the statuses in `accept`); rejects with
 * an ApiError otherwise, or a TypeError when the gateway cannot be reached. A 401 also signs the tab out.
 * `withToken` sends that token instead of the stored one.
 */
export async function api(method, path, { body, signal, accept = [], withToken } = {}) {
  const headers = { Accept: 'application/json' };
  const current = withToken ?? token();
  if (current) headers.Authorization = `Bearer ${current}`;
  const init = { method, headers, signal, cache: 'no-store', credentials: 'omit', redirect: 'error' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (response.ok || accept.includes(response.status)) return parsed;
  const error = new ApiError(response.status, parsed);
  // A token being checked at sign-in (`withToken`) is answered in the form instead.
  if (response.status === 401 && withToken === undefined) onUnauthorized(error);
  throw error;
}

/** A query string of the set values in `params`. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

// In cluster mode a page of GET /gateway/agents reads at most 10,000 agent rows, evicted agents' included, so it may
// hold fewer than `limit` agents (even none) with `next_after` set: followed, up to this many requests per call.
const MAX_AGENT_REQUESTS = 20;

/** Up to `limit` live agents after `after`, following `next_after` through short pages (`next_after` null: no more). */
export async function readLiveAgents(limit, after, signal) {
  let agents = [];
  let next = after;
  for (let request = 0; request < MAX_AGENT_REQUESTS; request += 1) {
    const page = await api('GET', `/gateway/agents${query({ limit: limit - agents.length, after: next })}`, { signal });
    agents = agents.concat(page.agents);
    next = page.next_after;
    if (next === null || agents.length >= limit) break;
  }
  return { agents, next_after: next };
}

/** What went wrong, in words: for an inline message. */
export function describe(error) {
  if (error instanceof ApiError) {
    const known = {
      400: 'The gateway refused the request',
      403: 'Not allowed',
      404: 'Not found',
      409: 'Conflict',
      413: 'Too large',
      422: 'The gateway refused the values',
      429: 'Rate limited',
      500: 'The gateway failed (details are in its log)',
      503: 'The gateway cannot do this right now; retry shortly',
    };
    return { title: `${known[error.status] ?? 'Request failed'} (${error.message})`, detail: error.detail };
  }
  if (error && error.name === 'AbortError') return { title: 'Cancelled', detail: null };
  return { title: 'Could not reach the gateway', detail: error ? String(error.message ?? error) : null };
}

/** An error as an inline alert. */
export function errorAlert(error, prefix) {
  const { title, detail } = describe(error);
  return h(
    'div',
    { class: 'alert error', role: 'alert', 'data-testid': 'error' },
    prefix ? `${prefix}: ${title}` : title,
    detail ? h('span', { class: 'detail' }, detail) : null,
  );
}
