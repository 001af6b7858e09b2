"""`schedulearn submit|ls|show|logs|script|cancel|policy|pause|resume|gpus|trace`: the API from a terminal.

Each command finds the server like `schedulearn.client` does (`--url`/`--token`, then
`SCHEDULEARN_URL`/`SCHEDULEARN_TOKEN`, then the running Jupyter server's runtime file) and prints
a short table or, with `--json`, the API's JSON. Errors are one line on stderr, exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from . import deadlines, history
from .client import (
    Client,
    ClientError,
    Reconnecting,
    empty_log_note,
    follow_pages,
    paused_text,
    printable,
    shown_gpus,
)
from .model import LAUNCHERS, JobSpec, SpecError, gpus_from_text, one_process_note

COMMANDS = ("submit", "ls", "show", "logs", "script", "cancel", "policy", "pause", "resume", "gpus", "trace")


def _common(p: argparse.ArgumentParser, json_flag: bool = True) -> None:
    p.add_argument("--url", help="server base URL (default: $SCHEDULEARN_URL or the runtime file)")
    p.add_argument("--token", help="API token (default: $SCHEDULEARN_TOKEN or the runtime file)")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the API's JSON")


LS_ROWS = 50  # the jobs `schedulearn ls` shows unless told (the newest)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("submit", help="queue a job on the scheduler",
                              description="Queue a command (after --) or a Python script as a job.")
    _common(p)
    p.add_argument("--name", help="job name")
    p.add_argument("--gpus", default=None, help="GPUs: an integer or 'auto' (default 1)")
    p.add_argument("--min-gpus", type=int, default=None,
                   help="smallest size of an elastic job (with --gpus N: N, or fewer down to this)")
    p.add_argument("--max-gpus", type=int, default=None, help="largest size of an elastic job")
    p.add_argument("--launcher", choices=LAUNCHERS, default=None,
                   help="how the command starts: python (one process; the default), torchrun or horovod "
                        "(one process per GPU)")
    p.add_argument("--resize", choices=("restart", "in-place"), default=None,
                   help="how an elastic job is resized: restart (checkpoint-restart, the default) or "
                        "in-place (Horovod Elastic or torchrun elastic agents; see docs/resize.md)")
    p.add_argument("--image", help="Docker image (docker executor)")
    p.add_argument("--priority", type=int, default=None,
                   help="job priority (higher first, for policies that use it; default 0)")
    p.add_argument("--workdir", help="working directory of the job (a relative path is taken from the "
                   "current directory). Default, as sbatch's: the current directory where the server is "
                   "on this machine with the local or Slurm executor; else the job's own directory")
    p.add_argument("--epochs", type=int, default=None, help="its length in epochs (progress, time left)")
    p.add_argument("--deadline", metavar="WHEN",
                   help="finish by: a duration from now (2h, 90m, 1h30m, 2d), a time today (18:00) or a date "
                        "and time (2026-11-24 18:00); the qoe policy plans for it")
    p.add_argument("--timeout", metavar="DURATION",
                   help="stop the job when it has run this long (90, 90s, 10m, 2h, 1h30m; its runs together, "
                        "not its time in the queue): it fails with exit code 124")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment (repeat); KEY alone: this shell's value of KEY")
    p.add_argument("--script", type=Path, help="a Python file to run (instead of a command)")
    p.add_argument("--spec", type=Path, help="a JobSpec JSON file; flags override its fields")
    p.add_argument("--wait", action="store_true",
                   help="follow the log until the job ends; exit with the job's status (0 if it "
                        "succeeded, its exit code if it failed, 128+N for signal N, else 1)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command's argv")
    p.set_defaults(func=cmd_submit)

    p = subparsers.add_parser("ls", help="list jobs")
    _common(p)
    p.add_argument("--state", help="queued, starting, running, succeeded, failed or cancelled")
    p.add_argument("--user", help="only this user's jobs")
    p.add_argument("--limit", type=_at_least(1), default=None,
                   help=f"only the newest N (the table: {LS_ROWS} unless --all; --json: all)")
    p.add_argument("--all", action="store_true", help="every job in the table")
    p.set_defaults(func=cmd_ls)

    p = subparsers.add_parser("logs", help="print a job's log")
    _common(p, json_flag=False)
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID", help="the job's id (schedulearn ls)")
    p.add_argument("--tail", type=_at_least(0), default=None, help="only the last N lines")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    p.set_defaults(func=cmd_logs)

    p = subparsers.add_parser("show", help="one job in full: why it waits or ended, where, when",
                              description="One job in full, a line per field: its whole reason (ls cuts it), "
                                          "where it runs, its times, what it asked for and runs.")
    _common(p)
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID", help="the job's id (schedulearn ls)")
    p.set_defaults(func=cmd_show)

    p = subparsers.add_parser("script", help="print the script a job runs")
    _common(p, json_flag=False)
    p.add_argument("job_id", type=_job_id, metavar="JOB_ID", help="the job's id (schedulearn ls)")
    p.set_defaults(func=cmd_script)

    p = subparsers.add_parser("cancel", help="cancel jobs")
    _common(p)
    p.add_argument("job_ids", type=_job_id, nargs="+", metavar="JOB_ID",
                   help="the jobs' ids (schedulearn ls)")
    p.set_defaults(func=cmd_cancel)

    p = subparsers.add_parser("policy", help="show or switch the scheduling policy")
    _common(p)
    p.add_argument("name", nargs="?", help="the policy to switch to")
    p.set_defaults(func=cmd_policy)

    p = subparsers.add_parser(
        "pause", help="pause scheduling: nothing starts or moves until resume (admins)",
        description="Pause scheduling (maintenance, a demo that needs the GPUs): no queued job starts and "
                    "no running job is preempted or resized until `schedulearn resume`; running jobs run "
                    "on. Admins only.")
    _common(p)
    p.add_argument("reason", nargs="*", help="why, for everyone to see (one line)")
    p.set_defaults(func=cmd_pause)

    p = subparsers.add_parser("resume", help="resume scheduling after a pause (admins)")
    _common(p)
    p.set_defaults(func=cmd_resume)

    p = subparsers.add_parser("gpus", help="the GPU inventory and who holds each GPU")
    _common(p)
    p.set_defaults(func=cmd_gpus)

    p = subparsers.add_parser(
        "trace", help="the finished jobs as a trace for schedulearn simulate (replay them under any policy)",
        description="Write the scheduler's finished jobs as a rigid trace (name,submit_time,gpus,duration"
                    "[,deadline]) that `schedulearn simulate` replays under any policy: what would another "
                    "policy have made of them? A job's gpus are those it held (on average), its duration "
                    "its run time; jobs not finished or never started are left out (counted on stderr).",
        epilog="example:\n  schedulearn trace --since 30d -o lab.csv\n"
               "  schedulearn simulate lab.csv --policy all --cluster 1x4",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p, json_flag=False)
    p.add_argument("-o", "--output", metavar="FILE", type=Path, help="write it here (default: stdout)")
    p.add_argument("--since", metavar="WHEN",
                   help="only jobs submitted since: a duration back from now (30d, 12h) "
                        "or a date (2026-11-01)")
    p.add_argument("--user", help="only this user's jobs")
    p.set_defaults(func=cmd_trace)


def _not_text(e: Exception) -> str | None:
    """What a file that is not UTF-8 text is, in words (None for any other error)."""
    if not isinstance(e, UnicodeDecodeError):
        return None
    return f"not UTF-8 text: byte 0x{e.object[e.start]:02x} at offset {e.start:,}"


def _at_least(least: int) -> Any:
    """An argparse type: an integer >= `least` (`ls --limit 0` printed a bare header; `--tail -3`
    came back from the server as `tail: ...`, the API's field, not the flag)."""
    def count(text: str) -> int:
        value = _int_at_least(text, least)
        if value is None:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}")
        return value

    return count


