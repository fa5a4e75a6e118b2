// Deliveries: the forensic inspector (filters, keyset pages, one delivery's attempts and payload) and the
// dead-letter panel with "Retry now".

import { h, replace, table, empty, field, copyText } from './dom.js';
import { api, errorAlert, query, describe, ApiError } from './api.js';
import { badge, clock, localToRfc3339, number, rfc3339ToLocal, when } from './format.js';

const STATUSES = ['pending', 'delivered', 'failed', 'dead'];
const LIMITS = [25, 100, 500];
/** How long a retried delivery is watched for its outcome. */
const WATCH_MS = 60000;
const WATCH_EVERY_MS = 1000;

// ---------------------------------------------------------------------------------------------------------------
// Webhook names

/**
 * The webhook configs by id, for naming a delivery's config instead of showing a bare number. One list request per
 * view; a failure (or a config deleted since) leaves the number alone.
 */
async function webhookNames(signal) {
  try {
    const list = await api('GET', '/gateway/webhook-configs', { signal });
    return new Map(list.webhook_configs.map((config) => [config.id, config]));
  } catch {
    return new Map();
  }
}

/** The target URL's host, or the URL itself when it does not parse. */
export function host(url) {
  try {
    return new URL(url).host;
  } catch {
    return url ?? '';
  }
}

/** A config as operators know it: `github · pull_request.opened → hooks.example.com`, its id beside it. */
function webhookCell(id, names) {
  const config = names.get(id);
  return h('td', { class: 'webhook', 'data-testid': 'webhook-name' },
    config
      ? [h('span', {}, `${config.source_identifier} · ${config.event_type}`),
        h('span', { class: 'muted' }, ` → ${host(config.target_url)} `)]
      : null,
    h('span', { class: 'mono muted' }, `#${id}`));
}

// ---------------------------------------------------------------------------------------------------------------
// The inspector

export function renderList(main, route, context) {
  const params = route.params;
  const filters = {
    session_id: params.get('session_id') ?? '',
    status: params.get('status') ?? '',
    from: params.get('from') ?? '',
    to: params.get('to') ?? '',
    limit: params.get('limit') ?? '100',
    after_id: params.get('after_id') ?? '',
  };

  const session = h('input', { type: 'text', value: filters.session_id, autocomplete: 'off', spellcheck: 'false', 'data-testid': 'filter-session' });
  const status = h('select', { 'data-testid': 'filter-status' },
    h('option', { value: '' }, 'any'), STATUSES.map((name) => h('option', { value: name }, name)));
  status.value = filters.status;
  const from = h('input', { type: 'datetime-local', step: 1, value: rfc3339ToLocal(filters.from), 'data-testid': 'filter-from' });
  const to = h('input', { type: 'datetime-local', step: 1, value: rfc3339ToLocal(filters.to), 'data-testid': 'filter-to' });
  const limit = h('select', {}, LIMITS.map((value) => h('option', { value: String(value) }, String(value))));
  limit.value = LIMITS.includes(Number(filters.limit)) ? filters.limit : '100';
  const apply = h('button', { type: 'submit', class: 'button', 'data-testid': 'filter-apply' }, 'Apply');
  const reset = h('button', { type: 'button', class: 'button ghost' }, 'Clear');
  const form = h(
    'form',
    { class: 'filters', novalidate: true },
    field('Session id', session, { id: 'filter-session' }),
    field('Status', status, { id: 'filter-status' }),
    field('Created from (local time)', from, { id: 'filter-from' }),
    field('Created before (local time)', to, { id: 'filter-to' }),
    field('Per page', limit, { id: 'filter-limit' }),
    apply,
    reset,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = `#/deliveries${query({
      session_id: session.value.trim(),
      status: status.value,
      from: localToRfc3339(from.value),
      to: localToRfc3339(to.value),
      limit: limit.value === '100' ? '' : limit.value,
    })}`;
  });
  reset.addEventListener('click', () => { location.hash = '#/deliveries'; });

  const body = h('div', {}, h('div', { class: 'empty' }, 'Loading…'));
  const pager = h('div', { class: 'pager' });
  main.append(
    h('div', { class: 'view-head' }, h('h1', {}, 'Deliveries'),
      h('span', { class: 'hint' }, 'Outbound webhooks, oldest first. Open one for its attempts and payload.')),
    h('section', { class: 'panel', 'aria-label': 'Filters' }, form),
    h('section', { class: 'panel flush', 'aria-label': 'Deliveries' }, body, pager),
  );

  (async () => {
    try {
      const [page, names] = await Promise.all([
        api('GET', `/gateway/deliveries${query(filters)}`, { signal: context.signal }),
        webhookNames(context.signal),
      ]);
      if (page.deliveries.length === 0) {
        replace(body, filters.after_id
          ? empty('No more deliveries', 'This was the last page.')
          : empty('No deliveries match', 'Change the filters, or enqueue one with POST /gateway/deliveries.'));
      } else {
        replace(body, deliveriesTable(page.deliveries, names));
      }
      const first = h('a', { href: `#/deliveries${query({ ...filters, after_id: '' })}`, class: 'button ghost small' }, 'First page');
      const nextPage = h('a', {
        href: `#/deliveries${query({ ...filters, after_id: page.next_after_id })}`,
        class: 'button ghost small',
        'data-testid': 'next-page',
      }, 'Next page');
      replace(
        pager,
        h('span', { class: 'muted' }, `${number(page.deliveries.length)} shown${filters.after_id ? ` after #${filters.after_id}` : ''}`),
        filters.after_id ? first : null,
        page.next_after_id !== null ? nextPage : null,
      );
    } catch (error) {
      if (!context.signal.aborted) replace(body, errorAlert(error, 'Could not load the deliveries'));
    }
  })();
}

