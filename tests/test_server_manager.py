"""The framework-free service (`schedulearn.service`), tested directly (no HTTP): settings,
ownership, the event fan-out, a crashing round, and the app's traits from the environment."""

from __future__ import annotations

import asyncio
import math
import threading

import pytest
from schedulearn.model import SpecError
from schedulearn.service import ApiError, Conflict, Forbidden, NotFound, SchedulerService, Settings
from traitlets import TraitError

from schedulearn_jupyter.app import SchedulearnApp


def sim_manager(tmp_path, **kw) -> SchedulerService:
    s = Settings(executor="sim", virtual_gpus=2, store_url=f"sqlite:///{tmp_path / 'm.db'}",
                 job_root=str(tmp_path / "jobs"), tick=0.05, inventory_interval=0, **kw)
    return SchedulerService(s)


@pytest.mark.parametrize("kw, error", [
    ({"executor": "kubernetes"}, "executor: expected one of local, docker, slurm, sim, got 'kubernetes'"),
    ({"virtual_gpus": -1}, "virtual_gpus: expected an integer >= 0, got -1"),
    ({"default_policy": "nope"}, "policy: unknown 'nope'; available: "),
    ({"cancel_grace": -2}, "cancel_grace: expected seconds >= 0, got -2"),
    ({"restart_cost": 0}, "restart_cost: expected seconds > 0 (a finite number), got 0"),
    ({"restart_cost": -1.5}, "restart_cost: expected seconds > 0 (a finite number), got -1.5"),
    ({"restart_cost": math.inf}, "restart_cost: expected seconds > 0 (a finite number), got inf"),
    ({"restart_cost": math.nan}, "restart_cost: expected seconds > 0 (a finite number), got nan"),
    ({"restart_cost": "soon"}, "restart_cost: expected seconds > 0 (a finite number), got 'soon'"),
])
def test_bad_settings_are_one_line_errors(kw, error):
    with pytest.raises(SpecError) as e:
        Settings(**kw).validate()
    assert str(e.value).startswith(error) and "\n" not in str(e.value)


def test_the_restart_cost_setting_prices_restarts_for_the_policies_and_the_statuses(tmp_path):
    """`restart_cost` is the elastic policies' (goodput, qoe: what they charge a resize until the
    job's own are measured), also after a run-time switch, and what a deadline's status counts
    for a restart, whatever the policy; without it, 30 s. A measured pause still wins."""
    from schedulearn import pauses

    async def main():
        m = sim_manager(tmp_path, default_policy="qoe", restart_cost=2.5)
        job = await m.submit({"duration": 600, "gpus": 1, "min_gpus": 1, "max_gpus": 2,
                              "deadline": "1h"}, "alice")
        queued = m.engine.get(job["id"])
        assert m.engine.policy.restart_cost == 2.5 and m.engine.restart_price(queued) == 2.5
        for name in ("goodput", "fifo", "qoe"):  # fifo prices no resize: the setting still counts
            await m.set_policy(name)
            assert getattr(m.engine.policy, "restart_cost", 2.5) == 2.5, name
            assert m.engine.restart_price(queued) == 2.5, name
        pauses.record(queued, {"pause_s": 1.0, "in_place": False})
        assert m.engine.restart_price(queued) == 1.0
        await m.stop()
        m = sim_manager(tmp_path / "default", default_policy="goodput")
        assert m.engine.policy.restart_cost == 30.0
        await m.stop()

    asyncio.run(main())



def test_a_policy_switched_at_run_time_outlives_a_restart_and_the_log_says_so(tmp_path):
    """The configured policy applies to a new store; a switch at run time is kept and wins at the
    next start, and the start-up line says which is in force and why (a server restarted with
    `--policy qoe` that schedules by `las` is otherwise a puzzle)."""
    async def main():
        m = sim_manager(tmp_path, default_policy="qoe")
        assert m.policy_note() == "policy qoe"
        await m.set_policy("las")
        await m.stop()
        m = sim_manager(tmp_path, default_policy="qoe")
        assert m.engine.policy.name == "las"
        assert m.policy_note() == ("policy las (kept in the store from an earlier start or a switch; "
                                   "the configured qoe applies only to a new store)")
        await m.stop()
        m = sim_manager(tmp_path / "new", default_policy="qoe")
        assert m.engine.policy.name == "qoe" and m.policy_note() == "policy qoe"
        await m.stop()

    asyncio.run(main())