def _int_at_least(text: str, least: int) -> int | None:
    """`text` as an integer >= `least`, or None."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= least else None


def _job_id(text: str) -> int:
    """A job id argument: an integer >= 1 (`logs -1` was `path: no route .../jobs/-1/logs`)."""
    value = _int_at_least(text, 1)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a job id (an integer >= 1, as schedulearn ls shows), "
                                         f"got {text!r}")
    return value


# -- commands ---------------------------------------------------------------------------------
def _client(args: argparse.Namespace) -> Client:
    return Client(args.url, args.token)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def _fail(message: str) -> int:
    print(f"schedulearn: {message}", file=sys.stderr)
    return 1


def build_spec(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if args.spec is not None:
        try:
            spec = json.loads(args.spec.read_text(encoding="utf-8-sig"))  # (an editor's byte-order mark)
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else _not_text(e) or e
            raise ClientError(f"spec: cannot read a JSON object from {args.spec} ({why})") from None
        if not isinstance(spec, dict):
            raise ClientError(f"spec: expected a JSON object in {args.spec}")
    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if command:
        spec["command"] = command
        spec.pop("script", None)
    if args.script is not None:
        if command:  # a script has no argv of its own: they would be dropped without a word
            raise ClientError(f"script: takes no arguments; got {' '.join(command)!r} after -- "
                              f"(run `-- python {args.script} ARGS` instead, or drop --script)")
        try:
            spec["script"] = args.script.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as e:  # (a binary, or a script saved in Latin-1)
            why = e.strerror if isinstance(e, OSError) else _not_text(e)
            raise ClientError(f"script: cannot read {args.script} ({why})") from None
        spec.pop("command", None)
        spec.setdefault("name", args.script.stem)
    if args.gpus is not None:
        spec["gpus"] = gpus_from_text(args.gpus)
    for key in ("name", "min_gpus", "max_gpus", "launcher", "resize", "image", "priority", "epochs"):
        value = getattr(args, key)
        if value is not None:
            spec[key] = value
    if args.workdir is not None:  # as typed in a shell: relative to where it was typed
        spec["workdir"] = os.path.abspath(os.path.expanduser(args.workdir))
    if args.deadline is not None:
        try:
            spec["deadline"] = deadlines.parse(args.deadline)
        except SpecError as e:
            raise ClientError(str(e)) from None
    if args.timeout is not None:
        try:
            spec["time_limit"] = deadlines.parse_timeout(args.timeout)
        except SpecError as e:
            raise ClientError(str(e)) from None
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep and key in os.environ:  # as `docker run -e KEY`: this shell's value
            value = os.environ[key]
        elif not sep or not key:
            raise ClientError(f"env: expected KEY=VALUE, or KEY alone for a variable this shell has, "
                              f"got {item!r}")
        spec.setdefault("env", {})[key] = value
    if "command" not in spec and "script" not in spec:
        raise ClientError("command: give a command after -- or --script FILE (or --spec FILE)")
    try:  # the server's own checks, before anything is sent
        JobSpec.parse(spec)
    except SpecError as e:
        raise ClientError(str(e)) from None
    return spec


def cmd_submit(args: argparse.Namespace) -> int:
    try:
        spec = build_spec(args)
        client = _client(args)
        if "workdir" not in spec and (here := client.default_workdir()):
            spec["workdir"] = here
        job = client.submit(spec)
        if args.json:
            _print_json(job)
        else:
            print(submitted_line(job), flush=True)
        if note := one_process_note(JobSpec.parse(spec)):  # why auto gives it one GPU
            print(note, file=sys.stderr)
        note = spec.get("deadline") is not None and deadlines.unplanned_note(client, "schedulearn policy qoe")
        if note:
            print(note, file=sys.stderr)
        if args.wait:
            return _wait(client, job)
    except ClientError as e:
        return _fail(str(e))
    except BrokenPipeError:  # `schedulearn submit --wait ... | head`
        return _reader_gone()
    return 0


def submitted_line(job: dict[str, Any], now: float | None = None) -> str:
    """What `submit` prints: `submitted job 7 (mnist, queued)`, and for a job with a deadline
    what the scheduler's estimate says of it at once (`...; deadline in 5 s, will miss)`: an
    infeasible one is flagged at submission where similar finished jobs tell)."""
    deadline = deadlines.deadline_text(job, now)
    said = f"{job['name']}, {job['state']}" + (f"; {deadline}" if deadline else "")
    return f"submitted job {job['id']} ({said})"


def _wait(client: Client, job: dict[str, Any]) -> int:
    """`submit --wait`: the log as it comes, then the job's end on stderr and as the status.
    Ctrl-C ends the wait, not the job, and says so."""
    call = Reconnecting()
    try:
        for text in follow_pages(client, job["id"], call=call):
            sys.stdout.write(text)
            sys.stdout.flush()  # a progress bar's drawing as it comes
        job = call(client.job, job["id"])
    except KeyboardInterrupt:
        print(f"\nschedulearn: job {job['id']} goes on (Ctrl-C ended the wait only): schedulearn logs -f "
              f"{job['id']} follows it, schedulearn cancel {job['id']} stops it", file=sys.stderr)
        return 130
    print(f"job {job['id']}: {job['state']}" + (f" ({job['reason']})" if job.get("reason") else ""),
          file=sys.stderr)
    return _wait_status(job)


def _wait_status(job: dict[str, Any]) -> int:
    """`submit --wait`'s exit status, as `srun` and `docker run` give theirs: 0 if the job
    succeeded, its exit code if it failed with one, 128 + N if a signal N ended it, else 1
    (cancelled, or it never started)."""
    if job["state"] == "succeeded":
        return 0
    code = job.get("exit_code") if job["state"] == "failed" else None
    if isinstance(code, int) and code > 0:
        return min(code, 255)
    if isinstance(code, int) and code < 0:
        return min(128 - code, 255)
    return 1


def _reader_gone() -> int:
    """Standard output's reader stopped reading (`| head`): it has what it wanted. No error,
    and none at exit either (Python's last flush would raise again)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _ago(t: float | None) -> str:
    if not t:
        return "-"
    s = max(0, int(time.time() - t))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def _table(rows: list[list[str]]) -> None:
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _progress(job: dict[str, Any]) -> str:
    """`[####------] 42% ~12m left`: reported progress and the estimated time left ('-' if none);
    `no report for 7m` for a job that stopped reporting (`silent_s`)."""
    if job.get("state") == "succeeded":
        return "done"
    out = []
    if job.get("progress") is not None:
        p = min(max(float(job["progress"]), 0.0), 1.0)
        out.append("[" + "#" * round(10 * p) + "-" * (10 - round(10 * p)) + f"] {100 * p:.0f}%")
    if job.get("eta_s") is not None and job.get("state") == "running":
        out.append(f"~{_span(float(job['eta_s']))} left" + ("?" if job.get("eta_basis") == "history" else ""))
    if job.get("silent_s") is not None and job.get("state") == "running":
        out.append(f"no report for {_span(float(job['silent_s']))}")
    return " ".join(out) or "-"


def _span(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


def cmd_ls(args: argparse.Namespace) -> int:
    """The jobs as a table: the newest `LS_ROWS` unless told (`--limit N`, `--all`), and a line
    saying so when there are more; `--json` gives all of them unless `--limit` says."""
    cut = LS_ROWS if args.limit is None and not args.all and not args.json else None
    try:
        client = _client(args)
        jobs = client.jobs(args.state, args.user, args.limit if cut is None else cut + 1)
        paused = None if args.json else client.policy_info().get("paused")
    except ClientError as e:
        return _fail(str(e))
    if args.json:
        _print_json({"jobs": jobs})
        return 0
    more = cut is not None and len(jobs) > cut
    jobs = jobs[-cut:] if more else jobs
    rows = [["ID", "NAME", "USER", "STATE", "GPUS", "SUBMITTED", "PROGRESS", "DEADLINE", "REASON"]]
    for j in jobs:
        rows.append([str(j["id"]), j["name"][:30], j["user"], j["state"], shown_gpus(j),
                     _ago(j["submit_time"]) + " ago", _progress(j),
                     deadlines.deadline_text(j).removeprefix("deadline ") or "-",
                     (j.get("reason") or "")[:90]])
    _table(rows)
    if more:
        print(f"(the newest {cut} jobs; --all lists every one, --limit N the newest N)")
    if paused:
        print(paused_text(paused))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    try:
        client = _client(args)
        wrote = 0
        if args.follow:  # (a server restart on the way is waited out: `Reconnecting`)
            for text in follow_pages(client, args.job_id, args.tail, call=Reconnecting()):
                sys.stdout.write(text)
                sys.stdout.flush()
                wrote += len(text)
        else:
            for chunk in client.log_bytes(args.job_id, args.tail):  # as it comes, byte for byte
                sys.stdout.buffer.write(chunk)
                wrote += len(chunk)
            sys.stdout.flush()
        if not wrote and args.tail != 0:  # say why, on stderr: a job failed at start has nothing
            print(f"schedulearn: {empty_log_note(client.job(args.job_id))}", file=sys.stderr)
    except ClientError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `schedulearn logs 7 | head`
        return _reader_gone()
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        job = _client(args).job(args.job_id)
    except ClientError as e:
        return _fail(str(e))
    if args.json:
        _print_json(job)
        return 0
    for key, value in job_fields(job):
        print(f"{key + ':':<11} {printable(value)}")
    return 0


def job_fields(job: dict[str, Any], now: float | None = None) -> list[tuple[str, str]]:
    """`schedulearn show`'s lines: (field, text), the fields a job has."""
    now = time.time() if now is None else now
    spec = job.get("spec") or {}
    fields = [("job", f"{job['id']} {job.get('name', '')!r} of {job.get('user') or '?'}: {job['state']}")]
    if job.get("reason"):
        fields.append(("reason", job["reason"]))
    alloc = job.get("alloc") or job.get("last_alloc") or {}
    where = "; ".join(f"{node} {', '.join(map(str, idx))}" for node, idx in alloc.items())
    asked = str(spec.get("gpus", 1))
    if spec.get("gpus") == "auto" or spec.get("min_gpus") or spec.get("max_gpus"):
        low, high = spec.get("min_gpus") or 1, spec.get("max_gpus")
        if high is None and spec.get("gpus") != "auto":  # `--gpus 2 --min-gpus 1`: one or two
            high = spec.get("gpus", 1)
        if high:
            asked += f" ({low}..{high})"
        elif JobSpec.model_construct(**spec).capped_to_one_process:  # (the server's spec as it is:
            asked += f" ({low}: one process; --max-gpus lets it grow)"  # not validated again here)
        else:
            asked += f" ({low} or more)"
    if alloc:
        got = shown_gpus(job)
        fields.append(("gpus", f"{'holds' if job.get('gpus') else 'held'} {got} on {where}" +
                       (f" (asked {asked})" if asked != got else "")))
    else:
        fields.append(("gpus", f"asks for {asked}"))
    if spec.get("command"):
        fields.append(("command", shlex.join(spec["command"])))
    elif job.get("script_bytes") is not None:
        fields.append(("script", f"{job['script_bytes']} bytes (schedulearn script {job['id']})"))
    fields.append(("launcher", spec.get("launcher") or "python"))
    for key in ("workdir", "image", "priority"):
        if spec.get(key):
            fields.append((key, str(spec[key])))
    if spec.get("env"):
        fields.append(("env", ", ".join(sorted(spec["env"]))))
    for key, what in (("submit_time", "submitted"), ("start_time", "started"), ("end_time", "ended")):
        if job.get(key):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job[key]))
            fields.append((what, f"{stamp} ({deadlines.fmt_minutes(now - job[key])} ago)"))
    if job.get("run_s"):
        limit = spec.get("time_limit")
        fields.append(("ran", deadlines.fmt_minutes(job["run_s"]) +
                       (f" of its time limit {deadlines.fmt_minutes(limit)}" if limit else "")))
    if job.get("restarts"):
        fields.append(("restarts", str(job["restarts"])))
    if (progress := _progress(job)) not in ("-", "done"):
        fields.append(("progress", progress))
    if deadline := deadlines.deadline_text(job, now).removeprefix("deadline "):
        fields.append(("deadline", deadline))
    if job.get("exit_code") is not None:
        fields.append(("exit code", str(job["exit_code"])))
    if job.get("files_removed"):
        fields.append(("files", "its directory was removed (keep_job_dirs): no log, no result"))
    return fields


