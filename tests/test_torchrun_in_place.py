"""Resize in place for torchrun: one elastic agent per GPU under the executor's supervisor
(`schedulearn.executors.torchrun_elastic`), real torchrun jobs on CPU (gloo) under virtual GPUs.

The main test drives an elastic torchrun job A (`resize: in-place`, 1..2 GPUs) through the
engine on a 3-GPU host under elastic-fifo: A starts on GPUs 0 and 1, job C takes GPU 2, job B
arrives and the policy shrinks A to GPU 0 (the agent of slot 1 leaves the rendezvous); when C
ends A grows back to GPUs 0 and 2 (a new agent joins). Every resize is a new rendezvous round in
which the workers restart from the checkpoint they saved at the step boundary: the step counter
goes on exactly, `restarts` and `SCHEDULEARN_RESTART_COUNT` stay 0, the run is never relaunched,
each agent's worker sees its own GPU, and the model ends equal to an unresized run's.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import json
import os
import re
import socket
import sys
import time

import pytest
from schedulearn import pauses
from schedulearn.engine import Engine, RealClock
from schedulearn.executors import launch, torchrun_elastic
from schedulearn.executors.launch import build_workers
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import JobSpec, JobState, virtual_cluster
from schedulearn.store.sql import SqlStore

from tests.conftest import assert_unresized_weights, require, wait_for
from tests.test_elastic_resize import JOBS, _has_torch

STEPS = 70
PREFIX = r"^(?:\[rank\d+\]: )?"
STEP = re.compile(PREFIX + r"step (\d+) world (\d) restart (\d+)$", re.M)
WORKER = re.compile(PREFIX + r"worker rank (\d) world (\d) cuda (\S+) pid (\d+)$", re.M)
PREWARMED = re.compile(PREFIX + r"worker pid (\d+) prewarmed ([01])$", re.M)
STORE_PORT = re.compile(PREFIX + r"worker pid \d+ store port (\d+)$", re.M)


def test_torchrun_in_place_runs_one_elastic_agent_per_gpu_under_the_supervisor(tmp_path):
    """The launch: the supervisor with the job's elastic range and its command; each agent an
    elastic node of one process in a c10d rendezvous that slot 0 hosts, restarts that cannot run
    out, the worker through the slot wrapper. Every other torchrun job keeps the plain launch."""
    spec = JobSpec(command=["python", "train.py"], launcher="torchrun", gpus="auto", min_gpus=1, max_gpus=3,
                   resize="in-place")
    (w,) = build_workers(spec, 7, {"node0": (4, 2)}, tmp_path, python="py", elastic_np=(1, 3))
    assert w.argv[:8] == ["py", "-u", torchrun_elastic.SCRIPT, "supervise", "--job-dir", str(tmp_path),
                          "--nnodes", "1:3"]
    assert w.argv[8] == "--" and w.argv[9:] == ["python", launch.RUNNER, "train.py"]
    (plain,) = build_workers(spec, 7, {"node0": (4, 2)}, tmp_path, python="py")
    assert "--standalone" in plain.argv and "supervise" not in plain.argv
    assert torchrun_elastic.GPUS_FILE == launch.GPUS_FILE
    assert torchrun_elastic.WORKERS_DIR == launch.WORKERS_DIR

    a0 = torchrun_elastic.agent_argv("py", 0, "1:3", 29999, "rid", ["py", "x.py"])
    a1 = torchrun_elastic.agent_argv("py", 1, "1:3", 29999, "rid", ["py", "x.py"])
    for a in (a0, a1):
        assert a[:4] == ["py", "-u", torchrun_elastic.SCRIPT, "agent"]
        assert {"--nnodes=1:3", "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-id=rid",
                "--rdzv-endpoint=127.0.0.1:29999", "--no-python"} <= set(a)
        assert int(next(x for x in a if x.startswith("--max-restarts=")).split("=")[1]) >= 10**6
        # the job's command through the prewarm client
        assert a[-5:] == ["schedulearn-slot", "py", torchrun_elastic.PREWARM, "py", "x.py"]
    assert "is_host=1" in next(x for x in a0 if x.startswith("--rdzv-conf="))  # slot 0 hosts the store
    assert "is_host=0" in next(x for x in a1 if x.startswith("--rdzv-conf="))


def test_the_rendezvous_port_is_held_from_its_pick_until_the_store_listens_on_it(tmp_path, monkeypatch):
    """The supervisor picks the rendezvous port by binding a socket, and that socket stays
    listening until the slot-0 agent's store takes it over (TCPStore's `master_listen_fd`): no
    other socket can take the port in between. (A port picked by binding and closing a socket
    was free again for the seconds the agent spends importing torch: EADDRINUSE, the job
    failing at start.) The store really serves on the socket it is handed."""
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")
    sup = torchrun_elastic.Supervisor(str(tmp_path), "1:2", ["py", "x.py"])
    try:
        with socket.socket() as other, pytest.raises(OSError) as taken:
            other.bind(("127.0.0.1", sup.port))
        assert taken.value.errno == errno.EADDRINUSE
        fd = sup.listener.fileno()
        a0 = torchrun_elastic.agent_argv("py", 0, "1:2", sup.port, "rid", ["py", "x.py"], fd)
        assert a0[4] == f"{torchrun_elastic.LISTEN_FD_FLAG}={fd}"  # agent() reads it first
        assert torchrun_elastic.LISTEN_FD_FLAG not in " ".join(
            torchrun_elastic.agent_argv("py", 1, "1:2", sup.port, "rid", ["py", "x.py"]))

        from torch.distributed import TCPStore
        from torch.distributed.elastic.rendezvous import RendezvousParameters
        from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

        monkeypatch.setattr(backend, "TCPStore", backend.TCPStore)  # undone after the test
        torchrun_elastic._host_on(os.dup(fd))  # the store owns (and closes) the copy it is given
        params = RendezvousParameters("c10d", f"127.0.0.1:{sup.port}", "rid", 1, 2, is_host=True)
        host = backend._create_tcp_store(params)  # what the slot-0 agent's rendezvous creates
        host.set("k", "v")
        peer = TCPStore("127.0.0.1", sup.port, is_master=False, timeout=datetime.timedelta(seconds=10))
        assert peer.get("k") == b"v"
    finally:
        sup.listener.close()


def test_the_workers_store_port_is_picked_free_outside_the_ephemeral_range(monkeypatch, tmp_path):
    pick = torchrun_elastic.store_ports
    assert pick((32768, 60999)) == range(61000, 65536)  # Linux's default range: the 4,535 above it
    assert pick((40000, 40060)) == range(40061, 65536)
    assert pick((1024, 65000)) is None  # 535 above, none below 10,000
    assert pick((20000, 65000)) == range(10_000, 20000)
    assert pick((15000, 64999)) == range(10_000, 15000)
    assert pick((10500, 64999)) is None  # 500 below: too few to pick from

    eph, reserved = tmp_path / "range", tmp_path / "reserved"
    eph.write_text("1024\t63999\n")
    reserved.write_text("64000-65000,65010\n")
    monkeypatch.setattr(torchrun_elastic, "EPHEMERAL", str(eph))
    monkeypatch.setattr(torchrun_elastic, "RESERVED", str(reserved))
    assert torchrun_elastic._reserved() == set(range(64000, 65001)) | {65010}
    monkeypatch.setattr(torchrun_elastic, "MIN_STORE_PORTS", 1)
    eph.write_text("1024 65534\n")  # one port above the range: 65535
    reserved.write_text("")
    with socket.socket() as held:  # taken: none to pick
        held.bind(("127.0.0.1", 65535))
        assert torchrun_elastic.store_port(tries=5) is None
    assert torchrun_elastic.store_port(tries=5) == 65535  # free again
    reserved.write_text("65530-65535")
    assert torchrun_elastic.store_port(tries=5) is None  # kept for a service
    eph.write_text("garbage")
    assert torchrun_elastic.store_port() is None  # torch's own pick then


def test_a_torchrun_resize_is_in_place_only_when_the_slots_keep_their_gpus_and_the_last_one_took_effect():
    ok = torchrun_elastic.resizable
    assert ok([0, 1], [0], None, 100.0) and ok([0], [0, 2], None, 100.0)
    assert not ok([0, 1], [1], None, 100.0)  # slot 0 (the rendezvous host) would change GPU
    assert not ok([0, 1], [1, 0, 2], None, 100.0)
    unmeasured = {"t": 90.0, "in_place": True}
    assert not ok([0], [0, 1], unmeasured, 100.0)  # a round may still be forming
    assert ok([0], [0, 1], unmeasured, 90.0 + torchrun_elastic.SETTLE_S + 1)
    assert ok([0], [0, 1], {"t": 90.0, "in_place": False}, 100.0)


def test_a_worker_that_fails_outside_a_resize_fails_the_job_once(tmp_path):
    """The agents' `--max-restarts` never runs out (a shrink stops survivors' workers as a
    failure would); the supervisor keeps the job's policy: a real failure ends the job, it is
    not restarted again and again."""
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")

    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=10)
        eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            a = eng.submit({"command": ["python", str(JOBS / "crash.py")], "launcher": "torchrun",
                            "gpus": "auto", "min_gpus": 1, "max_gpus": 2, "resize": "in-place"})
            t0 = time.monotonic()
            await wait_for(lambda: a.state.final, 120, "the failing job to end")
            text = ex.logs(a.id)
            assert a.state is JobState.failed, text[-3000:]
            assert "torchrun restarted it outside a resize); stopping the job" in text
            assert 2 <= text.count("working on it") <= 2 * 3  # two workers, a round or two: not a loop
            assert "RuntimeError: boom: the model diverged at step 3" in a.reason
            assert time.monotonic() - t0 < 90
            assert a.restarts == 0 and text.count("=== schedulearn: start #") == 1
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


def test_torchrun_job_resized_in_place_2_1_2_keeps_its_step_counter(tmp_path):
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")
    release_b, release_c = tmp_path / "release-b", tmp_path / "release-c"

    async def main():
        store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=20)
        eng = Engine(virtual_cluster(1, 3), "elastic-fifo", executor=ex, store=store)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            a = eng.submit({"name": "torchrun-elastic", "command": ["python", str(JOBS / "elastic_train.py")],
                            "launcher": "torchrun", "gpus": "auto", "min_gpus": 1, "max_gpus": 2,
                            "resize": "in-place", "env": {"TRAIN_STEPS": str(STEPS), "STEP_SLEEP": "0.15"}})
            await wait_for(lambda: re.search(PREFIX + r"step [3-9] world 2", ex.logs(a.id), re.M), 120,
                           "the job to train on 2 GPUs")
            assert a.alloc == {"node0": (0, 1)}
            c = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release_c)],
                            "gpus": 1})
            await wait_for(lambda: c.state is JobState.running, 30, "job C to start on the free GPU")
            assert a.size == 2 and c.alloc == {"node0": (2,)}
            b = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release_b)],
                            "gpus": 1})
            await wait_for(lambda: b.state is JobState.running, 60, "job B to start (A shrunk in place)")
            assert a.size == 1 and a.alloc == {"node0": (0,)} and b.alloc == {"node0": (1,)}
            await wait_for(lambda: len(pauses.measured(a, True)) == 1, 90,
                           "A to train on 1 GPU (the shrink's pause measured)")
            release_c.touch()
            await wait_for(lambda: c.state.final, 30, "job C to end")
            await wait_for(lambda: a.size == 2, 20, "A to grow back (in place)")
            assert a.alloc == {"node0": (0, 2)}  # slot 0 keeps GPU 0; the new slot is GPU 2
            await wait_for(lambda: a.state.final, 180, "the resized job to finish")
            text = ex.logs(a.id)
            assert a.state is JobState.succeeded, a.reason + "\n" + text[-4000:]
            assert a.restarts == 0 and a.extra[pauses.IN_PLACE_KEY] == 2
            assert text.count("=== schedulearn: start #") == 1  # one launch: the run was never relaunched

            steps = [(int(s), int(w), int(r)) for s, w, r in STEP.findall(text)]
            assert [s for s, *_ in steps] == list(range(1, STEPS + 1)), steps  # not a step lost or repeated
            worlds = [w for i, (_, w, _) in enumerate(steps) if i == 0 or steps[i - 1][1] != w]
            assert worlds == [2, 1, 2], worlds
            assert {r for *_, r in steps} == {0}  # SCHEDULEARN_RESTART_COUNT never changed

            # every worker sees its agent's GPU: 0 and 1, then 0 alone, then 0 and 2
            workers = [(int(r), int(n), cuda, int(p)) for r, n, cuda, p in WORKER.findall(text)]
            by_world = {n: sorted(cuda for _, m, cuda, _ in workers if m == n) for n in (1, 2)}
            assert set(by_world[1]) == {"0"}, workers
            assert by_world[2].count("0") == by_world[2].count("1") + by_world[2].count("2"), workers
            assert "1" in by_world[2] and "2" in by_world[2] and set(by_world[2]) == {"0", "1", "2"}, workers
            assert len({p for *_, p in workers}) == len(workers)  # workers restart: a new process each round
            # the workers of every resize's round were forked by the run's prewarm server (no
            # cold start: torch imported before), with the environment an exec would give them
            how = {int(p): int(pre) for p, pre in PREWARMED.findall(text)}
            resized_at = text.index("resized in place: 2 -> 1 GPUs")
            later = {p for *_, p in workers if text.index(f" pid {p}\n") > resized_at}
            assert len(later) == 3 and all(how[p] == 1 for p in later), (how, later)
            assert "schedulearn prewarm: ready" in text and "prewarm: cold start" not in text
            # every round's workers' store is on a port picked outside the ephemeral range (where
            # another socket could take it before rank 0 binds it); each worker prints its round's
            # (random picks: two rounds may share one by chance, so no count of distinct ports)
            low, high = torchrun_elastic._ephemeral()
            ports = [int(p) for p in STORE_PORT.findall(text)]
            assert len(ports) == len(workers), ports
            outside = torchrun_elastic.store_ports((low, high))
            assert all(not low <= p <= high and p in outside for p in ports), (ports, low, high)
            assert "resized in place: 2 -> 1 GPUs, CUDA_VISIBLE_DEVICES=0 ===" in text
            assert "could not leave the rendezvous" not in text  # the removed agent left it
            assert "resized in place: 1 -> 2 GPUs, CUDA_VISIBLE_DEVICES=0,2 ===" in text

            events = store.events(a.id)
            resized = [e["data"] for e in events if e["kind"] == "resized"]
            assert [(d["gpus"], d["in_place"], d["run"]) for d in resized] == [(1, True, 0), (2, True, 0)]
            measured = [e["data"] for e in events if e["kind"] == "resize_pause"]
            assert [(d["from"], d["to"], d["in_place"]) for d in measured] == [(2, 1, True), (1, 2, True)]
            assert all(0 < d["pause_s"] < 30 and d["first_step_t"] > d["last_step_t"] for d in measured)
            reports = (tmp_path / "jobs" / str(a.id) / "metrics.jsonl").read_text().splitlines()
            metrics = [json.loads(m) for m in reports]
            assert {m["num_nodes"] for m in metrics} == {1}  # one host, though each agent is a "node"

            assert_unresized_weights(tmp_path / "jobs" / str(a.id), STEPS)
            release_b.touch()
            await wait_for(lambda: b.state.final, 30, "job B to end")
            assert b.state is JobState.succeeded and c.state is JobState.succeeded
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task
            store.close()

    asyncio.run(main())


def test_a_round_completes_once_the_jobs_gpus_have_joined(tmp_path, monkeypatch):
    """Each agent's rendezvous completes a round at the job's GPU count (its `gpus` file),
    within --nnodes MIN..MAX, instead of waiting for the last call; without the file, torch's
    own rule (MAX, or the last call)."""
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")
    from datetime import timedelta

    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousSettings, RendezvousTimeout

    def settings(lo=1, hi=3):
        return RendezvousSettings("r", lo, hi, RendezvousTimeout(last_call=timedelta(seconds=1)),
                                  timedelta(seconds=1), 3)

    monkeypatch.setenv("SCHEDULEARN_JOB_DIR", str(tmp_path))
    s = settings()
    assert not torchrun_elastic._expect_nodes(s)
    assert s.max_nodes == 3  # no gpus file yet
    for gpus, want in (("0,1", 2), ("0", 1), ("0,1,2,3,4", 3), ("4,7,2", 3), ("2", 1)):
        (tmp_path / torchrun_elastic.GPUS_FILE).write_text(gpus)
        assert torchrun_elastic._expect_nodes(s)  # the same object: the handler, its parts share it
        assert s.max_nodes == want, gpus
    s2 = settings(lo=2, hi=4)
    (tmp_path / torchrun_elastic.GPUS_FILE).write_text("5")
    torchrun_elastic._expect_nodes(s2)
    assert s2.max_nodes == 2  # never below MIN
    (tmp_path / torchrun_elastic.GPUS_FILE).unlink()
    torchrun_elastic._expect_nodes(s2)
    assert s2.max_nodes == 4  # back to MAX
    monkeypatch.delenv("SCHEDULEARN_JOB_DIR")
    s3 = settings()
    torchrun_elastic._expect_nodes(s3)
    assert s3.max_nodes == 3


def test_a_shrinks_survivors_resume_without_waiting_for_the_removed_worker_to_end(tmp_path):
    """The agent a shrink removes leaves the rendezvous on its SIGTERM, before its worker has
    stopped: the survivors' round does not wait for that worker's end. Here the removed worker
    (GPU 1) holds its exit until the job has trained at world 1 (tests/jobs/elastic_train.py's
    HOLD_EXIT_GPU): it sees that happen while it is still alive."""
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")
    release = tmp_path / "release"

    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=20)
        eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            a = eng.submit({"command": ["python", str(JOBS / "elastic_train.py")], "launcher": "torchrun",
                            "gpus": "auto", "min_gpus": 1, "max_gpus": 2, "resize": "in-place",
                            "env": {"TRAIN_STEPS": "100000", "STEP_SLEEP": "0.1", "HOLD_EXIT_GPU": "1"}})
            await wait_for(lambda: re.search(PREFIX + r"step [3-9] world 2", ex.logs(a.id), re.M), 120,
                           "the job to train on 2 GPUs")
            b = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release)], "gpus": 1})
            await wait_for(lambda: "held exit:" in ex.logs(a.id), 90, "the removed worker to end")
            text = ex.logs(a.id)
            assert "held exit: the others resumed first True" in text, text[-4000:]
            assert "resized in place: 2 -> 1 GPUs, CUDA_VISIBLE_DEVICES=0 ===" in text
            assert "could not leave the rendezvous" not in text
            await wait_for(lambda: b.state is JobState.running, 60, "job B to get the freed GPU")
            assert a.restarts == 0 and a.state is JobState.running
        finally:
            release.touch()
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())
