"""`schedulearn.elastic.Monitor` with real torch jobs on CPU: the gradient statistics it
measures against their analytic values (one process, gradient accumulation, DDP under torchrun,
Horovod), the batch size it adapts, its learning-rate rules, and its state across a
checkpoint-restart that changes the world size.

The job (tests/jobs/gns_train.py) is linear regression with known gradient statistics: with the
weights frozen (learning rate 0) the squared norm of the true gradient is |delta|^2 and the
per-sample variance is S = (D + 1)|delta|^2 + D sigma^2 exactly. The Monitor's estimates are
unbiased; averaged over ~1000 steps (smoothing 0.998) they are within a few per cent; the
tolerance is 10 %. The runs are seeded: each gives the same numbers every time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedulearn.executors.launch import RUNNER

from tests.conftest import require

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jobs" / "gns_train.py"
BIN = Path(sys.executable).parent
TOLERANCE = 0.10
# The jobs run through the job runner (RUNNER), as the launchers run them: it ends a gloo rank
# cleanly (a rank that finalises with a live process group aborts at exit now and then).


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _wait(p: subprocess.Popen, timeout: float, what: str) -> tuple[str, str]:
    """The process's output once it ends; past `timeout` SIGTERM first (torchrun and horovodrun
    pass it to their workers), SIGKILL 20 s later, and an AssertionError saying `what`."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        raise AssertionError(f"{what}\n{out[-2000:]}{(err or '')[-2000:]}") from None


def _run(argv: list[str], tmp_path: Path, **env: object) -> dict:
    e = {**os.environ, "PYTHONPATH": f"{ROOT / 'scheduler'}{os.pathsep}{ROOT}",
         "SCHEDULEARN_JOB_DIR": str(tmp_path), **{k: str(v) for k, v in env.items()}}
    p = subprocess.Popen(argv, cwd=tmp_path, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = _wait(p, 300, f"timed out: {argv}")
    assert p.returncode == 0, out[-3000:] + err[-3000:]
    lines = [line[line.index("{"):] for line in out.splitlines() if "{" in line]
    return json.loads(lines[-1])


def _read(path: Path) -> list[dict]:
    """The complete lines of a metrics.jsonl being written."""
    try:
        lines = path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.endswith("\n")]


def _reports(job_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]


def _torchrun(n: int) -> list[str]:
    """One-host torchrun as the launcher builds it (`schedulearn.executors.launch`)."""
    return [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={n}",
            "--rdzv-conf=last_call_timeout=1", RUNNER, str(JOB)]


def _check_stats(out: dict) -> None:
    assert out["sqr"] == pytest.approx(out["true_sqr"], rel=TOLERANCE), out
    assert out["var"] == pytest.approx(out["true_var"], rel=TOLERANCE), out


def test_statistics_on_one_process_from_consecutive_steps(tmp_path):
    """One gradient a step: the previous step's gradient is the second sample."""
    require(_has("torch"), "torch is not installed")
    out = _run([sys.executable, RUNNER, str(JOB)], tmp_path, STEPS=1500, B0=16)
    assert (out["world"], out["accum_steps"], out["micro_batch"]) == (1, 0, 16)
    _check_stats(out)
    # no report fell due in the run (every 1e9 s): the step that completed the work reported
    # itself, so the run's last stretch reaches the scheduler before the job exits
    [last] = _reports(tmp_path)
    assert (last["progress"], last["step"], last["batch_size"]) == (1, 1500, 16)
    assert last["step_time"] > 0 and last["grad_var"] > 0


def test_statistics_from_accumulated_micro_batches(tmp_path):
    """B = 32 with micro-batches of at most 8: four gradients a step, each of 8 samples."""
    require(_has("torch"), "torch is not installed")
    out = _run([sys.executable, RUNNER, str(JOB)], tmp_path, STEPS=800, B0=32, MAXLOCAL=8)
    assert (out["accum_steps"], out["micro_batch"]) == (3, 8)
    _check_stats(out)


