/**
 * schedulearn-labextension: the Schedulearn sidebar (GPUs, jobs, policy, GPU timeline), a log
 * view following a job, and command-palette commands. Talks to the server extension's REST API
 * under `{base_url}schedulearn/api/`.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  Notification,
  showDialog,
  showErrorMessage,
  WidgetTracker
} from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { LabIcon } from '@jupyterlab/ui-components';

import { SchedulearnApi } from './api';
import { isFinal } from './format';
import { createLogWidget, LogView } from './logs';
import { SchedulearnModel } from './model';
import { SchedulearnPanel } from './panel';
import { IJob } from './types';

const PLUGIN_ID = 'schedulearn-labextension:plugin';

export namespace CommandIDs {
  export const open = 'schedulearn:open';
  export const refresh = 'schedulearn:refresh';
  export const setPolicy = 'schedulearn:set-policy';
  export const cancelJob = 'schedulearn:cancel-job';
  export const showLogs = 'schedulearn:show-logs';
}

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
<g class="jp-icon3" fill="#616161"><path d="M7 7h10v10H7z" opacity=".35"/>
<path d="M9 2h2v3H9zm4 0h2v3h-2zM9 19h2v3H9zm4 0h2v3h-2zM2 9h3v2H2zm0 4h3v2H2zm17-4h3v2h-3zm0 4h3v2h-3z"/>
<path d="M5 5h14v14H5zm2 2v10h10V7z"/></g></svg>`;

export const schedulearnIcon = new LabIcon({ name: 'schedulearn:gpu', svgstr: ICON_SVG });

interface ISettings {
  refreshInterval: number;
  timelineHours: number;
  logTail: number;
}

const DEFAULTS: ISettings = { refreshInterval: 5, timelineHours: 6, logTail: 5000 };

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Schedulearn sidebar: GPUs, jobs, policy and GPU timeline of the scheduler in this Jupyter server.',
  autoStart: true,
  optional: [ICommandPalette, ISettingRegistry, ILayoutRestorer],
  activate: async (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    registry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null
  ) => {
    const settings: ISettings = { ...DEFAULTS };
    const api = new SchedulearnApi();
    let panel: SchedulearnPanel;
    const model = new SchedulearnModel({
      api,
      interval: settings.refreshInterval,
      isVisible: () => !!panel && panel.isVisible
    });
    const logs = new WidgetTracker<MainAreaWidget<LogView>>({ namespace: 'schedulearn-logs' });

    const openLogs = (job: IJob) => {
      const existing = logs.find(w => w.content.jobId === job.id);
      if (existing) {
        app.shell.activateById(existing.id);
        return;
      }
      const widget = createLogWidget(api, job, settings.logTail);
      void logs.add(widget);
      app.shell.add(widget, 'main', { mode: 'split-right' });
      app.shell.activateById(widget.id);
    };

    const cancelJob = async (job: IJob) => {
      const me = model.snapshot?.user ?? '';
      const theirs = me && job.user && job.user !== me ? ` It is ${job.user}'s: its reason will name you.` : '';
      const answer = await showDialog({
        title: `Cancel job #${job.id}?`,
        body: `"${job.name}" (${job.state}) will be stopped: SIGTERM, then SIGKILL after the grace period.${theirs}`,
        buttons: [Dialog.cancelButton({ label: 'Keep it' }), Dialog.warnButton({ label: 'Cancel job' })]
      });
      if (!answer.button.accept) {
        return;
      }
      try {
        await model.cancel(job.id);
      } catch (error) {
        void showErrorMessage(`Could not cancel job #${job.id}`, (error as Error).message);
      }
    };

    const setPolicy = async (name: string) => {
      try {
        await model.setPolicy(name);
      } catch (error) {
        void showErrorMessage('Could not switch the policy', (error as Error).message);
      }
    };

    // The sidebar's dropdown switches the policy of the whole server: ask first.
    const confirmPolicy = async (name: string): Promise<boolean> => {
      const current = model.snapshot?.policy ?? '?';
      const answer = await showDialog({
        title: `Switch the scheduling policy to ${name}?`,
        body:
          `The policy decides for every user's jobs on this scheduler, from its next round ` +
          `(now ${current}). Running jobs may be preempted or resized by the new policy.`,
        buttons: [Dialog.cancelButton({ label: `Keep ${current}` }), Dialog.okButton({ label: `Switch to ${name}` })]
      });
      if (!answer.button.accept) {
        return false;
      }
      await setPolicy(name);
      return true;
    };

    panel = new SchedulearnPanel({
      model,
      timelineHours: settings.timelineHours,
      cancel: job => void cancelJob(job),
      logs: openLogs,
      setPolicy: confirmPolicy
    });
    panel.title.icon = schedulearnIcon;

    // A notification when one of this user's jobs ends, with a link to its log.
    model.jobEnded.connect((_, job) => {
      const me = model.snapshot?.user;
      if (me && job.user && job.user !== me) {
        return;
      }
      const text = endedText(job);
      const options = {
        autoClose: job.state === 'failed' ? (false as const) : 10000,
        actions: [{ label: 'Show log', callback: () => openLogs(job) }]
      };
      if (job.state === 'succeeded') {
        Notification.success(text, options);
      } else if (job.state === 'failed') {
        Notification.error(text, options);
      } else {
        Notification.info(text, options);
      }
    });
    app.shell.add(panel, 'left', { rank: 850 });
    if (restorer) {
      restorer.add(panel, 'schedulearn-sidebar');
    }
    model.start();

    const jobById = async (args: Record<string, unknown>, verb: string, active: boolean) => {
      if (args.id !== undefined) {
        return api.job(Number(args.id));
      }
      const jobs = (model.snapshot?.jobs ?? (await api.jobs())).filter(j => !active || !isFinal(j.state));
      if (jobs.length === 0) {
        void showErrorMessage(`No job to ${verb}`, active ? 'No queued or running jobs.' : 'No jobs yet.');
        return null;
      }
      const items = jobs.map(j => `#${j.id} ${j.name} (${j.state})`);
      const r = await InputDialog.getItem({ title: `Job to ${verb}`, items });
      if (!r.button.accept || r.value === null) {
        return null;
      }
      return jobs[items.indexOf(r.value)] ?? null;
    };

    app.commands.addCommand(CommandIDs.open, {
      label: 'Schedulearn: Show GPUs and Jobs',
      icon: schedulearnIcon,
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Schedulearn: Refresh',
      execute: () => model.refresh()
    });
    app.commands.addCommand(CommandIDs.setPolicy, {
      label: args => (args.policy ? `Schedulearn: Use Policy ${args.policy}` : 'Schedulearn: Switch Policy…'),
      isEnabled: () => model.snapshot?.canSwitch !== false,
      execute: async args => {
        let name = args.policy as string | undefined;
        if (!name) {
          const names = (model.snapshot?.policies ?? (await api.policies())).map(p => p.name);
          const current = model.snapshot?.policy;
          const r = await InputDialog.getItem({
            title: 'Scheduling policy',
            items: names,
            current: current ? names.indexOf(current) : 0
          });
          if (!r.button.accept || !r.value) {
            return;
          }
          name = r.value;
        }
        await setPolicy(name);
      }
    });
    app.commands.addCommand(CommandIDs.cancelJob, {
      label: 'Schedulearn: Cancel a Job…',
      execute: async args => {
        const job = await jobById(args, 'cancel', true);
        if (job) {
          await cancelJob(job);
        }
      }
    });
    app.commands.addCommand(CommandIDs.showLogs, {
      label: 'Schedulearn: Show the Log of a Job…',
      execute: async args => {
        const job = await jobById(args, 'show the log of', false);
        if (job) {
          openLogs(job);
        }
      }
    });
    if (palette) {
      const category = 'Schedulearn';
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category });
      }
    }

    if (registry) {
      const apply = (s: ISettingRegistry.ISettings) => {
        const c = s.composite as Partial<ISettings>;
        settings.refreshInterval = Number(c.refreshInterval ?? DEFAULTS.refreshInterval);
        settings.timelineHours = Number(c.timelineHours ?? DEFAULTS.timelineHours);
        settings.logTail = Number(c.logTail ?? DEFAULTS.logTail);
        model.interval = settings.refreshInterval;
        panel.timelineHours = settings.timelineHours;
      };
      try {
        const s = await registry.load(PLUGIN_ID);
        apply(s);
        s.changed.connect(apply);
      } catch (error) {
        console.warn(`${PLUGIN_ID}: settings not loaded, using defaults`, error);
      }
    }
  }
};

/** `Job #7 train succeeded`, with a failure's reason. */
function endedText(job: IJob): string {
  const why = job.state === 'failed' && job.reason ? `: ${job.reason.split('\n').pop()}` : '';
  return `Schedulearn: job #${job.id} ${job.name} ${job.state}${why}`;
}

export default plugin;
