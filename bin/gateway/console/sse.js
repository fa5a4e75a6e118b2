// Server-Sent Events over fetch(). EventSource cannot send an Authorization header, and the operator token must
// not travel in the URL (URLs end up in access logs and browser history), so the stream is read and parsed here.

import { ApiError } from './api.js';

/**
 * The SSE wire format (the HTML standard's "event stream interpretation"): lines ending in CRLF, LF or CR;
 * `field: value` lines; comments start with `:`; a blank line dispatches the event built so far.
 */
export class SseParser {
  constructor({ onEvent, onComment = () => {} }) {
    this.onEvent = onEvent;
    this.onComment = onComment;
    this.buffer = '';
    this.type = '';
    this.data = [];
    this.lastEventId = null;
  }

  /** Feeds decoded text; complete lines are interpreted at once, a partial one waits for the rest. */
  push(text) {
    this.buffer += text;
    let start = 0;
    for (;;) {
      const lf = this.buffer.indexOf('\n', start);
      const cr = this.buffer.indexOf('\r', start);
      let end;
      let next;
      if (cr !== -1 && (lf === -1 || cr < lf)) {
        // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
        if (cr === this.buffer.length - 1) break;
        end = cr;
        next = this.buffer[cr + 1] === '\n' ? cr + 2 : cr + 1;
      } else if (lf !== -1) {
        end = lf;
        next = lf + 1;
      } else {
        break;
      }
      this.line(this.buffer.slice(start, end));
      start = next;
    }
    this.buffer = this.buffer.slice(start);
  }

  line(line) {
    if (line === '') {
      this.dispatch();
      return;
    }
    if (line.startsWith(':')) {
      this.onComment(line.slice(1).replace(/^ /, '').trimEnd());
      return;
    }
    const colon = line.indexOf(':');
    const name = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (name === 'event') this.type = value;
    else if (name === 'data') this.data.push(value);
    else if (name === 'id' && !value.includes('\0')) this.lastEventId = value;
  }

  dispatch() {
    const type = this.type || 'message';
    const data = this.data;
    this.type = '';
    this.data = [];
    if (data.length === 0) return;
    this.onEvent({ type, data: data.join('\n'), id: this.lastEventId });
  }
}

/**
 * Reads the event stream at `url` until it ends (resolves with the last event id) or fails (rejects: an ApiError
 * for a refusal, a TypeError for a network failure, an AbortError once `signal` aborts).
 */
export async function readEventStream(url, { token, signal, lastEventId, onOpen, onEvent, onComment }) {
  const headers = { Accept: 'text/event-stream' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (lastEventId) headers['Last-Event-ID'] = lastEventId;
  const response = await fetch(url, { headers, signal, cache: 'no-store', credentials: 'omit' });
  if (!response.ok) {
    const text = await response.text();
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    throw new ApiError(response.status, body);
  }
  onOpen?.();
  const parser = new SseParser({ onEvent, onComment });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return parser.lastEventId;
    parser.push(value);
  }
}
