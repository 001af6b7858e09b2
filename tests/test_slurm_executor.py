"""The Slurm executor against a real two-node Slurm (scripts/slurm-dev.sh: munged, slurmctld, two
slurmd, 4 fake GPUs each) — issue 14.

Jobs run as Slurm jobs where the policy placed them: Slurm binds their GPUs (two jobs on one node
get disjoint CUDA_VISIBLE_DEVICES, and the engine's books follow what Slurm bound); torchrun and
Horovod run across both nodes (srun); a cancel delivers SIGTERM; an elastic job resized 2->1->2
continues its step count; a node that goes down fails its job with a clear reason; a job submitted
to the partition by someone else holds its GPUs; the inventory comes from sinfo.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from schedulearn.engine import Engine, RealClock
from schedulearn.executors.slurm import SlurmExecutor
from schedulearn.jobfiles import EXIT_CODE_FILE
from schedulearn.model import JobSpec, JobState

from tests.fixtures.slurm import SlurmCluster

pytestmark = pytest.mark.slow

JOBS = Path(__file__).parent / "jobs"

WHERE = """\
import os
rank = os.environ.get("RANK", "0")
print(f"rank {rank} world {os.environ.get('WORLD_SIZE', '1')} node {os.environ.get('SLURMD_NODENAME')} "
      f"cvd {os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
"""

HVD_WHERE = """\
import os
import horovod.torch as hvd
import torch
hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
node, cvd = os.environ.get("SLURMD_NODENAME"), os.environ.get("CUDA_VISIBLE_DEVICES")
print(f"hvd rank {hvd.rank()} size {hvd.size()} sum {total.item():g} node {node} cvd {cvd}", flush=True)
hvd.shutdown()
"""


@pytest.fixture
def cluster(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    slurm.cancel_all()
    yield slurm
    slurm.cancel_all()


def executor(slurm: SlurmCluster, tmp_path: Path, root: str = "jobs", **kw) -> SlurmExecutor:
    """An executor for one engine's life (`run_jobs` closes it with the engine)."""
    kw.setdefault("cancel_grace", 3.0)
    return SlurmExecutor(tmp_path / root, slurm_env=slurm.env, poll_interval=0.3, **kw)


async def until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.1)


