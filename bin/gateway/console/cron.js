// Cron jobs: the recurring jobs and pending one-time reminders; create (with the next instants the gateway
// computes and a misfire policy), pause, resume, delete, and a job's last runs (fired or skipped, and whether a
// stream of its agent took each fire).

import { h, replace, table, empty, field } from './dom.js';
import { api, errorAlert, query, describe, ApiError } from './api.js';
import { absolute, badge, compactJson, number, relative, when } from './format.js';

const PAGE = 100;
const RUNS = 50;
const OUTCOME_TONES = { fired: 'ok', skipped_misfire: 'warn', skipped_late: 'bad' };

export function render(main, _route, context) {
  let jobs = [];
  let next = null;
  const notice = h('div', { 'aria-live': 'polite', 'data-testid': 'jobs-notice' });
  const body = h('div', {});
  const count = h('span', { class: 'muted' }, 'Loading…');
  const more = h('button', { type: 'button', class: 'button ghost small' }, 'Load more');
  const refresh = h('button', { type: 'button', class: 'button ghost small' }, 'Refresh');
  const runs = h('section', { class: 'panel flush', 'aria-labelledby': 'runs-title', 'data-testid': 'runs-panel', hidden: true });
  const showRuns = (job) => loadRuns(runs, job, context);

  main.append(
    h('div', { class: 'view-head' }, h('h1', {}, 'Cron jobs'), h('div', { class: 'actions' }, refresh)),
    createPanel(context, (job) => {
      jobs = jobs.filter((known) => known.id !== job.id).concat([job]).sort((a, b) => a.id - b.id);
      draw();
    }),
    notice,
    h('section', { class: 'panel flush', 'aria-labelledby': 'jobs-title' },
      h('h2', { id: 'jobs-title' }, 'Jobs'), body, h('div', { class: 'pager' }, count, more)),
    runs,
  );

  const replaceJob = (job) => {
    jobs = jobs.map((known) => (known.id === job.id ? job : known));
    draw();
  };
  const removeJob = (id) => {
    jobs = jobs.filter((known) => known.id !== id);
    draw();
  };

  const draw = () => {
    more.hidden = next === null;
    const recurring = jobs.filter((job) => !job.is_one_time).length;
    count.textContent = `${number(recurring)} recurring, ${number(jobs.length - recurring)} one-time` +
      (next !== null ? ' (more to load)' : '');
    if (jobs.length === 0) {
      replace(body, empty('No cron jobs', 'Create one above; agents\u2019 reminders appear here too while pending.'));
      return;
    }
    const now = Date.now();
    replace(body, table(
      [['ID', 'num'], ['Agent'], ['Schedule'], ['Next fire'], ['State'], ['Payload'], ['', 'actions']],
      jobs.map((job) => jobRow(job, now, { context, notice, replaceJob, removeJob, showRuns })),
      { 'data-testid': 'jobs-table' },
    ));
  };

  const load = async () => {
    try {
      const page = await api('GET', `/gateway/cron/jobs${query({ limit: Math.max(PAGE, jobs.length) })}`, { signal: context.signal });
      jobs = page.jobs;
      next = page.next_after_id;
      draw();
    } catch (error) {
      if (!context.signal.aborted) replace(body, errorAlert(error, 'Could not load the jobs'));
    }
  };
  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const page = await api('GET', `/gateway/cron/jobs${query({ limit: PAGE, after_id: next })}`, { signal: context.signal });
      jobs = jobs.concat(page.jobs);
      next = page.next_after_id;
      draw();
    } catch (error) {
      if (!context.signal.aborted) replace(notice, errorAlert(error, 'Could not load more jobs'));
    } finally {
      more.disabled = false;
    }
  });
  refresh.addEventListener('click', load);
  load();
}

