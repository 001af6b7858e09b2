"""A job gets a clean environment, not the server's (issue 10): a real `jupyter server` with the
extension, started with secrets and settings in its environment, runs a REST job (a `script`,
torchrun) that prints its environment; only the allow-list and the job's own variables are
there."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from schedulearn.client import Client
from schedulearn.executors.launch import RUNNER

from tests.fixtures.jupyter import LiveServer

SHOW_ENV = """\
import json, os
if os.environ.get("RANK", "0") == "0":
    print("ENV=" + json.dumps(dict(os.environ)), flush=True)
"""


def test_a_job_sees_the_allow_list_not_the_servers_environment(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    traits = {"virtual_gpus": 2, "executor": "local", "job_root": str(tmp_path / "jobs"), "store_url": store,
              "tick": 0.2, "inventory_interval": 0, "cancel_grace": 2.0}
    srv = LiveServer(tmp_path / "srv", traits)
    (tmp_path / "scratch").mkdir()
    srv.env.update({
        "SCHEDULEARN_STORE_URL": store,  # the shared set-up's holds the database password
        "SCHEDULEARN_TEST_SERVER_SETTING": "server-only",
        "MY_SERVER_ONLY_SECRET": "s3cret",
        "AWS_SECRET_ACCESS_KEY": "aws-s3cret",
        "LANG": "C.UTF-8", "TZ": "Europe/Zurich", "TMPDIR": str(tmp_path / "scratch"), "NCCL_DEBUG": "WARN",
    })
    srv.start()
    try:
        client = Client(srv.url, srv.token)
        job = client.submit({"name": "show-env", "script": SHOW_ENV, "gpus": 1, "launcher": "torchrun",
                             "env": {"MINE": "from the spec"}})
        deadline = time.monotonic() + 120
        while (state := client.job(job["id"])["state"]) not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        log = client.logs(job["id"])
        assert state == "succeeded", log
    finally:
        srv.stop()
    assert RUNNER in log.splitlines()[0]  # a REST job's script under torchrun goes through the runner
    (line,) = [x for x in log.splitlines() if x.startswith("ENV=")]
    env = json.loads(line[4:])
    for leaked in ("SCHEDULEARN_STORE_URL", "SCHEDULEARN_TEST_SERVER_SETTING", "MY_SERVER_ONLY_SECRET",
                   "AWS_SECRET_ACCESS_KEY", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR"):
        assert leaked not in env, leaked
    assert not {"s3cret", "aws-s3cret", store} & set(env.values())
    assert {k for k in env if k.startswith("SCHEDULEARN_")} == {
        "SCHEDULEARN_JOB_ID", "SCHEDULEARN_JOB_DIR", "SCHEDULEARN_RESTART_COUNT", "SCHEDULEARN_NUM_GPUS",
        "SCHEDULEARN_RESULT_KEY"}
    assert env["SCHEDULEARN_JOB_ID"] == str(job["id"]) and env["CUDA_VISIBLE_DEVICES"] in ("0", "1")
    assert env["MINE"] == "from the spec"
    assert (env["LANG"], env["TZ"], env["TMPDIR"], env["NCCL_DEBUG"]) == (
        "C.UTF-8", "Europe/Zurich", str(tmp_path / "scratch"), "WARN")
    assert env["HOME"] == os.environ["HOME"]
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert env["WORLD_SIZE"] == "1"  # the launcher's
    # one host: the workers share the agent's rendezvous store (no port picked by bind-and-close)
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True" and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env
