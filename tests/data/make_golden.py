"""Record the decisions (start, end, restarts of every job) of the engine on fixed scenarios.

`tests/test_engine.py::test_decisions_match_golden` replays the same scenarios and compares, so
that speed work on the engine provably leaves decisions unchanged. Regenerate only when a
decision change is intended (and say why in the commit):

    PYTHONPATH=scheduler python tests/data/make_golden.py > tests/data/golden.json
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scheduler"))

from schedulearn.model import JobSpec, virtual_cluster  # noqa: E402
from schedulearn.policies.las import LeastAttainedService  # noqa: E402
from schedulearn.sim.simulate import simulate  # noqa: E402
from schedulearn.sim.traces import TraceJob, load_trace  # noqa: E402

POLICIES = ("fifo", "elastic-fifo", "round-robin", "las")
PHILLY = Path(__file__).resolve().parents[2] / "traces" / "philly.csv"


def random_trace(seed: int, n: int, max_gpus: int) -> list[TraceJob]:
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(1 / 300)
        g = rng.choice([1, 1, 1, 2, 2, 4, 8][: 3 + max_gpus.bit_length()])
        g = min(g, max_gpus)
        extra = {}
        if i % 4 == 0:
            extra["max_gpus"] = min(max_gpus, 2 * g)
        if i % 7 == 0:
            extra["priority"] = 1
        spec = JobSpec(name=f"r{i}", gpus=g, duration=round(rng.uniform(60, 20_000)), **extra)
        out.append(TraceJob(round(t), spec, f"random:{i}"))
    return out


def scenarios():
    for seed, hosts, gpus in ((1, 2, 4), (2, 3, 8), (3, 1, 8)):
        yield f"random-{seed}-{hosts}x{gpus}", random_trace(seed, 200, gpus), hosts, gpus
    if PHILLY.is_file():
        yield "philly-800-8x8", load_trace(PHILLY, limit=800), 8, 8


class ShortLas(LeastAttainedService):
    """LAS with a 1 GPU-hour threshold, so that demotions happen in short scenarios."""

    threshold = 3600.0


def decisions(trace, hosts, gpus, policy, **kw):
    r = simulate(trace, virtual_cluster(hosts, gpus), policy, **kw)
    return [[j.id, j.start_time, j.end_time, j.restarts] for j in sorted(r.jobs, key=lambda j: j.id)]


def main() -> None:
    out = {}
    for name, trace, hosts, gpus in scenarios():
        for policy in POLICIES:
            out[f"{name}/{policy}"] = decisions(trace, hosts, gpus, policy)
        out[f"{name}/las-1h"] = decisions(trace, hosts, gpus, ShortLas())
        if name.startswith("random"):
            for policy in ("fifo", "elastic-fifo"):
                out[f"{name}/{policy}/interval-60"] = decisions(trace, hosts, gpus, policy, interval=60.0)
            switch_at = trace[len(trace) // 2].submit_time
            for a, b in (("fifo", "las"), ("las", "round-robin")):
                actions = [(switch_at, lambda e, b=b: e.set_policy(b))]
                out[f"{name}/{a}-then-{b}"] = decisions(trace, hosts, gpus, a, actions=actions)
    json.dump(out, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
