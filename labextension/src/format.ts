/** Pure formatting helpers (no JupyterLab imports, so they are unit-tested under plain Node). */
import { Allocation, FINAL_STATES, IJob, IPaused, JobState } from './types';

export function isFinal(state: JobState): boolean {
  return FINAL_STATES.includes(state);
}

/** `75s` → `1m 15s`; hours and days for long waits. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds) || seconds < 0) {
    return '–';
  }
  const s = Math.round(seconds);
  if (s < 60) {
    return `${s}s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m}m ${s % 60}s`;
  }
  const h = Math.floor(m / 60);
  if (h < 24) {
    return `${h}h ${m % 60}m`;
  }
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** Seconds a job waited in the queue (until its first start, or until now). */
export function waited(job: IJob, now: number): number {
  const until = job.start_time ?? job.end_time ?? now;
  return Math.max(0, until - job.submit_time);
}

/** Seconds a job has run (server figure when given, else from its start and end). */
export function ran(job: IJob, now: number): number | null {
  if (job.start_time === null || job.start_time === undefined) {
    return null; // never started (the server reports run_s = 0)
  }
  if (job.run_s !== undefined && job.run_s !== null) {
    return job.run_s;
  }
  return Math.max(0, (job.end_time ?? now) - job.start_time);
}

/** `ran 4m 10s`, and while it runs under a time limit `ran 4m 10s (time limit 10m 0s)`; null
 * for a job that never started. */
export function ranText(job: IJob, now: number): string | null {
  const r = ran(job, now);
  if (r === null) {
    return null;
  }
  const limit = job.spec?.time_limit;
  const cap = job.state === 'running' && typeof limit === 'number' ? ` (time limit ${formatDuration(limit)})` : '';
  return `ran ${formatDuration(r)}${cap}`;
}

/** `{"node0": [0, 1]}` → `node0:0,1`. */
export function formatAlloc(alloc: Allocation | undefined): string {
  if (!alloc) {
    return '';
  }
  return Object.keys(alloc)
    .sort()
    .filter(node => alloc[node].length > 0)
    .map(node => `${node}:${alloc[node].join(',')}`)
    .join(' ');
}

/**
 * The GPUs to show for a job: those it holds now, else those it last held (a finished or
 * preempted job, from the server's `last_alloc`), else what it asks for (`2`, or `auto`).
 */
export function shownGpus(job: IJob): string {
  if (job.gpus > 0) {
    return String(job.gpus);
  }
  const last = Object.values(job.last_alloc ?? {}).reduce((n, idx) => n + idx.length, 0);
  return last > 0 ? String(last) : requestedGpus(job);
}

/** The GPUs a job asked for: `2`, or `auto`. */
export function requestedGpus(job: IJob): string {
  const g = job.spec?.gpus;
  return g === undefined ? String(job.gpus) : String(g);
}

/** Utilisation as a percentage 0-100 (NVML reports percent; a fraction is accepted). */
export function utilisationPercent(u: number | null | undefined): number {
  if (u === null || u === undefined || !isFinite(u) || u < 0) {
    return 0;
  }
  const pct = u <= 1 ? u * 100 : u;
  return Math.min(100, pct);
}

/** A stable, readable colour per job id (golden-angle hues). */
export function jobColour(id: number): string {
  const hue = (id * 137.508) % 360;
  return `hsl(${hue.toFixed(0)}, 60%, 55%)`;
}

/** A timeline span in hours, for its title: `6 h`, `1.5 h`, `30 min`. */
export function formatSpan(hours: number): string {
  if (hours < 1) {
    return `${Math.max(1, Math.round(hours * 60))} min`;
  }
  return `${Number(hours.toFixed(1))} h`;
}

/**
 * What the scheduler's estimate says of a job: `42% done · ~12m 5s left` (`` when nothing is
 * known). A time left predicted from similar jobs (not the job's own progress) ends in `?`; a
 * running job that stopped reporting (`silent_s`: hung, or a long stretch without reports) says
 * `no report for 7m 0s`.
 */
export function progressText(job: IJob): string {
  const parts: string[] = [];
  if (job.progress !== undefined && job.progress !== null && job.state !== 'succeeded') {
    parts.push(`${Math.round(100 * job.progress)}% done`);
  }
  if (job.eta_s !== undefined && job.eta_s !== null && job.state === 'running') {
    parts.push(`~${formatDuration(job.eta_s)} left${job.eta_basis === 'history' ? '?' : ''}`);
  }
  if (job.silent_s !== undefined && job.silent_s !== null && job.state === 'running') {
    parts.push(`no report for ${formatDuration(job.silent_s)}`);
  }
  return parts.join(' · ');
}

