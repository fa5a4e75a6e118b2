// Agent credentials: issue a token (shown once, in a dialog with a copy button), list an agent's credentials (or,
// with no agent chosen, every agent's) with their last use, expiry and state, revoke one after a confirmation. The token is in the page only while its dialog is open
// (never in storage or the address); closing the dialog empties the field and removes it from the page.

import { h, replace, table, empty, field, showOnce } from './dom.js';
import { api, errorAlert, query, readLiveAgents, ApiError } from './api.js';
import { absolute, badge, number, relative, when } from './format.js';

const PAGE = 100;
/** Credentials shown at most in the list of every agent's. */
const ALL_LIMIT = 1000;
/** The lifetimes offered; the API takes any number of seconds up to ten years. */
const LIFETIMES = [
  ['', 'never expires'],
  [String(24 * 3600), '1 day'],
  [String(30 * 24 * 3600), '30 days'],
  [String(90 * 24 * 3600), '90 days'],
  [String(365 * 24 * 3600), '1 year'],
];

export function render(main, route, context) {
  const agentId = route.params.get('agent_id') ?? '';
  const agentInput = h('input', {
    type: 'text', value: agentId, autocomplete: 'off', spellcheck: 'false', required: true, list: 'live-agents',
    'data-testid': 'credentials-agent',
  });
  const liveAgents = h('datalist', { id: 'live-agents' });
  const lifetime = h('select', { 'data-testid': 'credentials-lifetime' },
    LIFETIMES.map(([value, label]) => h('option', { value }, label)));
  const show = h('button', { type: 'submit', class: 'button ghost', 'data-testid': 'credentials-show' }, 'Show credentials');
  const issue = h('button', { type: 'button', class: 'button', 'data-testid': 'credentials-issue' }, 'Issue a token');
  const notice = h('div', { 'aria-live': 'polite', 'data-testid': 'credentials-notice' });
  const form = h(
    'form',
    { class: 'filters', novalidate: true },
    field('Agent id', agentInput, { id: 'credentials-agent', help: 'Live agents are offered as you type.' }),
    field('Lifetime of a new token', lifetime, { id: 'credentials-lifetime' }),
    show,
    issue,
  );
  const body = h('div', {});
  main.append(
    h('div', { class: 'view-head' }, h('h1', {}, 'Agent credentials'),
      h('span', { class: 'hint' }, 'Tokens agents authenticate with (--agent-auth). A token is shown once; the gateway keeps its hash.')),
    h('section', { class: 'panel', 'aria-label': 'Agent' }, form, liveAgents, notice),
    h('section', { class: 'panel flush', 'aria-label': 'Credentials' }, body),
  );

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const agent = agentInput.value.trim();
    // No agent: every agent's credentials.
    location.hash = agent ? `#/credentials${query({ agent_id: agent })}` : '#/credentials';
  });

  issue.addEventListener('click', async () => {
    const agent = agentInput.value.trim();
    if (!agent) {
      replace(notice, h('div', { class: 'alert error', role: 'alert' }, 'Name the agent first.'));
      agentInput.focus();
      return;
    }
    issue.disabled = true;
    replace(notice);
    try {
      const body = lifetime.value ? { expires_in_s: Number(lifetime.value) } : {};
      const issued = await api('POST', `/gateway/agents/${encodeURIComponent(agent)}/credentials`, { body, signal: context.signal });
      showToken(issued, () => {
        if (agent === agentId) load();
        else location.hash = `#/credentials${query({ agent_id: agent })}`;
      });
    } catch (error) {
      if (!context.signal.aborted) replace(notice, errorAlert(error, 'Not issued'));
    } finally {
      issue.disabled = false;
    }
  });

  // Live agents, to pick from (a convenience: an agent need not be live to get a token).
  readLiveAgents(1000, null, context.signal)
    .then((page) => replace(liveAgents, page.agents.map((agent) => h('option', { value: agent.agent_id }))))
    .catch(() => {});

  const load = async () => {
    if (!agentId) {
      loadAll();
      return;
    }
    try {
      let credentials = [];
      let after = null;
      // Every page: an agent has a handful of credentials, rarely more than a page.
      do {
        const page = await api('GET', `/gateway/agents/${encodeURIComponent(agentId)}/credentials${query({ limit: PAGE, after })}`,
          { signal: context.signal });
        credentials = credentials.concat(page.credentials);
        after = page.next_after;
      } while (after !== null && !context.signal.aborted);
      replace(body, credentials.length === 0
        ? empty(`No credentials for ${agentId}`, 'Issue a token above; the agent then sends it as Authorization: Bearer.')
        : credentialsTable(agentId, credentials, context, load));
    } catch (error) {
      if (!context.signal.aborted) replace(body, errorAlert(error, 'Could not load the credentials'));
    }
  };
  // Every agent's credentials, oldest first, up to ALL_LIMIT of them.
  const loadAll = async () => {
    try {
      let credentials = [];
      let after = null;
      do {
        const page = await api('GET', `/gateway/credentials${query({ limit: PAGE, after })}`, { signal: context.signal });
        credentials = credentials.concat(page.credentials);
        after = page.next_after;
      } while (after !== null && credentials.length < ALL_LIMIT && !context.signal.aborted);
      replace(body, credentials.length === 0
        ? empty('No credentials yet', 'Name an agent above and issue it a token; the agent then sends it as Authorization: Bearer.')
        : credentialsTable(null, credentials, context, load, after !== null));
    } catch (error) {
      if (!context.signal.aborted) replace(body, errorAlert(error, 'Could not load the credentials'));
    }
  };
  load();
}

