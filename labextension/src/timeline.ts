/**
 * The GPU timeline (Gantt): one row per GPU, one bar per job and GPU over the last hours.
 * `computeBars` is pure (unit-tested); `renderTimeline` draws it as SVG.
 */
import { clock, jobColour } from './format';
import { Allocation, IJob, INode } from './types';

export interface IBar {
  row: string; // "node:index"
  jobId: number;
  name: string;
  state: string;
  start: number;
  end: number;
}

export interface ITimeline {
  rows: string[];
  bars: IBar[];
  from: number;
  to: number;
}

/**
 * Rows: every GPU of the inventory (plus any row a remembered allocation names).
 * Bars: jobs whose [start, end or now] overlaps [now - span, now], on the GPUs of their
 * allocation: the current one, the server's `last_alloc`, or one remembered by the client.
 */
export function computeBars(
  nodes: INode[],
  jobs: IJob[],
  remembered: Map<number, Allocation>,
  now: number,
  spanSeconds: number
): ITimeline {
  const from = now - spanSeconds;
  const rows: string[] = [];
  const seen = new Set<string>();
  const addRow = (r: string) => {
    if (!seen.has(r)) {
      seen.add(r);
      rows.push(r);
    }
  };
  for (const node of nodes) {
    for (const gpu of node.gpus) {
      addRow(`${node.name}:${gpu.index}`);
    }
  }
  const bars: IBar[] = [];
  for (const job of jobs) {
    if (job.start_time === null || job.start_time === undefined) {
      continue;
    }
    const end = job.end_time ?? now;
    if (end < from || job.start_time > now) {
      continue;
    }
    const alloc = pickAlloc(job, remembered);
    if (!alloc) {
      continue;
    }
    for (const node of Object.keys(alloc).sort()) {
      for (const index of alloc[node]) {
        const row = `${node}:${index}`;
        addRow(row);
        bars.push({
          row,
          jobId: job.id,
          name: job.name,
          state: job.state,
          start: Math.max(job.start_time, from),
          end: Math.min(end, now)
        });
      }
    }
  }
  return { rows, bars, from, to: now };
}

/** The timeline windows a user can pick: `auto` follows the jobs, the others are fixed. */
export const WINDOWS: { label: string; seconds: number | 'auto' }[] = [
  { label: 'auto', seconds: 'auto' },
  { label: '15 min', seconds: 15 * 60 },
  { label: '1 h', seconds: 3600 },
  { label: '6 h', seconds: 6 * 3600 }
];

/**
 * The `auto` window: from a little before the earliest start of the jobs that ran within the
 * last `maxSeconds` to now, at least a minute: a job of a few seconds is a visible bar, not a
 * sliver at the edge of a 6-hour window.
 */
export function autoSpan(jobs: IJob[], now: number, maxSeconds: number): number {
  let earliest = now;
  for (const job of jobs) {
    if (job.start_time === null || job.start_time === undefined) {
      continue;
    }
    const end = job.end_time ?? now;
    if (end >= now - maxSeconds && job.start_time < earliest) {
      earliest = job.start_time;
    }
  }
  const span = (now - earliest) * 1.1; // a margin before the first bar
  return Math.min(Math.max(span, 60), maxSeconds);
}

function pickAlloc(job: IJob, remembered: Map<number, Allocation>): Allocation | null {
  for (const a of [job.alloc, job.last_alloc, remembered.get(job.id)]) {
    if (a && Object.values(a).some(v => v.length > 0)) {
      return a;
    }
  }
  return null;
}

/** Tick intervals, seconds: round times of day (every 15 s, 10 min, 6 h, ...). */
const TICK_STEPS = [
  1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400
];
/** The axis labels' character width in pixels (their 10-px font, with some room). */
const CHAR_W = 6.5;
const TICK_GAP = 10;

export interface ITick {
  t: number;
  label: string;
}