def test_statistics_from_ddp_replicas(tmp_path):
    """torchrun, 2 processes (gloo): each replica's local gradient (before the all-reduce) and
    their mean."""
    require(_has("torch"), "torch is not installed")
    out = _run(_torchrun(2), tmp_path, STEPS=800, B0=16)
    assert (out["world"], out["micro_batch"]) == (2, 8)
    _check_stats(out)


def test_statistics_from_horovod_replicas(tmp_path):
    require(_has("horovod.torch") and shutil.which("horovodrun", path=str(BIN)),
            "horovod is not installed (scripts/setup.sh builds it)")
    argv = [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", "--network-interface", "lo",
            sys.executable, RUNNER, str(JOB)]
    out = _run(argv, tmp_path, STEPS=800, B0=16)
    assert (out["world"], out["micro_batch"]) == (2, 8)
    _check_stats(out)


def test_horovod_replicas_accumulating_micro_batches(tmp_path):
    """B = 32, micro-batches of at most 8, 2 Horovod workers: two backward passes a step. Horovod's
    optimizer all-reduces once per `backward_passes_per_step` passes and refuses more; the
    Monitor sets it (an adaptive job on one GPU under Horovod Elastic accumulating two
    micro-batches failed live: "Gradients were computed more than backward_passes_per_step
    times")."""
    require(_has("horovod.torch") and shutil.which("horovodrun", path=str(BIN)),
            "horovod is not installed (scripts/setup.sh builds it)")
    argv = [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", "--network-interface", "lo",
            sys.executable, RUNNER, str(JOB)]
    out = _run(argv, tmp_path, STEPS=800, B0=32, MAXLOCAL=8)
    assert (out["world"], out["accum_steps"], out["micro_batch"]) == (2, 1, 8)
    _check_stats(out)


@pytest.mark.parametrize("adaptive", [False, True])
def test_horovod_elastic_ranks_follow_a_resize_in_place(tmp_path, adaptive):
    """Horovod Elastic grows a running job 1 -> 2 workers, then shrinks it back (a host-discovery
    script, as the local executor runs it): rank 0 keeps its process and its Monitor, the worker
    that joins starts a new one. At their first use after the resize both take rank 0's state
    and the new world's share of the batch, step after step the same on both ranks; before, rank
    0 went on with the whole batch while the new worker took half, and the job hung at its next
    all-reduce (seen live under `--gpus auto --resize in-place`). With `adaptive` the ranks pick
    their batch size together (alone again, rank 0 accumulates two micro-batches a step where its
    batch grew: `test_horovod_replicas_accumulating_micro_batches`)."""
    require(_has("horovod.torch") and shutil.which("horovodrun", path=str(BIN)),
            "horovod is not installed (scripts/setup.sh builds it)")
    hosts, disc = tmp_path / "hosts", tmp_path / "discover.sh"
    hosts.write_text("localhost:1\n")
    disc.write_text(f"#!/bin/sh\ncat {hosts}\n")
    disc.chmod(0o755)
    argv = [str(BIN / "horovodrun"), "-np", "1", "--min-np", "1", "--max-np", "2", "--host-discovery-script",
            str(disc), "--gloo", "--network-interface", "lo", sys.executable, RUNNER,
            str(ROOT / "tests" / "jobs" / "gns_hvd_elastic.py")]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'scheduler'}{os.pathsep}{ROOT}",
           "SCHEDULEARN_JOB_DIR": str(tmp_path), "STEPS": "350", "STEP_SLEEP": "0.1", "B0": "16",
           "MAXB": "256" if adaptive else "16", **({"ADAPTIVE": "1"} if adaptive else {})}
    p = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(r.get("step", 0) >= 20 for r in _read(tmp_path / "metrics.jsonl")):
            assert p.poll() is None and time.monotonic() < deadline, "the job did not train on 1 worker"
            time.sleep(0.2)
        hosts.write_text("localhost:2\n")  # Horovod adds a worker in place
        metrics = tmp_path / "metrics.jsonl"
        while not any(r.get("step", 0) >= 150 and r["num_gpus"] == 2 for r in _read(metrics)):
            assert p.poll() is None and time.monotonic() < deadline + 120, "no training on 2 workers"
            time.sleep(0.2)
        hosts.write_text("localhost:1\n")  # and removes it
        out, _ = _wait(p, 240, "the job hung after a resize:")
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, out[-3000:]
    rows = [tuple(int(v) for v in m.groups()) for m in re.finditer(
        r"rank (\d) step (\d+) world (\d) monitor (\d) micro (\d+) accum (\d+) batch (\d+)", out)]
    both = {}
    for rank, step, world, monitor, micro, accum, batch in rows:
        assert monitor == world and micro * (accum + 1) * world >= batch, (rank, step, world, monitor, micro)
        both.setdefault(step, {})[rank] = (world, micro, accum, batch)
    grown = sorted(s for s, r in both.items() if len(r) == 2)
    assert len(grown) >= 50, out[-3000:]  # trained on 2 workers
    assert all(both[s][0] == both[s][1] for s in grown)  # the same batch and share on both ranks
    ranks0 = [both[s][0][0] for s in sorted(both)]
    assert [w for i, w in enumerate(ranks0) if i == 0 or ranks0[i - 1] != w] == [1, 2, 1], ranks0
    assert max(both) == 350 and list(both[350]) == [0]  # rank 0 alone at the end
    reports = _reports(tmp_path)
    assert {r["num_gpus"] for r in reports} == {1, 2} and reports[-1]["progress"] == 1
    assert all(r["grad_var"] > 0 for r in reports if r["num_gpus"] == 2)
    if adaptive:
        assert len({both[s][0][3] for s in grown}) > 1  # chosen (again) on 2 workers


