"""Resizes in place in the simulator: each charged its launcher's `in_place_penalty` (not counted in
`restarts`), its pause measured from the simulated job's steps and handed to the engine as a live
executor does (`resize_pause`), the policy pricing it from that measurement alone; the CLI's
`--in-place-penalty`, `--resize` and `--launcher`."""

from __future__ import annotations

import argparse

import pytest
from schedulearn import cli, pauses
from schedulearn.engine import Engine
from schedulearn.model import virtual_cluster
from schedulearn.policies.goodput import Goodput
from schedulearn.sim.executor import SimExecutor
from schedulearn.store.sql import SqlStore

from tests.test_cli import SMALL, usage_error
from tests.test_cli import cli as run_cli

STEP = 2.0  # the simulated job's step time (s)
PENALTIES = {"horovod": 0.5, "torchrun": 1.5}


class StepModel:
    """`work` GPU-seconds at a linear speed-up; reports its progress and a step time of `STEP`."""

    def __init__(self, work: float):
        self.work = work

    def advance(self, progress, shape, bsz, dt):
        rate, need = sum(shape), self.work - progress
        if rate > 0 and rate * dt >= need:
            return self.work, need / rate
        return progress + rate * dt, None

    def report(self, progress, shape, bsz):
        return {"progress": progress / self.work, "step_time": STEP}


def _shrunk(launcher: str, penalty=None, store=None):
    """Job a (elastic, `resize: in-place`, `launcher`) starts on 2 GPUs at 0 (running from 30,
    after the 30 s restart penalty); b arrives at 40 and shrinks it to 1."""
    ex = SimExecutor(30.0, model=lambda job: StepModel(10_000.0 if job.id == 1 else 50.0),
                     in_place_penalty=PENALTIES if penalty is None else penalty)
    eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=ex, store=store)
    a = eng.submit({"gpus": "auto", "min_gpus": 1, "max_gpus": 2, "duration": 1.0, "resize": "in-place",
                    "launcher": launcher}, now=0.0)
    eng.round(0.0)
    assert a.size == 2
    eng.submit({"gpus": 1, "duration": 1.0}, now=40.0)
    eng.round(40.0)
    assert a.size == 1
    return eng, a


@pytest.mark.parametrize("launcher", ["horovod", "torchrun", "python"])
def test_in_place_resize_costs_its_launchers_penalty_and_no_restart(launcher):
    eng, a = _shrunk(launcher)
    # 20 GPU-seconds on 2 GPUs from 30 to 40; then 1 GPU after the pause
    if launcher == "python":  # no figure for it: a checkpoint-restart at 30 s
        assert a.restarts == 1 and a.extra.get(pauses.IN_PLACE_KEY, 0) == 0
        assert eng.executor.progress(a, 70.0) == pytest.approx(20.0)
        assert eng.executor.progress(a, 80.0) == pytest.approx(30.0)
    else:
        assert a.restarts == 0 and a.extra[pauses.IN_PLACE_KEY] == 1
        assert eng.executor.progress(a, 50.0) == pytest.approx(20.0 + 10.0 - PENALTIES[launcher])


def test_one_figure_for_every_launcher():
    eng, a = _shrunk("python", penalty=3.0)
    assert a.restarts == 0 and a.extra[pauses.IN_PLACE_KEY] == 1
    assert eng.executor.progress(a, 50.0) == pytest.approx(20.0 + 10.0 - 3.0)


@pytest.mark.parametrize("launcher", ["horovod", "torchrun"])
def test_pause_is_measured_from_the_steps_and_priced_from_the_measurement(launcher, tmp_path):
    """The first step at the new size ends `penalty + STEP` after the last at the old one: that is
    the pause the engine records and the policy prices the next resize at — not the simulator's
    `in_place_penalty` (which the policy is never told), and `restart_cost` until measured."""
    store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
    eng, a = _shrunk(launcher, store=store)
    policy = Goodput()
    pause = PENALTIES[launcher] + STEP
    eng.executor.advance(40.0 + pause - 0.1)  # its first step at 1 GPU has not ended
    assert pauses.PENDING_KEY in a.extra and pauses.measured(a, True) == []
    assert pauses.price(a, policy.restart_cost) == policy.restart_cost
    eng.executor.advance(100.0)
    assert pauses.measured(a, True) == [pytest.approx(pause)] and pauses.PENDING_KEY not in a.extra
    got = [e for e in store.events(a.id) if e["kind"] == "resize_pause"]
    assert len(got) == 1 and got[0]["data"]["pause_s"] == pytest.approx(pause)
    assert got[0]["data"]["in_place"] is True and (got[0]["data"]["from"], got[0]["data"]["to"]) == (2, 1)
    assert pauses.price(a, policy.restart_cost) == pytest.approx(pause)
    age, h = 100.0, policy.hysteresis
    assert policy.restart_factor(a, 100.0) == pytest.approx((age - h * pause) / (age + h * pause))
    store.close()


def test_restart_pause_is_measured_too(tmp_path):
    store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
    eng, a = _shrunk("python", store=store)
    eng.executor.advance(100.0)
    assert pauses.measured(a, False) == [pytest.approx(30.0 + STEP)]
    assert [e["data"]["in_place"] for e in store.events(a.id) if e["kind"] == "resize_pause"] == [False]
    store.close()


# -- the command line ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [
    ("0.5", 0.5), ("0", 0.0), ("horovod=0.55", {"horovod": 0.55}),
    ("horovod=0.5,torchrun=1.5", {"horovod": 0.5, "torchrun": 1.5}),
    (" torchrun = 2 ", {"torchrun": 2.0}),
])
def test_in_place_penalty_values(text, value):
    assert cli._in_place_penalty(text) == value


@pytest.mark.parametrize("text", ["", "x", "-1", "inf", "nan", "horovod", "horovod=", "horovod=a",
                                  "python=1", "horovod=1,horovod=2", "horovod=1,", "horovod=-1"])
def test_in_place_penalty_bad_values(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected seconds >= 0 \(every launcher\), "
                       r"or LAUNCHER=S,\.\.\. with LAUNCHER one of horovod, torchrun"):
        cli._in_place_penalty(text)


def test_cli_in_place_usage_errors():
    base = ("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4")
    line = usage_error(*base, "--resize", "in-place", "--in-place-penalty", "hvd=1")
    assert "argument --in-place-penalty: expected seconds >= 0" in line and "'hvd=1'" in line
    line = usage_error(*base, "--resize", "in-place")
    assert "--in-place-penalty: required when jobs resize in place" in line
    line = usage_error(*base, "--in-place-penalty", "1")
    assert "--in-place-penalty: no job of the trace resizes in place (add --resize in-place)" in line
    line = usage_error(*base, "--resize", "in-place", "--in-place-penalty", "horovod=1")
    assert "--in-place-penalty: no figure for launcher python" in line
    assert "argument --launcher: invalid choice" in usage_error(*base, "--launcher", "mpi")


def test_cli_simulate_in_place_runs():
    p = run_cli("simulate", SMALL, "--policy", "elastic-fifo", "--cluster", "2x4", "--json", "--resize",
                "in-place", "--launcher", "horovod", "--in-place-penalty", "horovod=0.5,torchrun=1.5")
    assert p.returncode == 0, p.stderr
    assert "resize in place horovod 0.5 s, torchrun 1.5 s" in p.stderr
