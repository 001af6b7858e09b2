/**
 * The wire model of the Schedulearn REST API (`{base_url}schedulearn/api/`), as the server
 * extension serialises the core model (scheduler/schedulearn/model.py). Pure types: no imports.
 */

/** node name -> GPU indices on that node. */
export type Allocation = Record<string, number[]>;

export type JobState = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export const FINAL_STATES: ReadonlyArray<JobState> = ['succeeded', 'failed', 'cancelled'];

export interface IGpu {
  index: number;
  uuid: string;
  name: string;
  memory_total_mb: number;
  memory_used_mb: number;
  /** NVML utilisation: a percentage (0-100); a fraction (0-1) is accepted too. */
  utilization: number | null;
  job_id: number | null;
  /** held outside the scheduler (a Slurm job of another user): what holds it */
  held_by?: string | null;
  virtual?: boolean;
}

export interface INode {
  name: string;
  virtual: boolean;
  healthy?: boolean;
  gpus: IGpu[];
}

export interface IJob {
  id: number;
  name: string;
  user: string;
  state: JobState;
  /** Seconds since the epoch (the server's wall clock). */
  submit_time: number;
  start_time: number | null;
  end_time: number | null;
  /** GPUs held now. */
  gpus: number;
  alloc: Allocation;
  /** The allocation a finished job last held, when the server reports it. */
  last_alloc?: Allocation;
  restarts?: number;
  exit_code?: number | null;
  reason?: string;
  run_s?: number;
  attained_gpu_s?: number;
  /** Fraction of its work done (0-1), as the job reports it. */
  progress?: number;
  /** Estimated seconds left on the GPUs it has (running jobs). */
  eta_s?: number;
  /** What `eta_s` comes from: the job's own progress and rate, or similar finished jobs. */
  eta_basis?: 'progress' | 'history';
  /** A running job that stopped reporting: seconds since its last report (past 3 min and ten of its gaps). */
  silent_s?: number;
  /** Finish by (seconds since the epoch), when the user gave a deadline. */
  deadline?: number;
  /** The scheduler's estimate of the deadline; `met` or `missed` once the job ended. */
  deadline_status?: 'on_track' | 'at_risk' | 'will_miss' | 'unknown' | 'met' | 'missed';
  /** How late a job that finished after its deadline was, in seconds. */
  missed_by_s?: number;
  spec?: { gpus?: number | 'auto'; time_limit?: number | null; [key: string]: unknown };
  /** Another user's job on a shared scheduler: its environment, script, log and result are theirs. */
  private?: boolean;
  /** When the job's directory (log, result, checkpoints) was removed (the server's keep_job_dirs). */
  files_removed?: number;
}

export interface IPolicyInfo {
  name: string;
  description: string;
}

/** The policy in force (`GET policy`) and whether this user may switch it. */
export interface IPolicyState {
  policy: string;
  canSwitch: boolean;
  /** The caller's Schedulearn user name ('' where the server does not say). */
  user: string;
  /** One of the scheduler's named admins (`--admins`): may cancel anyone's job. */
  admin: boolean;
  /** An admin's pause of scheduling (nothing starts or moves), or null. */
  paused: IPaused | null;
}

/** Who paused scheduling, since when (epoch seconds), and why. */
export interface IPaused {
  by: string;
  since: number;
  reason: string;
  /** the scheduler's own pause (the job root's disk is full): when it ends by itself */
  until?: string;
}

/** Everything the sidebar shows, fetched in one refresh. */
export interface ISnapshot {
  nodes: INode[];
  jobs: IJob[];
  policy: string;
  /** False for users who are not the scheduler's admins: the selector is read-only. */
  canSwitch: boolean;
  /** Who this is (`GET policy`): the sidebar notifies when this user's jobs end. */
  user: string;
  /** One of the scheduler's named admins: Cancel is enabled on everyone's jobs. */
  admin: boolean;
  /** Scheduling paused by an admin: shown under the policy. */
  paused: IPaused | null;
  policies: IPolicyInfo[];
  /** Client time (seconds) of the refresh. */
  now: number;
}

/** A message pushed on the `events` websocket. */
export interface IEvent {
  type: 'job' | 'policy' | 'inventory' | string;
  event?: string;
  job?: IJob;
  policy?: string;
}