def test_adaptive_batch_across_a_resize_keeps_converging(tmp_path):
    """A job adapts its batch size on 1 GPU, is checkpointed (a resize), and resumes on 2 GPUs
    under torchrun: it continues from its step, batch size and statistics, picks its batch size
    again for 2 GPUs (from both runs' reports, as the scheduler reads them), scales the learning
    rate by AdaScale's gain, and keeps converging; it ends once its steps, each counted at its
    gain, make `total_steps` at the initial batch size (in fewer optimiser steps). Its reports
    carry what the scheduler needs on both sizes."""
    require(_has("torch"), "torch is not installed")
    from schedulearn import elastic
    from schedulearn.estimates import estimate, ingest, packed_shape
    from schedulearn.model import Job, JobSpec

    env = dict(STEPS=3000, B0=8, MAXB=1024, SIGMA=2, LR=0.002, ADAPTIVE=1, OVERHEAD=0.01,
               PER_SAMPLE=0.0001, CKPT=1, REPORT_EVERY=0.5, SMOOTHING=0.95)
    first = _run([sys.executable, RUNNER, str(JOB)], tmp_path, STOP_AT=150, **env)
    assert first["steps"] == 150 and first["world"] == 1
    assert len(first["batches"]) > 1 and first["batches"][0] == 8  # it adapted
    assert first["true_sqr"] < 0.72  # |w - w*|^2 started at 0.72
    # its steps at larger batches counted their gain: more than 150 steps' worth (of the 3000:
    # its gain stays under 16 — seen under load: 800 by step 105)
    assert 150 < first["si_steps"] < 3000
    second = _run(_torchrun(2), tmp_path, **env)
    assert (second["start"], second["world"]) == (150, 2)
    # done at 3000 steps' worth of the initial batch (`total_steps`), in fewer optimiser steps
    # (how many fewer is the batches' to say: on 2 GPUs a batch of 8 may be the best goodput)
    assert 3000 <= second["si_steps"] < 3000 + max(second["batches"]) / 8, (first, second)
    assert second["steps"] < 3000
    assert second["batches"][0] == first["batches"][-1]  # restored from the checkpoint
    # chosen again for 2 GPUs from both runs' reports: by the scheduler's estimate from them,
    # near the best goodput there. The job keeps a batch its own fit puts within SWITCH_GAIN (5 %)
    # of its best, and that fit, refitted at each report from the previous one's parameters,
    # differs a little from one fitted to all at once: within 5 % of SWITCH_GAIN's margin (a
    # bound of 0.95 alone failed a CI run on 2026-12-06: 927 kept against 1024, 0.942x)
    job = Job(id=0, spec=JobSpec(command=["x"], batch_size=8, adaptive_batch=True), submit_time=0.0)
    ingest(job, _reports(tmp_path))
    job.batch_size = None
    est, two = estimate(job, 0.0), packed_shape(2, 2)
    best = min(max(est.best_batch(two), 8), 1024)
    kept = est.goodput(two, second["batches"][-1])
    assert kept >= 0.95 * est.goodput(two, best) / elastic.SWITCH_GAIN, (second, best)
    assert all(8 <= b <= 1024 for b in first["batches"] + second["batches"])
    assert second["lr"] == pytest.approx(0.002 * second["lr_factor"]) and second["lr_factor"] >= 1
    assert second["true_sqr"] < first["true_sqr"]  # still converging
    reports = _reports(tmp_path)
    assert (reports[-1]["progress"], reports[-1]["step"], reports[-1]["num_gpus"]) == (1, second["steps"], 2)
    assert {r["num_gpus"] for r in reports} == {1, 2}
    assert all(r["grad_var"] > 0 and r["step_time"] > 0 and 0 < r["progress"] <= 1 for r in reports[1:])
    assert [r["restart"] for r in reports] == sorted(r["restart"] for r in reports)


