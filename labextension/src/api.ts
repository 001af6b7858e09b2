/**
 * REST client of the Schedulearn server extension (`{base_url}schedulearn/api/`), and the
 * `events` websocket. Errors become `ApiError` with a message a person can act on.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IEvent, IJob, INode, IPaused, IPolicyInfo, IPolicyState } from './types';

export const API_PATH = 'schedulearn/api';

/** What went wrong, for the banner: the extension is missing, unreachable, or said no. */
export type ErrorKind = 'missing' | 'unreachable' | 'server';

export class ApiError extends Error {
  constructor(
    message: string,
    readonly kind: ErrorKind,
    readonly status: number = 0
  ) {
    super(message);
  }
}

export const MISSING_MESSAGE =
  'The Schedulearn server extension is not enabled on this Jupyter server ' +
  '(no /schedulearn/api/). Install it with `pip install schedulearn`, check ' +
  '`jupyter server extension list`, then restart Jupyter.';

export const UNREACHABLE_MESSAGE =
  'Cannot reach the Jupyter server. Is it still running? Retrying with back-off.';

export class SchedulearnApi {
  constructor(readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()) {}

  url(path: string): string {
    return URLExt.join(this.settings.baseUrl, API_PATH, path);
  }

  /** One request; JSON in and out. */
  async request<T>(path: string, init: RequestInit = {}): Promise<T> {
    const response = await this.raw(path, init);
    if (response.status === 204) {
      return undefined as T;
    }
    const text = await response.text();
    try {
      return (text ? JSON.parse(text) : undefined) as T;
    } catch {
      throw new ApiError(`Bad JSON from ${path}: ${text.slice(0, 120)}`, 'server', response.status);
    }
  }

  /** One request; the Response itself (for streaming), raising ApiError when not ok. */
  async raw(path: string, init: RequestInit = {}): Promise<Response> {
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(this.url(path), init, this.settings);
    } catch (error) {
      throw new ApiError(UNREACHABLE_MESSAGE, 'unreachable');
    }
    if (!response.ok) {
      throw await errorFrom(response, path);
    }
    return response;
  }

  async gpus(): Promise<INode[]> {
    return (await this.request<{ nodes: INode[] }>('gpus')).nodes;
  }

  /** The jobs the sidebar shows: every running and queued job, plus the newest `recent` ones
   * (a server may hold thousands of finished jobs; only these travel every refresh). */
  async jobs(recent = 200): Promise<IJob[]> {
    const [running, queued, latest] = await Promise.all(
      ['jobs?state=running', 'jobs?state=queued', `jobs?limit=${recent}`].map(
        async q => (await this.request<{ jobs: IJob[] }>(q)).jobs
      )
    );
    const byId = new Map<number, IJob>();
    for (const job of [...latest, ...queued, ...running]) {
      byId.set(job.id, job);
    }
    return [...byId.values()].sort((a, b) => a.id - b.id);
  }

  async job(id: number): Promise<IJob> {
    return this.request<IJob>(`jobs/${id}`);
  }

  async cancel(id: number): Promise<void> {
    await this.request(`jobs/${id}`, { method: 'DELETE' });
  }

  async policy(): Promise<string> {
    return (await this.policyInfo()).policy;
  }

  /** The policy in force and whether this user may switch it (only admins may, where the
   * server names admins; a server without `can_switch` lets everyone), and whether they are one of
   * the named admins (who may also cancel anyone's job). */
  async policyInfo(): Promise<IPolicyState> {
    const r = await this.request<{
      policy: string;
      can_switch?: boolean;
      user?: string;
      admin?: boolean;
      paused?: IPaused | null;
    }>('policy');
    return {
      policy: r.policy,
      canSwitch: r.can_switch !== false,
      user: r.user ?? '',
      admin: r.admin === true,
      paused: r.paused ?? null
    };
  }

  async setPolicy(policy: string): Promise<string> {
    const body = JSON.stringify({ policy });
    const r = await this.request<{ policy: string }>('policy', { method: 'PUT', body });
    return r?.policy ?? policy;
  }

  async policies(): Promise<IPolicyInfo[]> {
    const r = await this.request<IPolicyInfo[] | { policies: IPolicyInfo[] }>('policies');
    return Array.isArray(r) ? r : r.policies;
  }

  /** The last `tail` lines of a job's log. */
  async logs(id: number, tail?: number): Promise<string> {
    const q = tail ? `?tail=${tail}` : '';
    return (await this.raw(`jobs/${id}/logs${q}`)).text();
  }

  /** Streams a job's log until it ends; `onText` gets each chunk. */
  async followLogs(
    id: number,
    onText: (text: string) => void,
    signal: AbortSignal,
    tail?: number
  ): Promise<void> {
    const q = `?follow=1${tail ? `&tail=${tail}` : ''}`;
    const response = await this.raw(`jobs/${id}/logs${q}`, { signal });
    if (!response.body) {
      onText(await response.text());
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        const rest = decoder.decode();
        if (rest) {
          onText(rest);
        }
        return;
      }
      onText(decoder.decode(value, { stream: true }));
    }
  }

  /**
   * Opens the `events` websocket; `onEvent` gets every message. Returns the socket (or null when
   * websockets are unavailable); callers reconnect on close.
   */
  events(onEvent: (e: IEvent) => void): WebSocket | null {
    const base = URLExt.join(this.settings.wsUrl, API_PATH, 'events');
    const token = this.settings.token;
    const url = token ? `${base}?token=${encodeURIComponent(token)}` : base;
    let ws: WebSocket;
    try {
      ws = new this.settings.WebSocket(url);
    } catch {
      return null;
    }
    ws.onmessage = (msg: MessageEvent) => {
      try {
        onEvent(JSON.parse(String(msg.data)) as IEvent);
      } catch {
        // not JSON: ignore
      }
    };
    return ws;
  }
}

async function errorFrom(response: Response, path: string): Promise<ApiError> {
  let detail = '';
  try {
    const text = await response.text();
    try {
      const data = JSON.parse(text);
      detail = data.error ?? data.message ?? text;
    } catch {
      detail = text;
    }
  } catch {
    // no body
  }
  if (response.status === 404 && ['gpus', 'jobs', 'policy'].includes(path.split('?')[0])) {
    return new ApiError(MISSING_MESSAGE, 'missing', 404);
  }
  const short = String(detail).replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 300);
  return new ApiError(
    `${response.status} ${response.statusText || 'error'} on ${path}${short ? `: ${short}` : ''}`,
    'server',
    response.status
  );
}