/**
 * The axis ticks of [from, to] drawn `plotW` pixels wide: at multiples of the smallest interval
 * of `TICK_STEPS` (in local time) whose labels, centred on their ticks, leave `TICK_GAP` pixels
 * between them; `HH:MM:SS` below a minute's interval, else `HH:MM`. A tick whose label would
 * run past either end of the plot is left out.
 */
export function axisTicks(from: number, to: number, plotW: number): ITick[] {
  const span = Math.max(to - from, 1);
  const perSecond = plotW / span;
  const width = (step: number) => (step < 60 ? 8 : 5) * CHAR_W;
  const step =
    TICK_STEPS.find(s => s * perSecond >= width(s) + TICK_GAP) ?? TICK_STEPS[TICK_STEPS.length - 1];
  const half = width(step) / 2;
  const offset = -new Date(from * 1000).getTimezoneOffset() * 60; // local time's offset from UTC
  const ticks: ITick[] = [];
  for (let t = Math.ceil((from + offset) / step) * step - offset; t <= to; t += step) {
    const px = (t - from) * perSecond;
    if (px - half >= 0 && px + half <= plotW) {
      ticks.push({ t, label: clock(t, step < 60) });
    }
  }
  return ticks;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
const ROW_H = 16;
const LABEL_W = 64;
const AXIS_H = 16;

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    el.setAttribute(k, String(v));
  }
  return el;
}

/** Draws the timeline into a fresh SVG element `width` pixels wide. */
export function renderTimeline(tl: ITimeline, width: number): SVGSVGElement {
  const w = Math.max(width, LABEL_W + 60);
  const plotW = w - LABEL_W - 4;
  const h = AXIS_H + Math.max(tl.rows.length, 1) * ROW_H + 2;
  const root = svg('svg', { width: w, height: h, class: 'jp-schedulearn-timeline-svg' });
  const x = (t: number) => LABEL_W + ((t - tl.from) / Math.max(tl.to - tl.from, 1)) * plotW;

  // Axis: wall-clock ticks at round times, as many as fit without their labels touching.
  for (const tick of axisTicks(tl.from, tl.to, plotW)) {
    const tx = x(tick.t);
    root.appendChild(svg('line', { x1: tx, x2: tx, y1: AXIS_H - 3, y2: h, class: 'jp-schedulearn-tick' }));
    const label = svg('text', {
      x: tx,
      y: AXIS_H - 5,
      'text-anchor': 'middle',
      class: 'jp-schedulearn-tick-label'
    });
    label.textContent = tick.label;
    root.appendChild(label);
  }
  const rowIndex = new Map(tl.rows.map((r, i) => [r, i]));
  tl.rows.forEach((r, i) => {
    const label = svg('text', { x: 2, y: AXIS_H + i * ROW_H + 12, class: 'jp-schedulearn-row-label' });
    label.textContent = r;
    root.appendChild(label);
  });
  for (const bar of tl.bars) {
    const i = rowIndex.get(bar.row) ?? 0;
    const x0 = x(bar.start);
    const rect = svg('rect', {
      x: x0,
      y: AXIS_H + i * ROW_H + 2,
      width: Math.max(x(bar.end) - x0, 2),
      height: ROW_H - 4,
      rx: 2,
      fill: jobColour(bar.jobId),
      class: `jp-schedulearn-bar jp-mod-${bar.state}`,
      'data-job-id': bar.jobId,
      'data-row': bar.row
    });
    const title = svg('title', {});
    title.textContent =
      `#${bar.jobId} ${bar.name} (${bar.state}) on ${bar.row}\n` +
      `${clock(bar.start, true)}–${clock(bar.end, true)} (${Math.max(0, Math.round(bar.end - bar.start))} s shown)`;
    rect.appendChild(title);
    root.appendChild(rect);
  }
  if (tl.rows.length === 0) {
    const t = svg('text', { x: LABEL_W, y: AXIS_H + 12, class: 'jp-schedulearn-row-label' });
    t.textContent = 'no GPUs';
    root.appendChild(t);
  }
  return root;
}
