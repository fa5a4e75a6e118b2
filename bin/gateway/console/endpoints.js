// Webhook endpoints (the configs, DESIGN.md §18): each with its name, target and health, and what an operator does
// to one — send a test event, rotate its secret (the new one shown once, the old one's grace shown), enable or
// disable it, and recover a window of its dead deliveries, whose progress is followed until none is in flight.

import { h, replace, table, empty, field, showOnce } from './dom.js';
import { api, errorAlert, query, describe, ApiError } from './api.js';
import { absolute, badge, clock, localToRfc3339, number, rfc3339ToLocal, when } from './format.js';
import { host } from './deliveries.js';
import { hourlyCharts } from './charts.js';

/** How long a test delivery is watched for its first outcome. */
const WATCH_MS = 60000;
const WATCH_EVERY_MS = 1000;
/** How often a recover's progress is read again. */
const PROGRESS_EVERY_MS = 1000;
/** Inspector pages read to find (and follow) a recover's deliveries: past 20 × 500, the rest is not followed. */
const PAGE = 500;
const MAX_PAGES = 20;
/** How long the previous secret keeps verifying inbound requests after a rotation (SECRET_ROTATION_GRACE). */
const SECRET_GRACE_MS = 24 * 3600 * 1000;

/** A config as operators know it, as the deliveries view names it: `github · push → hooks.example.com #3`. */
function name(config) {
  return [h('strong', {}, `${config.source_identifier} · ${config.event_type}`),
    h('span', { class: 'muted' }, ` → ${host(config.target_url)} `),
    h('span', { class: 'mono muted' }, `#${config.id}`)];
}

export function render(main, _route, context) {
  const updated = h('span', { class: 'updated', 'aria-live': 'off' }, 'Loading…');
  const refresh = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'endpoints-refresh' }, 'Refresh');
  const body = h('div', {}, h('div', { class: 'empty' }, 'Loading…'));
  const recoverPanel = h('div', { 'data-testid': 'recover-panel' });
  main.append(
    h('div', { class: 'view-head' }, h('h1', {}, 'Webhook endpoints'),
      h('div', { class: 'actions' },
        h('span', { class: 'hint' }, 'Each webhook config is an endpoint for its event type.'), updated, refresh)),
    h('section', { class: 'panel flush', 'aria-label': 'Endpoints' }, body),
    recoverPanel,
  );
  const load = async () => {
    try {
      const list = await api('GET', '/gateway/webhook-configs', { signal: context.signal });
      const configs = list.webhook_configs;
      replace(body, configs.length === 0
        ? empty('No webhook endpoints', 'Create one with POST /gateway/webhook-configs (docs/webhooks.md).')
        : table(
          [['Endpoint'], ['Target'], ['Health'], ['Secret'], ['', 'actions']],
          configs.map((config) => endpointRow(config, { context, reload: load, recoverPanel })),
          { 'data-testid': 'endpoints-table' },
        ));
      updated.textContent = `Updated ${clock()}`;
    } catch (error) {
      if (!context.signal.aborted) replace(body, errorAlert(error, 'Could not load the endpoints'));
    }
  };
  refresh.addEventListener('click', load);
  load();
}

function endpointRow(config, { context, reload, recoverPanel }) {
  const now = Date.now();
  const result = h('div', { class: 'inline-result', 'aria-live': 'polite', 'data-testid': 'endpoint-result' });
  const test = h('button', { type: 'button', class: 'button small', 'data-testid': 'test' }, 'Send test');
  test.addEventListener('click', () => sendTest(config, { button: test, result, context }));
  const recover = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'recover' }, 'Recover…');
  recover.addEventListener('click', () => showRecover(config, recoverPanel, context));
  const charts = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'charts' }, 'Last 24 h');
  charts.addEventListener('click', () => showCharts(config, recoverPanel, context));
  const actions = h('div', { class: 'endpoint-actions' });
  const showActions = () => {
    const rotate = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'rotate' }, 'Rotate secret');
    rotate.addEventListener('click', confirmRotate);
    replace(actions, test, rotate, toggleButton(config, { result, context, reload }), recover, charts);
  };
  const confirmRotate = () => {
    const yes = h('button', { type: 'button', class: 'button danger solid small', 'data-testid': 'confirm-rotate' }, 'Rotate now');
    const no = h('button', { type: 'button', class: 'button ghost small' }, 'Cancel');
    no.addEventListener('click', showActions);
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      no.disabled = true;
      const secret = newSecret();
      try {
        const rotated = await api('PATCH', `/gateway/webhook-configs/${config.id}`, { body: { secret }, signal: context.signal });
        showSecret(rotated, secret, reload);
      } catch (error) {
        if (context.signal.aborted) return;
        showActions();
        result.className = 'inline-result error';
        replace(result, errorAlert(error, 'Not rotated'));
      }
    });
    replace(actions, h('span', { class: 'muted' }, 'Sign with a new secret from now on?'), yes, no);
    no.focus();
  };
  showActions();
  return h(
    'tr',
    { 'data-testid': 'endpoint-row', dataset: { webhookId: config.id } },
    h('td', { 'data-testid': 'webhook-name' }, name(config),
      h('div', { class: 'sub' }, `${config.agent_intent} (${config.target_session})`)),
    h('td', { class: 'mono' }, h('span', { class: 'truncate', title: config.target_url }, config.target_url)),
    h('td', { 'data-testid': 'endpoint-health' }, health(config, now)),
    h('td', { 'data-testid': 'endpoint-secret' }, secretState(config, now)),
    h('td', { class: 'actions' }, actions, result),
  );
}