function deliveriesTable(deliveries, names) {
  const now = Date.now();
  return table(
    [['ID', 'num'], ['Webhook'], ['Session'], ['Status'], ['Attempts', 'num'], ['Created'], ['Last attempt'],
      ['Next retry'], ['Last error'], ['Bytes', 'num']],
    deliveries.map((delivery) => h(
      'tr',
      { 'data-testid': 'delivery-row', dataset: { deliveryId: delivery.id } },
      h('td', { class: 'num mono' }, h('a', { href: `#/deliveries/${delivery.id}` }, `#${delivery.id}`)),
      webhookCell(delivery.webhook_id, names),
      h('td', { class: 'mono' }, delivery.session_id),
      h('td', {}, badge(delivery.status)),
      h('td', { class: 'num' }, number(delivery.attempt_count)),
      h('td', {}, when(delivery.created_at, { now })),
      h('td', {}, when(delivery.last_attempted_at, { now })),
      h('td', {}, when(delivery.next_retry_at, { now })),
      h('td', { class: 'mono' }, delivery.error_detail ?? ''),
      h('td', { class: 'num' }, number(delivery.payload_bytes)),
    )),
    { 'data-testid': 'deliveries-table' },
  );
}

// ---------------------------------------------------------------------------------------------------------------
// One delivery

export function renderDetail(main, route, context) {
  const id = route.id;
  const head = h('div', { class: 'view-head' },
    h('h1', {}, `Delivery #${id}`),
    h('a', { href: '#/deliveries', class: 'hint' }, '← All deliveries'));
  const body = h('div', { 'data-testid': 'delivery-detail' }, h('div', { class: 'empty' }, 'Loading…'));
  main.append(head, body);

  const load = async (notice) => {
    try {
      const delivery = await api('GET', `/gateway/deliveries/${encodeURIComponent(id)}`, { signal: context.signal });
      // The config names the route; a deleted one (or a failure to read it) leaves just the id.
      const config = await api('GET', `/gateway/webhook-configs/${delivery.webhook_id}`, { signal: context.signal })
        .catch(() => null);
      replace(body, detail(delivery, config, context, load, notice));
    } catch (error) {
      if (context.signal.aborted) return;
      if (error instanceof ApiError && error.status === 404) {
        replace(body, empty('No such delivery', 'It never existed, its webhook config was deleted, or it was pruned after --retention-days.'));
      } else {
        replace(body, errorAlert(error, 'Could not load the delivery'));
      }
    }
  };
  load();
}