/** A credential's state now: revoked, expired or active. */
function state(credential, now) {
  if (credential.revoked_at) return ['revoked', 'bad'];
  if (credential.expires_at && Date.parse(credential.expires_at) <= now) return ['expired', 'warn'];
  return ['active', 'ok'];
}

/** `agentId` null: every agent's credentials, with an Agent column; `more`: the list was cut at ALL_LIMIT. */
function credentialsTable(agentId, credentials, context, reload, more = false) {
  const now = Date.now();
  const active = credentials.filter((credential) => state(credential, now)[0] === 'active').length;
  const plural = credentials.length === 1 ? '' : 's';
  const title = agentId === null
    ? [`${number(credentials.length)}${more ? '+' : ''} credential${plural} of every agent`]
    : [`${number(credentials.length)} credential${plural} of `, h('code', {}, agentId)];
  const agentColumn = agentId === null ? [['Agent']] : [];
  return [
    h('h2', { class: 'list-title' }, ...title, h('span', { class: 'muted' }, ` · ${number(active)} active`),
      more ? h('span', { class: 'muted' }, ` · the oldest ${number(ALL_LIMIT)} shown; name an agent for its own`) : null),
    table(
      [['Credential'], ...agentColumn, ['State'], ['Issued'], ['Last used'], ['Expires'], ['Revoked'], ['', 'actions']],
      credentials.map((credential) => credentialRow(agentId, credential, now, context, reload)),
      { 'data-testid': 'credentials-table' },
    ),
  ];
}

function credentialRow(listedFor, credential, now, context, reload) {
  const agentId = credential.agent_id;
  const [label, tone] = state(credential, now);
  const actions = h('td', { class: 'actions' });
  const result = h('div', { class: 'inline-result', 'aria-live': 'polite', 'data-testid': 'revoke-result' });
  const showActions = () => {
    if (credential.revoked_at) {
      replace(actions, result);
      return;
    }
    const revoke = h('button', { type: 'button', class: 'button danger small', 'data-testid': 'revoke' }, 'Revoke');
    revoke.addEventListener('click', confirmRevoke);
    replace(actions, revoke, result);
  };
  const confirmRevoke = () => {
    const yes = h('button', { type: 'button', class: 'button danger solid small', 'data-testid': 'confirm-revoke' }, 'Revoke now');
    const no = h('button', { type: 'button', class: 'button ghost small' }, 'Cancel');
    no.addEventListener('click', showActions);
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      no.disabled = true;
      try {
        await api('DELETE', `/gateway/agents/${encodeURIComponent(agentId)}/credentials/${encodeURIComponent(credential.credential_id)}`,
          { signal: context.signal });
        reload();
      } catch (error) {
        if (context.signal.aborted) return;
        showActions();
        result.className = 'inline-result error';
        replace(result, error instanceof ApiError && error.status === 404
          ? 'Not revoked (404): this agent has no such credential any more.'
          : errorAlert(error, 'Not revoked'));
      }
    });
    replace(actions, h('span', { class: 'muted' }, 'It stops working at once. Sure?'), yes, no);
    no.focus();
  };
  showActions();
  return h(
    'tr',
    { 'data-testid': 'credential-row', dataset: { credentialId: credential.credential_id } },
    h('td', { class: 'mono' }, credential.credential_id),
    listedFor === null
      ? h('td', {}, h('a', { href: `#/credentials${query({ agent_id: agentId })}`, 'data-testid': 'credential-agent' }, agentId))
      : null,
    h('td', {}, badge(label, tone)),
    h('td', {}, when(credential.created_at, { now })),
    h('td', { 'data-testid': 'credential-last-used' }, lastUse(credential.last_used_at, now)),
    h('td', {}, credential.expires_at ? when(credential.expires_at, { now }) : h('span', { class: 'muted' }, 'never')),
    h('td', {}, credential.revoked_at ? when(credential.revoked_at, { now }) : '—'),
    actions,
  );
}

/**
 * A last use as the gateway keeps it: the start of its minute (each instance records uses every few seconds, to
 * the minute). Within that minute it reads "this minute" rather than a time before the credential may have been
 * issued.
 */
function lastUse(iso, now) {
  if (!iso) return h('span', { class: 'muted' }, 'never');
  const minute = Date.parse(iso);
  if (now - minute >= 60_000) return when(iso, { now });
  return h('time', { datetime: iso, title: `${iso}: recorded to the minute`, class: 'stack' },
    h('span', {}, 'this minute'), h('span', { class: 'sub' }, absolute(iso)));
}

/**
 * The token, this once: a modal dialog with the token as read-only text and a copy button. Closing it (the button,
 * Escape) removes the dialog, and the token with it, from the page; `onClosed` then shows the list.
 */
function showToken(issued, onClosed) {
  showOnce({
    kind: 'token',
    label: 'The new token',
    value: issued.token,
    title: ['New token for ', h('code', {}, issued.agent_id)],
    body: [
      h('p', {}, h('strong', {}, 'Shown this once.'), ' The gateway keeps only its hash: copy it now into the agent\'s secret store. ',
        issued.expires_at
          ? `It expires ${relative(issued.expires_at)}, at ${absolute(issued.expires_at, { precise: true })}.`
          : 'It never expires.'),
      h('p', { class: 'muted' }, 'Credential ', h('code', {}, issued.credential_id),
        '. The agent sends it as Authorization: Bearer <token> on heartbeats, messages, tools and its streams.'),
    ],
    onClosed,
  });
}