def cmd_script(args: argparse.Namespace) -> int:
    """The script as it was submitted (`--script FILE`, a notebook cell's bundle)."""
    try:
        sys.stdout.write(_client(args).script(args.job_id))
    except ClientError as e:
        return _fail(str(e))
    except BrokenPipeError:
        return _reader_gone()
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    client = _client_or_none(args)
    if client is None:
        return 1
    ids = list(dict.fromkeys(args.job_ids))
    if len(ids) > 1:  # the queued first, newest first: stopping a running job, or cancelling the
        try:          # job first in line, would start the next in line, to be stopped at once
            queued = {j["id"] for j in client.jobs("queued")}
        except ClientError:
            queued = set()
        ids.sort(key=lambda i: (i not in queued, -i))
    answers: dict[int, dict[str, Any] | ClientError] = {}
    for job_id in ids:
        try:
            answers[job_id] = client.cancel(job_id)
        except ClientError as e:
            answers[job_id] = e
    done = []
    for job_id in dict.fromkeys(args.job_ids):  # said in the order asked
        job = answers[job_id]
        if isinstance(job, ClientError):
            said = str(job)  # the server's message names the job (or the field) itself mostly
            named = said.startswith((f"job {job_id}:", "job:"))
            print(f"schedulearn: {said if named else f'job {job_id}: {said}'}", file=sys.stderr)
            continue
        done.append(job)
        if not args.json:
            print(f"job {job_id}: {'cancelled' if job['state'] == 'cancelled' else 'stopping'}")
    if args.json:
        _print_json({"jobs": done})
    return 1 if len(done) < len(answers) else 0


