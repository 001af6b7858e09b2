/** The left sidebar panel: status banner, policy selector, GPU grid, jobs table, GPU timeline. */
import { Message } from '@lumino/messaging';
import { caretDownEmptyIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { h } from './dom';
import { clock, formatSpan, pausedText } from './format';
import { renderGpuGrid } from './gpus';
import { IJobActions, renderJobsTable } from './jobs';
import { SchedulearnModel } from './model';
import { autoSpan, computeBars, renderTimeline, WINDOWS } from './timeline';

/** The policy selector's tooltip for users who may not switch the policy. */
export const READ_ONLY_TIP = "Only the scheduler's admins can switch the policy";

export interface IPanelOptions extends IJobActions {
  model: SchedulearnModel;
  /** Switches the policy; resolves `false` when the user did not confirm. */
  setPolicy(name: string): Promise<boolean | void>;
  /** Hours of history the timeline shows at most (its `auto` window's limit). */
  timelineHours: number;
}

export class SchedulearnPanel extends Widget {
  readonly model: SchedulearnModel;
  private _options: IPanelOptions;
  private _banner = h('div', { class: 'jp-schedulearn-banner', hidden: true });
  private _policy = h('select', { class: 'jp-schedulearn-policy jp-mod-styled', title: 'Scheduling policy' });
  private _policyNote = h('div', { class: 'jp-schedulearn-policy-note' });
  private _paused = h('div', { class: 'jp-schedulearn-paused', hidden: '' });
  private _gpus = h('div', { class: 'jp-schedulearn-section-body' });
  private _jobs = h('div', { class: 'jp-schedulearn-section-body' });
  private _timeline = h('div', { class: 'jp-schedulearn-section-body jp-schedulearn-timeline' });
  private _timelineTitle = h('span', {}, '');
  private _window = h(
    'select',
    { class: 'jp-schedulearn-window', title: 'Timeline window: auto follows the jobs' },
    ...WINDOWS.map(w => h('option', { value: String(w.seconds) }, w.label))
  );
  private _policyBox = h('div', { class: 'jp-HTMLSelect jp-DefaultStyle jp-schedulearn-policy-box' });
  private _updated = h('span', { class: 'jp-schedulearn-updated' });
  private _policySwitching = false;
  private _canSwitch = true;

  constructor(options: IPanelOptions) {
    super();
    this._options = options;
    this.model = options.model;
    this.id = 'schedulearn-sidebar';
    this.addClass('jp-schedulearn-panel');
    this.title.caption = 'Schedulearn: GPUs, jobs and policy';

    this._policy.addEventListener('change', () => void this._switchPolicy(this._policy.value));
    this._window.addEventListener('change', () => this.render());
    // JupyterLab's select look, with its caret: a dropdown, not a text field
    this._policyBox.append(this._policy, caretDownEmptyIcon.element({ tag: 'span' }));

    const section = (title: Node | string, body: HTMLElement, cls: string) =>
      h('section', { class: `jp-schedulearn-section ${cls}` }, h('h3', {}, title), body);

    this.node.append(
      h('header', { class: 'jp-schedulearn-header' }, h('h2', {}, 'Schedulearn'), this._updated),
      this._banner,
      section(
        'Policy',
        h('div', { class: 'jp-schedulearn-section-body' }, this._policyBox, this._policyNote, this._paused),
        'jp-schedulearn-policy-section'
      ),
      section('GPUs', this._gpus, 'jp-schedulearn-gpus-section'),
      section('Jobs', this._jobs, 'jp-schedulearn-jobs-section'),
      section(
        h('span', { class: 'jp-schedulearn-timeline-head' }, this._timelineTitle, this._window),
        this._timeline,
        'jp-schedulearn-timeline-section'
      )
    );
    this.model.changed.connect(this.render, this);
    this.render();
  }

  set timelineHours(hours: number) {
    this._options.timelineHours = hours;
    this.render();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  /** Redraws everything from the model's last snapshot. */
  render(): void {
    const error = this.model.error;
    this._banner.hidden = !error;
    this._banner.className = `jp-schedulearn-banner jp-mod-${error?.kind ?? 'ok'}`;
    this._banner.textContent = error ? error.message : '';
    const snap = this.model.snapshot;
    this.node.classList.toggle('jp-mod-stale', !!error);
    this.node.classList.toggle('jp-mod-nodata', !snap); // an error before any data: only the banner
    if (!snap) {
      if (!error) {
        this._gpus.replaceChildren(h('div', { class: 'jp-schedulearn-empty' }, 'Loading…'));
      }
      return;
    }
    this._updated.textContent = `updated ${clock(snap.now, true)}`;
    this._renderPolicy(snap.policy, snap.policies, snap.canSwitch);
    this._paused.hidden = !snap.paused;
    this._paused.textContent = snap.paused ? pausedText(snap.paused, snap.now) : '';
    this._gpus.replaceChildren(renderGpuGrid(snap.nodes, snap.jobs));
    this._jobs.replaceChildren(
      renderJobsTable(snap.jobs, snap.now, this._options, { user: snap.user, admin: snap.admin })
    );
    const max = this._options.timelineHours * 3600;
    const chosen = this._window.value === 'auto' ? 'auto' : Number(this._window.value);
    const span = chosen === 'auto' ? autoSpan(snap.jobs, snap.now, max) : chosen;
    this._timelineTitle.textContent = `GPU timeline (last ${formatSpan(span / 3600)})`;
    const tl = computeBars(snap.nodes, snap.jobs, this.model.remembered, snap.now, span);
    const width = this.node.clientWidth || 300;
    this._timeline.replaceChildren(renderTimeline(tl, width - 24));
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refresh().catch(() => undefined);
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this.render();
  }

  private _renderPolicy(
    policy: string,
    policies: { name: string; description: string }[],
    canSwitch = true
  ): void {
    const names = policies.map(p => p.name);
    if (!names.includes(policy)) {
      names.push(policy);
    }
    const current = [...this._policy.options].map(o => o.value);
    if (current.join('\n') !== names.join('\n')) {
      this._policy.replaceChildren(
        ...names.map(n => {
          const desc = policies.find(p => p.name === n)?.description ?? '';
          return h('option', { value: n, title: desc }, n);
        })
      );
    }
    // Follow changes made elsewhere, unless the user is choosing right now.
    if (!this._policySwitching && this._policy.value !== policy) {
      this._policy.value = policy;
    }
    this._policy.dataset.policy = policy;
    // Read-only for users who are not the scheduler's admins (the server would answer 403).
    this._canSwitch = canSwitch;
    if (!this._policySwitching) {
      this._policy.disabled = !canSwitch;
    }
    this._policy.title = canSwitch ? 'Scheduling policy' : READ_ONLY_TIP;
    this._policy.classList.toggle('jp-mod-readonly', !canSwitch);
    const desc = policies.find(p => p.name === policy)?.description ?? '';
    this._policyNote.textContent = desc;
  }

  private async _switchPolicy(name: string): Promise<void> {
    this._policySwitching = true;
    this._policy.disabled = true;
    try {
      await this._options.setPolicy(name); // may ask to confirm; declined: render() puts it back
    } finally {
      this._policySwitching = false;
      this._policy.disabled = !this._canSwitch;
      this.render();
    }
  }
}
