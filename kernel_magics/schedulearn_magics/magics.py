"""`%%schedulearn` (a cell becomes a training job) and `%schedulearn` (queue, jobs, policy, GPUs).

Every check that can fail happens before the one POST that submits the job; a bad option, a
missing variable or a syntax error is one line in the cell (IPython's `UsageError`), and the
server never hears of it. The job's fields are checked by the model the server checks them with
(`JobSpec.parse`), its messages naming the options (`--min-gpus`) instead of the fields.

One submit path (`_submit`), waited on in one of two ways: blocking (a terminal IPython, or a
kernel that does not await on asyncio) or awaiting (`run_async`, in a kernel: its event loop
then goes on delivering widget clicks). Either way an interrupted wait ends the cell with one
`JobInterrupted` saying what became of the job (cancelled, or left running when
`cancel_on_interrupt` is off).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import inspect
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display
from schedulearn import deadlines
from schedulearn.client import paused_text, printable
from schedulearn.model import JobSpec, SpecError, gpus_from_text, one_process_note
from traitlets import Bool, Float, Int

from . import bundle, views
from ._client import ServerError, connect, empty_log_note
from .handle import (
    CANCELLED_HERE,
    FINAL_STATES,
    JobHandle,
    JobInterrupted,
    ValueNotKept,
    cancelled_here,
    job_ended_without_result,
)
from .live import LiveShown, show_shown
from .watch import (
    JobView,
    TextJobView,
    follow,
    follow_in_background,
    poll_job,
    queue_text,
    reconnecting,
    widgets_available,
)

LAUNCHER_CHOICES = ("python", "torchrun", "horovod", "auto")
LOGS_LINES = 1000  # what `%schedulearn logs ID` shows unless told otherwise (--tail N, --all)
SUBCOMMANDS = ("queue", "ls", "logs ID", "script ID", "cancel ID", "result ID", "job ID", "policy [NAME]",
               "pause [REASON]", "resume", "gpus")
#: the option that sets each JobSpec field (the model's messages name fields)
OPTIONS = {"gpus": "--gpus", "min_gpus": "--min-gpus", "max_gpus": "--max-gpus", "launcher": "--launcher",
           "image": "--image", "name": "--name", "env": "--env", "priority": "--priority", "script": "cell",
           "epochs": "--epochs", "deadline": "--deadline", "resize": "--resize", "time_limit": "--timeout"}
_GPU_FIELDS = re.compile(r"\b(min_gpus|max_gpus|gpus)\b")


def parse_env(pairs: list[str] | None) -> dict[str, str]:
    """`--env K=V` and `--env K` (the kernel's value of K, as `docker run -e K`) options -> a dict
    (the names are the model's to check)."""
    env: dict[str, str] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq:
            if key not in os.environ:
                raise UsageError(f"--env: {key!r} is not set in this kernel's environment; expected K=V, "
                                 f"or K alone for a variable the kernel has")
            value = os.environ[key]
        env[key] = value
    return env


def check_spec(spec: dict[str, Any]) -> None:
    """`JobSpec.parse`, its one-line message naming the cell magic's options."""
    try:
        JobSpec.parse(spec)
    except SpecError as e:
        raise UsageError(in_options(str(e))) from None


def in_options(message: str) -> str:
    """A message that names JobSpec fields (`gpus: at most 4 ...`, the model's or the server's),
    in the cell magic's words (`--gpus: at most 4 ...`)."""
    field, sep, rest = message.partition(": ")
    rest = _GPU_FIELDS.sub(lambda m: OPTIONS[m.group(1)], rest)
    return f"{OPTIONS.get(field, field)}{sep}{rest}"


@magics_class
class SchedulearnMagics(Magics):
    """Run notebook cells as training jobs on the cluster's GPUs (see `%%schedulearn --help`)."""

    cancel_on_interrupt = Bool(
        True, help="Interrupting the kernel while a cell waits for its job cancels the job."
    ).tag(config=True)
    max_bundle_bytes = Int(
        bundle.DEFAULT_MAX_BYTES, help="The largest job script (cell + --files + --vars) submitted."
    ).tag(config=True)
    poll_interval = Float(0.5, help="Seconds between the job view's updates while waiting.").tag(config=True)
    queue_interval = Float(1.0, help="Seconds between the queue widget's refreshes.").tag(config=True)

    def __init__(self, shell: Any = None, **kw: Any):
        super().__init__(shell=shell, **kw)
        self._client: Any = None
        self.last_job: JobHandle | None = None

    # -- the server -------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = connect()
            except ServerError as e:
                raise UsageError(f"schedulearn: {e}") from None
        return self._client

    def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """A client call; a server error or an unreachable server becomes one line."""
        try:
            return fn(*args, **kw)
        except ServerError as e:
            raise UsageError(str(e)) from None

    # -- %%schedulearn ------------------------------------------------------------------------
    @magic_arguments()
    @argument("-h", "--help", action="store_true", help="show this help and submit nothing")
    @argument("--gpus", default="1", help="GPUs: N >= 1, or 'auto' (elastic; the policy sizes it; a plain "
                   "Python cell, one process, gets at most --min-gpus unless --max-gpus is given)")
    @argument("--min-gpus", type=int, default=None,
              help="smallest size of an elastic job (with --gpus N: N, or fewer down to this)")
    @argument("--max-gpus", type=int, default=None, help="largest size of an elastic job")
    @argument("--launcher", default="auto", choices=LAUNCHER_CHOICES,
              help="how to start the cell: python (one process), torchrun (one per GPU), horovod, "
                   "or auto: horovod if the cell imports horovod, torchrun if it uses torch.distributed, "
                   "else python")
    @argument("--resize", default=None, choices=("restart", "in-place"),
              help="how an elastic job is resized: restart (checkpoint-restart, the default) or in-place "
                   "(Horovod Elastic: the cell uses hvd.elastic; or torchrun's elastic agents; see "
                   "docs/resize.md)")
    @argument("--image", default=None, help="Docker image (Docker executor)")
    @argument("--name", default=None, help="job name (default: the notebook and cell number)")
    @argument("--env", action="append", metavar="K=V",
              help="environment variable for the job (repeatable); K alone: the kernel's value of K")
    @argument("--files", action="append", metavar="PATH",
              help="file or folder to ship (repeatable); the cell then runs in its own job directory, where "
                   "they are unpacked, instead of the notebook's folder")
    @argument("--vars", default=None, metavar="a,b", help="notebook variables cloudpickled into the job")
    @argument("--no-wait", action="store_true", help="return a job handle at once instead of waiting")
    @argument("-o", "--out", default=None, metavar="VAR", help="also store the result (or the handle) in VAR")
    @argument("--priority", type=int, default=0, help="job priority (higher first, for policies that use it)")
    @argument("--timeout", default=None, help="stop the job when it has run this long (90, 90s, 10m, 2h, "
                   "1h30m; its runs together, not its time in the queue): it fails with exit code 124")
    @argument("--epochs", type=int, default=None,
              help="the job's length in epochs: reported epochs count against it (progress, time left)")
    @argument("--deadline", default=None, metavar="WHEN",
              help="finish by: a duration from submission (2h, 90m, 1h30m, 2d), a time today (18:00) or a "
                   "date and time (2026-11-24 18:00); the qoe policy plans for it, and the job view "
                   "says whether it is on track")
    @cell_magic
    def schedulearn(self, line: str, cell: str) -> Any:
        """Run this cell as a job on the cluster's GPUs; its last expression comes back as the
        cell's value.

            %%schedulearn --gpus 2 --launcher torchrun
            import torch.distributed as dist
            ...
            final_loss
        """
        args = self._parse(line)
        if args.help:
            print(self.schedulearn.parser.format_help())
            return None
        handle = self._submit(args, cell)
        if args.no_wait:
            return self._no_wait(handle, args.out)
        view = self._view(handle)
        live = self._live(handle, view)
        job = self._follow(handle, view, self._interrupted, live)
        return self._finish(handle, job, view, args.out, bundle.ends_quietly(cell), live)

    def _follow(self, handle: JobHandle, view: JobView, interrupted: Any,
                live: LiveShown | None) -> dict[str, Any]:
        """Block until the job ends, showing it in `view` (and what it shows, `live`); an
        interrupt ends the wait with `interrupted(handle, view)`, a server gone for good with one line."""
        try:
            return follow(handle, view, poll=self.poll_interval, live=live)
        except KeyboardInterrupt:
            raise interrupted(handle, view) from None
        except ServerError as e:
            raise UsageError(f"job {handle.id}: lost touch with the server: {e}") from None

    def _parse(self, line: str) -> Any:
        try:  # shell quoting (IPython's own split keeps the quotes around 'a b')
            return self.schedulearn.parser.parse_args(deadlines.attach_values(shlex.split(line)))
        except UsageError as e:
            raise UsageError(f"%%schedulearn: {e} (see %%schedulearn --help)") from None
        except ValueError as e:  # an unclosed quote in the options line
            raise UsageError(f"%%schedulearn: cannot read the options: {e}") from None

    def build_spec(self, args: Any, cell: str) -> dict[str, Any]:
        """Options + cell -> a JobSpec dict, checked; raises `UsageError` before anything is sent."""
        if not cell.strip():
            raise UsageError("cell: empty; write the training code below %%schedulearn")
        if args.out is not None and not args.out.isidentifier():
            raise UsageError(f"--out: expected a variable name, got {args.out!r}")
        env = parse_env(args.env)
        try:
            tree = bundle.check_syntax(cell)
            launcher = bundle.detect_launcher(tree) if args.launcher == "auto" else args.launcher
            names = [n.strip() for n in (args.vars or "").split(",") if n.strip()]
            hidden = getattr(self.shell, "user_ns_hidden", ())
            bundle.check_names(cell, self.shell.user_ns, names, hidden, tree)
            variables = bundle.pack_vars(names, self.shell.user_ns) if names else None
            files = None
            if args.files:  # (base64 in the script: 4/3 of their size; the script's limit checks the rest)
                files = bundle.pack_files(args.files, os.getcwd(), self.max_bundle_bytes * 3 // 4)
            keep_value = args.out is not None or not bundle.ends_quietly(cell)  # `;`: not wanted
            script = bundle.build_script(cell, files, variables, self.max_bundle_bytes, keep_value)
        except bundle.BundleError as e:
            raise UsageError(str(e)) from None
        spec: dict[str, Any] = {
            "name": args.name or self._default_name(),
            "script": script,
            "gpus": gpus_from_text(args.gpus),
            "launcher": launcher,
            "env": env,
            "priority": args.priority,
        }
        if not args.name:  # its default name changes with every run (In [N]); the cell does not
            spec["cell"] = self._cell_identity(cell)
        if args.min_gpus is not None:
            spec["min_gpus"] = args.min_gpus
        if args.max_gpus is not None:
            spec["max_gpus"] = args.max_gpus
        if args.image:
            spec["image"] = args.image
        if args.epochs is not None:
            spec["epochs"] = args.epochs
        if args.deadline is not None:
            try:
                spec["deadline"] = deadlines.parse(args.deadline)
            except SpecError as e:
                raise UsageError(str(e).replace("deadline: ", "--deadline: ", 1)) from None
        if args.resize is not None:
            spec["resize"] = args.resize
        if args.timeout is not None:
            try:
                spec["time_limit"] = deadlines.parse_timeout(args.timeout)
            except SpecError as e:
                raise UsageError(str(e)) from None
        check_spec(spec)
        return spec

    def _cell_identity(self, cell: str) -> str:
        """`notebook#id`: the id the front-end gives the running cell (JupyterLab and Notebook 7
        send it with each execution, as `cellId`; it stays while the cell is edited), else
        `notebook#code-` and a hash of the cell's code (a re-run of the same code is the same
        cell). What the scheduler learned from a cell's earlier runs then starts the next."""
        session = os.environ.get("JPY_SESSION_NAME", "").encode("utf-8", "replace").decode("utf-8")
        notebook = printable(session)[-200:] or "cell"
        kernel = getattr(self.shell, "kernel", None)
        try:
            parent = kernel.get_parent("shell") if kernel is not None else None
        except Exception:  # an ipykernel before 6, or no request: no id
            parent = None
        meta = parent.get("metadata") if isinstance(parent, dict) else None
        cell_id = meta.get("cellId") if isinstance(meta, dict) else None
        if isinstance(cell_id, str) and 0 < len(cell_id) <= 64 and cell_id.isprintable():
            return f"{notebook}#{cell_id}"
        return f"{notebook}#code-{hashlib.sha256(cell.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"

    def _default_name(self) -> str:
        notebook = os.environ.get("JPY_SESSION_NAME", "")
        # a name is one line of at most 200 characters (model.JobSpec): a notebook's file name
        # may be longer, or hold a tab, and the user did not choose this name
        stem = printable(Path(notebook).stem)[:180] if notebook else "cell"
        # The number the notebook shows as In [N]: ipykernel has already counted the running
        # cell in `execution_count` (it is N + 1 there); the display hook's count is N in both
        # ipykernel and terminal IPython.
        hook = getattr(self.shell, "displayhook", None)
        count = getattr(hook, "prompt_count", None)
        if count is None:
            count = getattr(self.shell, "execution_count", None)
        return f"{stem}[{count}]" if count is not None else stem

    # -- submitting and following a job ------------------------------------------------------
    def _submit(self, args: Any, cell: str) -> JobHandle:
        """The one way a cell becomes a job: checked, submitted, its handle kept as `last_job`."""
        spec = self.build_spec(args, cell)
        # As in the notebook, the cell runs in the notebook's folder (its relative paths, its
        # modules), where the server runs jobs on this machine; with --files, in its own job
        # directory, where they are unpacked (not over the notebook's own files).
        if not args.files and (here := self._call(self.client.default_workdir)):
            spec["workdir"] = here
        try:  # what only the server checks (the cluster's GPUs, the executor's images) in the
            job = self.client.submit(spec)  # options' words too, as what the kernel checks
        except ServerError as e:
            raise UsageError(in_options(str(e))) from None
        handle = JobHandle(self.client, job)
        # the notes once the job is in (a refused submission is its one-line error alone)
        if note := one_process_note(JobSpec.parse(spec), "cell"):  # (why auto gives it one GPU)
            print(note, file=sys.stderr)
        if spec.get("deadline") is not None and (note := deadlines.unplanned_note(
                self.client, "%schedulearn policy qoe, or the queue widget's dropdown")):
            print(note, file=sys.stderr)
        self.last_job = handle
        return handle

    def _no_wait(self, handle: JobHandle, out: str | None) -> JobHandle:
        """`--no-wait`: the handle is the cell's value. In a notebook it shows itself as a live
        job widget (its `_ipython_display_`), not as text frozen at "queued"; as text, a line."""
        handle.poll_interval = max(1.0, self.poll_interval)
        if not widgets_available(self.shell):
            print(views.status_line(handle.job) + f"  (handle: {handle!r})")
        if out:
            self.shell.user_ns[out] = handle
        return handle

    @staticmethod
    def _live(handle: JobHandle, view: JobView) -> LiveShown | None:
        """What displays the job's figures and `display()`s in the waiting cell as they come: in
        a kernel, whose front-end replaces a display in place (in a terminal, an update would print
        it again: there they come at the end, once)."""
        return None if isinstance(view, TextJobView) else LiveShown(handle)

    def _view(self, handle: JobHandle) -> JobView:
        if widgets_available(self.shell):
            from .widgets import JobWidget

            view = JobWidget(handle)
            display(view)
            return view
        return TextJobView()

    # -- waiting without blocking the kernel's event loop ------------------------------------
    async def run_async(self, line: str, cell: str) -> Any:
        """`%%schedulearn` in a kernel: the cell is rewritten to `await` this (see
        `async_cell_transformer`), so that while the job runs the kernel's event loop stays free
        to deliver widget messages: the job widget's Cancel button works during the wait."""
        args = self._parse(line)
        if args.help or args.no_wait:
            return self.schedulearn(line, cell)
        handle = self._submit(args, cell)
        view = self._view(handle)
        live = self._live(handle, view)
        job = await self._await(handle, view, self._interrupted, live)
        return self._finish(handle, job, view, args.out, bundle.ends_quietly(cell), live)

    async def _await(self, handle: JobHandle, view: JobView, interrupted: Any,
                     live: LiveShown | None) -> dict[str, Any]:
        """`_follow` on the event loop (the kernel's interrupt cancels the task)."""
        try:
            return await self._await_end(handle, view, live)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise interrupted(handle, view) from None
        except ServerError as e:
            raise UsageError(f"job {handle.id}: lost touch with the server: {e}") from None

    async def _await_end(self, handle: JobHandle, view: JobView, live: LiveShown | None) -> dict[str, Any]:
        """`follow` on the event loop: each poll in a thread, the waits between them awaited;
        what the job showed is displayed from the loop's thread (the cell's output)."""
        delay = 0.1
        patience = reconnecting(view)
        while True:
            try:
                job = await asyncio.to_thread(poll_job, handle, view, patience.answered)
            except ServerError as e:
                await asyncio.sleep(patience.lost(e))
                continue
            if live is not None and job.get("start_time") is not None:  # (started: it may show)
                await asyncio.to_thread(live.fetch)
                live.show()
            if job["state"] in FINAL_STATES:
                return job
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, self.poll_interval)

    def _interrupted(self, handle: JobHandle, view: JobView) -> JobInterrupted:
        """What ends a cell whose wait was interrupted: the job cancelled (`cancel_on_interrupt`),
        or left running with the commands that reach it; either way a widget goes on following it
        to its final state (a text view would print into the next cell; a widget left behind
        said `running` for good)."""
        if not self.cancel_on_interrupt:
            if not isinstance(view, TextJobView):
                follow_in_background(handle, view, poll=handle.poll_interval)
            hint = f"%schedulearn logs {handle.id}, %schedulearn cancel {handle.id}"
            return JobInterrupted(handle.id, f"still {handle.state}; it runs on ({hint})")
        try:
            job = handle.cancel().job
        except Exception as e:
            return JobInterrupted(handle.id, f"could not cancel it: {e}")
        if job["state"] in FINAL_STATES and not handle.cancelled_by_you:  # (its log was being read)
            return _ended_already(handle.id, job["state"])
        view.update(job, None, None)
        if job["state"] not in FINAL_STATES and not isinstance(view, TextJobView):
            follow_in_background(handle, view, poll=0.5)
        return JobInterrupted(handle.id, "cancelled by you")

    def _finish(self, handle: JobHandle, job: dict[str, Any], view: JobView, out: str | None,
                quiet: bool = False, live: LiveShown | None = None) -> Any:
        """The cell's value: the job's result (also stored in `out`); None when the cell ends
        with `;` (IPython's own check reads the magic's call, not the cell, so it showed it), and
        a line on stderr when the value could not be pickled (`ValueNotKept`, raised with `out`);
        what the cell showed (figures, `display()`) is displayed first."""
        if job["state"] != "succeeded":
            tail = ""
            # the log is on screen already unless a widget showed none of it
            if job["state"] == "failed" and not isinstance(view, TextJobView) and not view.log_tail:
                try:
                    tail = handle.logs(tail=20)
                except Exception:
                    tail = ""
            handle.read_shown_of_failure(job)
            show_shown(handle, live)  # what the cell showed before it raised
            raise job_ended_without_result(job, tail, handle.cancelled_by_you)
        not_kept = None
        try:
            value = self._call(handle.result)
        except ValueNotKept as e:
            not_kept = e
        show_shown(handle, live)  # its figures and displays, as the inline backend would show them
        if not_kept is not None:
            if out:  # a value asked for by name: the cell fails, as a missing one would
                raise not_kept
            print(f"ValueNotKept: {not_kept}", file=sys.stderr)  # the job's work stands: a line, not an error
            return None
        if out:
            self.shell.user_ns[out] = value
        return None if quiet else value

    # -- %schedulearn ---------------------------------------------------------------------------
    @line_magic("schedulearn")
    def schedulearn_line(self, line: str) -> Any:
        """%schedulearn queue | ls | logs ID | script ID | cancel ID | result ID | job ID | policy [NAME]
        | pause [REASON] | resume | gpus"""
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise UsageError(f"%schedulearn: cannot read the line: {e}") from None
        if not words or words[0] in ("-h", "--help", "help"):
            print(self._line_help())
            return None
        cmd, rest = words[0], words[1:]
        handlers = {
            "queue": self._queue, "ls": self._ls, "logs": self._logs, "script": self._script,
            "cancel": self._cancel, "result": self._result, "job": self._job, "policy": self._policy,
            "pause": self._pause, "resume": self._resume, "gpus": self._gpus,
        }
        if cmd not in handlers:
            allowed = ", ".join(SUBCOMMANDS)
            raise UsageError(f"%schedulearn: unknown command {cmd!r}; expected one of: {allowed}")
        return handlers[cmd](rest)

    def _line_help(self) -> str:
        return ("%schedulearn queue          live table of jobs and the policy dropdown\n"
                "%schedulearn ls             the jobs, as text\n"
                "%schedulearn logs ID        a job's log (its last 1,000 lines; --tail N, --all)\n"
                "%schedulearn script ID      the cell (or script) a job runs\n"
                "%schedulearn cancel ID      cancel a job\n"
                "%schedulearn result ID      a job's result (a job still running: followed to its end)\n"
                "%schedulearn job ID         a handle of a job (a live job widget): after a kernel restart\n"
                "%schedulearn policy [NAME]  show the policies, or switch to NAME\n"
                "%schedulearn pause [REASON] pause scheduling: nothing starts or moves (admins)\n"
                "%schedulearn resume         resume scheduling\n"
                "%schedulearn gpus           the GPU inventory\n"
                "%%schedulearn --help        the cell magic's options")

    @staticmethod
    def _no_args(cmd: str, rest: list[str]) -> None:
        if rest:
            raise UsageError(f"%schedulearn {cmd}: takes no arguments, got {' '.join(rest)!r}")

    @staticmethod
    def _job_id(cmd: str, rest: list[str]) -> int:
        if len(rest) != 1 or not _is_job_id(rest[0]):
            raise UsageError(f"%schedulearn {cmd}: expected one job id (an integer >= 1, as %schedulearn ls "
                             f"shows), got {' '.join(rest)!r}")
        return int(rest[0])

    def _queue(self, rest: list[str]) -> Any:
        self._no_args("queue", rest)
        if widgets_available(self.shell):
            from .widgets import QueueWidget

            widget = self._call(QueueWidget, self.client, self.queue_interval)
            display(widget)
            return None
        print(self._call(queue_text, self.client))
        return None

    def _ls(self, rest: list[str]) -> None:
        self._no_args("ls", rest)
        print(views.text_table(self._call(self.client.jobs)))
        if paused := self._call(self.client.policy_info).get("paused"):
            print(paused_text(paused, resume="%schedulearn resume"))

    def _logs(self, rest: list[str]) -> None:
        """`logs ID [--tail N | --all]`: the log's last `LOGS_LINES` lines by default (a log of
        gigabytes would take the notebook down), saying so when there is more."""
        usage = "%schedulearn logs: expected a job id, then --tail N or --all"
        words = list(rest)
        lines: int | None = LOGS_LINES
        if "--all" in words:
            words.remove("--all")
            lines = None
        elif "--tail" in words:
            i = words.index("--tail")
            n = words[i + 1] if i + 1 < len(words) else ""
            if not (n.isascii() and n.isdigit()):
                raise UsageError(f"%schedulearn logs: --tail expects a number of lines >= 0, got {n!r}")
            lines = int(n)
            del words[i:i + 2]
        if len(words) != 1 or not _is_job_id(words[0]):
            raise UsageError(f"{usage}, got {' '.join(rest)!r}")
        job_id = int(words[0])
        text = self._call(self.client.logs, job_id, None if lines is None else lines + 1)
        if lines is not None and text.count("\n") + (not text.endswith("\n") and bool(text)) > lines:
            text = text.split("\n", 1)[1] if lines else ""
            print(f"(the last {lines:,} lines; %schedulearn logs {job_id} --all for all of it)")
        if text:
            print(text, end="" if text.endswith("\n") else "\n")
        else:
            print(f"({empty_log_note(self._call(self.client.job, job_id))})")

    def _script(self, rest: list[str]) -> None:
        """`script ID`: the notebook cell a job of `%%schedulearn` runs (not the ~30 KB of the
        script it travels in), or the script of any other job."""
        job_id = self._job_id("script", rest)
        script = self._call(self.client.script, job_id)
        cell = bundle.cell_of(script)
        if cell is not None:
            print(f"(job {job_id} runs this notebook cell; the whole script: schedulearn script {job_id})")
            script = cell
        print(script, end="" if script.endswith("\n") else "\n")

    def _cancel(self, rest: list[str]) -> None:
        job = self._call(self.client.cancel, self._job_id("cancel", rest))
        CANCELLED_HERE.add(cancelled_here(self.client, job["id"]))  # (its result, read here later:
        # `cancelled by you`)
        print(f"job {job['id']}: {job['state']}" + (" (stopping)" if job["state"] == "running" else ""))

    def _result(self, rest: list[str]) -> Any:
        """`result ID`: a job's result; a job not ended yet is followed in the job view (a widget
        or text, as a waiting cell's) to its end. An interrupt stops the wait, not the job."""
        handle = self._handle("result", rest)
        if handle.job["state"] in FINAL_STATES:
            return self._ended_result(handle)
        view = self._view(handle)
        live = self._live(handle, view)
        return self._finish(handle, self._follow(handle, view, self._stopped_waiting, live), view, None,
                            live=live)

    async def result_async(self, line: str) -> Any:
        """`%schedulearn result ID` on a line of its own in a kernel, rewritten to `await` this
        (`async_result_transformer`): the wait leaves the event loop free, so the widget's Cancel
        button is heard, as in a waiting cell."""
        handle = self._handle("result", shlex.split(line))
        if handle.job["state"] in FINAL_STATES:
            return self._ended_result(handle)
        view = self._view(handle)
        live = self._live(handle, view)
        return self._finish(handle, await self._await(handle, view, self._stopped_waiting, live), view, None,
                            live=live)

    def _ended_result(self, handle: JobHandle) -> Any:
        """An ended job's result, what its cell showed (figures, `display()`) displayed first, as
        when the cell waited for it (before its `JobFailed` too)."""
        try:
            return self._call(handle.result)
        finally:
            display(*handle.shown)

    def _stopped_waiting(self, handle: JobHandle, view: JobView) -> JobInterrupted:
        """An interrupted `result` wait: the job was not this cell's submission, so it runs on
        (a widget goes on following it)."""
        state = handle.state
        if state in FINAL_STATES:  # (its log was being read)
            return _ended_already(handle.id, state)
        if not isinstance(view, TextJobView):
            follow_in_background(handle, view, poll=handle.poll_interval)
        hint = f"%schedulearn result {handle.id}, %schedulearn cancel {handle.id}"
        return JobInterrupted(handle.id, f"still {state}; it runs on ({hint})")

    def _job(self, rest: list[str]) -> JobHandle:
        """`job ID`: a handle of a job (in a notebook, a live job widget): a job submitted before
        a kernel restart, from another notebook or from the CLI."""
        handle = self._handle("job", rest)
        handle.poll_interval = max(1.0, self.poll_interval)
        if not widgets_available(self.shell):
            print(views.status_line(handle.job) + f"  (handle: {handle!r})")
        return handle

    def _handle(self, cmd: str, rest: list[str]) -> JobHandle:
        """The handle of job ID, its state read (an unknown job: the server's one line)."""
        job_id = self._job_id(cmd, rest)
        return JobHandle(self.client, self._call(self.client.job, job_id))

    def _policy(self, rest: list[str]) -> None:
        if len(rest) > 1:
            raise UsageError(f"%schedulearn policy: expected at most one policy name, got {' '.join(rest)!r}")
        if rest:
            name = self._call(self.client.set_policy, rest[0])
            print(f"policy: {name}")
            return
        current = self._call(self.client.policy)
        for p in self._call(self.client.policies):
            mark = "*" if p["name"] == current else " "
            print(f"{mark} {p['name']:<14} {p.get('description', '')}")

    def _pause(self, rest: list[str]) -> None:
        paused = self._call(self.client.pause, " ".join(rest))
        print(paused_text(paused, resume="%schedulearn resume"))

    def _resume(self, rest: list[str]) -> None:
        self._no_args("resume", rest)
        print("scheduling resumed" if self._call(self.client.resume) else "scheduling was not paused")

    def _gpus(self, rest: list[str]) -> None:
        self._no_args("gpus", rest)
        print(views.gpus_text(self._call(self.client.gpus)))


# magic_arguments names the parser after the function; the cell magic is spelt with two %. Its
# help is printed as argparse prints a command's (`usage: %%schedulearn …`): IPython's formatter
# writes reST for docstrings (`::`, `<K=V>`) and adds a `%` of its own (`%%%schedulearn`).
SchedulearnMagics.schedulearn.parser.prog = "%%schedulearn"
SchedulearnMagics.schedulearn.parser.formatter_class = argparse.RawDescriptionHelpFormatter
SchedulearnMagics.schedulearn.parser.description = inspect.cleandoc(
    SchedulearnMagics.schedulearn.parser.description or "")


def async_cell_transformer(lines: list[str]) -> list[str]:
    """IPython input transformer: `%%schedulearn OPTIONS` + body -> one line awaiting
    `SchedulearnMagics.run_async(OPTIONS, body)`; ipykernel runs such a cell as a task on its
    event loop, which then goes on dispatching comm messages (widget clicks) meanwhile."""
    if not lines or not lines[0].startswith("%%schedulearn") or not _awaits_on_asyncio():
        return lines
    options = lines[0][len("%%schedulearn"):]
    if options.strip() and not options[0].isspace():
        return lines  # another magic whose name starts the same
    body = "".join(lines[1:])
    call = "get_ipython().magics_manager.registry['SchedulearnMagics'].run_async"
    return [f"await {call}({options.strip()!r}, {body!r})\n"]


#: `%schedulearn result ID` as IPython turns it into Python, alone on a line of the cell's top
#: level, its value assigned or not (a `%` inside a string is never turned into this)
_RESULT_CALL = re.compile(r"^((?:[A-Za-z_]\w*\s*=\s*)?)get_ipython\(\)\.run_line_magic\('schedulearn', "
                          r"'result\s+(\d+)\s*'\)(\s*)$")


def async_result_transformer(lines: list[str]) -> list[str]:
    """IPython input transformer (after the magics became calls): a top-level line
    `[VAR = ]%schedulearn result ID` -> `[VAR = ]await SchedulearnMagics.result_async('ID')`, so
    that waiting for a running job leaves the event loop free (its widget's Cancel is heard)."""
    if not any("run_line_magic('schedulearn'" in ln for ln in lines) or not _awaits_on_asyncio():
        return lines
    call = "await get_ipython().magics_manager.registry['SchedulearnMagics'].result_async"
    return [_RESULT_CALL.sub(lambda m: f"{m[1]}{call}({m[2]!r}){m[3]}", ln) for ln in lines]


def _awaits_on_asyncio() -> bool:
    """Top-level `await` runs on asyncio here (not after `%autoawait off` or `%autoawait trio`)."""
    from IPython import get_ipython
    from IPython.core.async_helpers import _asyncio_runner

    ip = get_ipython()
    return bool(ip is not None and ip.autoawait and ip.loop_runner is _asyncio_runner)


def _is_job_id(word: str) -> bool:
    """An integer >= 1 in ASCII digits (`str.isdigit` takes '²', which `int` refuses)."""
    return word.isascii() and word.isdigit() and int(word) >= 1


def _ended_already(job_id: int, state: str) -> JobInterrupted:
    """An interrupt that came once the job had ended (while the end of its log was read): not
    `cancelled by you`, nor `still succeeded; it runs on`."""
    then = f" (%schedulearn result {job_id} gives its value)" if state == "succeeded" else ""
    return JobInterrupted(job_id, f"it had {state} already{then}")
