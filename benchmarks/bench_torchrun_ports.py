"""How often `torchrun` jobs fail at start, with and without
`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, when ephemeral ports are scarce.

With the variable set, torch's agent picks the workers' store port by binding port 0 and closing
the socket (`torch.distributed.elastic.utils.distributed.get_free_port`); rank 0 binds it again
later, and any socket of the host can take the port in between (`EADDRINUSE`, or a rank that
connects to another job's store and hangs). On an ordinary host this is rare (about one torchrun
job in 180 of the test suite); narrowing the ephemeral port range (`--ports`, root only: it writes
`/proc/sys/net/ipv4/ip_local_port_range`, restored at the end) makes it frequent, so the two
settings can be compared side by side. Schedulearn's launcher leaves the variable unset
(`schedulearn.executors.launch`; for jobs spread over hosts since 2026-11-27): the workers share
the rank-0 agent's store.

    .venv/bin/python benchmarks/bench_torchrun_ports.py --jobs 36 --parallel 3 --ports 61

Each job: `torchrun --standalone --nproc-per-node 2` of a gloo program (20 all-reduces).

`--nodes 2`: two-node jobs instead, as the launcher starts a job spread over hosts (one torchrun
agent per node, `--nnodes 2 --node-rank r --rdzv-backend c10d`, the rendezvous on a port picked
from the Slurm executor's `RDZV_PORTS`, as it does); both nodes on this host, as in the Slurm test
cluster, one GPU's worth of work each. Until 2026-11-27 these kept the variable set.

`--in-place`: jobs resized in place instead (`schedulearn.executors.torchrun_elastic`'s
supervisor, one elastic agent per GPU, 2 GPUs). Their agents' rounds keep the variable set, so
two ports are picked: the rendezvous store's, by the supervisor, and each round's workers' store,
by the rank-0 agent. `--settings` (comma-separated) compares how:

* `let-go`: the rendezvous port picked by binding and closing a socket (free again for the
  seconds the slot-0 agent imports torch) and torch's bind-and-close pick of the workers' port
  (until 2026-11-26);
* `held`: the rendezvous port held (the supervisor's listening socket handed to the store), the
  workers' port torch's pick (2026-11-26);
* `outside`: held, and the workers' port picked outside the ephemeral range, checked free
  (`torchrun_elastic.store_port`: what it does now).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PROGRAM = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1000)
for _ in range(20):
    dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
"""


def _env(share: bool) -> dict[str, str]:
    """This environment, with `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` unless `share`."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
    if not share:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return env


def one(script: Path, share: bool, timeout: float) -> str:
    """'ok', 'EADDRINUSE', 'hung' or 'failed' for one torchrun job."""
    env = _env(share)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            "--rdzv-conf=last_call_timeout=1", str(script)]
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hung"
    if p.returncode == 0:
        return "ok"
    return "EADDRINUSE" if "EADDRINUSE" in p.stderr + p.stdout else "failed"


def one_two_nodes(script: Path, share: bool, timeout: float) -> str:
    """'ok', 'EADDRINUSE', 'hung' or 'failed' for one job of two torchrun nodes on this host,
    started as `schedulearn.executors.launch` starts a job spread over two hosts."""
    from schedulearn.executors.slurm import RDZV_PORTS

    env = _env(share)
    port, run_id = random.randrange(*RDZV_PORTS), f"bench-{random.getrandbits(48):x}"
    with tempfile.TemporaryDirectory() as tmp:
        procs, logs = [], []
        for rank in range(2):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={rank}",
                    "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                    f"--rdzv-id={run_id}", "--rdzv-conf=last_call_timeout=1", "--local-addr=127.0.0.1",
                    str(script)]
            logs.append(Path(tmp, f"node{rank}.log"))
            with logs[-1].open("w") as f:
                procs.append(subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        end = time.monotonic() + timeout
        try:
            for p in procs:
                p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                if p.poll() is None:
                    _stop(p)
            return "hung"
        out = "".join(log.read_text() for log in logs)
    if all(p.returncode == 0 for p in procs):
        return "ok"
    return "EADDRINUSE" if "EADDRINUSE" in out else "failed"


#: the supervisor as it was before 2026-11-26 (with `LET_GO`): the rendezvous port picked, then let
#: go until the slot-0 agent binds it; and until 2026-11-27 (with `TORCH_PICK`): the agents' own
#: pick of their workers' store port (torch binding port 0 and closing the socket)
SUPERVISOR = """\
import sys
from schedulearn.executors import torchrun_elastic as t
if {let_go}:
    init = t.Supervisor.__init__
    def picked_and_let_go(self, *args):
        init(self, *args)
        self.listener.close()
        self.listener = None
    t.Supervisor.__init__ = picked_and_let_go