def test_submit_cancel_and_ownership(tmp_path):
    async def main():
        m = sim_manager(tmp_path)
        m.start()
        job = await m.submit({"duration": 30}, "alice")
        assert job["user"] == "alice" and job["state"] == "queued"
        with pytest.raises(Forbidden):
            await m.cancel(job["id"], "bob")
        with pytest.raises(NotFound):
            await m.cancel(77, "alice")
        with pytest.raises(NotFound):
            await m.get_job("x")
        with pytest.raises(ApiError) as e:
            await m.submit({"duration": 1, "gpus": 3}, "alice")
        assert e.value.status == 400 and str(e.value).startswith("gpus: at most 2")
        await m.cancel(job["id"], "alice")
        with pytest.raises(Conflict):
            await m.cancel(job["id"], "alice")
        assert [(j.id, j.state.value) for j in m.store.list_jobs()] == [(job["id"], "cancelled")]
        await m.stop()

    asyncio.run(main())


@pytest.mark.parametrize("spec, error", [
    ({"application": "bogus"}, "application: unknown 'bogus'; expected one of bert, cifar10, deepspeech2, "
                               "imagenet, ncf, yolov3"),
    ({"application": "cifar10", "batch_size": 100_000},
     "batch_size: expected an integer from 1 to 4096 (cifar10's largest validated batch size), got 100000"),
    ({"application": "ncf", "duration": 5}, "duration: give a duration (a rigid run) or an application (its "
                                            "model), not both"),
])
def test_the_sim_executor_refuses_a_model_it_cannot_run(tmp_path, spec, error):
    """An unknown application ran as a 1-s rigid job without a word, a batch past the application's
    data for ever; now a one-line 400, and nothing is queued."""
    async def main():
        m = sim_manager(tmp_path)
        with pytest.raises(ApiError) as e:
            await m.submit(spec, "alice")
        assert e.value.status == 400 and str(e.value) == error
        assert m.store.list_jobs() == []
        ok = await m.submit({"application": "cifar10", "batch_size": 4096}, "alice")
        assert ok["state"] == "queued"
        await m.stop()

    asyncio.run(main())


def test_simulated_jobs_end_on_the_wall_clock_and_events_fan_out(tmp_path):
    async def main():
        m = sim_manager(tmp_path)
        m.start()
        a, b = await m.subscribe(), await m.subscribe()
        job = await m.submit({"duration": 0.2}, "u")
        events = []
        async with asyncio.timeout(10):
            async for e in a:
                events.append(e)
                if e.get("event") == "succeeded":
                    break
        assert [e["event"] for e in events] == ["submitted", "started", "succeeded"]
        assert all(e["job"]["id"] == job["id"] for e in events)
        got_b = [await b.get(5) for _ in range(3)]
        assert [e["seq"] for e in got_b] == [e["seq"] for e in events]
        # events emitted from another thread arrive on the loop
        t = threading.Thread(target=m.engine._emit, args=({"type": "custom"},))
        t.start()
        t.join()
        assert (await a.get(5))["type"] == "custom"
        a.close()
        assert a not in m.hub.subscribers
        await m.stop()

    asyncio.run(main())


def test_a_subscriber_that_does_not_read_is_dropped(tmp_path):
    async def main():
        m = sim_manager(tmp_path)
        m.hub.maxsize = 5
        slow = await m.subscribe()
        for i in range(10):
            m.hub.publish({"type": "x", "i": i})
        assert slow.closed and slow not in m.hub.subscribers
        got = [e async for e in slow]
        assert [e["i"] for e in got] == [0, 1, 2, 3, 4]
        await m.stop()

    asyncio.run(main())


