// Overview: what is alive, what is scheduled, how deliveries stand, and who leads. Refreshed every 5 s.

import { h, replace, table } from './dom.js';
import { api, errorAlert, query, readLiveAgents } from './api.js';
import { absolute, badge, clock, number, relative, when } from './format.js';
import { hourlyCharts } from './charts.js';

const REFRESH_MS = 5000;
/** Counts are read as one page of a list: past it the console says "at least". */
const AGENTS_PAGE = 1000;
const JOBS_PAGE = 1000;
const DELIVERIES_PAGE = 500;
const STATUSES = ['pending', 'failed', 'delivered', 'dead'];

export function render(main, _route, context) {
  const updated = h('span', { class: 'updated', 'aria-live': 'off' }, 'Loading…');
  const refresh = h('button', { type: 'button', class: 'button ghost small' }, 'Refresh');
  const body = h('div', { 'data-testid': 'overview' });
  main.append(
    h(
      'div',
      { class: 'view-head' },
      h('h1', {}, 'Overview'),
      h('div', { class: 'actions' }, updated, refresh),
    ),
    body,
  );
  // The last 24 hours, below the rest: drawn apart from `body` so that its refresh does not redraw them.
  const history = h('section', { class: 'panel', 'aria-labelledby': 'history-title' });
  main.append(h('h2', { id: 'history-title', class: 'section-title' }, 'The last 24 hours, per hour'), history);
  const loadHistory = hourlyCharts(history, { signal: context.signal });
  const load = async () => {
    try {
      const [agents, jobs, counts, cluster, ready] = await Promise.all([
        readLiveAgents(AGENTS_PAGE, null, context.signal),
        api('GET', `/gateway/cron/jobs${query({ limit: JOBS_PAGE })}`, { signal: context.signal }),
        Promise.all(STATUSES.map((status) =>
          api('GET', `/gateway/deliveries${query({ status, limit: DELIVERIES_PAGE })}`, { signal: context.signal }))),
        api('GET', '/gateway/cluster', { signal: context.signal }),
        // 503 is an answer here: it says what is not ready.
        api('GET', '/readyz', { signal: context.signal, accept: [503] }),
      ]);
      replace(body, view({ agents, jobs, counts, cluster, ready }));
      loadHistory();
      updated.textContent = `Updated ${clock()} · every ${REFRESH_MS / 1000} s`;
    } catch (error) {
      if (context.signal.aborted) return;
      replace(body, errorAlert(error, 'Could not load the overview'));
      updated.textContent = `Failed at ${clock()}; retrying`;
    }
  };
  refresh.addEventListener('click', load);
  context.every(REFRESH_MS, load);
  load();
}

/** "1,000+" when a list had more than its first page. */
function counted(list, more) {
  return `${number(list.length)}${more ? '+' : ''}`;
}

function view({ agents, jobs, counts, cluster, ready }) {
  const recurring = jobs.jobs.filter((job) => !job.is_one_time);
  const reminders = jobs.jobs.length - recurring.length;
  const paused = jobs.jobs.filter((job) => job.paused === true).length;
  const byStatus = Object.fromEntries(STATUSES.map((status, index) => [status, counts[index]]));
  const dead = byStatus.dead;
  const deadCount = dead.deliveries.length;
  const jobsMore = jobs.next_after_id !== null;
  return [
    h(
      'div',
      { class: 'cards' },
      card('Live agents', counted(agents.agents, agents.next_after !== null), '#/agents', 'card-agents',
        'heartbeat within the eviction threshold'),
      card('Cron jobs', `${number(recurring.length)}${jobsMore ? '+' : ''}`, '#/cron', 'card-jobs',
        `${number(reminders)} one-time reminder${reminders === 1 ? '' : 's'}${paused ? ` · ${number(paused)} paused` : ''}`),
      card('Dead letters', counted(dead.deliveries, dead.next_after_id !== null), '#/dead', 'card-dead',
        deadCount ? 'need an operator: retry or inspect' : 'none — good', deadCount ? 'bad' : 'good'),
      card('Role', cluster.role, null, 'card-role', cluster.instance_id),
    ),
    h(
      'div',
      { class: 'grid-2' },
      h(
        'section',
        { class: 'panel flush', 'aria-labelledby': 'deliveries-title' },
        h('h2', { id: 'deliveries-title' }, 'Deliveries by status'),
        table(
          [['Status'], ['Count', 'num'], ['']],
          STATUSES.map((status) => h(
            'tr',
            { 'data-testid': `deliveries-${status}` },
            h('td', {}, badge(status)),
            h('td', { class: 'num' }, counted(byStatus[status].deliveries, byStatus[status].next_after_id !== null)),
            h('td', { class: 'actions' }, h('a', { href: `#/deliveries?status=${status}` }, 'Inspect')),
          )),
        ),
      ),
      h(
        'section',
        { class: 'panel', 'aria-labelledby': 'cluster-title' },
        h('h2', { id: 'cluster-title' }, 'Leadership, members and readiness'),
        h(
          'dl',
          { class: 'props' },
          h('dt', {}, 'This instance'), h('dd', {}, h('code', {}, cluster.instance_id), ' ', badge(cluster.role)),
          h('dt', {}, 'Leader'),
          h('dd', { 'data-testid': 'leader' }, cluster.leader
            ? [h('code', {}, cluster.leader.instance_id), cluster.leader.epoch != null ? ` · epoch ${cluster.leader.epoch}` : '']
            : h('span', { class: 'badge warn' }, 'none (election in progress or Redis unreachable)')),
          h('dt', {}, 'Leader since'), h('dd', {}, cluster.leader?.since ? when(cluster.leader.since, { precise: true }) : '—'),
          h('dt', {}, 'Redis'), h('dd', {}, badge(cluster.redis)),
          h('dt', {}, 'Readiness'),
          h('dd', { 'data-testid': 'readiness' }, badge(ready.status === 'ready' ? 'ready' : 'not ready',
            ready.status === 'ready' ? 'ok' : 'bad'),
          ready.not_ready ? ` ${ready.not_ready.join(', ')}` : ''),
        ),
        members(cluster),
        checks(ready.checks),
      ),
    ),
  ];
}

