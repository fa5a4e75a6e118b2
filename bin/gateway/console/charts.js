// The last hours as small charts (GET /gateway/history): one inline SVG per series, bars for counts and a line for
// gauges, with hour labels on the browser's 24-hour clock and a text summary that is also each chart's accessible
// description. Nothing is loaded from elsewhere: no library, no CDN, no inline style (the page's policy refuses it);
// colours come from app.css.
//
// hourlyCharts(container, { webhookId, hours, signal }) draws into `container` and returns its `load` function, which
// reads the history again and redraws (the overview calls it on its refresh). With `webhookId` only the delivery
// series are drawn, of that webhook config.

import { h, replace } from './dom.js';
import { api, errorAlert, query } from './api.js';
import { number } from './format.js';

const SVG = 'http://www.w3.org/2000/svg';
/** The drawing's size in its own units; the CSS scales it to the width it is given. */
const WIDTH = 300;
const HEIGHT = 110;
/** Room for the value labels on the left and the hour labels below. */
const LEFT = 34;
const BOTTOM = 18;
const TOP = 6;
/** An hour label every this many hours. */
const LABEL_EVERY = 6;

/** What is charted, in order; `also` is a second line on the same chart. */
const CHARTS = [
  { series: 'deliveries', title: 'Deliveries', kind: 'bars', tone: 'ok', unit: 'delivered per hour' },
  { series: 'failed_attempts', title: 'Failed attempts', kind: 'bars', tone: 'warn', unit: 'failed attempts per hour' },
  { series: 'dead_letters', title: 'Dead letters', kind: 'bars', tone: 'bad', unit: 'deliveries gone dead per hour' },
  { series: 'heartbeats', title: 'Heartbeats', kind: 'bars', tone: 'info', unit: 'heartbeats per hour' },
  { series: 'live_agents', title: 'Live agents', kind: 'line', tone: 'info', unit: 'most agents live at once' },
  { series: 'cron_fires', title: 'Cron fires', kind: 'bars', tone: 'info', unit: 'fires per hour' },
  {
    series: 'cron_lateness_max_ms', title: 'Cron lateness', kind: 'line', tone: 'warn', also: 'cron_lateness_avg_ms',
    unit: 'ms late: the latest fire (line) and the average (dashed)',
  },
];

let serial = 0;

function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) element.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

function pad(value) {
  return String(value).padStart(2, '0');
}

/** An hour's start on the browser's clock, 24-hour: `14:00`. */
function hourLabel(iso) {
  const date = new Date(iso);
  return `${pad(date.getHours())}:00`;
}

/** "peak 12 at 14:00 · total 40" (counts) or "highest 3 at 09:00" (gauges); what the chart says in words. */
function summary(chart, values, hourStarts) {
  const known = values.map((value, index) => [value, index]).filter(([value]) => typeof value === 'number');
  if (known.length === 0 || known.every(([value]) => value === 0)) return `none in the last ${values.length} hours`;
  const [peak, at] = known.reduce((best, item) => (item[0] > best[0] ? item : best));
  const when = hourLabel(hourStarts[at]);
  if (chart.kind === 'bars') {
    const total = known.reduce((sum, [value]) => sum + value, 0);
    return `total ${number(total)} in ${values.length} hours · peak ${number(peak)} in the hour from ${when}`;
  }
  return `highest ${number(peak)} in the hour from ${when}`;
}

/** The largest value shown, rounded up to a number that reads well on the axis. */
function scaleTop(values) {
  const largest = Math.max(0, ...values.filter((value) => typeof value === 'number'));
  if (largest <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(largest));
  const step = [1, 2, 5, 10].find((factor) => factor * magnitude >= largest) ?? 10;
  return step * magnitude;
}