/**
 * What the API says of the endpoint's health: each of `enabled`, `disabled_reason`, `consecutive_failures`,
 * `last_success_at` and `stats_24h` when it gives it (a gateway without them shows a dash).
 */
function health(config, now) {
  const parts = [];
  if (typeof config.enabled === 'boolean') {
    parts.push(h('div', {}, config.enabled ? badge('enabled', 'ok') : badge('disabled', 'bad'),
      !config.enabled && config.disabled_reason ? h('span', { class: 'muted' }, ` ${config.disabled_reason}`) : null));
  }
  if (typeof config.consecutive_failures === 'number') {
    parts.push(h('div', { class: config.consecutive_failures > 0 ? '' : 'muted' },
      `${number(config.consecutive_failures)} failed in a row`));
  }
  if ('last_success_at' in config) {
    parts.push(h('div', {}, h('span', { class: 'muted' }, 'Last success: '),
      config.last_success_at ? when(config.last_success_at, { now }) : h('span', { class: 'muted' }, 'never')));
  }
  const stats = config.stats_24h;
  if (stats && typeof stats === 'object') {
    parts.push(h('div', { class: 'sub', 'data-testid': 'stats-24h' },
      `24 h: ${number(stats.delivered)} delivered · ${number(stats.failed_attempts)} failed attempts · ${number(stats.dead)} dead`));
  }
  return parts.length > 0 ? parts : h('span', { class: 'muted' }, '—');
}

function secretState(config, now) {
  if (!config.secret_rotated_at) return h('span', { class: 'muted' }, 'never rotated');
  const graceEnds = Date.parse(config.secret_rotated_at) + SECRET_GRACE_MS;
  return [h('div', {}, h('span', { class: 'muted' }, 'Rotated '), when(config.secret_rotated_at, { now })),
    graceEnds > now
      ? h('div', { class: 'sub' }, `previous one accepted inbound until ${absolute(new Date(graceEnds).toISOString())}`)
      : null];
}

/** Enable or disable (`PATCH {"enabled"}`), offered when the gateway reports `enabled`. */
function toggleButton(config, { result, context, reload }) {
  if (typeof config.enabled !== 'boolean') return null;
  const enable = !config.enabled;
  const button = h('button', { type: 'button', class: enable ? 'button small' : 'button danger small', 'data-testid': 'toggle' },
    enable ? 'Enable' : 'Disable');
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await api('PATCH', `/gateway/webhook-configs/${config.id}`, { body: { enabled: enable }, signal: context.signal });
      reload();
    } catch (error) {
      if (context.signal.aborted) return;
      button.disabled = false;
      result.className = 'inline-result error';
      replace(result, errorAlert(error, enable ? 'Not enabled' : 'Not disabled'));
    }
  });
  return button;
}

/** 32 random bytes as base64url: a secret nobody typed. */
function newSecret() {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes)).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

/**
 * The new secret, this once: a modal dialog with the secret as read-only text, a copy button, and when the previous
 * secret stops verifying inbound requests. Closing it removes the dialog, and the secret with it, from the page.
 */
function showSecret(config, secret, onClosed) {
  const graceEnds = new Date(Date.parse(config.secret_rotated_at) + SECRET_GRACE_MS).toISOString();
  showOnce({
    kind: 'secret',
    label: 'The new secret',
    value: secret,
    title: ['New secret for ', name(config)],
    body: [
      h('p', {}, h('strong', {}, 'Shown this once.'), ' Give it to the receiver now: every delivery from now on is signed with it.'),
      h('p', { 'data-testid': 'secret-grace' }, config.has_inbound_secret
        ? 'Inbound requests are verified with this endpoint\'s inbound secret, which did not change.'
        : `Inbound requests signed with the previous secret are still accepted for 24 h, until ${absolute(graceEnds)}, ` +
          'unless it is revoked (PATCH with "revoke_previous": true).'),
    ],
    onClosed,
  });
}

