"""scripts/gpu-check.sh (docs/gpu-check.md) in its CPU mode, against this environment.

`--cpu --venv <this venv>` installs nothing and runs the whole pipeline that does not need CUDA
on 2 virtual GPUs: a real Jupyter server with the extension, a `%%schedulearn --gpus 1` cell in a
kernel started by that server, two concurrent 1-GPU jobs, an elastic training job resized 2 -> 1
by elastic-fifo through the REST API (checkpoint-restart; `--train-launcher python`, one process:
torchrun's own resize on CPU is tests/test_elastic_resize.py's), the `gpus` route while a job runs, and
the launch timings. The GPU-only checks must say SKIP with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, require

SCRIPT = ROOT / "scripts" / "gpu-check.sh"
LINE = re.compile(r"^(PASS|FAIL|SKIP) ([a-z0-9-]+): (.+)$")
TIME = re.compile(r"^TIME (.+): median ([\d.]+) s \(min [\d.]+, max [\d.]+, n=(\d+)\)$")


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def run(*args: str, timeout: float = 480) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULEARN_")}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


@pytest.mark.slow
def test_cpu_mode_runs_every_check_that_needs_no_gpu_and_skips_the_others() -> None:
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")
    steps = 8
    r = run("--cpu", "--venv", sys.prefix, "--repeat", "2", "--train-steps", str(steps),
            "--step-sleep", "0.1", "--train-launcher", "python")
    out = r.stdout.splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    assert out[0].startswith("schedulearn gpu-check: CPU with 2 virtual GPUs (--cpu given)"), out[0]
    checks = {m[2]: (m[1], m[3]) for m in map(LINE.match, out) if m}
    assert list(checks) == ["nvml-inventory", "mig-devices", "cell-cuda-matmul", "concurrent-jobs",
                            "torchrun-nccl", "checkpoint-restart", "monitor-statistics", "busy-gpu",
                            "gpus-route", "gpu-utilisation", "launch-timing"], out
    status = {name: s for name, (s, _) in checks.items()}
    assert status == {"nvml-inventory": "SKIP", "mig-devices": "SKIP", "cell-cuda-matmul": "PASS",
                      "concurrent-jobs": "PASS", "torchrun-nccl": "SKIP", "checkpoint-restart": "PASS",
                      "monitor-statistics": "PASS", "busy-gpu": "SKIP", "gpus-route": "PASS",
                      "gpu-utilisation": "SKIP",
                      "launch-timing": "PASS"}, out
    for name in ("nvml-inventory", "mig-devices", "torchrun-nccl", "busy-gpu", "gpu-utilisation"):
        assert "--cpu given" in checks[name][1], checks[name]  # a SKIP says why
    cell = checks["cell-cuda-matmul"][1]
    assert re.search(r"on virtual GPU \d: 1024x1024 float64 matmul on cpu, checksum -?[\d.]+ matches the CPU",
                     cell), cell
    concurrent = checks["concurrent-jobs"][1]
    assert re.search(r"ran at once on virtual GPU (\d) and virtual GPU (?!\1)\d", concurrent), concurrent
    restart = checks["checkpoint-restart"][1]
    assert "python job" in restart and "resized 2 -> 1 GPUs by elastic-fifo" in restart, restart
    assert f"steps 1..{steps} continuous" in restart and "final weights match" in restart, restart
    monitor = checks["monitor-statistics"][1]
    assert re.search(r"on cpu: \|g\|\^2 [+-]\d+\.\d%, per-sample variance [+-]\d+\.\d% off their "
                     r"analytic values over 1500 steps of 2 micro-batches; progress 1 in the REST API",
                     monitor), monitor
    times = [m for m in map(TIME.match, out) if m]
    assert [m[1] for m in times] == [
        "submit->first log line (CPU, virtual GPU)",
        "launch overhead, submit->job's first statement (CPU, virtual GPU)",
        "submit->job succeeded, 1-GPU probe job (CPU, virtual GPU)"], out
    assert all(m[3] == "2" and 0 < float(m[2]) < 60 for m in times), out
    passed, skipped = list(status.values()).count("PASS"), list(status.values()).count("SKIP")
    assert out[-1] == f"{passed} passed, 0 failed, {skipped} skipped", out
    work = Path(re.search(r"work folder (\S+)$", out[0])[1])
    assert not work.exists()  # removed after a run without failures


def test_nvidia_smi_listing_is_parsed_with_mig_devices_under_their_gpu() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    text = (  # nvidia-smi -L of a machine with MIG on its first GPU (driver 535 format)
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
        "  MIG 1g.5gb      Device  1: (UUID: MIG-0fe7b3a4-ff3e-5d1c-9b8f-3a1e7c0d2b11)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-aa1c0f6e-7d7b-8c1a-2f0e-1b2c3d4e5f60)\n")
    gpus = gpu_check.parse_smi(text)
    assert [(g.index, g.name, g.uuid, g.migs) for g in gpus] == [
        (0, "NVIDIA A100-SXM4-40GB", "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
         ["MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "MIG-0fe7b3a4-ff3e-5d1c-9b8f-3a1e7c0d2b11"]),
        (1, "NVIDIA A100-SXM4-40GB", "GPU-aa1c0f6e-7d7b-8c1a-2f0e-1b2c3d4e5f60", [])]
    assert gpu_check.parse_smi("No devices were found\n") == []


def test_bad_arguments_are_one_line_errors() -> None:
    r = run("--venv", "/nonexistent/venv", timeout=30)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --venv: /nonexistent/venv/bin/python not found (expected an existing virtualenv)"]
    r = run("--venv", sys.prefix, "--repeat", "0", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].endswith("--repeat: expected an integer >= 1, got 0"), r.stderr
