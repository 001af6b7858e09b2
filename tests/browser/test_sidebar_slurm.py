"""The sidebar of a JupyterLab whose scheduler runs jobs through the real two-node Slurm (issue
14), in Chromium: the Slurm nodes and their GPUs, no utilisation bar (the server cannot read it),
GPUs held by a job Schedulearn did not submit shown as held by that Slurm job, and a job of ours
on the GPUs Slurm bound."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.slurm import SlurmCluster

from .conftest import LabServer
from .test_sidebar import PANEL, open_sidebar, submit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab_traits(slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    d = tmp_path_factory.mktemp("sl-slurm-lab")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = slurm.conf  # the lab server inherits it
    slurm.cancel_all()
    try:
        yield {"executor": "slurm", "job_root": str(d / "jobs"), "store_url": f"sqlite:///{d / 'jobs.db'}",
               "tick": 0.2, "cancel_grace": 2.0, "inventory_interval": 1.0}
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        slurm.cancel_all()


def test_slurm_nodes_other_peoples_jobs_and_ours(lab_page: Any, lab_server: LabServer,
                                                 slurm: SlurmCluster) -> None:
    outside = slurm.run("sbatch", "--parsable", "--gres=gpu:3", "--nodelist=n2", "--output=/dev/null",
                        "--wrap", "sleep 120").stdout.strip()
    panel = open_sidebar(lab_page)
    for node in ("n1", "n2"):
        panel.locator(f'.jp-schedulearn-node[data-node="{node}"]').wait_for()
    held = panel.locator(".jp-schedulearn-gpu.jp-mod-outside", has_text=f"Slurm job {outside} (root)")
    held.first.wait_for(timeout=30_000)
    assert held.count() == 3
    assert panel.locator('.jp-schedulearn-node[data-node="n2"] .jp-schedulearn-node-usage').inner_text() \
        == "3/4 busy"
    assert panel.locator(f"{PANEL} .jp-schedulearn-util").count() == 0  # utilisation unknown: no bar
    job = submit(lab_server, "ours", 30, gpus=2)
    ours = panel.locator(f'.jp-schedulearn-gpu.jp-mod-busy[data-job-id="{job}"]')
    ours.first.wait_for(timeout=30_000)
    assert ours.count() == 2
    assert {c.get_attribute("data-node") for c in ours.all()} == {"n1"}  # n2 has one GPU left
    lab_server.api("DELETE", f"jobs/{job}")
    slurm.run("scancel", outside)