def test_an_adaptive_job_changes_its_batch_only_for_5_percent_more_goodput(tmp_path, monkeypatch):
    """At a report rank 0 refits the estimate and takes its best batch size only where that
    promises `SWITCH_GAIN` (5 %, AdaptDL's threshold) more goodput than the batch it has: the
    fit moves with every report, and a best size within its noise is no reason to change (seen
    live: a job alone on one GPU switched 38 times in 1,826 steps, nine of them back to its
    initial batch). The estimate here is fixed: its best size 64, at 4 % then 6 % more goodput
    than the 16 the job has."""
    require(_has("torch"), "torch is not installed")
    import torch
    from schedulearn import elastic, estimates

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCHEDULEARN_JOB_DIR", raising=False)
    more = {"by": 1.04}

    class Fixed:
        def best_batch(self, shape):
            return 64

        def goodput(self, shape, batch=None):
            return {16: 1.0, 64: more["by"]}[batch]

    monkeypatch.setattr(estimates, "estimate", lambda job, now, history=None: Fixed())
    model = torch.nn.Linear(2, 1)
    mon = elastic.Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), batch_size=16,
                          max_batch_size=256, adaptive=True)
    report = dict(t=time.time(), step_time=0.1, batch_size=16, accum_steps=0, init_batch_size=16,
                  max_batch_size=256, max_local_bsz=256, timed_steps=10)
    mon._adapt(report)
    assert mon.batch_size == 16  # 4 % more: kept
    more["by"] = 1.06
    mon._adapt(report)
    assert mon.batch_size == 64 and mon.micro_batch * (mon.accum_steps + 1) >= 64  # 6 % more: taken
    mon.close()