def _client_or_none(args: argparse.Namespace) -> Client | None:
    try:
        return _client(args)
    except ClientError as e:
        _fail(str(e))
        return None


def cmd_policy(args: argparse.Namespace) -> int:
    try:
        client = _client(args)
        if args.name:
            name = client.set_policy(args.name)
            if args.json:
                _print_json({"policy": name})
            else:
                print(f"policy: {name}")
            return 0
        info = client.policy_info()
        current, can_switch = info["policy"], info.get("can_switch", True)
        available = client.policies()
    except ClientError as e:
        return _fail(str(e))
    if args.json:
        _print_json({"policy": current, "can_switch": can_switch, "policies": available})
        return 0
    for p in available:
        mark = "*" if p["name"] == current else " "
        print(f"{mark} {p['name']:<14} {p['description']}")
    if not can_switch:
        print("(only the scheduler's admins can switch the policy)")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    try:
        paused = _client(args).pause(" ".join(args.reason))
    except ClientError as e:
        return _fail(str(e))
    if args.json:
        _print_json({"paused": paused})
    else:
        print(paused_text(paused))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    try:
        was = _client(args).resume()
    except ClientError as e:
        return _fail(str(e))
    if args.json:
        _print_json({"paused": None})
    else:
        print("scheduling resumed" if was else "scheduling was not paused")
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    try:
        data = _client(args).gpus()
    except ClientError as e:
        return _fail(str(e))
    if args.json:
        _print_json(data)
        return 0
    rows = [["NODE", "GPU", "NAME", "MEMORY (MiB)", "UTIL", "JOB"]]
    for node in data["nodes"]:
        for g in node["gpus"]:
            mem = f"{g['memory_used_mb']}/{g['memory_total_mb']}" if g["memory_total_mb"] else "-"
            job = str(g["job_id"]) if g["job_id"] is not None else "held" if g.get("held_by") else "-"
            rows.append([node["name"] + (" (virtual)" if node["virtual"] else ""), str(g["index"]),
                         g["name"], mem, "-" if g["utilization"] is None else f"{g['utilization']:.0f}%",
                         job])
    _table(rows)
    for node in data["nodes"]:  # what holds GPUs outside the scheduler (another's job, Slurm's)
        for g in node["gpus"]:
            if g.get("held_by") and g["job_id"] is None:
                print(printable(f"{node['name']} GPU {g['index']} held: {g['held_by']}"))
    if data.get("note"):  # no GPUs: why, and what to do
        print(f"({data['note']})")
    return 0


