"""How often one-host `torchrun` jobs fail at start, with and without
`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, when ephemeral ports are scarce.

With the variable set, torch's agent picks the workers' store port by binding port 0 and closing
the socket (`torch.distributed.elastic.utils.distributed.get_free_port`); rank 0 binds it again
later, and any socket of the host can take the port in between (`EADDRINUSE`, or a rank that
connects to another job's store and hangs). On an ordinary host this is rare (about one torchrun
job in 180 of the test suite); narrowing the ephemeral port range (`--ports`, root only: it writes
`/proc/sys/net/ipv4/ip_local_port_range`, restored at the end) makes it frequent, so the two
settings can be compared side by side. Schedulearn's launcher leaves the variable unset for
one-host jobs (`schedulearn.executors.launch`): the workers share the agent's rendezvous store.

    .venv/bin/python benchmarks/bench_torchrun_ports.py --jobs 36 --parallel 3 --ports 61

Each job: `torchrun --standalone --nproc-per-node 2` of a gloo program (20 all-reduces).
"""

from __future__ import annotations

import argparse
import os
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


def one(script: Path, share: bool, timeout: float) -> str:
    """'ok', 'EADDRINUSE', 'hung' or 'failed' for one torchrun job."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"}
    if not share:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            "--rdzv-conf=last_call_timeout=1", str(script)]
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hung"
    if p.returncode == 0:
        return "ok"
    return "EADDRINUSE" if "EADDRINUSE" in p.stderr + p.stdout else "failed"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=36, help="jobs per setting (default 36)")
    ap.add_argument("--parallel", type=int, default=3, help="jobs at a time (default 3)")
    ap.add_argument("--ports", type=int, default=0,
                    help="narrow the ephemeral port range to this many ports from 40000 (root; 0: leave it)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a job counts as hung")
    args = ap.parse_args()
    old = RANGE.read_text() if args.ports else None
    if args.ports:
        RANGE.write_text(f"40000 {40000 + args.ports - 1}\n")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "train.py"
            script.write_text(PROGRAM)
            settings = ((False, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"), (True, "shared store (unset)"))
            for share, label in settings:
                t0 = time.monotonic()
                with ThreadPoolExecutor(args.parallel) as pool:
                    got = list(pool.map(one, [script] * args.jobs, [share] * args.jobs,
                                        [args.timeout] * args.jobs))
                bad = {k: got.count(k) for k in ("EADDRINUSE", "hung", "failed") if got.count(k)}
                print(f"{label:40s} {args.jobs - got.count('ok'):3d} of {args.jobs} failed {bad or ''}"
                      f"  ({time.monotonic() - t0:.0f} s)", flush=True)
    finally:
        if old is not None:
            RANGE.write_text(old)
    print(f"ports: {args.ports or 'unchanged'}, {args.parallel} at a time, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