def run_jobs(ex: SlurmExecutor, specs: list[dict], timeout: float = 120, policy: str = "fifo",
             nodes=None, during=None) -> list:
    async def main():
        eng = Engine(nodes if nodes is not None else ex.nodes(), policy, executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            jobs = [eng.submit(s) for s in specs]
            if during is not None:
                await during(eng, jobs)
            try:
                await until(lambda: all(j.state.final for j in jobs), timeout, "the jobs to end")
            except AssertionError as e:
                states = [(j.id, j.state.value, j.alloc, j.reason) for j in jobs]
                queue = ex.cli.run("squeue", "-o", "%i %T %r %N %k")
                raise AssertionError(f"{e}: {states}; Slurm: {queue}") from None
            return jobs
        finally:
            eng.close()
            await asyncio.wait_for(task, 10)

    return asyncio.run(main())


def test_inventory_is_the_partitions_nodes_and_gres(cluster: SlurmCluster, tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path)
    nodes = ex.nodes()
    assert [(n.name, len(n.gpus), n.healthy) for n in nodes] == [("n1", 4, True), ("n2", 4, True)]
    assert ex.partition == "debug"  # the cluster's default
    cluster.set_node("n2", "drain")
    try:
        assert [n.healthy for n in ex.nodes()] == [True, False]
    finally:
        cluster.set_node("n2", "resume")


def test_two_jobs_on_one_node_get_disjoint_gpus_and_the_books_follow_slurm(cluster: SlurmCluster,
                                                                            tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path)
    hold = "import time; time.sleep(4)\n"
    a, b = run_jobs(ex, [{"name": "a", "script": WHERE + hold, "gpus": 2},
                         {"name": "b", "script": WHERE + hold, "gpus": 2}])
    logs = {j.id: ex.logs(j.id) for j in (a, b)}
    for j in (a, b):
        assert j.state is JobState.succeeded, j.reason + logs[j.id]
    cvd = {j.id: re.search(r"node n1 cvd (\S+)", logs[j.id]).group(1) for j in (a, b)}
    assert {cvd[a.id], cvd[b.id]} == {"0,1", "2,3"}, logs
    for j in (a, b):  # the engine's books say which GPUs Slurm bound (the sidebar shows them)
        assert j.last_alloc == {"n1": tuple(int(i) for i in cvd[j.id].split(","))}
        marker = r"=== schedulearn: Slurm job \d+ on n1: CUDA_VISIBLE_DEVICES="
        assert re.search(marker + cvd[j.id], logs[j.id])


def test_torchrun_across_both_nodes_has_the_whole_world(cluster: SlurmCluster, tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path)
    allreduce = ("import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                 "t = torch.tensor([float(dist.get_rank() + 1)]); dist.all_reduce(t)\n"
                 "print(f'sum {t.item():g} agent_store {os.environ.get(\"TORCHELASTIC_USE_AGENT_STORE\")}',"
                 " flush=True)\n")
    (job,) = run_jobs(ex, [{"name": "wide", "script": WHERE + allreduce, "gpus": 6, "launcher": "torchrun"}])
    text = ex.logs(job.id)
    assert job.state is JobState.succeeded, job.reason + text[-3000:]
    assert job.last_alloc == {"n1": (0, 1, 2, 3), "n2": (0, 1)}  # 4 + 2: a heterogeneous Slurm job
    ranks = dict(re.findall(r"rank (\d) world 6 node (n\d)", text))
    assert sorted(ranks) == [str(r) for r in range(6)], text[-3000:]
    assert sorted(ranks.values()) == ["n1"] * 4 + ["n2"] * 2
    assert text.count("sum 21 agent_store True") == 6  # rank 0's agent store, bound once and kept


@pytest.mark.parametrize("launcher", ["torchrun", "horovod"])
def test_a_rank_failing_on_the_second_node_fails_the_job_with_its_reason(
        cluster: SlurmCluster, tmp_path: Path, launcher: str) -> None:
    """Rank 5 (on n2) raises while the others wait in an all-reduce: the job fails at once (the
    runner's failing rank does not wait for the others; srun ends the other node's task), and its
    reason is rank 5's error, read through srun's `--label` and the launcher's rank prefix — not
    rank 0's lost connection to it, nor srun's SIGTERM of the other node's task."""
    ex = executor(cluster, tmp_path)
    script = ("import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
              "if dist.get_rank() == 5:\n    raise RuntimeError('rank 5 boom')\n"
              "dist.all_reduce(torch.ones(1))\n")
    if launcher == "horovod":
        script = ("import torch, horovod.torch as hvd\nhvd.init()\n"
                  "if hvd.rank() == 5:\n    raise RuntimeError('rank 5 boom')\n"
                  "hvd.allreduce(torch.ones(1), name='x')\n")
    (job,) = run_jobs(ex, [{"name": "one-fails", "script": script, "gpus": 6, "launcher": launcher,
                            "env": {"SCHEDULEARN_EXIT_WAIT": "900"}}], timeout=120)
    text = ex.logs(job.id)
    assert job.state is JobState.failed, job.reason + text[-3000:]
    assert job.reason == "RuntimeError: rank 5 boom", (job.reason, text[-3000:])
    assert job.exit_code == 1, text[-3000:]  # the launcher's on n2 (srun itself: 143, its SIGTERM)


def test_horovod_across_both_nodes(cluster: SlurmCluster, tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path)
    (job,) = run_jobs(ex, [{"name": "hvd", "script": HVD_WHERE, "gpus": 6, "launcher": "horovod"}],
                      timeout=180)
    text = ex.logs(job.id)
    assert job.state is JobState.succeeded, job.reason + text[-3000:]
    found = re.findall(r"hvd rank (\d) size 6 sum 21 node (n\d) cvd (\S+)", text)
    assert sorted(r for r, _, _ in found) == [str(r) for r in range(6)], text[-3000:]
    # 4 + 2 GPUs: each node's workers see that node's Slurm variables and devices, not the first's
    assert sorted((n, c) for _, n, c in found) == [("n1", "0,1,2,3")] * 4 + [("n2", "0,1")] * 2


def test_cancel_delivers_sigterm_and_the_job_ends_cancelled(cluster: SlurmCluster, tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path, cancel_grace=10)

    async def cancel_when_ready(eng, jobs):
        (job,) = jobs
        await until(lambda: "ready" in ex.logs(job.id), 60, "the job to run")
        eng.cancel(job.id)

    (job,) = run_jobs(ex, [{"name": "term", "command": [sys.executable, str(JOBS / "sigterm_job.py")],
                            "gpus": 1}], during=cancel_when_ready)
    text = ex.logs(job.id)
    assert job.state is JobState.cancelled and job.reason == "cancelled", (job.reason, text[-2000:])
    assert "got SIGTERM" in text
    assert not cluster.active_jobs()


def test_elastic_job_resized_2_1_2_continues_its_steps(cluster: SlurmCluster, tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path, cancel_grace=20)
    (n1,) = [n for n in ex.nodes() if n.name == "n1"]
    n1.gpus = n1.gpus[:2]  # Schedulearn manages 2 of n1's GPUs here: the second job forces a shrink
    release = tmp_path / "release"
    steps = 30

    async def contend(eng, jobs):
        (a,) = jobs
        await until(lambda: "step 3 world 2" in ex.logs(a.id), 120, "the job to train on 2 GPUs")
        b = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release)], "gpus": 1})
        await until(lambda: b.state is JobState.running and a.size == 1, 30, "the shrink")
        await until(lambda: re.search(r"step \d+ world 1", ex.logs(a.id)), 120, "the job to train on 1 GPU")
        release.touch()
        await until(lambda: b.state.final, 60, "the second job to end")
        await until(lambda: a.size == 2, 30, "the job to grow back")

    (a,) = run_jobs(ex, [{"name": "elastic", "command": ["python", str(JOBS / "elastic_train.py")],
                          "launcher": "torchrun", "gpus": "auto", "min_gpus": 1, "max_gpus": 2,
                          "env": {"TRAIN_STEPS": str(steps), "STEP_SLEEP": "0.2"}}],
                    policy="elastic-fifo", nodes=[n1], during=contend, timeout=240)
    text = ex.logs(a.id)
    assert a.state is JobState.succeeded, a.reason + text[-3000:]
    assert a.restarts == 2
    found = [(int(s), int(w)) for s, w in
             re.findall(r"^(?:\[rank\d+\]: )?step (\d+) world (\d) restart \d$", text, re.M)]
    assert [s for s, _ in found] == list(range(1, steps + 1)), found  # continuous over both resizes
    worlds = [w for i, (_, w) in enumerate(found) if i == 0 or found[i - 1][1] != w]
    assert worlds == [2, 1, 2]
    assert len(re.findall(r"=== schedulearn: Slurm job (\d+) on n1", text)) == 3  # a Slurm job per run


