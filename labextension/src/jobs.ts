/** The jobs table: state, user, GPUs, waited, ran (two lines a job); Cancel and Logs actions. */
import { h } from './dom';
import {
  deadlineText,
  formatAlloc,
  formatDuration,
  isFinal,
  jobColour,
  progressPercent,
  progressText,
  ranText,
  shownGpus,
  waited
} from './format';
import { IJob } from './types';

export interface IJobActions {
  cancel(job: IJob): void;
  logs(job: IJob): void;
}

const ORDER: Record<string, number> = { running: 0, queued: 1 };

/** Active jobs first (running, then queued, by id), then finished ones, newest first. */
export function sortJobs(jobs: IJob[]): IJob[] {
  return [...jobs].sort((a, b) => {
    const oa = ORDER[a.state] ?? 2;
    const ob = ORDER[b.state] ?? 2;
    if (oa !== ob) {
      return oa - ob;
    }
    if (oa < 2) {
      return a.id - b.id;
    }
    return (b.end_time ?? 0) - (a.end_time ?? 0) || b.id - a.id;
  });
}

/** Who looks at the jobs table (`GET policy`): `user` may cancel only their own jobs, unless they
 * are one of the scheduler's admins (anyone's), and read the logs of others' only where the
 * scheduler does not keep them private. */
export interface IViewer {
  user: string;
  admin: boolean;
}

/** The jobs table, as `viewer` may act on it. */
export function renderJobsTable(
  jobs: IJob[],
  now: number,
  actions: IJobActions,
  viewer: IViewer = { user: '', admin: false },
  limit = 50
): HTMLElement {
  const me = viewer.user;
  const root = h('div', { class: 'jp-schedulearn-jobs' });
  if (jobs.length === 0) {
    root.append(h('div', { class: 'jp-schedulearn-empty' }, 'No jobs yet. Submit one with %%schedulearn.'));
    return root;
  }
  const sorted = sortJobs(jobs);
  const shown = sorted.slice(0, limit);
  const body = h('tbody', {});
  for (const job of shown) {
    const cancel = h(
      'button',
      { class: 'jp-schedulearn-cancel jp-mod-styled jp-mod-warn', title: `Cancel job #${job.id}` },
      'Cancel'
    );
    cancel.addEventListener('click', () => actions.cancel(job));
    const logs = h(
      'button',
      { class: 'jp-schedulearn-logs jp-mod-styled', title: `Show the log of job #${job.id}` },
      'Logs'
    );
    logs.addEventListener('click', () => actions.logs(job));
    if (me && job.user && job.user !== me) {
      if (viewer.admin) {
        cancel.title = `Cancel job #${job.id}, ${job.user}'s (you are an admin)`;
      } else {
        cancel.disabled = true;
        cancel.title = `Job #${job.id} is ${job.user}'s: only they or an admin may cancel it`;
      }
    }
    if (job.private) {
      logs.disabled = true;
      logs.title = `Job #${job.id} is ${job.user}'s: only they may read its log`;
    } else if (job.files_removed) {
      logs.disabled = true;
      logs.title = `Job #${job.id}'s log was removed with its directory, a while after it ended`;
    }
    const gpus = shownGpus(job);
    const where = formatAlloc(job.gpus > 0 ? job.alloc : job.last_alloc ?? {});
    const meta = [
      job.user || '–',
      `${gpus} GPU${gpus === '1' ? '' : 's'}`,
      `waited ${formatDuration(waited(job, now))}`,
      ranText(job, now),
      progressText(job) || null,
      deadlineText(job, now) || null
    ]
      .filter(x => x !== null)
      .join(' · ');
    const pct = progressPercent(job);
    const bar =
      pct === null
        ? null
        : h(
            'div',
            { class: 'jp-schedulearn-progress', title: `${Math.round(pct)}% done`, 'data-progress': pct.toFixed(1) },
            h('div', { class: 'jp-schedulearn-progress-fill', style: `width: ${pct.toFixed(1)}%` })
          );
    body.append(
      h(
        'tr',
        { class: `jp-schedulearn-job jp-mod-${job.state}`, 'data-job-id': job.id, 'data-state': job.state },
        h(
          'td',
          { class: 'jp-schedulearn-job-main', style: `border-left: 3px solid ${jobColour(job.id)}` },
          h(
            'div',
            { class: 'jp-schedulearn-job-title', title: job.reason ? `${job.name}: ${job.reason}` : job.name },
            h('span', { class: 'jp-schedulearn-job-id' }, `#${job.id}`),
            ' ',
            h('span', { class: 'jp-schedulearn-job-name' }, job.name)
          ),
          h('div', { class: 'jp-schedulearn-job-meta', title: where ? `${meta} · on ${where}` : meta }, meta),
          bar
        ),
        h('td', {}, h('span', { class: `jp-schedulearn-state jp-mod-${job.state}` }, job.state)),
        h('td', { class: 'jp-schedulearn-actions' }, logs, isFinal(job.state) ? null : cancel)
      )
    );
  }
  root.append(h('table', { class: 'jp-schedulearn-table' }, body));
  if (sorted.length > shown.length) {
    root.append(h('div', { class: 'jp-schedulearn-more' }, `${sorted.length - shown.length} older jobs not shown`));
  }
  return root;
}
