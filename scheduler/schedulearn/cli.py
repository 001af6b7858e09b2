"""`schedulearn …`: the command line.

Each subcommand is a small function registered on a subparser (`register`); the client commands
(`submit`, `ls`, `logs`, `script`, `cancel`, `policy`, `gpus`) come from `schedulearn.client_cli`, and other
packages add theirs through the extension hook `EXTENSIONS` (modules with a `register(subparsers)`
of their own): `serve`, the standalone server, is the Jupyter side's (`schedulearn_jupyter.serve`).
A module that cannot be imported (the Jupyter side not installed) leaves its commands out.
Usage errors are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.util
import json
import sys
import time
from typing import Any, NoReturn

from . import __version__, client_cli, deadlines
from .model import SpecError

#: Modules of other packages that add subcommands: each has `register(subparsers)`.
EXTENSIONS = ("schedulearn_jupyter.serve",)

RESULT_KEYS = ("policy", "jobs", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s",
               "gpu_utilization")
#: with a trace that has deadlines (`sim.metrics.deadline_metrics`)
DEADLINE_KEYS = ("deadline_jobs", "deadline_met", "avg_tardiness_s", "be_avg_jct_s")

EXAMPLES = """\
examples:
  schedulearn policies
  schedulearn simulate traces/philly.csv --policy all --cluster 8x8 --limit 2000
  schedulearn simulate my-trace.csv --policy las --cluster 4x8 --json
"""

SIMULATE_EXAMPLES = """\
A trace is a CSV; its format is detected from the header:
  name,submit_time,gpus,duration                      rigid jobs (seconds)
  timestamp,duration,num_gpus,gpu_time,cluster        the Philly summary (--start, --limit)
  name,time,application,num_replicas,batch_size       a Pollux workload (application models)
Rigid and Pollux traces may end with a deadline column: seconds after submission (empty: none).

Output (--json): one object per policy with policy, jobs, avg_jct_s, p50_jct_s, p99_jct_s,
makespan_s, avg_queue_s, gpu_utilization; with a trace that has a deadline column, also
deadline_jobs, deadline_met (the share of them that finished by their deadline), avg_tardiness_s
(mean lateness, 0 when on time) and be_avg_jct_s (the average JCT of the jobs without one).
JCT = finish - submit; makespan = last finish - first submit; utilisation = busy GPU-seconds /
(GPUs x makespan).

examples:
  schedulearn simulate tests/data/small-trace.csv --policy fifo --cluster 2x4
  schedulearn simulate traces/philly.csv --policy all --cluster 8x8 --limit 2000
  schedulearn simulate traces/philly.csv --policy las --cluster 300x8 --json
  schedulearn simulate traces/pollux/workloads/workload-1.csv --policy las,goodput --plot jct.png
  schedulearn simulate traces/pollux/workloads-deadline/workload-1.csv --policy qoe,goodput,edf

A Pollux workload runs by default in the set-up it was published with: --cluster 16x4
--interval 60 --restart-penalty 30. The settings used are printed on stderr.

Resizing in place: --resize in-place makes every job ask for it, --launcher picks the launcher,
--in-place-penalty prices it (one figure, or per launcher); e.g. at the pauses measured with
Horovod Elastic (docs/benchmarks.md, "Resize in place"):
  schedulearn simulate traces/pollux/workloads/workload-1.csv --policy goodput \\
      --resize in-place --launcher horovod --in-place-penalty horovod=0.55
Policies learn a job's pause only as live: measured from its steps around each resize.

Policies learn of a job only what it reports (step times on placements it ran on, gradient
statistics, progress), as live; --estimates oracle feeds them the simulator's ground truth
instead, an upper bound for comparison.
"""


class UsageError(Exception):
    """Bad input on the command line: one line on stderr, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


IN_PLACE_FORMS = ("seconds >= 0 (every launcher), or LAUNCHER=S,... with LAUNCHER one of "
                  "horovod, torchrun (e.g. horovod=0.5,torchrun=1.5)")


def _in_place_penalty(text: str) -> float | dict[str, float]:
    """`--in-place-penalty`: one figure, or one per launcher (`horovod=0.5,torchrun=1.5`)."""
    from .model import IN_PLACE_LAUNCHERS

    def seconds(value: str) -> float:
        return _non_negative(value.strip())

    try:
        if "=" not in text:
            return seconds(text)
        out: dict[str, float] = {}
        for part in text.split(","):
            launcher, eq, value = part.partition("=")
            launcher = launcher.strip()
            if not eq or launcher not in IN_PLACE_LAUNCHERS or launcher in out:
                raise argparse.ArgumentTypeError("")
            out[launcher] = seconds(value)
        return out
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected {IN_PLACE_FORMS}, got {text!r}") from None