/** Sends a test event, then watches its delivery until the first attempt has an outcome. */
async function sendTest(config, { button, result, context }) {
  button.disabled = true;
  result.className = 'inline-result';
  replace(result, 'Sending a test event…');
  let sent;
  try {
    sent = await api('POST', `/gateway/webhook-configs/${config.id}/test`, { signal: context.signal });
  } catch (error) {
    if (context.signal.aborted) return;
    button.disabled = false;
    result.className = 'inline-result error';
    replace(result, error instanceof ApiError && error.status === 404
      ? 'Not sent (404): this endpoint no longer exists.'
      : errorAlert(error, 'Not sent'));
    return;
  }
  button.disabled = false;
  const link = h('a', { href: `#/deliveries/${sent.delivery_id}`, 'data-testid': 'test-delivery' }, `#${sent.delivery_id}`);
  if (config.enabled === false) {
    // Held like every delivery of a disabled endpoint: it goes out when the endpoint is enabled.
    replace(result, 'Test delivery ', link, ' held: this endpoint is disabled; it goes out once it is enabled.');
    return;
  }
  replace(result, 'Test delivery ', link, ' sent; waiting for its first attempt…');
  const deadline = Date.now() + WATCH_MS;
  while (!context.signal.aborted && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, WATCH_EVERY_MS));
    if (context.signal.aborted) return;
    let current;
    try {
      current = await api('GET', `/gateway/deliveries/${sent.delivery_id}`, { signal: context.signal });
    } catch {
      continue;
    }
    if (current.attempt_count === 0) continue;
    if (current.status === 'delivered') {
      result.className = 'inline-result success';
      replace(result, 'Test delivery ', link, ' delivered.');
    } else {
      result.className = 'inline-result error';
      replace(result, 'Test delivery ', link, ` failed (${current.error_detail ?? 'no detail'}); it is retried like any other.`);
    }
    return;
  }
}

/** One endpoint's last 24 hours (its deliveries, failed attempts and dead letters per hour), below the list. */
function showCharts(config, panel, context) {
  const close = h('button', { type: 'button', class: 'button ghost small' }, 'Close');
  close.addEventListener('click', () => replace(panel));
  const box = h('div', { 'data-testid': 'endpoint-charts' });
  replace(panel, h('section', { class: 'panel', 'aria-labelledby': 'endpoint-charts-title' },
    h('div', { class: 'view-head' }, h('h2', { id: 'endpoint-charts-title' }, 'The last 24 hours of ', name(config)), close),
    box));
  hourlyCharts(box, { webhookId: config.id, signal: context.signal });
  panel.scrollIntoView({ block: 'nearest' });
}

// ---------------------------------------------------------------------------------------------------------------
// Recover

function showRecover(config, panel, context) {
  const since = h('input', {
    type: 'datetime-local', step: 1, required: true, 'data-testid': 'recover-since',
    value: rfc3339ToLocal(new Date(Date.now() - 24 * 3600 * 1000).toISOString()),
  });
  const until = h('input', { type: 'datetime-local', step: 1, 'data-testid': 'recover-until' });
  const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'recover-submit' }, 'Recover dead deliveries');
  const close = h('button', { type: 'button', class: 'button ghost' }, 'Close');
  const result = h('div', { 'aria-live': 'polite', 'data-testid': 'recover-result' });
  const form = h(
    'form',
    { class: 'filters', novalidate: true },
    field('Created since (local time)', since, { id: 'recover-since' }),
    field('Until (local time; empty: now)', until, { id: 'recover-until' }),
    submit,
    close,
  );
  close.addEventListener('click', () => replace(panel));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const range = { since: localToRfc3339(since.value), until: localToRfc3339(until.value) };
    if (!range.since) {
      replace(result, h('div', { class: 'alert error', role: 'alert' }, 'Choose where the window starts.'));
      since.focus();
      return;
    }
    submit.disabled = true;
    replace(result, h('div', { class: 'alert info' }, 'Recovering…'));
    try {
      // Which deliveries the recover takes is read first, so that their progress can be followed afterwards.
      const tracked = await deadInWindow(config.id, range, context.signal);
      const body = range.until ? range : { since: range.since };
      const answer = await api('POST', `/gateway/webhook-configs/${config.id}/recover`, { body, signal: context.signal });
      followProgress(result, answer.recovered, tracked, range, context);
    } catch (error) {
      if (!context.signal.aborted) replace(result, errorAlert(error, 'Not recovered'));
    } finally {
      submit.disabled = false;
    }
  });
  replace(panel, h('section', { class: 'panel', 'aria-labelledby': 'recover-title' },
    h('h2', { id: 'recover-title' }, 'Recover dead deliveries of ', name(config)),
    h('p', { class: 'muted' }, 'Every dead delivery of this endpoint created in the window goes back to pending with a full ' +
      'set of attempts. They go out under the outbound rate, oldest first.'),
    form, result));
  since.focus();
}