def test_a_restarted_adaptive_job_picks_its_batch_from_its_earlier_runs_reports_too(tmp_path, monkeypatch):
    """Under the scheduler a restarted job's Monitor starts from the reports the job wrote before
    (its job directory's metrics.jsonl: earlier runs; a torchrun job resized in place restarts its
    workers too). Seen live: a torchrun worker restarted on 4 GPUs, fed only its own two first
    reports, fitted the step time to their noise and went back to its initial batch size. Here,
    one GPU: the earlier run measured batches of 16, 66 and 252 (0.2 s a step plus 4 ms a sample);
    the new run's second report is 13 % slow. Outside the scheduler (no SCHEDULEARN_JOB_DIR) a
    metrics.jsonl in the working directory is not the job's: the choice is the fresh one."""
    require(_has("torch"), "torch is not installed")
    import torch
    from schedulearn import elastic
    from schedulearn.estimates import estimate, ingest, packed_shape
    from schedulearn.model import Job, JobSpec

    t0 = time.time() - 600
    common = dict(num_gpus=1, num_nodes=1, init_batch_size=16, max_batch_size=512, max_local_bsz=128,
                  grad_sqr=0.018, grad_var=0.147, timed_steps=20)
    earlier = [dict(common, t=t0, restart=0, batch_size=16, accum_steps=0, step_time=0.266,
                    compute_time=0.066),
               dict(common, t=t0 + 60, restart=0, batch_size=66, accum_steps=1, step_time=0.466,
                    compute_time=0.134),
               dict(common, t=t0 + 120, restart=0, batch_size=252, accum_steps=1, step_time=1.21,
                    compute_time=0.505)]
    new = [dict(common, t=t0 + 300, restart=1, batch_size=134, accum_steps=1, step_time=0.736,
                compute_time=0.268),
           dict(common, t=t0 + 305, restart=1, batch_size=143, accum_steps=1, step_time=0.834,
                compute_time=0.31)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in earlier))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCHEDULEARN_RESTART_COUNT", "1")

    def choices() -> list[int]:
        model = torch.nn.Linear(2, 1)
        mon = elastic.Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), batch_size=16,
                              max_batch_size=512, max_local_bsz=128, adaptive=True)
        picked = []
        for rec in new:
            mon._adapt(rec)  # what a report does (rank 0 decides)
            picked.append(mon.batch_size)
        mon.close()
        return picked

    # judged by the scheduler's estimate from all five reports
    job = Job(id=0, spec=JobSpec(command=["x"], batch_size=16, adaptive_batch=True), submit_time=0.0)
    ingest(job, earlier + new)
    job.batch_size = None
    est, one = estimate(job, 0.0), packed_shape(1, 1)
    best = est.goodput(one, est.best_batch(one))
    monkeypatch.delenv("SCHEDULEARN_JOB_DIR", raising=False)
    fresh = choices()  # two reports' noise read as 11 ms a sample: back to (about) 16
    assert fresh[-1] < 32 and est.goodput(one, fresh[-1]) < 0.8 * best, fresh  # 70 %
    monkeypatch.setenv("SCHEDULEARN_JOB_DIR", str(tmp_path))
    seeded = choices()
    assert seeded[-1] > 100 and est.goodput(one, seeded[-1]) >= 0.95 * best, seeded
    assert seeded == [seeded[0]] * 2  # the slow report moved nothing


def test_total_steps_count_a_larger_batchs_steps_at_their_gain(tmp_path, monkeypatch):
    """`total_steps` are steps at the initial batch size: a step at 4x that batch counts its gain
    (var + sqr)/(var/4 + sqr) — AdaScale's scale-invariant iterations, the statistical progress
    the scheduler's estimates and simulated jobs count — at the statistics it ran with; at the
    initial batch each step counts 1, the optimiser steps exactly. On the known problem of
    gns_train.py (weights frozen at w* + 0.3: sqr = 0.72, S = 8.48, var = S/16) the gain is
    1.466. Counted in optimiser steps, a job whose batch grew read as slower than before (seen
    live: its time left went from 85 s to 7 min on 4 GPUs and a batch 8x its first, while its
    statistics said each step did the work of 6.9). Under `adascale` the learning rate follows
    the same gain at every step (it was set only when the batch size changed: a step counted
    1.47 steps' worth ran at the initial batch's factor of 1)."""
    require(_has("torch"), "torch is not installed")
    import torch
    from schedulearn import elastic

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCHEDULEARN_JOB_DIR", raising=False)
    d, sigma, b0, total = 8, 0.5, 16, 10_000
    gen = torch.Generator().manual_seed(0)
    w_star = torch.randn(d, generator=gen, dtype=torch.float64)

    def run(batch: int, steps: int) -> tuple[elastic.Monitor, list[float], list[float], list[float]]:
        model = torch.nn.Linear(d, 1, bias=False).double()
        with torch.no_grad():
            model.weight.copy_((w_star + 0.3).unsqueeze(0))
        mon = elastic.Monitor(model, torch.optim.SGD(model.parameters(), lr=0.0), batch_size=b0,
                              max_batch_size=64, total_steps=total, smoothing=0.99, report_every=1e9)
        mon.batch_size = batch
        mon._configure()
        counted, gains, factors = [], [], []
        for _ in range(steps):
            gains.append(mon._gain(mon.batch_size))  # at the statistics the step runs with
            factors.append(mon.lr_factor)  # and its learning rate's (AdaScale's) factor
            before = mon.progress
            for _ in range(mon.accum_steps + 1):
                x = torch.randn(mon.micro_batch, d, generator=gen, dtype=torch.float64)
                y = x @ w_star + sigma * torch.randn(mon.micro_batch, generator=gen, dtype=torch.float64)
                mon.backward(0.5 * ((model(x).squeeze(1) - y) ** 2).mean())
            mon.step()
            counted.append((mon.progress - before) * total)
        mon.close()
        return mon, counted, gains, factors

    mon, counted, gains, factors = run(b0, 50)
    assert counted == pytest.approx([1.0] * 50) and mon.scale_invariant_steps == mon.steps == 50
    assert mon.progress == 50 / total and factors == [1.0] * 50  # the optimiser steps, exactly
    mon, counted, gains, factors = run(64, 400)
    assert counted == pytest.approx(gains, rel=1e-9)
    assert factors == pytest.approx(gains, rel=1e-9)  # the learning rate did the work counted
    assert mon.scale_invariant_steps == pytest.approx(sum(gains)) and mon.steps == 400
    sqr, var = 8 * 0.3 ** 2, ((d + 1) * 8 * 0.3 ** 2 + d * sigma ** 2) / b0
    analytic = (var + sqr) / (var / 4 + sqr)  # 1.466
    late = sum(counted[200:]) / 200
    assert late == pytest.approx(analytic, rel=TOLERANCE), (late, analytic)