def test_a_node_that_goes_down_fails_its_job_with_a_clear_reason(cluster: SlurmCluster,
                                                                 tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path)
    (n2,) = [n for n in ex.nodes() if n.name == "n2"]

    async def node_down(eng, jobs):
        (job,) = jobs
        await until(lambda: "ready" in ex.logs(job.id), 60, "the job to run")
        cluster.set_node("n2", "down", "disk on fire")

    try:
        (job,) = run_jobs(ex, [{"name": "doomed", "command": [sys.executable, str(JOBS / "sigterm_job.py")],
                                "gpus": 1}], nodes=[n2], during=node_down)
    finally:
        cluster.set_node("n2", "resume")
    assert job.state is JobState.failed
    assert job.reason.startswith("a node of the job failed (Slurm: NODE_FAIL)"), job.reason


def test_a_program_missing_on_the_node_is_the_jobs_one_line_reason(cluster: SlurmCluster,
                                                                    tmp_path: Path) -> None:
    """The local executor refuses a missing program before a start (`check_command`); on Slurm the
    program runs on a node, where the batch shell said `worker-n1.sh: 15: exec: nope: not found`.
    One node and across both (torchrun's own program is there; a missing script is the
    program's own error)."""
    ex = executor(cluster, tmp_path)
    rel = {"name": "rel", "command": ["./not-here.sh"], "gpus": 1, "workdir": str(tmp_path)}
    one, path = run_jobs(ex, [{"name": "nope", "command": ["nope-xyz", "--x"], "gpus": 1}, rel])
    assert one.state is JobState.failed and one.exit_code == 127
    said = r"command: 'nope-xyz' not found on PATH on node n[12]"
    assert re.fullmatch(said, one.reason), one.reason  # the line, as the local executor says it
    assert path.state is JobState.failed and path.exit_code == 127
    assert "command: './not-here.sh' does not exist on node n" in path.reason, path.reason
    assert f"(relative to {tmp_path})" in path.reason, path.reason
    assert "exec:" not in ex.logs(one.id) + ex.logs(path.id)


