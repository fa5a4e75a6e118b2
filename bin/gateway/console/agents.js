// Agents: the live ones (heartbeat within the eviction threshold), with what their last DecisionLog said they are.

import { h, replace, table, empty } from './dom.js';
import { errorAlert, readLiveAgents } from './api.js';
import { clock, number, when } from './format.js';

const PAGE = 100;
const MAX_PAGE = 1000;
const REFRESH_MS = 5000;
export function render(main, _route, context) {
  let agents = [];
  let next = null;
  const filter = h('input', { type: 'search', id: 'agent-filter', placeholder: 'agent or cluster id', 'data-testid': 'agent-filter' });
  const count = h('span', { class: 'updated' }, 'Loading…');
  const body = h('div', {});
  const more = h('button', { type: 'button', class: 'button ghost small', 'data-testid': 'agents-more' }, 'Load more');
  const pager = h('div', { class: 'pager' }, count, more);
  main.append(
    h(
      'div',
      { class: 'view-head' },
      h('h1', {}, 'Agents'),
      h('div', { class: 'actions' }, h('label', { for: 'agent-filter', class: 'muted' }, 'Filter'), filter),
    ),
    h('section', { class: 'panel flush', 'aria-label': 'Live agents' }, body, pager),
  );

  const draw = () => {
    const needle = filter.value.trim().toLowerCase();
    const shown = needle
      ? agents.filter((agent) => agent.agent_id.toLowerCase().includes(needle) || agent.cluster_id.toLowerCase().includes(needle))
      : agents;
    more.hidden = next === null;
    count.textContent = `${number(agents.length)} live agent${agents.length === 1 ? '' : 's'}${next !== null ? ' shown (more to load)' : ''}` +
      ` · updated ${clock()}`;
    if (agents.length === 0) {
      replace(body, next === null
        ? empty('No live agents', 'An agent appears here after its first heartbeat (POST /gateway/heartbeat).')
        : empty('No live agent among the agents read so far', 'Load more reads further.'));
      return;
    }
    if (shown.length === 0) {
      replace(body, empty('No agent matches the filter', ''));
      return;
    }
    const now = Date.now();
    replace(body, table(
      [['Agent'], ['Cluster'], ['Last seen'], ['Type'], ['Capability version'], ['Capabilities updated']],
      shown.map((agent) => h(
        'tr',
        { 'data-testid': 'agent-row', dataset: { agentId: agent.agent_id } },
        h('td', { class: 'mono' }, agent.agent_id),
        h('td', { class: 'mono' }, agent.cluster_id),
        h('td', {}, when(agent.last_seen, { now })),
        h('td', {}, agent.capabilities ? agent.capabilities.agent_type : h('span', { class: 'muted' }, 'no DecisionLog yet')),
        h('td', { class: 'mono' }, agent.capabilities?.capability_version ?? ''),
        h('td', {}, agent.capabilities ? when(agent.capabilities.updated_at, { now }) : ''),
      )),
      { 'data-testid': 'agents-table' },
    ));
  };

  const load = async () => {
    try {
      const limit = Math.min(MAX_PAGE, Math.max(PAGE, agents.length));
      const page = await readLiveAgents(limit, null, context.signal);
      agents = page.agents;
      next = page.next_after;
      draw();
    } catch (error) {
      if (!context.signal.aborted) replace(body, errorAlert(error, 'Could not load the agents'));
    }
  };
  more.addEventListener('click', async () => {
    more.disabled = true;
    try {
      const page = await readLiveAgents(PAGE, next, context.signal);
      agents = agents.concat(page.agents);
      next = page.next_after;
      draw();
    } catch (error) {
      if (!context.signal.aborted) pager.before(errorAlert(error, 'Could not load more agents'));
    } finally {
      more.disabled = false;
    }
  });
  filter.addEventListener('input', draw);
  context.every(REFRESH_MS, load);
  load();
}
