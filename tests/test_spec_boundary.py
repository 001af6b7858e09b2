"""`JobSpec.parse` at the boundary: strict types, and specs that can never launch refused with one
line naming the field (the server answers 400 with it; tests/test_server_boundary.py)."""

from __future__ import annotations

import pytest
from schedulearn.model import JobSpec, SpecError
from schedulearn.store import SqlStore

OK = {"command": ["true"]}


@pytest.mark.parametrize("extra, error", [
    ({"gpus": "2"}, "gpus: expected an integer >= 1 or 'auto', got '2'"),
    ({"gpus": 2.0}, "gpus: expected an integer >= 1 or 'auto', got 2.0"),
    ({"gpus": True}, "gpus: expected an integer >= 1 or 'auto', got True"),
    ({"min_gpus": "1"}, "min_gpus: expected an integer >= 1, got '1'"),
    ({"max_gpus": 4.0}, "max_gpus: expected an integer >= 1, got 4.0"),
    ({"priority": "3"}, "priority: expected an integer, got '3'"),
    ({"adaptive_batch": "yes"}, "adaptive_batch: expected true or false, got 'yes'"),
    ({"adaptive_batch": 1}, "adaptive_batch: expected true or false, got 1"),
    ({"batch_size": "64"}, "batch_size: expected an integer >= 1, got '64'"),
    ({"env": {"A=B": "1"}}, "env: names must match [A-Za-z_][A-Za-z0-9_]* (a shell identifier), got 'A=B'"),
    ({"env": {"1BAD": "1"}}, "env: names must match [A-Za-z_][A-Za-z0-9_]* (a shell identifier), got '1BAD'"),
    ({"env": {"A\x00B": "1"}}, "env: names must match [A-Za-z_][A-Za-z0-9_]* (a shell identifier), got "),
    ({"env": {"": "1"}}, "env: names must match "),
    ({"env": {"OK": "a\x00b"}}, "env: NUL characters (\\u0000) are not allowed in a value (OK)"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "3"}},
     "env: CUDA_VISIBLE_DEVICES is set by the scheduler for every job (the GPUs it is given, its folder and "
     "run); leave it out"),
    ({"env": {"SCHEDULEARN_JOB_DIR": "/tmp"}}, "env: SCHEDULEARN_JOB_DIR is set by the scheduler for"),
    ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env: NVIDIA_VISIBLE_DEVICES is set by the scheduler for"),
    ({"command": ["echo", "a\x00b"]}, "command: NUL characters (\\u0000) are not allowed in an argument"),
    ({"command": ["echo", "\udfff"]}, "command: lone surrogate characters (\\ud800-\\udfff) are not allowed"),
    ({"env": {"OK": "\ud800"}}, "env: lone surrogate characters"),
    ({"env": {"\udfff": "x"}}, "env: names must match "),
    ({"name": "x\udfff"}, "name: lone surrogate characters"),
    ({"name": "a\tb"}, "name: control characters (tab, newline, escape, ...) are not allowed, got 'a\\tb'"),
    ({"name": "a\nb"}, "name: control characters (tab, newline, escape, ...) are not allowed, got 'a\\nb'"),
    ({"name": "\x1b[2J"}, "name: control characters (tab, newline, escape, ...) are not allowed, "
                           "got '\\x1b[2J'"),
    ({"name": "a\x9b"}, "name: control characters"),  # C1 too
    ({"command": None, "script": "print('\udfff')"}, "script: lone surrogate characters"),
    ({"workdir": "/tmp/\udc80"}, "workdir: lone surrogate characters"),
    ({"workdir": "data"}, "workdir: expected an absolute path (on the machine the job runs on), got 'data'"),
    ({"workdir": "."}, "workdir: expected an absolute path"),
    ({"workdir": ""}, "workdir: expected an absolute path (on the machine the job runs on), got ''"),
    ({"workdir": "/tmp/a\x00b"}, "workdir: NUL characters (\\u0000) are not allowed"),
    ({"time_limit": 0}, "time_limit: expected a number of seconds > 0 and <= 31536000 (a year), got 0"),
    ({"time_limit": "2h"}, "time_limit: expected a number of seconds > 0 and <= 31536000 (a year), got '2h'"),
    ({"time_limit": 4e7}, "time_limit: expected a number of seconds > 0 and <= 31536000 (a year), got 4"),
    ({"time_limit": float("nan")}, "time_limit: expected a number of seconds > 0"),
    ({"time_limit": True}, "time_limit: expected a number of seconds > 0"),
])
def test_specs_that_cannot_launch_or_are_mistyped_are_one_line_errors(extra, error):
    with pytest.raises(SpecError) as e:
        JobSpec.parse({**OK, **extra})
    assert str(e.value).startswith(error), str(e.value)
    assert "\n" not in str(e.value)
    str(e.value).encode("utf-8")  # the message itself is printable/encodable (no surrogate in it)


@pytest.mark.parametrize("extra", [
    {"gpus": 2}, {"gpus": "auto"}, {"min_gpus": 1, "max_gpus": 4, "gpus": "auto"}, {"priority": -3},
    {"env": {"_A1": "x=y", "PATH_2": "é ✓ 🚀", "a": ""}}, {"name": "日本語 job ✓"},
    {"command": ["echo", "🚀"]}, {"workdir": "/home/me/é"}, {"duration": 5}, {"duration": 2.5},
    {"adaptive_batch": True}, {"time_limit": 1}, {"time_limit": 0.5}, {"time_limit": 31536000},
])
def test_good_specs_still_parse(extra):
    spec = JobSpec.parse({**OK, **extra})
    for key, value in extra.items():
        assert getattr(spec, key) == value


def test_the_store_reads_back_a_spec_stored_before_the_stricter_checks(tmp_path):
    """A job submitted by an older version (an env name that is not an identifier) still loads: the
    launch checks are made on user input, not on what the store holds."""
    from schedulearn.model import Job

    old = JobSpec(command=["true"], env={"1BAD": "x"})  # built in code: no boundary checks
    with SqlStore(f"sqlite:///{tmp_path / 'j.db'}") as store:
        store.add_job(Job(id=1, spec=old, submit_time=0.0))
        (back,) = store.load_jobs()
    assert back.spec.env == {"1BAD": "x"}
    with pytest.raises(SpecError):
        JobSpec.parse(old.model_dump())


def test_the_variables_a_spec_may_not_set_are_those_the_scheduler_sets():
    """What `SCHEDULER_ENV` refuses in a spec's `env` is what every job's environment gets from
    the scheduler (and so would override without a word): a `--env CUDA_VISIBLE_DEVICES=3` ran
    on the GPU the job was given, not on 3."""
    from schedulearn.executors.docker import NVIDIA_VISIBLE
    from schedulearn.executors.launch import job_env
    from schedulearn.model import SCHEDULER_ENV

    set_by_scheduler = set(job_env(7, "/jobs/7", 2, 4, result_key="k")) - {"PYTHONUNBUFFERED"}
    containers = {NVIDIA_VISIBLE, "SCHEDULEARN_HOST_GPUS"}  # (the Docker executor's, over the image's)
    assert set_by_scheduler | {"CUDA_VISIBLE_DEVICES"} | containers == SCHEDULER_ENV
    assert JobSpec.parse({**OK, "env": {"SCHEDULEARN_RANK_PREFIX": "0"}}).env  # a job's own switch