def _apply_resize(trace: list, resize: str | None, launcher: str | None) -> list:
    """`--resize` and `--launcher`: the same `resize` / `launcher` for every job of the trace."""
    if resize is None and launcher is None:
        return trace
    import dataclasses

    from .model import Launcher, Resize

    update: dict[str, Any] = {}
    if resize is not None:
        update["resize"] = Resize(resize)
    if launcher is not None:
        update["launcher"] = Launcher(launcher)
    return [dataclasses.replace(tj, spec=tj.spec.model_copy(update=update)) for tj in trace]


def _check_in_place(trace: list, penalty: float | dict[str, float] | None) -> None:
    """The jobs that resize in place and `--in-place-penalty` go together (a usage error else)."""
    from .sim.executor import in_place_penalty_for

    launchers = {tj.spec.launcher.value for tj in trace if tj.spec.in_place}
    if penalty is None:
        if launchers:
            raise UsageError(f"--in-place-penalty: required when jobs resize in place (--resize in-place): "
                             f"{IN_PLACE_FORMS}")
        return
    if not launchers:
        raise UsageError("--in-place-penalty: no job of the trace resizes in place (add --resize in-place)")
    if all(in_place_penalty_for(penalty, name) is None for name in launchers):
        raise UsageError(f"--in-place-penalty: no figure for launcher {', '.join(sorted(launchers))} of the "
                         "jobs that resize in place (add --launcher horovod or torchrun, or give one figure)")


def _penalty_text(penalty: float | dict[str, float]) -> str:
    if isinstance(penalty, dict):
        return ", ".join(f"{k} {v:g} s" for k, v in penalty.items())
    return f"{penalty:g} s"


# -- policies ------------------------------------------------------------------------------------
def cmd_policies(args: argparse.Namespace) -> int:
    from . import policies

    available = policies.available()
    if args.json:
        print(json.dumps(available, indent=2))
    else:
        _table([["policy", "description"]] + [[p["name"], p["description"]] for p in available])
    return 0


# -- simulate ------------------------------------------------------------------------------------
def cmd_simulate(args: argparse.Namespace) -> int:
    from . import policies
    from .model import parse_cluster
    from .sim.simulate import check_fits, simulate
    from .sim.traces import REFERENCE_SETTINGS, load_trace, trace_format

    names = list(policies.policy_classes())
    if args.policy == "all":
        chosen = names
    else:
        chosen = [p.strip() for p in args.policy.split(",")]
        for name in chosen:
            if name not in names:
                raise UsageError(f"policy: unknown {name!r}; available: {', '.join(names)}, all")
    try:
        trace = load_trace(args.trace, start=args.start, limit=args.limit)
    except (SpecError, ValueError) as e:  # readers' errors are one line: file:line: field: ...
        raise UsageError(str(e)) from None
    if not trace:
        raise UsageError(f"trace: no jobs in {args.trace}" + (" after --start" if args.start else ""))
    trace = _apply_resize(trace, args.resize, args.launcher)
    _check_in_place(trace, args.in_place_penalty)
    fmt = trace_format(args.trace)
    reference = REFERENCE_SETTINGS.get(fmt, {})
    cluster = args.cluster or reference.get("cluster")
    if cluster is None:
        raise UsageError("--cluster: required for rigid and Philly traces (H hosts x G GPUs, e.g. 8x8)")
    interval = args.interval if args.interval is not None else reference.get("interval")
    penalty = args.restart_penalty
    if penalty is None:
        penalty = reference.get("restart_penalty", 0.0)
    nodes = parse_cluster(cluster)
    plot = _plotter(args.plot) if args.plot else None
    given = {"cluster": args.cluster, "interval": args.interval, "restart_penalty": args.restart_penalty}
    defaulted = [f"--{k.replace('_', '-')}" for k in reference if given[k] is None]
    note = f" ({', '.join(defaulted)}: the {fmt} trace format's reference set-up)" if defaulted else ""
    check_fits(trace, nodes)  # (a SpecError: one line, exit 2)
    if not args.quiet:
        line = _settings_line(cluster, interval, args.tick, penalty, args.estimates)
        if args.in_place_penalty is not None:
            line += f", resize in place {_penalty_text(args.in_place_penalty)}"
        print(f"simulate: {line}{note}", file=sys.stderr, flush=True)
    results = []
    for name in chosen:
        shown = None if args.quiet else _Progress(name, len(trace))
        r = simulate(trace, nodes, name, interval=interval, tick=args.tick,
                     restart_penalty=penalty, record=bool(args.plot), estimates=args.estimates,
                     in_place_penalty=args.in_place_penalty, progress=shown)
        if shown is not None:
            shown.clear()
        results.append(r)
        if not args.quiet:
            print(f"simulate: {name}: {len(trace)} jobs, {r.rounds} rounds, {r.wall_s:.1f} s",
                  file=sys.stderr, flush=True)
    metrics = [{k: r.metrics[k] for k in RESULT_KEYS + DEADLINE_KEYS if k in r.metrics} for r in results]
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        _print_results(metrics, len(nodes), sum(len(n.gpus) for n in nodes))
    if plot is not None:
        try:
            plot(results, args.plot)
        except (OSError, RuntimeError, ValueError) as e:  # (the folder went away during the run;
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
            print(f"plot: cannot write {args.plot} ({reason}); the results above stand",  # a full
                  file=sys.stderr)  # disk; a format whose writer needs what is missing, e.g. LaTeX)
            return 1
        if not args.quiet:
            print(f"simulate: plot written to {args.plot}", file=sys.stderr)
    return 0


