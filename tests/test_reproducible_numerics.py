"""The same trace gives the same simulation on every machine: the throughput fit, the speed-up
curves and the simulated jobs (and so every estimate and decision fed by them) depend neither on
which BLAS kernel numpy's OpenBLAS picks for the processor nor on which of its own SIMD loops
numpy picks for exp, log and power. Before, their last bits did, and the chaos of a resizing
policy turned them into other figures (qoe met 81.9 % of workload 4's deadlines with one BLAS
kernel, 83.1 % with another; goodput's average JCT on Pollux workload 3 was 2,121 s with numpy's
AVX-512 loops, 2,172 s without).

Each check runs the same code in two interpreters, one forced onto the older code path (OpenBLAS's
oldest x86 kernel; numpy's baseline loops) and one on what this processor gets (OpenBLAS's Haswell
kernel with FMA; numpy's dispatched loops), and compares the outputs exactly."""

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


def _run(core: str, *args: str, env: dict[str, str] | None = None) -> str:
    env = {**os.environ, **(env or {}), "OPENBLAS_CORETYPE": core, "OPENBLAS_VERBOSE": "2"}
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


def _dispatched() -> list[str]:
    """numpy's optional SIMD targets this processor runs (its loops for exp, log, power, ...)."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as umath
    features = getattr(umath, "__cpu_features__", {})
    return [t for t in getattr(umath, "__cpu_dispatch__", []) if features.get(t)]


@pytest.fixture(scope="module")
def simd() -> dict[str, str]:
    targets = _dispatched()
    if not targets:
        pytest.skip("numpy runs only its baseline loops on this processor: nothing to compare")
    env = {"NPY_DISABLE_CPU_FEATURES": " ".join(targets)}
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "from tests.test_reproducible_numerics import _dispatched; print(_dispatched())")
    r = subprocess.run([sys.executable, "-c", probe, str(ROOT)], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr  # really off there
    return env


def test_a_simulation_is_the_same_with_or_without_numpys_simd_loops(simd, traces: Path):
    trace = str(traces / "pollux" / "workloads-deadline" / "workload-4.csv")
    core = "Haswell" if {"avx2", "fma"} <= _cpu_flags() else "Katmai"
    native, baseline = _run(core, trace), _run(core, trace, env=simd)
    assert native.startswith("PerfParams(") and native.count("\n") == 1 and native == baseline


def test_the_portable_functions_are_the_c_librarys_elementwise_and_numpys_out_of_domain():
    import math

    import numpy as np
    from schedulearn.estimates import libm

    x = np.linspace(-30.0, 30.0, 2001)
    y = np.geomspace(1e-6, 1e6, 2001)
    assert libm.exp(x).tolist() == [math.exp(v) for v in x.tolist()]
    assert libm.log(y).tolist() == [math.log(v) for v in y.tolist()]
    assert libm.power(y, 1.37).tolist() == [math.pow(v, 1.37) for v in y.tolist()]
    assert libm.power(y[:, None], np.array([0.5, 2.0])).shape == (2001, 2)  # broadcasts
    assert libm.exp(2.0).shape == () and float(libm.exp(2.0)) == math.exp(2.0)
    with np.errstate(all="ignore"):  # out of the domain: as numpy answers
        for ours, theirs in ((libm.exp([1e4, -1e4]), np.exp([1e4, -1e4])),
                             (libm.log([0.0, -1.0, math.inf]), np.log([0.0, -1.0, math.inf])),
                             (libm.power([0.0, -2.0, 1e300], [-1.0, 0.5, 3.0]),
                              np.power([0.0, -2.0, 1e300], [-1.0, 0.5, 3.0]))):
            assert np.array_equal(ours, theirs, equal_nan=True), (ours, theirs)
    for lo, hi, n in ((3, 4096, 50), (32, 33, 50), (1, 1e6, 7), (5, 5, 2)):
        g = libm.geomspace(lo, hi, n)
        assert len(g) == n and g[0] == lo and g[-1] == hi and np.all(np.diff(g) >= 0)
        assert np.allclose(g, np.geomspace(lo, hi, n), rtol=1e-14, atol=0)