if {torch_pick}:
    t.SCRIPT = {agent!r}
t.main(sys.argv[1:])
"""
#: an agent with torch's own pick of its workers' store port
TORCH_PICK_AGENT = """\
import sys
from schedulearn.executors import torchrun_elastic as t
t._pick_store_ports_outside_ephemeral = lambda: None
t.main(sys.argv[1:])
"""
#: the in-place settings: (rendezvous port let go, torch's pick of the workers' store port), label
IN_PLACE = {"let-go": ((True, True), "rendezvous port let go, torch's pick"),
            "held": ((False, True), "rendezvous port held, torch's pick"),
            "outside": ((False, False), "held, workers' port outside ephemeral")}


def one_in_place(script: Path, setting: tuple[bool, bool], timeout: float) -> str:
    """'ok', 'EADDRINUSE (rendezvous)', "EADDRINUSE (workers' store)", 'hung' or 'failed' for one
    job under the in-place supervisor; `setting`: (rendezvous port let go, torch's pick)."""
    from schedulearn.executors import torchrun_elastic

    let_go, torch_pick = setting
    with tempfile.TemporaryDirectory() as job_dir:
        Path(job_dir, torchrun_elastic.GPUS_FILE).write_text("0,1\n")
        env = dict(os.environ, SCHEDULEARN_JOB_DIR=job_dir)
        agent = Path(job_dir, "agent.py")
        agent.write_text(TORCH_PICK_AGENT)
        head = ["-c", SUPERVISOR.format(let_go=let_go, torch_pick=torch_pick, agent=str(agent))]
        argv = [sys.executable, "-u", *head, "supervise", "--job-dir", job_dir, "--nnodes", "1:2", "--",
                sys.executable, str(script)]
        log = Path(job_dir, "log")
        with log.open("w") as f:  # a file, not a pipe: a stray worker cannot hold it open
            p = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop(p)
                return "hung"
        out = log.read_text()
    if p.returncode == 0:
        return "ok"
    if "EADDRINUSE" not in out:
        return "failed"
    return "EADDRINUSE (rendezvous)" if "c10d_rendezvous_backend" in out else "EADDRINUSE (workers' store)"


def _stop(p: subprocess.Popen) -> None:
    """Stop a hung job as the executor does: SIGTERM to its process group (the supervisor passes
    it on; workers forked by the prewarm server are in sessions of their own), then SIGKILL."""
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=36, help="jobs per setting (default 36)")
    ap.add_argument("--parallel", type=int, default=3, help="jobs at a time (default 3)")
    ap.add_argument("--ports", type=int, default=0,
                    help="narrow the ephemeral port range to this many ports from 40000 (root; 0: leave it)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a job counts as hung")
    ap.add_argument("--nodes", type=int, choices=(1, 2), default=1,
                    help="2: jobs of two torchrun nodes on this host, as spread over hosts (default 1)")
    ap.add_argument("--in-place", action="store_true",
                    help="jobs resized in place (the ports picked as before and as now: see --settings)")
    ap.add_argument("--settings", default="held,outside",
                    help=f"with --in-place, which of {','.join(IN_PLACE)} (default held,outside)")
    args = ap.parse_args()
    old = RANGE.read_text() if args.ports else None
    if args.ports:
        RANGE.write_text(f"40000 {40000 + args.ports - 1}\n")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "train.py"
            script.write_text(PROGRAM)
            if args.in_place:
                names = [n for n in args.settings.split(",") if n]
                unknown = sorted(set(names) - set(IN_PLACE))
                if unknown:
                    ap.error(f"--settings: unknown {', '.join(unknown)} (allowed: {', '.join(IN_PLACE)})")
                run, settings = one_in_place, [IN_PLACE[n] for n in names]
            else:
                run = one_two_nodes if args.nodes == 2 else one
                settings = ((False, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"), (True, "shared store (unset)"))
            for flag, label in settings:
                t0 = time.monotonic()
                with ThreadPoolExecutor(args.parallel) as pool:
                    got = list(pool.map(run, [script] * args.jobs, [flag] * args.jobs,
                                        [args.timeout] * args.jobs))
                bad = {k: got.count(k) for k in sorted(set(got) - {"ok"})}
                print(f"{label:40s} {args.jobs - got.count('ok'):3d} of {args.jobs} failed {bad or ''}"
                      f"  ({time.monotonic() - t0:.0f} s)", flush=True)
                subprocess.run(["pkill", "-KILL", "-f", str(script)], check=False)  # strays of hung jobs
    finally:
        if old is not None:
            RANGE.write_text(old)
    print(f"ports: {args.ports or 'unchanged'}, {args.parallel} at a time, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