const DEADLINE_WORDS: Record<string, string> = {
  on_track: 'on track',
  at_risk: 'at risk',
  will_miss: 'will miss',
  unknown: 'no estimate yet'
};

/**
 * A job's deadline as users read it (`` without one): `due in 1h 5m · at risk`, `due 3m 0s ago`,
 * `deadline met`, `missed by 12m 0s` — the scheduler's own estimate (`deadline_status`).
 */
export function deadlineText(job: IJob, now: number): string {
  if (job.deadline === undefined || job.deadline === null) {
    return '';
  }
  if (isFinal(job.state)) {
    if (job.deadline_status === 'met') {
      return 'deadline met';
    }
    if (job.deadline_status === 'missed') {
      return job.missed_by_s ? `missed by ${formatDuration(job.missed_by_s)}` : 'deadline missed';
    }
    return '';
  }
  const left = job.deadline - now;
  if (left <= 0) {
    return `due ${formatDuration(-left)} ago`;
  }
  const words = DEADLINE_WORDS[job.deadline_status ?? ''];
  return words ? `due in ${formatDuration(left)} · ${words}` : `due in ${formatDuration(left)}`;
}

/** The reported progress as a percentage 0-100, or null (not reported, or the job ended). */
export function progressPercent(job: IJob): number | null {
  if (job.progress === undefined || job.progress === null || isFinal(job.state)) {
    return null;
  }
  return Math.max(0, Math.min(100, 100 * job.progress));
}

/** A log as a terminal shows it, read in pieces: `shown`, the lines that ended (each at its
 * last drawing), and `open`, the line not yet ended (raw: its carriage returns kept, so that a
 * progress bar's next drawing replaces the last one even when a piece ends inside it). */
export interface IScreen {
  shown: string;
  open: string;
}

/** A line as a terminal shows it: each carriage return starts drawing over it from its first
 * column (a progress bar redraws its line so, tqdm's way); what a drawing does not reach of the
 * one before stays, as on a terminal (and a drawing read only in part does not blank the rest). */
export function drawn(line: string): string {
  let out = '';
  for (const part of line.split('\r')) {
    out = part + out.slice(part.length);
  }
  return out;
}

/** `screen` with `text` written after it; at most `max` characters of ended lines kept. */
export function writeToScreen(screen: IScreen, text: string, max = 2_000_000): IScreen {
  let open = screen.open + text;
  let shown = screen.shown;
  const end = open.lastIndexOf('\n');
  if (end >= 0) {
    shown = (shown + open.slice(0, end).split('\n').map(drawn).join('\n') + '\n').slice(-max);
    open = open.slice(end + 1);
  }
  if (open.length > 8192 && open.includes('\r')) {
    open = '\r' + drawn(open); // an endless progress line: what it shows is all that matters
  }
  return { shown, open };
}

/** What a terminal shows of `screen`. */
export function screenText(screen: IScreen): string {
  return screen.shown + drawn(screen.open);
}

/** A time of day on the 24-hour clock, `14:05` (or `14:05:09`): the sidebar's header and its
 * timeline's axis read alike (the header used the locale's, `2:05:09 PM`, beside a `14:05` axis). */
export function clock(t: number, seconds = false): string {
  const d = new Date(t * 1000);
  const hm = `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  return seconds ? `${hm}:${String(d.getSeconds()).padStart(2, '0')}` : hm;
}

/** The sidebar's line while an admin has paused scheduling: `Scheduling paused by carol at 18:40
 * (reboot at 19:00): no job starts until an admin resumes it.` */
export function pausedText(paused: IPaused, now: number = Date.now() / 1000): string {
  const why = paused.reason ? ` (${paused.reason})` : '';
  const day = (t: number) => {
    const d = new Date(t * 1000);
    return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
  };
  // a pause may last days (a maintenance): its date unless it began today
  const when = day(paused.since) === day(now) ? `at ${clock(paused.since)}` : `on ${day(paused.since)} ${clock(paused.since)}`;
  const until = paused.until ? paused.until : 'an admin resumes it';
  return `Scheduling paused by ${paused.by || '?'} ${when}${why}: no job starts until ${until}.`;
}

/** What a GPU card says of a GPU held outside the scheduler: `held_by` (`Slurm job 12 (bob)`),
 * or where that is long, up to its first parenthesis (`job 12 of alice, another scheduler's`);
 * the whole text is the card's tooltip. */
export function heldLabel(heldBy: string, most = 40): string {
  const cut = heldBy.indexOf(' (');
  return heldBy.length > most && cut > 0 ? heldBy.slice(0, cut) : heldBy;
}