def outside_job(cluster: SlurmCluster, asks: str = "--gres=gpu:3", node: str = "n1") -> str:
    """Someone's own `sbatch` holding 3 of n1's GPUs (or what `asks` says, on `node`) for 120 s,
    once running: its Slurm id."""
    outside = cluster.run("sbatch", "--parsable", asks, f"--nodelist={node}", "--output=/dev/null",
                          "--wrap", "sleep 120").stdout.strip()
    deadline = time.monotonic() + 30
    while not any(str(j["job_id"]) == outside and j["job_state"] == "RUNNING" for j in cluster.jobs()):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return outside


def test_a_job_submitted_outside_schedulearn_holds_its_gpus(cluster: SlurmCluster, tmp_path: Path) -> None:
    outside = outside_job(cluster)
    ex = executor(cluster, tmp_path)
    (n1, n2) = ex.nodes()
    held = [g.index for g in n1.gpus if g.held_by]
    assert len(held) == 3 and all(f"Slurm job {outside}" in g.held_by for g in n1.gpus if g.held_by)
    assert not any(g.held_by for g in n2.gpus)
    # two 2-GPU jobs: n1 has one GPU left, so both go to n2 (never onto the outside job's GPUs)
    a, b = run_jobs(ex, [{"name": "a", "script": WHERE, "gpus": 2},
                         {"name": "b", "script": WHERE, "gpus": 2}])
    assert a.state is JobState.succeeded and b.state is JobState.succeeded
    assert set(a.last_alloc) == set(b.last_alloc) == {"n2"}
    (one,) = run_jobs(executor(cluster, tmp_path, "jobs2"), [{"name": "one", "script": WHERE, "gpus": 1}])
    assert one.state is JobState.succeeded and list(one.last_alloc) == ["n1"]
    assert one.last_alloc["n1"][0] not in held


def test_a_job_placed_on_gpus_taken_outside_since_the_inventory_is_placed_anew(cluster: SlurmCluster,
                                                                               tmp_path: Path) -> None:
    """Someone's own sbatch takes 3 of n1's GPUs between two inventory reads (the server reads it
    every 30 s): the engine places a 2-GPU job on n1, where Slurm cannot start it. It waited there,
    shown running (its run time counted), while n2 stood idle; now the pending run is withdrawn,
    the inventory read again and the job placed on n2 — no restart counted, nothing of it ran."""
    ex = executor(cluster, tmp_path)
    stale = ex.nodes()  # read before the outside job came
    assert not any(g.held_by for n in stale for g in n.gpus)
    outside = outside_job(cluster)
    log = placed_anew_on_n2(ex, stale, gpus=2)
    said = (f"run #0 not started: its GPUs were taken outside the scheduler (n1: 3 of 4 GPUs held by "
            f"Slurm job {outside}); placed anew")
    assert said in log and log.count("=== schedulearn: start #0") == 2, log
    assert "node n2" in log


def placed_anew_on_n2(ex: SlurmExecutor, stale: list, gpus: int) -> str:
    """Run a job of `gpus` GPUs placed from the `stale` inventory (on n1, where Slurm cannot start
    it now): it ends on n2, not restarted, well before the outside job's 120 s. Its log."""
    started = time.monotonic()
    (job,) = run_jobs(ex, [{"name": "a", "script": WHERE, "gpus": gpus}], nodes=stale, timeout=60)
    log = ex.logs(job.id)
    assert job.state is JobState.succeeded, job.reason + log
    assert list(job.last_alloc) == ["n2"] and job.restarts == 0, (job.last_alloc, log)
    assert time.monotonic() - started < 30  # not after the outside job's 120 s
    return log


def test_a_cancel_in_slurm_outside_schedulearn_is_the_jobs_reason(cluster: SlurmCluster,
                                                                  tmp_path: Path) -> None:
    ex = executor(cluster, tmp_path)

    async def scancel(eng, jobs):
        (job,) = jobs
        await until(lambda: "ready" in ex.logs(job.id), 60, "the job to run")
        (slurm_id,) = [j["job_id"] for j in cluster.active_jobs()]
        cluster.run("scancel", str(slurm_id))

    (job,) = run_jobs(ex, [{"name": "victim", "command": [sys.executable, str(JOBS / "sigterm_job.py")],
                            "gpus": 1}], during=scancel)
    assert job.state is JobState.failed
    assert job.reason.startswith("cancelled in Slurm, not by the scheduler"), job.reason