function drawing(chart, series, hourStarts, titleId, descId) {
  const values = series[chart.series] ?? [];
  const second = chart.also ? series[chart.also] ?? [] : [];
  const top = scaleTop([...values, ...second]);
  const slots = Math.max(values.length, 1);
  const plotWidth = WIDTH - LEFT - 4;
  const plotHeight = HEIGHT - TOP - BOTTOM;
  const slot = plotWidth / slots;
  const x = (index) => LEFT + index * slot;
  const y = (value) => TOP + plotHeight - (value / top) * plotHeight;
  const parts = [
    svg('title', { id: titleId }, `${chart.title}, ${chart.unit}, last ${values.length} hours`),
    svg('desc', { id: descId }, summary(chart, values, hourStarts)),
    svg('line', { class: 'axis', x1: LEFT, y1: TOP + plotHeight, x2: WIDTH - 4, y2: TOP + plotHeight }),
    svg('line', { class: 'grid', x1: LEFT, y1: TOP, x2: WIDTH - 4, y2: TOP }),
    svg('text', { class: 'tick', x: LEFT - 4, y: TOP + 4, 'text-anchor': 'end' }, number(top)),
    svg('text', { class: 'tick', x: LEFT - 4, y: TOP + plotHeight, 'text-anchor': 'end' }, '0'),
  ];
  hourStarts.forEach((iso, index) => {
    const last = index === hourStarts.length - 1;
    if (index % LABEL_EVERY !== 0 && !last) return;
    if (!last && hourStarts.length - 1 - index < LABEL_EVERY / 2) return;
    parts.push(svg('text', {
      class: 'tick', x: x(index) + slot / 2, y: HEIGHT - 4, 'text-anchor': last ? 'end' : 'middle',
    }, last ? 'now' : hourLabel(iso)));
  });
  if (chart.kind === 'bars') {
    values.forEach((value, index) => {
      const count = typeof value === 'number' ? value : 0;
      const height = (count / top) * plotHeight;
      parts.push(svg('rect', {
        class: `bar ${chart.tone}${count > 0 ? ' nonzero' : ''}`,
        x: x(index) + slot * 0.15, y: TOP + plotHeight - height, width: slot * 0.7, height,
      }, svg('title', {}, `${hourLabel(hourStarts[index])}: ${number(count)}`)));
    });
  } else {
    for (const [list, dashed] of [[values, false], [second, true]]) {
      const points = list.map((value, index) => (typeof value === 'number' ? [x(index) + slot / 2, y(value), value, index] : null));
      // A line through consecutive known hours; an hour without a sample breaks it.
      let run = [];
      const flush = () => {
        if (run.length > 1) {
          parts.push(svg('polyline', {
            class: `line ${chart.tone}${dashed ? ' dashed' : ''}`, points: run.map(([px, py]) => `${px},${py}`).join(' '),
          }));
        }
        run = [];
      };
      for (const point of points) {
        if (point === null) flush();
        else run.push(point);
      }
      flush();
      if (!dashed) {
        for (const point of points.filter((known) => known !== null)) {
          const [px, py, value, index] = point;
          parts.push(svg('circle', { class: `dot ${chart.tone}${value > 0 ? ' nonzero' : ''}`, cx: px, cy: py, r: 2.5 },
            svg('title', {}, `${hourLabel(hourStarts[index])}: ${number(value)}`)));
        }
      }
    }
  }
  return svg('svg', {
    class: 'chart', viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'aria-labelledby': `${titleId} ${descId}`,
  }, ...parts);
}

function figure(chart, history) {
  serial += 1;
  const titleId = `chart-title-${serial}`;
  const descId = `chart-desc-${serial}`;
  const values = history.series[chart.series] ?? [];
  return h(
    'figure',
    { class: 'chart-figure', 'data-testid': `chart-${chart.series}` },
    h('figcaption', {}, h('strong', {}, chart.title), h('span', { class: 'muted' }, ` · ${chart.unit}`)),
    drawing(chart, history.series, history.hour_starts, titleId, descId),
    h('div', { class: 'muted', 'data-testid': 'chart-summary' }, summary(chart, values, history.hour_starts)),
  );
}

/**
 * Draws the last `hours` hours of the history into `container` (the gateway's, or with `webhookId` one webhook
 * config's deliveries) and returns `load`, which reads and draws them again.
 */
export function hourlyCharts(container, { webhookId = null, hours = 24, signal } = {}) {
  const grid = h('div', { class: 'charts', 'data-testid': 'hourly-charts' });
  replace(container, grid);
  const load = async () => {
    try {
      const history = await api('GET', `/gateway/history${query({ hours, webhook_id: webhookId })}`, { signal });
      const shown = CHARTS.filter((chart) => Array.isArray(history.series[chart.series]));
      replace(grid, shown.map((chart) => figure(chart, history)));
    } catch (error) {
      if (!signal?.aborted) replace(grid, errorAlert(error, 'Could not load the last hours'));
    }
  };
  load();
  return load;
}