def test_a_crashing_round_is_logged_and_the_loop_goes_on(tmp_path, caplog):
    async def main():
        m = sim_manager(tmp_path)
        real = m.engine.round
        calls = {"n": 0}

        def flaky(*args, **kw):
            calls["n"] += 1
            if calls["n"] <= 2:
                raise RuntimeError("boom in a round")
            return real(*args, **kw)

        m.engine.round = flaky
        m.start()
        job = await m.submit({"duration": 0.1}, "u")
        async with asyncio.timeout(10):
            while m.engine.get(job["id"]).state.value != "succeeded":
                m.engine.wake()
                await asyncio.sleep(0.02)
        await m.stop()

    asyncio.run(main())
    assert "scheduling round failed" in caplog.text and "boom in a round" in caplog.text


def test_traits_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SCHEDULEARN_VIRTUAL_GPUS", "3")
    monkeypatch.setenv("SCHEDULEARN_EXECUTOR", "sim")
    monkeypatch.setenv("SCHEDULEARN_DOCKER_HOSTS", "tcp://a:2375, tcp://b:2375")
    monkeypatch.setenv("SCHEDULEARN_CANCEL_GRACE", "2.5")
    monkeypatch.setenv("SCHEDULEARN_JOB_ROOT", str(tmp_path / "j"))
    monkeypatch.setenv("SCHEDULEARN_STORE_URL", "sqlite:///x.db")
    monkeypatch.setenv("SCHEDULEARN_DEFAULT_POLICY", "las")
    monkeypatch.setenv("SCHEDULEARN_DEFAULT_IMAGE", "pytorch/pytorch")
    monkeypatch.setenv("SCHEDULEARN_REMOTE_URL", "http://gpu-box:8765/")
    monkeypatch.setenv("SCHEDULEARN_REMOTE_TOKEN", "t")
    monkeypatch.setenv("SCHEDULEARN_RESTART_COST", "2")
    monkeypatch.setenv("SCHEDULEARN_KEEP_JOB_DIRS", "30d")
    app = SchedulearnApp()
    assert app.keep_job_dirs == "30d" and app.scheduler_settings().keep_job_dirs == 30 * 86400
    assert app.restart_cost == 2.0 and app.scheduler_settings().restart_cost == 2.0
    assert app.virtual_gpus == 3 and app.executor == "sim" and app.cancel_grace == 2.5
    assert app.docker_hosts == ["tcp://a:2375", "tcp://b:2375"]
    assert app.job_root == str(tmp_path / "j") and app.store_url == "sqlite:///x.db"
    assert app.default_policy == "las" and app.default_image == "pytorch/pytorch"
    assert app.remote_url == "http://gpu-box:8765/" and app.remote_token == "t"
    # explicit configuration wins over the environment
    assert SchedulearnApp(virtual_gpus=1).virtual_gpus == 1


def test_defaults_without_environment(monkeypatch):
    for name in ("VIRTUAL_GPUS", "EXECUTOR", "STORE_URL", "JOB_ROOT", "DEFAULT_POLICY", "KEEP_JOB_DIRS"):
        monkeypatch.delenv("SCHEDULEARN_" + name, raising=False)
    app = SchedulearnApp()
    assert app.virtual_gpus == 0 and app.executor == "local" and app.default_policy == "fifo"
    assert app.store_url.startswith("sqlite:///") and app.store_url.endswith("schedulearn/jobs.db")
    assert app.restart_cost == 30.0
    assert app.keep_job_dirs == "" and app.scheduler_settings().keep_job_dirs is None  # for ever


