// The console's shell: sign-in, navigation between views (the part of the address after #), periodic refresh.

import { h, replace, field } from './dom.js';
import { api, token, setToken, forgetToken, whenUnauthorized, describe, ApiError } from './api.js';
import { badge } from './format.js';
import * as overview from './overview.js';
import * as agents from './agents.js';
import * as cron from './cron.js';
import * as credentials from './credentials.js';
import * as deliveries from './deliveries.js';
import * as endpoints from './endpoints.js';
import * as tail from './tail.js';

const VIEWS = {
  overview: overview.render,
  agents: agents.render,
  cron: cron.render,
  credentials: credentials.render,
  deliveries: deliveries.renderList,
  delivery: deliveries.renderDetail,
  dead: deliveries.renderDead,
  tail: tail.render,
  endpoints: endpoints.render,
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const session = document.getElementById('session');
const instance = document.getElementById('instance');

/** The view on screen: aborting its controller cancels its requests, streams and timers. */
let mounted = null;

function unmount() {
  if (!mounted) return;
  mounted.controller.abort();
  for (const timer of mounted.timers) clearInterval(timer);
  mounted = null;
}

/** `#/deliveries/12?status=dead` → {view: 'delivery', id: '12', params}. */
function parseRoute() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, search = ''] = raw.split('?');
  const segments = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(search);
  if (segments[0] === 'deliveries' && segments[1]) return { view: 'delivery', id: segments[1], params };
  const view = segments[0] && VIEWS[segments[0]] ? segments[0] : 'overview';
  return { view, params };
}

function route() {
  unmount();
  if (!token()) {
    showSignIn();
    return;
  }
  showShell();
  const current = parseRoute();
  const highlighted = current.view === 'delivery' ? 'deliveries' : current.view;
  for (const link of nav.querySelectorAll('a')) {
    if (link.dataset.view === highlighted) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const controller = new AbortController();
  mounted = { controller, timers: [] };
  const context = {
    signal: controller.signal,
    /** Runs `callback` every `ms` while this view is shown and the tab is visible. */
    every(ms, callback) {
      const timer = setInterval(() => {
        if (!document.hidden && !controller.signal.aborted) callback();
      }, ms);
      mounted.timers.push(timer);
    },
  };
  replace(main);
  VIEWS[current.view](main, current, context);
  document.title = `${nav.querySelector(`a[data-view="${highlighted}"]`)?.textContent ?? 'Console'} · Agent Gateway`;
}

function showShell() {
  nav.hidden = false;
  session.hidden = false;
}

async function showInstance() {
  try {
    const cluster = await api('GET', '/gateway/cluster');
    replace(instance, h('code', {}, cluster.instance_id), badge(cluster.role));
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) replace(instance, 'instance unknown');
  }
}

function showSignIn(message, tone = 'error') {
  unmount();
  nav.hidden = true;
  session.hidden = true;
  replace(instance);
  document.title = 'Sign in · Agent Gateway';
  const input = h('input', {
    type: 'password',
    name: 'token',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    'data-testid': 'token-input',
  });
  const status = h('div', { 'aria-live': 'polite', 'data-testid': 'signin-message' });
  if (message) replace(status, h('div', { class: `alert ${tone}`, role: 'alert' }, message));
  const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'signin-submit' }, 'Sign in');
  const form = h(
    'form',
    { 'data-testid': 'signin-form', novalidate: true },
    field('Admin token', input, {
      id: 'token',
      help: 'Printed once when the gateway starts, or the GATEWAY_ADMIN_TOKEN it runs with. Kept in this tab only.',
    }),
    submit,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) {
      replace(status, h('div', { class: 'alert error', role: 'alert' }, 'Paste the admin token first.'));
      input.focus();
      return;
    }
    submit.disabled = true;
    replace(status, h('div', { class: 'alert info' }, 'Checking the token…'));
    try {
      await api('GET', '/gateway/cluster', { withToken: value });
      setToken(value);
      replace(status);
      showInstance();
      // A new address routes through `hashchange`; the same one is routed here.
      if (parseRoute().view === 'overview' && location.hash !== '#/overview') location.hash = '#/overview';
      else route();
    } catch (error) {
      submit.disabled = false;
      const text = error instanceof ApiError && error.status === 401
        ? 'The gateway refused this token (401 unauthorized). Check that it is the current admin token.'
        : describe(error).title;
      replace(status, h('div', { class: 'alert error', role: 'alert' }, text));
      input.focus();
      input.select();
    }
  });
  replace(
    main,
    h(
      'section',
      { class: 'signin', 'aria-labelledby': 'signin-title' },
      h(
        'div',
        { class: 'panel' },
        h('h1', { id: 'signin-title' }, 'Sign in to the console'),
        h('p', {}, 'Paste the operator (admin) token. Every request this console makes sends it as a bearer token.'),
        status,
        form,
      ),
    ),
  );
  input.focus();
}

whenUnauthorized(() => {
  forgetToken();
  showSignIn('Signed out: the gateway refused the token (401 unauthorized). It may have been rotated; paste the current admin token.');
});

document.getElementById('sign-out').addEventListener('click', () => {
  forgetToken();
  showSignIn('Signed out. The token was removed from this tab.', 'info');
});

window.addEventListener('hashchange', route);
route();
if (token()) showInstance();