def _settings_line(cluster: str, interval: float | None, tick: float, penalty: float,
                   estimates: str = "reported") -> str:
    rounds = f"a round every {interval:g} s" if interval else "a round at every event"
    known = ("estimates from what jobs report" if estimates == "reported"
             else "estimates from the true job models (oracle: an upper bound)")
    return f"cluster {cluster}, {rounds}, tick {tick:g} s, restart penalty {penalty:g} s, {known}"


class _Progress:
    """`simulate: qoe: 57/160 jobs done, 5.2 h simulated, 31 s, ~55 s left` on stderr while a
    long simulation runs: rewritten in place on a terminal (at most twice a second), a line every
    `EVERY` seconds elsewhere (a CI log); nothing in its first seconds (short runs stay quiet).

    The time left is the slower of two paces: the whole run's, and the last third's (at least
    `WINDOW_S`). Jobs end fast while the queue drains and slowly in the tail, when a few long jobs
    run on for simulated weeks; the whole run's pace alone said `~0 s left` through a 10-s tail."""

    QUIET_S, EVERY, WINDOW_S = 2.0, 15.0, 3.0

    def __init__(self, policy: str, total: int) -> None:
        self.policy, self.total = policy, total
        self.tty = sys.stderr.isatty()
        self.began = time.perf_counter()
        self.last = self.began + self.QUIET_S - (0.5 if self.tty else self.EVERY)
        self.drawn = False
        self.seen: collections.deque[tuple[float, int]] = collections.deque([(self.began, 0)])

    def __call__(self, done: int, sim_s: float) -> None:
        now = time.perf_counter()
        self.seen.append((now, done))
        if now - self.last < (0.5 if self.tty else self.EVERY) or done >= self.total:
            return
        self.last, took = now, now - self.began
        left = self._left(now, done)
        line = (f"simulate: {self.policy}: {done}/{self.total} jobs done, {sim_s / 3600:.1f} h "
                f"simulated, {took:.0f} s, ~{left:.0f} s left")
        if self.tty:
            sys.stderr.write("\r" + line + "\033[K")
            self.drawn = True
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def _left(self, now: float, done: int) -> float:
        """Seconds left at the slower of the whole run's pace and the recent one's."""
        since = now - max(self.WINDOW_S, (now - self.began) / 3)
        while len(self.seen) > 1 and self.seen[1][0] <= since:
            self.seen.popleft()
        t0, done0 = self.seen[0]
        paces = [(now - self.began) / done]
        if done > done0:
            paces.append((now - t0) / (done - done0))
        return max(paces) * (self.total - done)

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _plotter(path: str):
    """`schedulearn.sim.plot.plot_results`, or a usage error saying what is missing or why the
    image could not be written to `path` — before the run, which may take minutes."""
    if importlib.util.find_spec("schedulearn.sim.plot") is None:
        raise UsageError("--plot: this installation has no schedulearn.sim.plot module")
    try:
        module = importlib.import_module("schedulearn.sim.plot")
    except ImportError as e:
        raise UsageError(f"--plot: needs {e.name or 'matplotlib'}: pip install 'schedulearn[plot]'") from None
    try:
        module.check_writable(path)
    except ValueError as e:
        raise UsageError(f"--{e}") from None
    return module.plot_results