/** The inspector's `to` (exclusive) for a window whose `until` is included. */
function exclusiveEnd(until) {
  return until ? new Date(Date.parse(until) + 1).toISOString() : null;
}

/** The ids of the endpoint's dead deliveries created in the window, as far as the first pages go. */
async function deadInWindow(webhookId, range, signal) {
  const ids = new Set();
  let after = null;
  let pages = 0;
  do {
    const page = await api('GET', `/gateway/deliveries${query({
      status: 'dead', from: range.since, to: exclusiveEnd(range.until), limit: PAGE, after_id: after,
    })}`, { signal });
    for (const delivery of page.deliveries) if (delivery.webhook_id === webhookId) ids.add(delivery.id);
    after = page.next_after_id;
    pages += 1;
  } while (after !== null && pages < MAX_PAGES);
  return ids;
}

/** Where the tracked deliveries stand now: `{inFlight, delivered, dead, seen}`. */
async function standing(tracked, range, signal) {
  const counts = { inFlight: 0, delivered: 0, dead: 0, seen: 0 };
  let after = Math.min(...tracked) - 1;
  let pages = 0;
  while (after !== null && pages < MAX_PAGES && counts.seen < tracked.size) {
    const page = await api('GET', `/gateway/deliveries${query({
      from: range.since, to: exclusiveEnd(range.until), limit: PAGE, after_id: after,
    })}`, { signal });
    for (const delivery of page.deliveries) {
      if (!tracked.has(delivery.id)) continue;
      counts.seen += 1;
      if (delivery.status === 'delivered') counts.delivered += 1;
      else if (delivery.status === 'dead') counts.dead += 1;
      else counts.inFlight += 1;
    }
    after = page.next_after_id;
    pages += 1;
  }
  return counts;
}

/** `recovered: n`, then how many of them are still pending or failing and how many delivered or dead, until none is left in flight. */
function followProgress(result, recovered, tracked, range, context) {
  const progress = h('div', { class: 'inline-result', 'data-testid': 'recover-progress', dataset: { state: 'running' } });
  replace(result,
    h('div', { class: 'alert success', role: 'status' }, h('strong', { 'data-testid': 'recovered' }, `recovered: ${number(recovered)}`),
      recovered > 0 ? ' — now going out under the outbound rate.' : ' — nothing dead in this window.'),
    recovered > 0 ? progress : null);
  if (recovered === 0 || tracked.size === 0) {
    progress.dataset.state = 'done';
    return;
  }
  let done = false;
  let reading = false;
  const tick = async () => {
    if (done || reading) return;
    reading = true;
    try {
      const counts = await standing(tracked, range, context.signal);
      done = counts.inFlight === 0;
      progress.dataset.state = done ? 'done' : 'running';
      progress.className = `inline-result ${done ? (counts.dead > 0 ? 'error' : 'success') : ''}`.trim();
      replace(progress,
        done ? h('strong', {}, 'Done: ') : h('strong', {}, 'In progress: '),
        h('span', { 'data-testid': 'progress-in-flight' }, `${number(counts.inFlight)} still pending or failing`), ' · ',
        h('span', { 'data-testid': 'progress-delivered' }, `${number(counts.delivered)} delivered`), ' · ',
        h('span', { 'data-testid': 'progress-dead' }, `${number(counts.dead)} dead again`),
        h('span', { class: 'muted' }, ` · updated ${clock()}`),
        tracked.size < recovered ? h('span', { class: 'muted' }, ` (following the first ${number(tracked.size)})`) : null);
    } catch (error) {
      if (!context.signal.aborted) replace(progress, `Could not read the progress: ${describe(error).title}; retrying`);
    } finally {
      reading = false;
    }
  };
  context.every(PROGRESS_EVERY_MS, tick);
  tick();
}
