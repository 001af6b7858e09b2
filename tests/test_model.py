"""The model: JobSpec validation (one-line errors naming the field), sizes, Job accounting."""

from __future__ import annotations

import json

import pytest
from schedulearn import policies
from schedulearn.model import Job, JobSpec, JobState, SpecError, parse_cluster, virtual_cluster


def error(data) -> str:
    with pytest.raises(SpecError) as e:
        JobSpec.parse(data)
    msg = str(e.value)
    assert "\n" not in msg  # one line
    return msg


@pytest.mark.parametrize("data, expected", [
    ({"command": ["x"], "gpus": 0}, "gpus: expected an integer >= 1 or 'auto', got 0"),
    ({"command": ["x"], "gpus": -2}, "gpus: expected an integer >= 1 or 'auto', got -2"),
    ({"command": ["x"], "gpus": "many"}, "gpus: expected an integer >= 1 or 'auto', got 'many'"),
    ({"command": ["x"], "gpus": True}, "gpus: expected an integer >= 1 or 'auto', got True"),
    ({"command": ["x"], "launcher": "mpirun"},
     "launcher: expected one of python, torchrun, horovod, got 'mpirun'"),
    ({"command": ["x"], "script": "print(1)"}, "command: give either command or script, not both"),
    ({}, "command: give a command (argv list) or a script (Python source)"),
    ({"command": []}, "command: expected a non-empty argv list"),
    ({"command": ["x"], "min_gpus": 3, "max_gpus": 2}, "min_gpus: must be <= max_gpus (2), got 3"),
    ({"command": ["x"], "gpus": 2, "min_gpus": 3}, "min_gpus: must be <= gpus (2), got 3"),
    ({"command": ["x"], "gpus": 4, "max_gpus": 2}, "max_gpus: must be >= gpus (4), got 2"),
])
def test_bad_specs_are_one_line_naming_the_field(data, expected):
    assert error(data) == expected


def test_unknown_field_lists_the_allowed_ones():
    msg = error({"command": ["x"], "gpu": 2})
    assert msg.startswith("gpu: unknown field; allowed: name, command, script, gpus,")


def test_unknown_policy_lists_the_available_ones():
    with pytest.raises(SpecError) as e:
        policies.create("sjf")
    assert str(e.value) == ("policy: unknown 'sjf'; available: "
                            + ", ".join(p["name"] for p in policies.available()))
    assert {"fifo", "elastic-fifo", "round-robin", "las"} <= {p["name"] for p in policies.available()}


@pytest.mark.parametrize("text", ["4", "x8", "0x8", "4x0", "axb", "4x8x2", ""])
def test_bad_cluster(text):
    with pytest.raises(SpecError, match=r"^cluster: expected HxG with H hosts and G GPUs each"):
        parse_cluster(text)


def test_cluster():
    nodes = parse_cluster("3X2")
    assert [n.name for n in nodes] == ["node0", "node1", "node2"]
    assert [[g.index for g in n.gpus] for n in nodes] == [[0, 1]] * 3
    assert all(n.virtual and n.healthy for n in nodes)


def test_sizes():
    rigid = JobSpec(command=["x"], gpus=4)
    assert (rigid.min_size, rigid.requested, rigid.max_size(64), rigid.elastic) == (4, 4, 4, False)
    ranged = JobSpec(command=["x"], gpus=2, max_gpus=8)
    assert (ranged.min_size, ranged.requested, ranged.max_size(64), ranged.elastic) == (2, 2, 8, True)
    assert ranged.max_size(6) == 6  # never more than the cluster
    auto = JobSpec(command=["x"], gpus="auto", min_gpus=2, launcher="torchrun")
    assert (auto.min_size, auto.requested, auto.max_size(16), auto.elastic) == (2, 2, 16, True)
    assert JobSpec(command=["x"], gpus="auto").min_size == 1
    # a GPU count above a minimum: that many, or fewer down to the minimum (goodput, elastic-fifo
    # size it between the two; a rigid policy gives it its count); before, goodput held it at 1
    shrinks = JobSpec(command=["x"], gpus=2, min_gpus=1, launcher="torchrun")
    assert (shrinks.min_size, shrinks.requested, shrinks.max_size(64), shrinks.elastic) == (1, 2, 2, True)


def test_auto_single_process_jobs_are_capped_at_their_minimum_unless_max_gpus_says_more():
    """A plain Python job (one process) cannot use the GPUs `--gpus auto` could give it."""
    one = JobSpec(script="print(1)", gpus="auto")
    assert (one.single_process, one.max_size(16), one.elastic) == (True, 1, False)
    two = JobSpec(script="print(1)", gpus="auto", min_gpus=2)
    assert (two.max_size(16), two.elastic) == (2, False)
    spawns = JobSpec(script="print(1)", gpus="auto", max_gpus=4)
    assert (spawns.max_size(16), spawns.elastic) == (4, True)
    for launcher in ("torchrun", "horovod"):
        assert JobSpec(script="x", gpus="auto", launcher=launcher).max_size(16) == 16
    simulated = JobSpec(application="cifar10", gpus="auto")  # a model of a distributed job
    assert (simulated.single_process, simulated.max_size(16)) == (False, 16)


def test_job_service_accounting():
    job = Job(id=1, spec=JobSpec(duration=10), submit_time=0.0)
    assert job.attained(100) == 0 and job.run_time(100) == 0
    job.set_alloc({"a": (0, 1), "b": (3,)}, 10.0)
    assert job.size == 3
    assert job.attained(20) == pytest.approx(30) and job.run_time(20) == pytest.approx(10)
    job.set_alloc({"a": (0,)}, 20.0)  # shrink: the service so far is kept
    assert job.attained(30) == pytest.approx(40) and job.run_time(30) == pytest.approx(20)
    job.set_alloc({}, 30.0)  # preempted: no more service while queued
    assert job.attained(1000) == pytest.approx(40) and job.run_time(1000) == pytest.approx(20)


def test_job_to_dict_is_json():
    job = Job(id=7, spec=JobSpec(name="n", command=["python", "t.py"], gpus=2), submit_time=5.0)
    job.set_alloc({"node0": (0, 1)}, 6.0)
    job.state = JobState.running
    d = json.loads(json.dumps(job.to_dict(now=16.0)))
    assert d["id"] == 7 and d["state"] == "running" and d["gpus"] == 2
    assert d["alloc"] == {"node0": [0, 1]} and d["attained_gpu_s"] == 20.0
    assert d["spec"]["command"] == ["python", "t.py"]
    assert JobSpec.parse(d["spec"]) == job.spec  # the wire format goes back to the model


def test_final_states():
    assert [s.value for s in JobState if s.final] == ["succeeded", "failed", "cancelled"]


def test_virtual_cluster_gpu_ids_are_unique():
    uuids = [g.uuid for n in virtual_cluster(3, 4) for g in n.gpus]
    assert len(set(uuids)) == 12
