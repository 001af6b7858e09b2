"""A `%%schedulearn --gpus 2` cell through a real Jupyter server whose scheduler runs jobs through
the real two-node Slurm (`SchedulearnApp.executor = "slurm"`, issue 14): the cell runs as a Slurm
job on two of a node's fake GPUs and its value comes back; `GET gpus` lists Slurm's nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.fixtures.jupyter import LiveServer, kernel_env
from tests.fixtures.slurm import SlurmCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """This module's Jupyter server: the slurm executor (the conftest's `shell` talks to it)."""
    home = tmp_path_factory.mktemp("slurm-server")
    traits = {"executor": "slurm", "job_root": str(home / "jobs"), "tick": 0.2, "inventory_interval": 0,
              "store_url": f"sqlite:///{home / 'jobs.db'}", "cancel_grace": 2.0}
    srv = LiveServer(home / "srv", traits)
    srv.env.update(slurm.env)
    srv.env["SCHEDULEARN_SLURM_POLL_INTERVAL"] = "0.3"
    srv.start()
    try:
        with kernel_env(srv):
            yield srv
    finally:
        slurm.cancel_all()


def test_a_cell_runs_as_a_slurm_job_and_its_value_comes_back(shell: InteractiveShell, client) -> None:
    nodes = client.gpus()["nodes"]
    assert [(n["name"], len(n["gpus"])) for n in nodes] == [("n1", 4), ("n2", 4)]
    r = shell.run_cell("%%schedulearn --gpus 2 --name on-slurm -o got\n"
                       "import os\n"
                       "{'slurm_job': os.environ['SLURM_JOB_ID'], 'node': os.environ['SLURMD_NODENAME'],\n"
                       " 'gpus': os.environ['CUDA_VISIBLE_DEVICES']}")
    assert r.success, r.error_in_exec
    value = r.result
    assert value["node"] in ("n1", "n2") and value["slurm_job"].isdigit()
    assert len(value["gpus"].split(",")) == 2  # Slurm bound two of the node's GPUs
    assert shell.user_ns["got"] == value
    (job,) = [j for j in client.jobs() if j["name"] == "on-slurm"]
    assert job["state"] == "succeeded" and job["last_alloc"] == {
        value["node"]: [int(i) for i in value["gpus"].split(",")]}
