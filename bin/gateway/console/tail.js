// Live tail: one topic's events as they are published, newest first, over the gateway's event stream.

import { h, replace, empty, field } from './dom.js';
import { token, describe, reportUnauthorized, ApiError } from './api.js';
import { badge, clock, compactJson } from './format.js';
import { readEventStream } from './sse.js';

const TOPICS = ['gateway:messages', 'gateway:webhooks', 'gateway:agents', 'gateway:violations'];
const AGENT_TOPIC = 'agent';
/** Events kept on screen; older ones are dropped. */
const KEEP = 500;
const RECONNECT_MS = 3000;

const TONES = {
  decision_log: 'info',
  schema_violation: 'bad',
  agent_evicted: 'warn',
  webhook_delivery_status: 'info',
  webhook_dlq: 'bad',
  webhook_signature_failure: 'bad',
  reminder: 'ok',
  lagged: 'warn',
};

export function render(main, route, context) {
  const initial = route.params.get('topic') ?? 'gateway:messages';
  const initialAgent = initial.match(/^agent:(.*):scheduled$/)?.[1] ?? '';
  const topic = h('select', { 'data-testid': 'tail-topic' },
    TOPICS.map((name) => h('option', { value: name }, name)),
    h('option', { value: AGENT_TOPIC }, 'agent:<id>:scheduled'));
  topic.value = initialAgent ? AGENT_TOPIC : (TOPICS.includes(initial) ? initial : TOPICS[0]);
  const agent = h('input', { type: 'text', value: initialAgent, autocomplete: 'off', spellcheck: 'false', placeholder: 'agent id', 'data-testid': 'tail-agent' });
  const agentField = field('Agent id', agent, {
    id: 'tail-agent',
    help: 'Replays the agent\u2019s reminders no stream has received; the console only watches, so the agent still gets them.',
    grow: true,
  });
  const start = h('button', { type: 'submit', class: 'button', 'data-testid': 'tail-start' }, 'Start');
  const stop = h('button', { type: 'button', class: 'button ghost', 'data-testid': 'tail-stop' }, 'Stop');
  const clear = h('button', { type: 'button', class: 'button ghost' }, 'Clear');
  const dot = h('span', { class: 'dot' });
  const statusText = h('span', { 'data-testid': 'tail-status-text' }, 'Not connected');
  const status = h('span', { class: 'tail-status', 'data-testid': 'tail-status', role: 'status' }, dot, statusText);
  const counter = h('span', { class: 'muted' }, '');
  const problem = h('div', { 'aria-live': 'polite' });
  const list = h('ul', { class: 'events', 'data-testid': 'tail-events', 'aria-label': 'Events, newest first' });
  const placeholder = empty('No events yet', 'Events published on the topic from now on appear here, newest first.');
  const form = h('form', { class: 'filters', novalidate: true },
    field('Topic', topic, { id: 'tail-topic' }), agentField, start, stop, clear);
  main.append(
    h('div', { class: 'view-head' }, h('h1', {}, 'Live tail'), h('div', { class: 'actions' }, counter, status)),
    h('section', { class: 'panel', 'aria-label': 'Topic' }, form),
    problem,
    h('section', { class: 'panel flush', 'aria-label': 'Events' }, placeholder, list),
  );

  let stream = null;
  let received = 0;
  /** The id of the last event shown: sent as Last-Event-ID when the stream reconnects. */
  let lastEventId = null;
  const setState = (state, text) => {
    dot.className = `dot ${state}`;
    statusText.textContent = text;
    status.dataset.state = state;
  };
  const showAgentField = () => { agentField.hidden = topic.value !== AGENT_TOPIC; };
  showAgentField();
  topic.addEventListener('change', showAgentField);

  const topicName = () => (topic.value === AGENT_TOPIC ? `agent:${agent.value.trim()}:scheduled` : topic.value);

  const stopStream = () => {
    stream?.abort();
    stream = null;
    stop.disabled = true;
    start.textContent = 'Start';
    setState('', 'Stopped');
  };
  context.signal.addEventListener('abort', () => stream?.abort());

  const add = (event) => {
    received += 1;
    if (event.id) lastEventId = event.id;
    counter.textContent = `${received} event${received === 1 ? '' : 's'} received ·`;
    placeholder.hidden = true;
    let data = event.data;
    try {
      data = JSON.parse(event.data);
    } catch {
      // Shown as the text it is.
    }
    const pretty = typeof data === 'string' ? data : JSON.stringify(data, null, 2);
    const summary = typeof data === 'string' ? data : compactJson(withoutEnvelope(data));
    const published = typeof data === 'object' && data !== null && typeof data.timestamp === 'string'
      ? new Date(data.timestamp) : new Date();
    list.prepend(h(
      'li',
      { 'data-testid': 'tail-event', dataset: { eventType: event.type } },
      h('div', { class: 'meta' },
        h('time', { class: 'muted mono', datetime: published.toISOString(), title: published.toISOString() },
          clock(published)),
        badge(event.type, TONES[event.type] ?? ''),
        event.id ? h('span', { class: 'mono muted' }, `id ${event.id}`) : null),
      h('details', {}, h('summary', {}, summary), h('pre', { class: 'code' }, pretty)),
    ));
    while (list.childElementCount > KEEP) list.lastElementChild.remove();
  };

  const connect = async (name, controller) => {
    setState('wait', `Connecting to ${name}…`);
    try {
      await readEventStream(`/gateway/events?topic=${encodeURIComponent(name)}`, {
        token: token(),
        signal: controller.signal,
        lastEventId,
        onComment: (text) => {
          if (text === 'connected') setState('live', `Live: ${name}`);
        },
        onEvent: add,
      });
      if (controller.signal.aborted) return;
      setState('wait', `The stream ended; reconnecting in ${RECONNECT_MS / 1000} s`);
    } catch (error) {
      if (controller.signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) {
        reportUnauthorized(error);
        return;
      }
      if (error instanceof ApiError) {
        // A refusal does not get better by retrying.
        setState('down', 'Refused');
        replace(problem, h('div', { class: 'alert error', role: 'alert' },
          explain(error), error.detail ? h('span', { class: 'detail' }, error.detail) : null));
        stop.disabled = true;
        if (stream === controller) stream = null;
        return;
      }
      setState('wait', `Connection lost (${describe(error).title}); reconnecting in ${RECONNECT_MS / 1000} s`);
    }
    setTimeout(() => {
      if (!controller.signal.aborted) connect(name, controller);
    }, RECONNECT_MS);
  };

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    replace(problem);
    if (topic.value === AGENT_TOPIC && !agent.value.trim()) {
      replace(problem, h('div', { class: 'alert error', role: 'alert' }, 'Enter the agent id whose reminders to follow.'));
      agent.focus();
      return;
    }
    stream?.abort();
    const name = topicName();
    // The address remembers the topic (never the token), so a reload resumes the same tail.
    history.replaceState(null, '', `#/tail?topic=${encodeURIComponent(name)}`);
    const controller = new AbortController();
    stream = controller;
    stop.disabled = false;
    start.textContent = 'Restart';
    lastEventId = null;
    connect(name, controller);
  });
  stop.addEventListener('click', stopStream);
  clear.addEventListener('click', () => {
    list.replaceChildren();
    received = 0;
    counter.textContent = '';
    placeholder.hidden = false;
  });
  stop.disabled = true;
  if (route.params.get('topic')) start.click();
}

/** An event's own fields, without what every event carries (shown beside it already). */
function withoutEnvelope(data) {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return data;
  const { id: _id, timestamp: _timestamp, event_type: _type, ...rest } = data;
  return rest;
}

function explain(error) {
  if (error.status === 401) return 'The gateway refused the token for this topic (401).';
  if (error.status === 400) return 'Not a topic the gateway knows (400 invalid_topic).';
  if (error.status === 503) return 'The gateway holds as many streams as it allows (503 too_many_streams); close another tail.';
  return `The gateway refused the stream (${error.message}).`;
}