def test_the_ranks_end_a_loop_on_progress_at_the_same_step(tmp_path):
    """`while mon.progress < 1` on every rank of a DDP job: the ranks take rank 0's count of the
    steps (it rides the all-reduce each step makes anyway), so they leave the loop at the same
    step even where their own counts differ (here rank 1 starts 5 steps ahead: on its own count
    it would leave 5 steps early, and rank 0's next all-reduce would never be joined)."""
    require(_has("torch"), "torch is not installed")
    e = {**os.environ, "PYTHONPATH": f"{ROOT / 'scheduler'}{os.pathsep}{ROOT}",
         "SCHEDULEARN_JOB_DIR": str(tmp_path), "STEPS": "40", "B0": "8", "SKEW": "5"}
    p = subprocess.Popen(_torchrun(2), cwd=tmp_path, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    out, _ = _wait(p, 90, "the ranks left the loop at different steps (the job hung):")
    assert p.returncode == 0, out[-3000:]
    result = json.loads(next(line[line.index("{"):] for line in out.splitlines() if '"steps"' in line))
    assert (result["steps"], result["world"]) == (40, 2)


def test_a_loop_that_steps_on_past_the_work_of_total_steps_is_told_once(tmp_path, monkeypatch, capsys):
    """A loop of `total_steps` optimiser steps under an adaptive batch does the work before its
    end (its larger batches' steps count more): the step after it is told so, once, on stderr —
    the job's log — with what to run instead."""
    require(_has("torch"), "torch is not installed")
    import torch
    from schedulearn import elastic

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCHEDULEARN_JOB_DIR", raising=False)
    model = torch.nn.Linear(2, 1)
    mon = elastic.Monitor(model, torch.optim.SGD(model.parameters(), lr=0.1), batch_size=4,
                          total_steps=10, report_every=1e9)
    for step in range(13):
        mon.backward(model(torch.randn(mon.micro_batch, 2)).pow(2).mean())
        mon.step()
        if step == 9:
            assert mon.progress == 1 and capsys.readouterr().err == ""
    mon.close()
    assert capsys.readouterr().err.splitlines() == [
        "schedulearn.elastic.Monitor: the work of total_steps=10 is done (in 10 steps: at a larger "
        "batch a step counts its gain) but the loop goes on; run it `while mon.progress < 1`"]


def test_learning_rate_rules_and_bad_arguments():
    require(_has("torch"), "torch is not installed")
    import torch
    from schedulearn import elastic

    model = torch.nn.Linear(2, 1)
    for rule, factor in (("sqrt", 2.0), ("linear", 4.0), ("none", 1.0)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        mon = elastic.Monitor(model, opt, batch_size=16, max_batch_size=64, lr_scaling=rule)
        mon.batch_size = 64
        mon._configure()
        assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * factor) and mon.micro_batch == 32
        mon.close()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    allowed = "adascale, sqrt, linear, none"
    with pytest.raises(ValueError, match=rf"^lr_scaling: expected one of {allowed}, got 'x'$"):
        elastic.Monitor(model, opt, batch_size=16, lr_scaling="x")
    with pytest.raises(ValueError, match=r"^max_batch_size: expected >= batch_size \(16\), got 8$"):
        elastic.Monitor(model, opt, batch_size=16, max_batch_size=8)
    mon = elastic.Monitor(model, opt, batch_size=16)
    with pytest.raises(RuntimeError, match="call backward"):
        mon.step()


def test_report_fills_in_the_placement_unless_the_loop_gives_it(tmp_path, monkeypatch):
    """`report()` adds the placement from the launcher's environment; a loop that states its own
    (`num_gpus=8`) is believed — it raised `TypeError: got multiple values for keyword argument`."""
    from schedulearn import elastic

    for var in ("WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK",
                "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SCHEDULEARN_NUM_NODES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SCHEDULEARN_JOB_DIR", str(tmp_path))
    monkeypatch.setenv("SCHEDULEARN_NUM_GPUS", "2")
    monkeypatch.setenv("SCHEDULEARN_RESTART_COUNT", "3")
    elastic.report(step_time=0.5, batch_size=64)
    elastic.report(step_time=0.5, batch_size=64, num_gpus=8, num_nodes=2, restart=4)
    first, second = (json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines())
    assert (first["num_gpus"], first["num_nodes"], first["restart"]) == (2, 1, 3)
    assert (second["num_gpus"], second["num_nodes"], second["restart"]) == (8, 2, 4)


def test_a_report_field_the_scheduler_does_not_read_is_said_once_on_stderr(tmp_path, monkeypatch, capsys):
    """`report(progess=0.5)` (a typo) left the job without a progress bar and said nothing; a
    progress of 2 read as done. Said once per field in the job's log, never raised (a slip in a
    report must not stop a training run), and still written."""
    from schedulearn import elastic

    monkeypatch.setenv("SCHEDULEARN_JOB_DIR", str(tmp_path))
    monkeypatch.setattr(elastic, "_said", set())
    for _ in range(3):
        elastic.report(progess=0.5)
        elastic.report(progress=2)
    elastic.report(progress="0.5", step_time=0.1, batch_size=8, epoch=1, epochs=4, grad_sqr=1.0)  # all read
    elastic.report(progress=-1)  # another slip of the same field: said too
    elastic.report(progress=-2)  # (the same: said already)
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "schedulearn.elastic.report: 'progess' is not a field the scheduler reads (it reads: accum_steps, "
        "batch_size, compute_time, epoch, epochs, grad_sqr, grad_var, init_batch_size, max_batch_size, "
        "max_local_bsz, num_gpus, num_nodes, progress, restart, step, step_time, t, timed_steps, "
        "total_steps); written, and ignored",
        "schedulearn.elastic.report: progress: expected a fraction from 0 to 1, got 2 (read as 1: done)",
        "schedulearn.elastic.report: progress: expected a fraction from 0 to 1, got -1 (read as 0)",
    ], said
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 9


