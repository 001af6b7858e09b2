"""The same trace gives the same simulation on every machine: the throughput fit (and so every
estimate and decision fed by it) does not depend on which BLAS kernel numpy's OpenBLAS picks for
the processor. Before, the fit's last bits did, and the chaos of a resizing policy turned them
into other figures (qoe met 81.9 % of workload 4's deadlines with one kernel, 83.1 % with another).

Each check runs the same code in two interpreters, one forced onto OpenBLAS's oldest x86 kernel
and one onto its Haswell kernel (FMA: other rounding), and compares the outputs exactly."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PROBE = r'''
import sys
sys.path.insert(0, sys.argv[1])
from schedulearn.estimates.throughput import fit
obs = []
for i, (k, r, m, a) in enumerate([(1, 1, 32, 0), (1, 2, 32, 0), (1, 4, 64, 0), (2, 8, 64, 1),
                                  (1, 4, 16, 0), (4, 16, 32, 0), (2, 6, 48, 0)]):
    t = (0.02 + 0.001 * m) * (a + 1) + (0.0 if r == 1 else (0.01 + 0.002 * r) * (3 if k > 1 else 1))
    obs.append((k, r, m, a, t * (1 + 0.03 * ((i * 7) % 5 - 2)), None))  # noisy step times
print(repr(fit(obs)))
if len(sys.argv) > 2:  # a short simulation: every job's end
    from pathlib import Path
    from schedulearn.model import parse_cluster
    from schedulearn.sim.simulate import simulate
    from schedulearn.sim.traces import load_trace
    trace = load_trace(Path(sys.argv[2]))[:40]
    r = simulate(trace, parse_cluster("16x4"), "qoe", interval=60, restart_penalty=30)
    print(sorted((j.id, j.end_time, j.restarts) for j in r.jobs))
'''


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def _run(core: str, *args: str) -> str:
    env = {**os.environ, "OPENBLAS_CORETYPE": core, "OPENBLAS_VERBOSE": "2"}
    env.pop("OPENBLAS_L2_SIZE", None)
    r = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "scheduler"), *args], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    if f"Core: {core}" not in r.stdout + r.stderr:
        pytest.skip(f"numpy's BLAS did not take OPENBLAS_CORETYPE={core} (not OpenBLAS, or no such kernel)")
    return "\n".join(ln for ln in r.stdout.splitlines() if not ln.startswith("Core:"))


@pytest.fixture(scope="module")
def kernels() -> tuple[str, str]:
    if platform.machine() not in ("x86_64", "AMD64") or not {"avx2", "fma"} <= _cpu_flags():
        pytest.skip("needs an x86-64 processor with AVX2 and FMA (OpenBLAS's Haswell kernel)")
    return "Katmai", "Haswell"


def test_the_throughput_fit_is_the_same_whichever_blas_kernel_runs(kernels):
    old, fma = kernels
    a, b = _run(old), _run(fma)
    assert a.startswith("PerfParams(") and a == b


def test_a_simulation_is_the_same_whichever_blas_kernel_runs(kernels, traces: Path):
    old, fma = kernels
    trace = str(traces / "pollux" / "workloads-deadline" / "workload-4.csv")
    a, b = _run(old, trace), _run(fma, trace)
    assert a.count("\n") == 1 and a == b
