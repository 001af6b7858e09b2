"""The job-directory contract: what a job's directory holds, who writes each file, and the size
limits a job travels under. The server, the executors, the job runner and the magics all take
these names from here (the job side, `schedulearn.run`, is standard library only and keeps its
own two: the result's name and its MAC's suffix, re-exported below).

`<job_root>/<job id>/`, one directory per job, kept across its runs (restarts, resizes):

* `main.py` — the spec's script, written by the executor, run by the job.
* `log.txt` — every run's output, appended, and the executor's marker lines (`joblogs.MARKER`);
  read by the API (`logs`) and for failure reasons (`joblogs.failure_reason`).
* `checkpoints/` — the job's own (`elastic.Checkpointer`), read by its next run.
* `metrics.jsonl` — what the job reports (`elastic.report`), read by the goodput policy.
* `shown.jsonl` — what a notebook cell's job shows (figures, `display()`) as it shows it, each
  line signed with the job's key (`schedulearn_magics.cell_runner.LiveShown`); handed out by
  the API only with the job's signature (`liveshown.page`).
* `result.pkl`, `result.pkl.hmac` — rank 0's result and its MAC (`run.write_result`), handed out
  by the API only when the MAC is the job's (`results.open_result`).
* `exit_code` — written by the local executor's wrapper (`exitwrap.py`), read after a server restart.
* `pid` — the local executor's record of the running run, read after a server restart.
* `gate_closed` — the run number of a local run whose gate closed before the go-ahead (the
  server died between the `pid` file and the start: nothing of that run ran), written by the gate.
* `.schedulearn-run.py` — the Docker executor's copy of the job runner (`run.py`).

`<job_root>/.result-secret` (the server's result secret, mode 0600) is no job's.
"""

from __future__ import annotations

from .run import MAC_SUFFIX, RESULT_FILE

#: The job's program when the spec gives a script (`python main.py`).
SCRIPT_NAME = "main.py"
#: Every run's output, appended, with a marker line per start and exit.
LOG_NAME = "log.txt"
#: The job's own checkpoints (`schedulearn.elastic`), kept across runs.
CHECKPOINT_DIR = "checkpoints"
#: What the job reports (`schedulearn.elastic.report`): one JSON object a line.
METRICS_FILE = "metrics.jsonl"
#: What a notebook cell's job shows, a signed record a line (`liveshown`).
SHOWN_FILE = "shown.jsonl"
#: The fields of a report the scheduler reads (`schedulearn.estimates.reports`, whose docstring
#: says what each means); `elastic.report` says so once when given another (a typo, `progess=`).
REPORT_FIELDS = frozenset({
    "t", "step_time", "batch_size", "num_gpus", "num_nodes", "accum_steps", "compute_time", "grad_sqr",
    "grad_var", "init_batch_size", "max_batch_size", "max_local_bsz", "progress", "epoch", "epochs", "step",
    "total_steps", "restart", "timed_steps"})
#: The exit status the executor's wrapper writes (read back after a server restart).
EXIT_CODE_FILE = "exit_code"
#: The local executor's record of the running run (pid, start time, boot id, run number).
PID_FILE = "pid"
#: Written by a local run's gate when it closed unopened: that run's number (nothing of it ran).
GATE_CLOSED_FILE = "gate_closed"
#: The job runner, copied into the directory where the job's Python may not have schedulearn.
RUNNER_COPY = ".schedulearn-run.py"
#: The server's secret (in the job root, not in a job's directory).
SECRET_NAME = ".result-secret"

#: The largest API request body the servers accept.
MAX_REQUEST_BYTES = 4 * 1024 * 1024
#: The largest job script the magics submit (the body also carries the rest of the spec).
MAX_SCRIPT_BYTES = MAX_REQUEST_BYTES - 128 * 1024

__all__ = [
    "CHECKPOINT_DIR", "EXIT_CODE_FILE", "GATE_CLOSED_FILE", "LOG_NAME", "MAC_SUFFIX", "MAX_REQUEST_BYTES",
    "MAX_SCRIPT_BYTES", "METRICS_FILE", "PID_FILE", "RESULT_FILE", "RUNNER_COPY", "SCRIPT_NAME", "SHOWN_FILE",
    "SECRET_NAME",
]