/** `notice`: what the last "Retry now" came to, kept across the reload that shows its attempt. */
function detail(delivery, config, context, reload, notice) {
  const now = Date.now();
  const retryResult = notice ?? h('div', { class: 'inline-result', 'aria-live': 'polite', 'data-testid': 'retry-result' });
  const retryable = delivery.status === 'dead' || delivery.status === 'failed';
  const retry = retryable
    ? h('button', { type: 'button', class: 'button', 'data-testid': 'retry' }, 'Retry now')
    : null;
  retry?.addEventListener('click', () => retryNow(delivery.id, { button: retry, result: retryResult, context, onSettled: reload }));

  const attempts = delivery.attempts ?? [];
  const raw = typeof delivery.payload_raw === 'string';
  const payloadText = raw ? delivery.payload_raw : JSON.stringify(delivery.payload, null, 2);
  const copyPayload = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'copy-payload' }, 'Copy');
  copyPayload.addEventListener('click', () => copyText(payloadText, copyPayload));
  const copySignature = h('button', { type: 'button', class: 'button ghost small' }, 'Copy');
  copySignature.addEventListener('click', () => copyText(delivery.signature, copySignature));

  return [
    h('section', { class: 'panel', 'aria-label': 'Summary' },
      h('div', { class: 'code-head' },
        h('div', {}, badge(delivery.status), ' ', h('span', { class: 'muted' }, `${number(delivery.attempt_count)} attempt${delivery.attempt_count === 1 ? '' : 's'} since the last reset`)),
        h('div', { class: 'row-actions' }, retry, resendControl(delivery.id, context))),
      retryResult,
      h('dl', { class: 'props' },
        h('dt', {}, 'Webhook config'),
        h('dd', { 'data-testid': 'webhook-name' }, config
          ? [h('strong', {}, `${config.source_identifier} · ${config.event_type}`),
            h('span', { class: 'muted' }, ` → ${host(config.target_url)} · ${config.agent_intent} (${config.target_session}) `)]
          : null, h('span', { class: 'mono muted' }, `#${delivery.webhook_id}`)),
        h('dt', {}, 'Session'), h('dd', { class: 'mono' }, delivery.session_id),
        h('dt', {}, 'Target'), h('dd', { class: 'mono' }, delivery.target_url),
        h('dt', {}, 'Created'), h('dd', {}, when(delivery.created_at, { now, precise: true })),
        h('dt', {}, 'Last attempt'), h('dd', {}, when(delivery.last_attempted_at, { now, precise: true })),
        h('dt', {}, 'Next retry'), h('dd', {}, when(delivery.next_retry_at, { now, precise: true })),
        h('dt', {}, 'Last error'), h('dd', { class: 'mono' }, delivery.error_detail ?? '—'),
        h('dt', {}, 'Signature'), h('dd', {}, h('code', {}, delivery.signature), ' ', copySignature),
      )),
    h('section', { class: 'panel flush', 'aria-labelledby': 'attempts-title' },
      h('h2', { id: 'attempts-title' }, 'Attempts'),
      attempts.length === 0
        ? empty('No attempts yet', 'The first attempt goes out as soon as the outbound rate allows.')
        : table(
          [['#', 'num'], ['Started'], ['Duration (ms)', 'num'], ['HTTP status', 'num'], ['Outcome'], ['Error']],
          attempts.flatMap((attempt, index) => [
            // "Retry now" starts the count over: the attempts after it are numbered from 1 again.
            index > 0 && attempt.attempt_number <= attempts[index - 1].attempt_number
              ? h('tr', { class: 'separator' }, h('td', { colspan: 6 }, 'Retried: the attempts below start over'))
              : null,
            h(
              'tr',
              { 'data-testid': 'attempt-row' },
              h('td', { class: 'num' }, String(attempt.attempt_number)),
              h('td', {}, when(attempt.started_at, { now, precise: true })),
              h('td', { class: 'num' }, number(attempt.duration_ms)),
              h('td', { class: 'num mono' }, attempt.status_code == null ? '—' : String(attempt.status_code)),
              h('td', {}, attempt.error_class ? badge(attempt.error_class, 'bad') : badge('ok', 'ok')),
              h('td', { class: 'mono' }, attempt.error_detail ?? ''),
            ),
          ]),
          { 'data-testid': 'attempts-table' },
        )),
    h('section', { class: 'panel', 'aria-labelledby': 'payload-title' },
      h('div', { class: 'code-head' },
        h('div', {},
          h('h2', { id: 'payload-title' }, raw ? 'Payload, exactly as sent' : 'Payload'),
          h('span', { class: 'muted' }, raw
            ? `The stored bytes (${number(delivery.payload_bytes)}), as signed: recompute the signature over these.`
            : `Parsed and pretty-printed; the ${number(delivery.payload_bytes)} bytes sent may differ in spacing.`)),
        copyPayload),
      h('pre', { class: 'code', 'data-testid': 'payload' }, payloadText)),
  ];
}