def test_a_slurm_job_gets_the_allow_list_not_the_servers_environment(cluster: SlurmCluster, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULEARN_STORE_URL", "postgresql://sched:s3cret@db/schedulearn")
    monkeypatch.setenv("MY_SERVER_ONLY_SECRET", "s3cret")
    ex = executor(cluster, tmp_path)
    show = "import json, os\nprint('ENV=' + json.dumps(dict(os.environ)), flush=True)\n"
    (job,) = run_jobs(ex, [{"name": "env", "script": show, "gpus": 1, "env": {"MINE": "from the spec"}}])
    assert job.state is JobState.succeeded, job.reason
    (line,) = [x for x in ex.logs(job.id).splitlines() if x.startswith("ENV=")]
    env = json.loads(line[4:])
    assert "MY_SERVER_ONLY_SECRET" not in env and "SCHEDULEARN_STORE_URL" not in env
    assert "s3cret" not in line
    assert env["MINE"] == "from the spec" and env["SCHEDULEARN_JOB_ID"] == str(job.id)
    assert env["SLURM_JOB_ID"].isdigit()  # Slurm's own variables are there


def test_a_job_placed_where_slurm_has_no_cpu_left_is_placed_anew(cluster: SlurmCluster,
                                                                  tmp_path: Path) -> None:
    """Someone's own sbatch takes every CPU of n1 and no GPU: the engine, which counts GPUs, saw
    n1's GPUs free and placed a job there, where Slurm cannot start it (pending: Resources). It
    waited, shown running, for as long as the outside job ran (120 s here) while n2 stood idle;
    now the inventory marks n1's free GPUs held (its CPUs are all allocated), and a run placed
    there from an older inventory is withdrawn and placed anew on n2 — no restart counted."""
    ex = executor(cluster, tmp_path)
    stale = ex.nodes()
    outside = outside_job(cluster, "--cpus-per-task=8")
    (n1, n2) = ex.nodes()
    assert [g.held_by for g in n1.gpus] == [f"n1: all 8 CPUs allocated (Slurm job {outside})"] * 4
    assert not any(g.held_by for g in n2.gpus)
    log = placed_anew_on_n2(ex, stale, gpus=1)
    said = (f"run #0 not started: its node has no room (n1: all 8 CPUs allocated (Slurm job {outside})); "
            "placed anew")
    assert said in log and "node n2" in log, log


def test_a_run_waiting_in_slurms_queue_says_so_while_shown_running(cluster: SlurmCluster,
                                                                    tmp_path: Path) -> None:
    """Jobs of the cluster's own take 6 of the 8 CPUs of each node; a job of the scheduler asks
    for 4 CPUs per GPU (`slurm_sbatch_args`), so Slurm keeps it pending (Resources) on the node
    the engine placed it on, where its GPUs are free. It is shown running (the engine cannot
    know better), but its reason now says where it waits — `waiting in Slurm's queue
    (Resources: …)`, an event — until it runs, and then no more."""
    from schedulearn.engine import RUN_NOTE

    outside = [outside_job(cluster, "--cpus-per-task=6", node) for node in ("n1", "n2")]
    ex = executor(cluster, tmp_path, sbatch_args=["--cpus-per-gpu=4"])
    ex.pending_note_s = 1.0
    said: list[str] = []

    async def watch(eng, jobs):
        (job,) = jobs
        eng.listeners.append(lambda e: e.get("event") == "run_note" and said.append(e["job"]["reason"]))
        await until(lambda: RUN_NOTE in job.extra, 30, "the run's wait to be said")
        assert job.state is JobState.running
        assert eng.job_dict(job, time.time())["reason"] == job.extra[RUN_NOTE]
        for slurm_id in outside:
            cluster.run("scancel", slurm_id)
        await until(lambda: "rank 0" in ex.logs(job.id), 60, "the job to run")
        await until(lambda: RUN_NOTE not in job.extra, 10, "the note to go once it runs")
        assert job.state is JobState.running and eng.job_dict(job, time.time())["reason"] == ""

    script = WHERE + "import time\ntime.sleep(3)\n"
    (job,) = run_jobs(ex, [{"name": "a", "script": script, "gpus": 1}], during=watch, timeout=90)
    assert job.state is JobState.succeeded, job.reason + ex.logs(job.id)
    node = next(iter(job.last_alloc))
    assert said == [f"waiting in Slurm's queue (Resources: what it asks for (GPUs, CPUs, memory) is not free "
                    f"on {node} yet)", ""], said


def test_a_new_run_is_not_ended_by_the_exit_code_its_previous_run_left(cluster: SlurmCluster,
                                                                       tmp_path: Path) -> None:
    """A relaunch (a resize) that a poll has not seen yet (its squeue read came just before the
    sbatch) is not ended by the `exit_code` its previous run wrote (143: stopped for the resize):
    the launch removes that file. (Seen: a job resized while the server restarted failed `ended by
    SIGTERM, not by the scheduler` while its new run went on to finish.)"""
    ex = executor(cluster, tmp_path)
    try:
        d = ex.job_dir(7)
        d.mkdir(parents=True)
        (d / EXIT_CODE_FILE).write_text("143\n")  # run #0's, stopped for a resize
        spec = JobSpec(command=["sleep", "30"], gpus=1)
        run = ex._launch(7, spec, {"n1": (0,)}, 1)
        ex._poll_once([])  # a poll whose squeue read predates the sbatch: the run not listed
        assert run.code is None and not run.gone.is_set(), (run.code, ex.logs(7))
        assert [j["job_state"] for j in cluster.active_jobs()] in (["PENDING"], ["RUNNING"])
    finally:
        cluster.cancel_all()
        ex.close()


def test_a_held_job_of_ours_that_no_run_tracks_is_cancelled_as_an_orphan(cluster: SlurmCluster,
                                                                         tmp_path: Path) -> None:
    """An `sbatch` whose answer a crash lost may reach Slurm only after the restarted server looked
    for it (the run was submitted again meanwhile): a held job with this server's tag that no run
    tracks. The poll cancels it once it has been so for `orphan_grace` s; another server's held
    job (another tag) and someone's own held job stay."""
    ex = executor(cluster, tmp_path)
    ex.orphan_grace = 1.0

    def held(*comment: str) -> str:
        return cluster.run("sbatch", "--parsable", "--hold", "--gres=gpu:1", "--output=/dev/null", *comment,
                           "--wrap", "sleep 1").stdout.strip()

    orphan, other = held(f"--comment={ex.tag}:7:0"), held("--comment=schedulearn:0123456789:7:0")
    someones = held()
    (a,) = run_jobs(ex, [{"name": "a", "script": "import time; time.sleep(4)\n", "gpus": 1}])
    assert a.state is JobState.succeeded, a.reason + ex.logs(a.id)
    states = {str(j["job_id"]): (j["job_state"], j.get("state_reason")) for j in cluster.jobs()}
    assert states.get(orphan, ("CANCELLED",))[0] == "CANCELLED", states
    assert states[other] == states[someones] == ("PENDING", "JobHeldUser"), states


def test_the_exit_code_a_batch_script_writes_is_read_a_few_bytes_at_most(tmp_path: Path) -> None:
    """The job directory's `exit_code` is the job's to write (its batch script runs as the job's
    account), and the run's `job` file lies in the job's directory: a 64 GiB one (sparse) costs
    each poll a few bytes, not a MemoryError. No Slurm needed."""
    from schedulearn.executors.slurm import JOB_ID_FILE, RUN_DIR, _Run

    ex = SlurmExecutor(tmp_path / "jobs")
    run_dir = ex.job_dir(1) / RUN_DIR.format(restarts=0)
    run_dir.mkdir(parents=True)
    (run_dir / JOB_ID_FILE).write_text(json.dumps({"slurm_id": 41, "restarts": 0}))
    run = _Run(job_id=1, restarts=0, slurm_id=41)
    with open(ex.job_dir(1) / EXIT_CODE_FILE, "wb") as f:
        f.write(b"3\n")
        f.truncate(64 << 30)
    assert ex._exit_code(run) is None  # not a number: NUL bytes follow
    (ex.job_dir(1) / EXIT_CODE_FILE).write_bytes(b"3\n")
    assert ex._exit_code(run) == 3
    with open(run_dir / JOB_ID_FILE, "ab") as f:  # the server's, but in the job's directory
        f.truncate(64 << 30)
    assert ex._exit_code(run) is None