/** Loads job `job`'s last runs into `panel`, newest first; they outlive the job, so a deleted job's show too. */
async function loadRuns(panel, job, context) {
  panel.hidden = false;
  const title = h('h2', { id: 'runs-title' }, `Runs of job #${job.id}`, h('span', { class: 'muted' }, ` (${job.agent_id}, last ${RUNS})`));
  replace(panel, title, h('p', { class: 'muted' }, 'Loading…'));
  try {
    const page = await api('GET', `/gateway/cron/jobs/${job.id}/runs${query({ limit: RUNS })}`, { signal: context.signal });
    if (page.runs.length === 0) {
      replace(panel, title, empty('No runs yet', 'Each instant appears here once fired, or skipped by its misfire policy or lateness.'));
      return;
    }
    const now = Date.now();
    replace(panel, title, table(
      [['Scheduled for'], ['Fired at'], ['Lateness', 'num'], ['Outcome'], ['Received'], ['Fire id']],
      page.runs.map((run) => h(
        'tr',
        { 'data-testid': 'run-row', dataset: { fireId: run.fire_id } },
        h('td', {}, when(run.scheduled_for, { now, precise: true })),
        h('td', {}, when(run.fired_at, { now, precise: true })),
        h('td', { class: 'num mono' }, `${number(run.lateness_ms)} ms`),
        h('td', {}, h('span', { class: `badge ${OUTCOME_TONES[run.outcome] ?? ''}`.trim(), 'data-testid': 'run-outcome' }, run.outcome)),
        h('td', {}, run.received_at ? when(run.received_at, { now, precise: true }) : h('span', { class: 'muted' }, 'not yet')),
        h('td', { class: 'mono' }, run.fire_id),
      )),
      { 'data-testid': 'runs-table' },
    ));
  } catch (error) {
    if (!context.signal.aborted) replace(panel, title, errorAlert(error, 'Could not load the runs'));
  }
}

function jobRow(job, now, { context, notice, replaceJob, removeJob, showRuns }) {
  const result = h('div', { class: 'inline-result', 'aria-live': 'polite' });
  const actions = h('div', { class: 'row-actions' });
  const cell = h('td', { class: 'actions' }, actions, result);

  const showActions = () => {
    const paused = job.paused === true;
    const toggle = h(
      'button',
      { type: 'button', class: 'button ghost small', 'data-testid': paused ? 'resume' : 'pause' },
      paused ? 'Resume' : 'Pause',
    );
    toggle.addEventListener('click', async () => {
      toggle.disabled = true;
      replace(result);
      try {
        const updated = await api('POST', `/gateway/cron/jobs/${job.id}/${paused ? 'resume' : 'pause'}`, { signal: context.signal });
        replaceJob(updated);
      } catch (error) {
        toggle.disabled = false;
        showResult(result, error, {
          not_found: 'This gateway has no pause/resume (404 not_found): it is older than the console.',
          unknown_cron_job: 'This job no longer exists (fired, or deleted elsewhere). Refresh the list.',
        });
      }
    });
    const runs = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'runs' }, 'Runs');
    runs.addEventListener('click', () => showRuns(job));
    const remove = h('button', { type: 'button', class: 'button danger small', 'data-testid': 'delete' }, 'Delete');
    remove.addEventListener('click', () => confirmDelete());
    replace(actions, runs, toggle, remove);
  };

  const confirmDelete = () => {
    const yes = h('button', { type: 'button', class: 'button danger solid small', 'data-testid': 'confirm-delete' }, `Delete #${job.id}`);
    const no = h('button', { type: 'button', class: 'button ghost small' }, 'Cancel');
    no.addEventListener('click', showActions);
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      no.disabled = true;
      try {
        await api('DELETE', `/gateway/cron/jobs/${job.id}`, { signal: context.signal });
        replace(notice, h('div', { class: 'alert success', role: 'status' }, `Deleted job #${job.id} (${job.agent_id}).`));
        removeJob(job.id);
      } catch (error) {
        showActions();
        showResult(result, error, { unknown_cron_job: 'This job no longer exists (fired, or deleted elsewhere).' });
      }
    });
    replace(actions, h('span', { class: 'muted' }, 'Sure?'), yes, no);
    no.focus();
  };
  showActions();

  const state = job.paused === true ? badge('paused') : badge('active');
  const payload = compactJson(job.payload);
  return h(
    'tr',
    { 'data-testid': 'job-row', dataset: { jobId: job.id } },
    h('td', { class: 'num mono' }, String(job.id)),
    h('td', { class: 'mono' }, job.agent_id),
    h('td', { class: 'mono' }, job.is_one_time ? h('span', { class: 'badge' }, 'one-time') : scheduleCell(job)),
    h('td', {}, when(job.next_fire_at, { now })),
    h('td', {}, state),
    h('td', {}, h('span', { class: 'mono truncate', title: payload }, payload)),
    cell,
  );
}

/** A recurring job's expression and the time zone it is read in (UTC for jobs created without one). */
function scheduleCell(job) {
  const zone = job.timezone ?? 'UTC';
  return h('span', {}, job.schedule, ' ', h('span', { class: 'muted', 'data-testid': 'job-timezone', title: 'Read in this time zone' }, zone),
    ' ', h('span', { class: 'muted', 'data-testid': 'misfire-policy', title: 'Misfire policy' }, job.misfire_policy ?? 'fire_once'));
}

