// Times, numbers and statuses as the console shows them.

import { h } from './dom.js';

const numberFormat = new Intl.NumberFormat();

export function number(value) {
  return typeof value === 'number' ? numberFormat.format(value) : '—';
}

/** "12 s ago", "in 4 min", "3 h ago", "2 d ago". */
export function relative(iso, now = Date.now()) {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return '';
  const seconds = Math.round((at - now) / 1000);
  const size = Math.abs(seconds);
  let text;
  if (size < 1) return 'now';
  if (size < 60) text = `${size} s`;
  else if (size < 3600) text = `${Math.round(size / 60)} min`;
  else if (size < 86400) text = `${Math.round(size / 3600)} h`;
  else text = `${Math.round(size / 86400)} d`;
  return seconds < 0 ? `${text} ago` : `in ${text}`;
}

function pad(value, width = 2) {
  return String(value).padStart(width, '0');
}

/** The UTC offset of the browser's zone at `date`, as `UTC+01:00`. */
function zone(date) {
  const offset = -date.getTimezoneOffset();
  const sign = offset >= 0 ? '+' : '-';
  return `UTC${sign}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
}

/** The browser's local time of day, 24-hour, with the zone: `14:05:09 UTC+01:00` (every "updated at" line). */
export function clock(date = new Date()) {
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())} ${zone(date)}`;
}

/**
 * The browser's local date and time to the second, 24-hour, with the zone's UTC offset (one format everywhere in
 * the console); `precise` adds the milliseconds when the instant has them.
 */
export function absolute(iso, { precise = false } = {}) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso ?? '');
  const ms = date.getMilliseconds();
  const text = `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  return `${text}${precise && ms ? `.${pad(ms, 3)}` : ''} ${zone(date)}`;
}

/**
 * An instant as relative time over local time; the tooltip has the exact RFC 3339 text the API gave and the
 * local time with its zone.
 */
export function when(iso, { now, precise = false } = {}) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  return h(
    'time',
    { datetime: iso, title: `${iso} (local: ${absolute(iso, { precise: true })})`, class: 'stack' },
    h('span', {}, relative(iso, now)),
    h('span', { class: 'sub' }, absolute(iso, { precise })),
  );
}

const STATUS_TONES = {
  pending: 'info',
  delivered: 'ok',
  failed: 'warn',
  dead: 'bad',
  ready: 'ok',
  single: 'info',
  leader: 'ok',
  follower: 'info',
  ok: 'ok',
  none: '',
  unreachable: 'bad',
  paused: 'warn',
  active: 'ok',
};

/** A status as a coloured badge. */
export function badge(status, tone = STATUS_TONES[status] ?? '') {
  return h('span', { class: `badge ${tone}`.trim(), 'data-testid': 'status' }, status);
}

/** Compact JSON of a value, for a one-line cell. */
export function compactJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

/** A datetime-local field's value (the browser's local time) as an RFC 3339 instant, or null. */
export function localToRfc3339(value) {
  if (!value) return null;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

/** An RFC 3339 instant as a datetime-local field's value. */
export function rfc3339ToLocal(iso) {
  const date = new Date(iso);
  if (!iso || Number.isNaN(date.getTime())) return '';
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}