/** The instances heard from within the lease TTL (30 s by default): a dead one is gone from here after it. */
function members(cluster) {
  const list = cluster.members ?? [];
  const now = Date.now();
  return h(
    'div',
    { class: 'checks' },
    h('h2', { id: 'members-title' }, `Members (${number(list.length)})`),
    table(
      [['Instance'], ['Role'], ['Epoch', 'num'], ['Version'], ['Last heard'], ['Up for']],
      list.map((member) => h(
        'tr',
        { 'data-testid': 'member-row', dataset: { instanceId: member.instance_id } },
        h('td', { class: 'mono nowrap' }, member.instance_id, member.instance_id === cluster.instance_id
          ? h('span', { class: 'muted' }, ' (this one)') : null),
        h('td', {}, badge(member.role)),
        h('td', { class: 'num mono' }, member.epoch == null ? '—' : String(member.epoch)),
        h('td', { class: 'mono' }, member.version),
        h('td', { title: absolute(member.last_heard_at, { precise: true }) }, relative(member.last_heard_at, now)),
        h('td', { title: member.started_at ? absolute(member.started_at, { precise: true }) : '' },
          member.started_at ? relative(member.started_at, now).replace(/ ago$/, '') : '—'),
      )),
      { 'data-testid': 'members-table', 'aria-labelledby': 'members-title' },
    ),
    h('p', { class: 'muted' }, cluster.redis === 'unreachable'
      ? 'Redis is unreachable: only this instance is known.'
      : 'Instances heard from within the lease TTL (30 s by default); a stopped one leaves at once, a dead one after the TTL.'),
  );
}

function card(label, value, href, testid, sub, tone) {
  const children = [
    h('div', { class: 'label' }, label),
    h('div', { class: 'value', 'data-testid': `${testid}-value` }, value),
    sub ? h('div', { class: 'sub' }, sub) : null,
  ];
  const attributes = { class: tone ? `card ${tone}` : 'card', 'data-testid': testid };
  return href ? h('a', { ...attributes, href }, children) : h('div', attributes, children);
}

function checks(details) {
  if (!details) return null;
  const rows = [
    h('tr', {}, h('td', {}, 'store'), h('td', {}, badge(details.store.healthy ? 'healthy' : 'unhealthy',
      details.store.healthy ? 'ok' : 'bad')), h('td', { class: 'mono' }, details.store.problem ?? '')),
    ...details.components.map((component) => h(
      'tr',
      {},
      h('td', {}, component.component),
      h('td', {}, badge(component.healthy ? 'healthy' : component.running ? 'unhealthy' : 'stopped',
        component.healthy ? 'ok' : 'bad')),
      h('td', { class: 'mono' }, component.problem ?? ''),
    )),
  ];
  return h(
    'div',
    { class: 'checks' },
    h('h2', {}, 'Store and loops'),
    table([['Part'], ['State'], ['Last problem']], rows),
  );
}