def test_a_report_of_tensors_is_written_as_numbers_and_a_slip_never_stops_the_run(tmp_path, monkeypatch,
                                                                                  capsys):
    """`report(progress=done / total)` with torch tensors (a `.item()` forgotten) raised `Object of
    type Tensor is not JSON serializable`, and `report(step_time="x")` a bare `could not convert`:
    either stopped the training run the report only describes. Scalars (0-d tensors, numpy
    numbers) are written as the numbers they hold, and the scheduler reads them; what holds no
    number is left out and said once, never raised."""
    import numpy as np
    import torch
    from schedulearn import elastic
    from schedulearn.estimates.reports import progress_of

    monkeypatch.setenv("SCHEDULEARN_JOB_DIR", str(tmp_path))
    monkeypatch.setattr(elastic, "_said", set())
    elastic.report(step_time=torch.tensor(0.25), batch_size=np.int64(64), progress=torch.tensor(3) / 4,
                   grad_sqr=np.float32(1.5))
    elastic.report(step_time="x", batch_size=torch.ones(2), progress=torch.ones(3), epoch=2)
    elastic.report(step_time="y", progress=object())  # (said once per field)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    first, second, third = (json.loads(line) for line in lines)
    assert [first[k] for k in ("step_time", "batch_size", "progress", "grad_sqr")] == [0.25, 64, 0.75, 1.5]
    assert progress_of(first) == 0.75
    assert second["epoch"] == 2
    assert not {"step_time", "batch_size", "progress"} & (set(second) | set(third))
    said = "schedulearn.elastic.report: "
    assert capsys.readouterr().err.splitlines() == [
        f"{said}step_time: expected a number, got str 'x'; left out of the report",
        f"{said}batch_size: expected a number, got Tensor tensor([1., 1.]); left out of the report",
        f"{said}progress: expected a number, got Tensor tensor([1., 1., 1.]); left out of the report",
    ]