/** An error under a row's buttons, in words for the reasons in `explained`. */
function showResult(element, error, explained = {}) {
  element.className = 'inline-result error';
  const reason = error instanceof ApiError ? error.reason : null;
  const { title, detail } = describe(error);
  replace(element, explained[reason] ?? title, detail && !explained[reason] ? ` — ${detail}` : '');
}

function createPanel(context, onCreated) {
  const agent = h('input', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', 'data-testid': 'cron-agent' });
  const schedule = h('input', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: '*/5 * * * *', class: 'mono', 'data-testid': 'cron-schedule' });
  const timezone = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'UTC', class: 'mono', list: 'cron-timezones', 'data-testid': 'cron-timezone' });
  // The browser's own zone first: what an operator most likely means by "09:00".
  const zones = [browserZone(), 'UTC', 'America/New_York', 'Europe/London', 'Europe/Paris', 'Asia/Tokyo', 'Australia/Sydney'];
  const zoneList = h('datalist', { id: 'cron-timezones' }, [...new Set(zones.filter(Boolean))].map((zone) => h('option', { value: zone })));
  const payload = h('textarea', { rows: 3, spellcheck: 'false', 'data-testid': 'cron-payload' });
  payload.value = '{}';
  const misfire = h(
    'select',
    { 'data-testid': 'cron-misfire' },
    h('option', { value: 'fire_once' }, 'fire_once: one catch-up fire, the newest missed instant'),
    h('option', { value: 'skip' }, 'skip: no catch-up, missed instants recorded as skipped'),
    h('option', { value: 'fire_all' }, 'fire_all: every missed instant (the newest 100)'),
  );
  const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'cron-submit' }, 'Create job');
  const result = h('div', { 'aria-live': 'polite', 'data-testid': 'cron-result' });
  const form = h(
    'form',
    { class: 'form-grid', novalidate: true, 'data-testid': 'cron-form' },
    field('Agent id', agent, { id: 'cron-agent', help: 'Whose agent:<id>:scheduled topic it fires on' }),
    field('Schedule', schedule, { id: 'cron-schedule', help: 'Cron: 5 fields, or 6–7 with seconds (docs/scheduler.md)' }),
    field('Time zone', timezone, { id: 'cron-timezone', help: 'IANA name the schedule is read in; empty: UTC. Across DST a missing time fires right after the gap, a repeated one once' }),
    zoneList,
    field('Payload (JSON object)', payload, { id: 'cron-payload' }),
    field('After downtime', misfire, { id: 'cron-misfire', help: 'What the job does about instants it missed (docs/scheduler.md "Misfires")' }),
    h('div', { class: 'buttons' }, submit),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    payload.removeAttribute('aria-invalid');
    let parsed;
    try {
      parsed = payload.value.trim() ? JSON.parse(payload.value) : {};
    } catch (error) {
      payload.setAttribute('aria-invalid', 'true');
      replace(result, h('div', { class: 'alert error', role: 'alert' }, 'The payload is not JSON', h('span', { class: 'detail' }, error.message)));
      return;
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      payload.setAttribute('aria-invalid', 'true');
      replace(result, h('div', { class: 'alert error', role: 'alert' }, 'The payload must be a JSON object ({…}).'));
      return;
    }
    submit.disabled = true;
    try {
      const job = await api('POST', '/gateway/cron/jobs', {
        body: { agent_id: agent.value.trim(), schedule: schedule.value.trim(), timezone: timezone.value.trim() || null, payload: parsed, misfire_policy: misfire.value },
        signal: context.signal,
      });
      replace(result, created(job));
      onCreated(job);
    } catch (error) {
      if (!context.signal.aborted) replace(result, errorAlert(error, 'Not created'));
    } finally {
      submit.disabled = false;
    }
  });
  return h('section', { class: 'panel', 'aria-labelledby': 'create-title' }, h('h2', { id: 'create-title' }, 'New recurring job'), form, result);
}

function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone;
  } catch {
    return null;
  }
}

function created(job) {
  const now = Date.now();
  return h(
    'div',
    { class: 'alert success', role: 'status' },
    `Created job #${job.id} for `,
    h('code', {}, job.agent_id),
    ` on `,
    h('code', {}, job.schedule),
    ` in `,
    h('code', {}, job.timezone ?? 'UTC'),
    '. Its next instants (in that zone, then UTC):',
    h(
      'ol',
      { class: 'preview', 'data-testid': 'cron-preview' },
      (job.preview ?? [job.next_fire_at]).map((instant, index) => h(
        'li',
        {},
        h('span', { class: 'mono', 'data-testid': 'cron-preview-local' }, job.preview_local?.[index] ?? instant),
        h('span', { class: 'muted' }, `${instant} · ${absolute(instant, { precise: true })} · ${relative(instant, now)}`),
      )),
    ),
  );
}
