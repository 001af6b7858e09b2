/**
 * The sidebar's model: one `Poll` (back-off on errors, standby when hidden) refreshing GPUs,
 * jobs and the policy; the `events` websocket, when the server offers it, triggers a refresh at
 * once so changes made elsewhere show up without waiting for the next poll.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { ApiError, SchedulearnApi } from './api';
import { isFinal } from './format';
import { Allocation, IEvent, IJob, ISnapshot } from './types';

export interface IModelOptions {
  api?: SchedulearnApi;
  /** Seconds between refreshes. */
  interval?: number;
  /** Whether anyone looks (the panel is visible); polling stands by otherwise. */
  isVisible?: () => boolean;
}

const STORAGE_KEY = 'schedulearn:allocs';
const MAX_REMEMBERED = 500;

export class SchedulearnModel {
  readonly api: SchedulearnApi;
  private _snapshot: ISnapshot | null = null;
  private _error: ApiError | null = null;
  private _changed = new Signal<this, void>(this);
  private _jobEnded = new Signal<this, IJob>(this);
  private _endedSeen = new Set<number>();
  private _poll: Poll;
  private _ws: WebSocket | null = null;
  private _wsRetry = 0;
  private _wsTimer: number | undefined;
  private _disposed = false;
  private _started = false;
  private _remembered = new Map<number, Allocation>();
  private _isVisible: () => boolean;

  constructor(options: IModelOptions = {}) {
    this.api = options.api ?? new SchedulearnApi();
    this._isVisible = options.isVisible ?? (() => true);
    this._loadRemembered();
    const interval = (options.interval ?? 5) * 1000;
    this._poll = new Poll({
      auto: false,
      factory: () => this._refresh(),
      frequency: { interval, backoff: true, max: Math.max(60 * 1000, interval) },
      name: 'schedulearn:model',
      standby: () => !this._isVisible() || 'when-hidden'
    });
  }

  /** Emitted after every refresh (and on errors). */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Emitted once per job that ends while the model runs (from the events, else a refresh). */
  get jobEnded(): ISignal<this, IJob> {
    return this._jobEnded;
  }

  get snapshot(): ISnapshot | null {
    return this._snapshot;
  }

  get error(): ApiError | null {
    return this._error;
  }

  /** Allocations seen for jobs (finished jobs no longer carry one). */
  get remembered(): Map<number, Allocation> {
    return this._remembered;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Starts polling and listening to events. */
  start(): void {
    this._started = true;
    void this._poll.start();
    this._connect();
  }

  /** Refresh now (returns when the refresh has run). */
  async refresh(): Promise<void> {
    await this._poll.refresh();
    await this._poll.tick;
  }

  set interval(seconds: number) {
    const interval = Math.max(1, seconds) * 1000;
    if (interval === this._poll.frequency.interval) {
      return;
    }
    this._poll.frequency = { ...this._poll.frequency, interval, max: Math.max(60 * 1000, interval) };
    // The tick already scheduled keeps the old interval: refresh now, the next one uses the new.
    if (this._started) {
      void this._poll.refresh();
    }
  }

  async setPolicy(name: string): Promise<void> {
    await this.api.setPolicy(name);
    await this.refresh();
  }

  async cancel(id: number): Promise<void> {
    await this.api.cancel(id);
    await this.refresh();
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._poll.dispose();
    window.clearTimeout(this._wsTimer);
    if (this._ws) {
      this._ws.onclose = null;
      this._ws.close();
    }
    Signal.clearData(this);
  }

  private async _refresh(): Promise<void> {
    try {
      const [nodes, jobs, { policy, canSwitch, user, admin, paused }, policies] = await Promise.all([
        this.api.gpus(),
        this.api.jobs(),
        this.api.policyInfo(),
        this._snapshot?.policies.length ? Promise.resolve(this._snapshot.policies) : this.api.policies()
      ]);
      const before = this._snapshot ? new Map(this._snapshot.jobs.map(j => [j.id, j.state])) : null;
      this._snapshot = { nodes, jobs, policy, canSwitch, user, admin, paused, policies, now: Date.now() / 1000 };
      for (const job of jobs) {
        const was = before?.get(job.id);
        if (was !== undefined && !isFinal(was) && isFinal(job.state)) {
          this._ended(job); // missed by the events (no websocket)
        }
      }
      this._error = null;
      let learned = false;
      for (const job of jobs) {
        learned = this._remember(job.id, job.alloc) || learned;
      }
      if (learned) {
        this._saveRemembered();
      }
      if (!this._ws && this._wsRetry > 0) {
        this._connect(); // the server came back: listen again
      }
    } catch (error) {
      this._error =
        error instanceof ApiError ? error : new ApiError(String(error), 'server');
      this._changed.emit();
      throw error; // the poll backs off
    }
    this._changed.emit();
  }

  private _remember(id: number, alloc: Allocation | undefined): boolean {
    if (!alloc || !Object.values(alloc).some(v => v.length > 0)) {
      return false;
    }
    const before = JSON.stringify(this._remembered.get(id));
    const now = JSON.stringify(alloc);
    if (before === now) {
      return false;
    }
    this._remembered.set(id, alloc);
    return true;
  }

  private _ended(job: IJob): void {
    if (!this._endedSeen.has(job.id)) {
      this._endedSeen.add(job.id);
      this._jobEnded.emit(job);
    }
  }

  private _onEvent(e: IEvent): void {
    if (e.job && this._remember(e.job.id, e.job.alloc)) {
      this._saveRemembered();
    }
    if (e.type === 'job' && e.job && isFinal(e.job.state)) {
      this._ended(e.job);
    }
    void this._poll.refresh();
  }

  private _connect(): void {
    if (this._disposed || this._ws) {
      return;
    }
    const ws = this.api.events(e => this._onEvent(e));
    if (!ws) {
      return;
    }
    this._ws = ws;
    ws.onopen = () => {
      this._wsRetry = 0;
    };
    ws.onclose = () => {
      this._ws = null;
      if (this._disposed) {
        return;
      }
      // Polling keeps the panel fresh meanwhile; reconnect with back-off.
      this._wsRetry = Math.min(this._wsRetry + 1, 8);
      const delay = Math.min(1000 * 2 ** this._wsRetry, 60 * 1000);
      this._wsTimer = window.setTimeout(() => this._connect(), delay);
    };
  }

  private _storageKey(): string {
    return `${STORAGE_KEY}:${this.api.settings.baseUrl}`;
  }

  private _loadRemembered(): void {
    try {
      const raw = window.localStorage.getItem(this._storageKey());
      if (raw) {
        for (const [id, alloc] of JSON.parse(raw) as [number, Allocation][]) {
          this._remembered.set(id, alloc);
        }
      }
    } catch {
      // no storage, or garbage in it: start empty
    }
  }

  private _saveRemembered(): void {
    try {
      const entries = [...this._remembered.entries()].slice(-MAX_REMEMBERED);
      window.localStorage.setItem(this._storageKey(), JSON.stringify(entries));
    } catch {
      // storage full or unavailable: the timeline shows fewer past bars
    }
  }
}