// ---------------------------------------------------------------------------------------------------------------
// Dead letters

export function renderDead(main, _route, context) {
  let rows = [];
  let names = new Map();
  let next = null;
  const body = h('div', {}, h('div', { class: 'empty' }, 'Loading…'));
  const count = h('span', { class: 'muted' });
  const more = h('button', { type: 'button', class: 'button ghost small' }, 'Load more');
  const refresh = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'dead-refresh' }, 'Refresh');
  main.append(
    h('div', { class: 'view-head' }, h('h1', {}, 'Dead letters'),
      h('div', { class: 'actions' }, h('span', { class: 'hint' }, 'Deliveries that used up every retry. Retry now starts them over.'), refresh)),
    h('section', { class: 'panel flush', 'aria-label': 'Dead letters' }, body, h('div', { class: 'pager' }, count, more)),
  );
  const draw = () => {
    more.hidden = next === null;
    count.textContent = `${number(rows.length)} dead${next !== null ? ' shown (more to load)' : ''} · updated ${clock()}`;
    if (rows.length === 0) {
      replace(body, empty('No dead letters — good.', 'A delivery lands here after its last retry fails.'));
      return;
    }
    const now = Date.now();
    replace(body, table(
      [['ID', 'num'], ['Webhook'], ['Session'], ['Status'], ['Attempts', 'num'], ['Last attempt'], ['Last error'], ['Target'], ['', 'actions']],
      rows.map((delivery) => deadRow(delivery, now, names, context)),
      { 'data-testid': 'dead-table' },
    ));
  };
  const load = async () => {
    try {
      const [page, configs] = await Promise.all([
        api('GET', `/gateway/deliveries${query({ status: 'dead', limit: 100 })}`, { signal: context.signal }),
        webhookNames(context.signal),
      ]);
      names = configs;
      rows = page.deliveries;
      next = page.next_after_id;
      draw();
    } catch (error) {
      if (!context.signal.aborted) replace(body, errorAlert(error, 'Could not load the dead letters'));
    }
  };
  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const page = await api('GET', `/gateway/deliveries${query({ status: 'dead', limit: 100, after_id: next })}`, { signal: context.signal });
      rows = rows.concat(page.deliveries);
      next = page.next_after_id;
      draw();
    } catch (error) {
      if (!context.signal.aborted) body.prepend(errorAlert(error, 'Could not load more'));
    } finally {
      more.disabled = false;
    }
  });
  refresh.addEventListener('click', load);
  load();
}

function deadRow(delivery, now, names, context) {
  const status = h('span', {}, badge(delivery.status));
  const attempts = h('td', { class: 'num', 'data-testid': 'attempts' });
  const lastAttempt = h('td', {});
  const lastError = h('td', { class: 'mono', 'data-testid': 'last-error' });
  // The cells that change when the delivery does: drawn from the row's delivery as the gateway last answered it,
  // so after "Retry now" the row says what the API says, not what the dead letter said.
  const show = (current, at = Date.now()) => {
    replace(status, badge(current.status));
    replace(attempts, number(current.attempt_count));
    replace(lastAttempt, when(current.last_attempted_at, { now: at }));
    replace(lastError, current.error_detail ?? '');
  };
  show(delivery, now);
  const result = h('div', { class: 'inline-result', 'aria-live': 'polite', 'data-testid': 'retry-result' });
  const retry = h('button', { type: 'button', class: 'button small', 'data-testid': 'retry' }, 'Retry now');
  retry.addEventListener('click', () => retryNow(delivery.id, { button: retry, result, context, onDelivery: show }));
  return h(
    'tr',
    { 'data-testid': 'dead-row', dataset: { deliveryId: delivery.id } },
    h('td', { class: 'num mono' }, h('a', { href: `#/deliveries/${delivery.id}` }, `#${delivery.id}`)),
    webhookCell(delivery.webhook_id, names),
    h('td', { class: 'mono' }, delivery.session_id),
    h('td', { 'data-testid': 'status-cell' }, status),
    attempts,
    lastAttempt,
    lastError,
    h('td', { class: 'mono' }, h('span', { class: 'truncate', title: delivery.target_url }, delivery.target_url)),
    h('td', { class: 'actions' }, retry, result),
  );
}