def _print_results(rows: list[dict[str, Any]], hosts: int, gpus: int) -> None:
    head = ["policy", "jobs", "avg JCT s", "p50 JCT s", "p99 JCT s", "makespan s", "avg queue s", "GPU util"]
    body = [[r["policy"], str(r["jobs"]), *(f"{r[k]:,.0f}" for k in RESULT_KEYS[2:7]),
             f"{100 * r['gpu_utilization']:.1f}%"] for r in rows]
    if any("deadline_met" in r for r in rows):  # the trace has deadlines
        head += ["deadlines met", "avg tardiness s"]
        for r, line in zip(rows, body, strict=True):
            line += [f"{100 * r['deadline_met']:.1f}% of {r['deadline_jobs']}",
                     f"{r['avg_tardiness_s']:,.0f}"]
    print(f"{hosts} host{'s' if hosts != 1 else ''}, {gpus} GPU{'s' if gpus != 1 else ''}")
    _table([head] + body, right=range(1, len(head)))


def _table(rows: list[list[str]], right=()) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells).rstrip())


# -- the parser ----------------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    """The core's commands: `policies` and `simulate`."""
    p = subparsers.add_parser(
        "policies", help="list the scheduling policies",
        description="List the scheduling policies (built-in and from plugins).",
        epilog="examples:\n  schedulearn policies\n  schedulearn policies --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help='print [{"name", "description"}, ...]')
    p.set_defaults(func=cmd_policies)

    p = subparsers.add_parser(
        "simulate", help="replay a job trace under one or all policies",
        description="Replay a job trace through the real engine and policies on a virtual clock.",
        epilog=SIMULATE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="a trace CSV (rigid, Philly or Pollux workload)")
    p.add_argument("--policy", required=True, metavar="NAME",
                   help="a policy name, several separated by commas, or 'all'")
    p.add_argument("--cluster", metavar="HxG",
                   help="H hosts with G GPUs each, e.g. 4x8 (default for Pollux workloads: 16x4; "
                        "required for other traces)")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per policy")
    p.add_argument("--start", metavar="ISO", help="Philly only: skip jobs submitted before this time")
    p.add_argument("--limit", type=_positive(int), metavar="N", help="keep only the first N jobs")
    p.add_argument("--interval", type=_positive(float), metavar="S",
                   help="schedule only every S seconds (default for Pollux workloads: 60; "
                        "otherwise at every event)")
    p.add_argument("--tick", type=_positive(float), default=60.0, metavar="S",
                   help="how often time-driven policies (las) look again while jobs wait (default 60)")
    p.add_argument("--restart-penalty", type=_non_negative, metavar="S",
                   help="seconds without progress after each preemption or resize (default for Pollux "
                        "workloads: 30; otherwise 0)")
    p.add_argument("--in-place-penalty", type=_in_place_penalty, metavar="S|LAUNCHER=S,...",
                   help="seconds without progress after a resize in place of a job that asks for one "
                        "(resize: in-place): one figure, or one per launcher, e.g. horovod=0.5,torchrun=1.5 "
                        "(jobs of other launchers restart); starts, preemptions and other resizes cost "
                        "--restart-penalty")
    p.add_argument("--resize", choices=("restart", "in-place"),
                   help="how every job of the trace is resized (its spec's resize: checkpoint-restart "
                        "or in place); default: as the trace says (restart)")
    p.add_argument("--launcher", choices=("python", "torchrun", "horovod"),
                   help="the launcher every job of the trace runs with (what --in-place-penalty's "
                        "per-launcher figures go by); default: as the trace says (python)")
    p.add_argument("--estimates", choices=("reported", "oracle"), default="reported",
                   help="what policies learn of a job: what it reports, as live (default), or the "
                        "simulator's ground truth (oracle: an upper bound, not what a live job gives)")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the results into an image (the format "
                   "follows the suffix: .png, .svg, .pdf, ...; PNG where there is none)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="nothing on stderr but errors: no settings line, no progress, no summary lines")
    p.set_defaults(func=cmd_simulate)


def build_parser() -> Parser:
    parser = Parser(
        prog="schedulearn",
        description="Schedule deep-learning training on shared GPUs; simulate policies on traces.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"schedulearn {__version__}")
    subparsers = parser.add_subparsers(dest="command_name", metavar="COMMAND")
    register(subparsers)
    client_cli.register(subparsers)
    for name in EXTENSIONS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # an optional part that is not installed (no Jupyter): its commands are absent
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(deadlines.attach_values(sys.argv[1:] if argv is None else argv))
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args) or 0
    except (UsageError, SpecError) as e:
        print(str(e).splitlines()[0] if str(e) else type(e).__name__, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