def since_time(text: str, now: float | None = None) -> float:
    """`--since`: a duration back from `now` (`30d`, `12h`) or a date/time (`2026-11-01`)."""
    now = time.time() if now is None else now
    try:
        return now - deadlines.parse_duration(text, "--since")
    except SpecError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ClientError(f"--since: expected a duration back from now (30d, 12h, 90m) or a date "
                          f"(2026-11-01, 2026-11-01 09:00), got {text!r}") from None


def _write_out(path: Path, text: str) -> str | None:
    """Write `text` to `path` whole or not at all (a file beside it, then renamed over it); a
    path that is there and no regular file — `/dev/null`, a pipe — is written into as it is:
    renamed over, `trace -o /dev/null` run as root left a regular file in its place, and every
    `> /dev/null` of the machine then wrote into it (a service account's failed: `Permission
    denied`). None, or why it could not."""
    try:
        if path.is_dir():
            return "a folder"
        if path.exists() and not path.is_file():
            with open(path, "w") as f:
                f.write(text)
            return None
    except OSError as e:
        return e.strerror or str(e)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        return e.strerror or str(e)
    return None


def cmd_trace(args: argparse.Namespace) -> int:
    try:
        since = since_time(args.since) if args.since else None
        client = _client(args)
        trace = history.from_jobs(client.jobs(user=args.user), since)
        shape, note, gpus = history.cluster_shape(client.gpus())
    except ClientError as e:
        return _fail(str(e))
    left = ", ".join(f"{n} {why}" for why, n in sorted(trace.left_out.items()))
    if not trace.rows:
        return _fail("trace: no finished job" + (f" of {args.user}" if args.user else "")
                     + (f" since {args.since}" if args.since else "") + " to write"
                     + (f" (left out: {left})" if left else ""))
    text = trace.csv_text()
    if args.output is None:
        sys.stdout.write(text)
        target = "FILE"
    else:
        if (failed := _write_out(args.output, text)) is not None:
            return _fail(f"output: cannot write {args.output} ({failed})")
        target = shlex.quote(str(args.output))
    span = " to ".join(dict.fromkeys(
        f"{datetime.fromtimestamp(t):%Y-%m-%d %H:%M}" for t in (trace.first_submit, trace.last_submit)))
    print(f"{len(trace.rows)} job{'s' if len(trace.rows) != 1 else ''} submitted {span}"
          + (f" written to {args.output}" if args.output else "") + (f"; left out: {left}" if left else ""),
          file=sys.stderr)
    jcts, util = trace.jcts, trace.utilization(gpus)
    p99 = float(np.percentile(jcts, 99))  # (the replay's figures, counted the same way)
    print(f"as they ran here: avg JCT {statistics.fmean(jcts):.0f} s, p50 {statistics.median(jcts):.0f} s, "
          f"p99 {p99:.0f} s" + (f", GPU util {util:.1%}" if util is not None else "")
          + " (as simulate counts them)", file=sys.stderr)
    if shape:
        print(f"replay them on this scheduler's GPUs{note}: schedulearn simulate {target} --policy all "
              f"--cluster {shape}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (the project's `schedulearn.cli` registers the same commands)."""
    parser = argparse.ArgumentParser(prog="schedulearn")
    register(parser.add_subparsers(dest="command_name", required=True))
    args = parser.parse_args(deadlines.attach_values(sys.argv[1:] if argv is None else argv))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
