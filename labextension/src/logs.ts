/** A log view in the main area that follows a job: streams `logs?follow=1` until it ends. */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { SchedulearnApi } from './api';
import { IScreen, isFinal, screenText, writeToScreen } from './format';
import { IJob } from './types';

const MAX_CHARS = 2_000_000;

export class LogView extends Widget {
  private _pre = document.createElement('pre');
  private _status = document.createElement('div');
  private _abort = new AbortController();
  private _screen: IScreen = { shown: '', open: '' };

  constructor(
    private _api: SchedulearnApi,
    readonly jobId: number,
    private _tail: number
  ) {
    super();
    this.addClass('jp-schedulearn-logview');
    this._status.className = 'jp-schedulearn-logview-status';
    this._pre.className = 'jp-schedulearn-log';
    this.node.append(this._status, this._pre);
    void this.follow();
  }

  /** The log as a terminal shows it (a progress bar's line at its last drawing). */
  get text(): string {
    return screenText(this._screen);
  }

  /** Streams the log; once the stream ends, reads the whole log once more (idempotent). */
  async follow(): Promise<void> {
    this._setStatus('following…', 'running');
    try {
      this._set('');
      await this._api.followLogs(this.jobId, t => this._append(t), this._abort.signal, this._tail);
      if (this.isDisposed) {
        return;
      }
      const job: IJob = await this._api.job(this.jobId);
      this._set(await this._api.logs(this.jobId, this._tail));
      this._setStatus(
        isFinal(job.state)
          ? `job #${job.id} ${job.state}${job.exit_code !== null && job.exit_code !== undefined ? ` (exit code ${job.exit_code})` : ''}`
          : `job #${job.id} ${job.state}; log stream closed`,
        job.state
      );
    } catch (error) {
      if (!this.isDisposed) {
        this._setStatus(`log unavailable: ${(error as Error).message}`, 'failed');
      }
    }
  }

  dispose(): void {
    this._abort.abort();
    super.dispose();
  }

  private _setStatus(text: string, state: string): void {
    this._status.textContent = text;
    this._status.dataset.state = state;
  }

  private _set(text: string): void {
    this._screen = writeToScreen({ shown: '', open: '' }, text, MAX_CHARS);
    this._pre.textContent = this.text;
    this._scroll();
  }

  private _append(text: string): void {
    const atBottom = this.node.scrollTop + this.node.clientHeight >= this.node.scrollHeight - 20;
    this._screen = writeToScreen(this._screen, text, MAX_CHARS);
    this._pre.textContent = this.text;
    if (atBottom) {
      this._scroll();
    }
  }

  private _scroll(): void {
    this.node.scrollTop = this.node.scrollHeight;
  }
}

export function createLogWidget(api: SchedulearnApi, job: IJob, tail: number): MainAreaWidget<LogView> {
  const content = new LogView(api, job.id, tail);
  const widget = new MainAreaWidget({ content });
  widget.id = `schedulearn-log-${job.id}`;
  widget.title.label = `Log #${job.id} ${job.name}`;
  widget.title.caption = `Schedulearn job #${job.id} (${job.name}): log`;
  widget.title.closable = true;
  widget.addClass('jp-schedulearn-logwidget');
  return widget;
}