def test_a_report_writes_only_finite_numbers_for_the_fields_the_scheduler_reads(tmp_path, monkeypatch,
                                                                               capsys):
    """`report(step_time=nan)` wrote `NaN`, a token strict JSON readers refuse (`jq`, a browser's
    `JSON.parse`), without a word; `progress=None` wrote `null`, `batch_size=True` a batch of 1.
    Every line of metrics.jsonl is now strict JSON: a value that is not a finite number is left
    out and said once (per field and slip), None is a field not given, and a bool is no number."""
    import numpy as np
    from schedulearn import elastic

    monkeypatch.setenv("SCHEDULEARN_JOB_DIR", str(tmp_path))
    monkeypatch.setattr(elastic, "_said", set())
    elastic.report(step_time=float("nan"), grad_var=np.float32("inf"), progress=None, batch_size=True,
                   loss=float("-inf"), num_gpus=4, epoch=1.5, note="warm-up")
    elastic.report(step_time=float("inf"), batch_size=False, progress=float("nan"))
    elastic.report(step_time=0.5, batch_size=8, progress=0.25, loss=0.75)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    def strict(constant: str) -> None:
        pytest.fail(f"{constant} written: not JSON")

    first, second, third = (json.loads(line, parse_constant=strict) for line in lines)
    assert not {"step_time", "grad_var", "progress", "batch_size", "loss"} & (set(first) | set(second))
    assert (first["num_gpus"], first["epoch"], first["note"]) == (4, 1.5, "warm-up")
    assert isinstance(first["num_gpus"], int)
    assert [third[k] for k in ("step_time", "batch_size", "progress", "loss")] == [0.5, 8, 0.25, 0.75]
    said = "schedulearn.elastic.report: "
    err = [line for line in capsys.readouterr().err.splitlines() if "is not a field the" not in line]
    assert err == [
        f"{said}step_time: expected a finite number, got nan; left out of the report",
        f"{said}batch_size: expected a number, got bool True; left out of the report",
        f"{said}grad_var: expected a finite number, got inf; left out of the report",
        f"{said}loss: expected a finite number, got -inf; left out of the report",
        f"{said}progress: expected a finite number, got nan; left out of the report",
    ]


def test_the_report_fields_are_the_ones_the_scheduler_documents_and_reads():
    """`jobfiles.REPORT_FIELDS` (what `report` checks against) is the table of fields that
    `schedulearn.estimates.reports` documents: neither drifts from the other."""
    import re

    from schedulearn.estimates import reports
    from schedulearn.jobfiles import REPORT_FIELDS

    table = reports.__doc__.split("| field | meaning |")[1].split("\n\n")[0]
    documented = set(re.findall(r"`([a-z_]+)`", "\n".join(ln.split("|")[1] for ln in table.splitlines()[2:])))
    assert documented == REPORT_FIELDS