/**
 * "Retry now": resets the delivery, then watches it until its first new attempt has an outcome, saying what
 * happened in `result`.
 */
async function retryNow(id, { button, result, context, onDelivery = () => {}, onSettled }) {
  button.disabled = true;
  result.className = 'inline-result';
  replace(result, 'Retrying…');
  let reset;
  try {
    reset = await api('POST', `/gateway/deliveries/${id}/retry`, { signal: context.signal });
  } catch (error) {
    if (context.signal.aborted) return;
    button.disabled = false;
    result.className = 'inline-result error';
    const reason = error instanceof ApiError ? error.reason : null;
    // Whatever the refusal, the row shows the delivery as it is now (someone else may have retried it).
    api('GET', `/gateway/deliveries/${id}`, { signal: context.signal }).then(onDelivery).catch(() => {});
    if (reason === 'retry_not_allowed') {
      replace(result, 'Not retried (409): only a dead or failed delivery can be retried, and this one is now pending or ' +
        'delivered — someone may have retried it already. Refresh to see where it stands.');
    } else if (error instanceof ApiError && error.status === 404) {
      replace(result, 'Not retried (404): this delivery no longer exists (its config was deleted, or it was pruned).');
    } else {
      const { title, detail } = describe(error);
      replace(result, `Not retried: ${title}${detail ? ` — ${detail}` : ''}`);
    }
    return;
  }
  onDelivery(reset);
  replace(result, 'Reset to pending; its first attempt is going out…');
  const deadline = Date.now() + WATCH_MS;
  while (!context.signal.aborted && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, WATCH_EVERY_MS));
    if (context.signal.aborted) return;
    let current;
    try {
      current = await api('GET', `/gateway/deliveries/${id}`, { signal: context.signal });
    } catch {
      continue;
    }
    onDelivery(current);
    if (current.status === 'pending' && current.attempt_count === 0) continue;
    if (current.status === 'delivered') {
      result.className = 'inline-result success';
      replace(result, `Delivered on attempt ${current.attempt_count}.`);
    } else {
      result.className = 'inline-result error';
      replace(result, `Attempt ${current.attempt_count} failed (${current.error_detail ?? 'no detail'}); ` +
        (current.status === 'dead' ? 'dead again.' : 'it will be retried on its schedule.'));
      button.disabled = false;
    }
    onSettled?.(result);
    return;
  }
  if (!context.signal.aborted) replace(result, 'Reset to pending; no attempt within a minute — check the outbound rate and the loops on the overview.');
}

// ---------------------------------------------------------------------------------------------------------------
// Resend

/**
 * "Resend": a new delivery of the same payload to the same endpoint, whatever this one's status; the new delivery's
 * id is shown as a link beside the button.
 */
function resendControl(id, context) {
  const button = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'resend' }, 'Resend');
  const result = h('span', { class: 'inline-result', 'aria-live': 'polite', 'data-testid': 'resend-result' });
  button.addEventListener('click', async () => {
    button.disabled = true;
    result.className = 'inline-result';
    replace(result, 'Resending…');
    try {
      const sent = await api('POST', `/gateway/webhook-deliveries/${id}/resend`, { signal: context.signal });
      result.className = 'inline-result success';
      replace(result, 'Resent as ', h('a', { href: `#/deliveries/${sent.delivery_id}`, 'data-testid': 'resent-id' }, `#${sent.delivery_id}`));
    } catch (error) {
      if (context.signal.aborted) return;
      result.className = 'inline-result error';
      const { title } = describe(error);
      replace(result, error instanceof ApiError && error.status === 404
        ? 'Not resent (404): this delivery no longer exists.'
        : `Not resent: ${title}`);
    } finally {
      button.disabled = false;
    }
  });
  return h('span', { class: 'row-actions' }, button, result);
}