@pytest.mark.parametrize("name, value, error", [
    ("VIRTUAL_GPUS", "four", "SCHEDULEARN_VIRTUAL_GPUS: expected an integer, got 'four'"),
    ("EXECUTOR", "kubernetes",
     "SCHEDULEARN_EXECUTOR: expected one of local, docker, slurm, sim, got 'kubernetes'"),
    ("CANCEL_GRACE", "soon", "SCHEDULEARN_CANCEL_GRACE: expected a number, got 'soon'"),
    ("RESTART_COST", "soon", "SCHEDULEARN_RESTART_COST: expected a number, got 'soon'"),
    ("RESTART_COST", "-3", "SCHEDULEARN_RESTART_COST: expected seconds > 0 (a finite number), got '-3'"),
    ("RESTART_COST", "inf", "SCHEDULEARN_RESTART_COST: expected seconds > 0 (a finite number), got 'inf'"),
    ("KEEP_JOB_DIRS", "a month", "SCHEDULEARN_KEEP_JOB_DIRS: expected a duration > 0 such as 90, 90s, 10m, "
                                 "2h or 1h30m, got 'a month'"),
])
def test_bad_environment_is_a_one_line_error(monkeypatch, name, value, error):
    monkeypatch.setenv("SCHEDULEARN_" + name, value)
    app = SchedulearnApp()
    with pytest.raises(TraitError) as e:
        getattr(app, name.lower())
    assert str(e.value) == error


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan])
def test_a_bad_restart_cost_trait_is_a_one_line_error(value):
    with pytest.raises(TraitError) as e:
        SchedulearnApp(restart_cost=value)
    assert str(e.value) == f"restart_cost: expected seconds > 0 (a finite number), got {float(value)!r}"
    assert SchedulearnApp(restart_cost=2).restart_cost == 2.0


def test_schedulearn_serve_takes_the_restart_cost(monkeypatch, tmp_path):
    """`--restart-cost`, its default from `SCHEDULEARN_RESTART_COST`, else 30 s (a bad value: a
    one-line usage error, tests/test_cli.py)."""
    import argparse

    from schedulearn_jupyter import serve

    def settings(*args: str) -> Settings:
        parser = argparse.ArgumentParser()  # (the defaults come from the environment here)
        serve.add_arguments(parser)
        assert "--restart-cost" in parser.format_help()
        return serve.settings_from_args(parser.parse_args(
            ["--store", f"sqlite:///{tmp_path / 's.db'}", "--job-root", str(tmp_path), *args]))

    monkeypatch.delenv("SCHEDULEARN_RESTART_COST", raising=False)
    assert settings().restart_cost == 30.0 and settings("--restart-cost", "2.5").restart_cost == 2.5
    monkeypatch.setenv("SCHEDULEARN_RESTART_COST", "4")
    assert settings().restart_cost == 4.0 and settings("--restart-cost", "2.5").restart_cost == 2.5


def test_docker_hosts_as_the_docker_executor_takes_them():
    from schedulearn.executors.docker import docker_hosts

    assert docker_hosts(Settings(node_name="box")) == ["box=unix:///var/run/docker.sock"]
    assert docker_hosts(Settings(node_name="box", virtual_gpus=2)) == ["box=unix:///var/run/docker.sock?gpus=2"]
    hosts = ["tcp://10.0.0.3:2376", "gpu2=ssh://me@gpu2?gpus=8", "gpu3=tcp://h:1?address=10.0.0.9"]
    got = docker_hosts(Settings(executor="docker", options={"docker_hosts": hosts}, virtual_gpus=4))
    assert got == ["10.0.0.3=tcp://10.0.0.3:2376?gpus=4", "gpu2=ssh://me@gpu2?gpus=8",
                   "gpu3=tcp://h:1?address=10.0.0.9&gpus=4"]
    from schedulearn.executors.hosts import parse_hosts

    assert [h.name for h in parse_hosts(got)] == ["10.0.0.3", "gpu2", "gpu3"]


def test_cached_job_list_json_never_goes_stale(tmp_path):
    import json

    async def main():
        m = sim_manager(tmp_path)
        m.start()

        async def same(**query):
            clock = m.engine.clock
            m.engine.clock = lambda: 12345.0  # running jobs' figures depend on the time
            try:
                assert json.loads(await m.list_jobs_json(**query)) == await m.list_jobs(**query)
            finally:
                m.engine.clock = clock

        ids = [(await m.submit({"duration": 0.3 if i == 0 else 30}, f"u{i % 2}"))["id"] for i in range(4)]
        await same()
        await same(state="queued")
        async with asyncio.timeout(10):
            while m.engine.get(ids[0]).state.value != "succeeded":
                await same()
                await asyncio.sleep(0.02)
        await m.cancel(ids[1], "u1")
        await m.cancel(ids[2], "u0")
        await asyncio.sleep(0.1)
        for query in ({}, {"state": "cancelled"}, {"state": "running"}, {"user": "u1"}, {"limit": 2}):
            await same(**query)
        await m.stop()

    asyncio.run(main())
