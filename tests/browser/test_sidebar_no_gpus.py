"""A JupyterLab on a machine without GPUs and no virtual GPUs declared (a laptop after `pip
install`): the server's log warns and says what to do, `GET gpus` says why it is empty, a
submission is refused with that reason instead of 'gpus: at most 0', and the sidebar, in real
Chromium, says there are no GPUs and how to declare virtual ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from schedulearn.inventory import discover

from .test_sidebar import open_sidebar

pytestmark = pytest.mark.slow

HINT = "SCHEDULEARN_VIRTUAL_GPUS=4"


@pytest.fixture(scope="module")
def lab_traits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if any(n.gpus for n in discover(0)):
        pytest.skip("this machine has GPUs: the extension finds them without virtual ones")
    d: Path = tmp_path_factory.mktemp("sl")
    return {"virtual_gpus": 0, "executor": "local", "job_root": str(d / "jobs"),
            "store_url": f"sqlite:///{d / 'jobs.db'}", "tick": 0.2}


def test_no_gpus_is_explained_everywhere(lab_server: Any, lab_page: Any, shot: Any) -> None:
    warned = [line for line in lab_server.output().splitlines() if "has no GPUs" in line]
    assert len(warned) == 1 and "[W " in warned[0] and HINT in warned[0], lab_server.output()[-3000:]

    status, gpus = lab_server.api("GET", "gpus")
    assert status == 200 and sum(len(n["gpus"]) for n in gpus["nodes"]) == 0
    assert gpus["note"].startswith("this scheduler has no GPUs: none on this host (") and HINT in gpus["note"]

    status, refused = lab_server.api("POST", "jobs", {"command": ["true"], "gpus": 1})
    assert status == 400 and refused["error"] == f"gpus: {gpus['note']}", refused
    status, listed = lab_server.api("GET", "jobs")
    assert status == 200 and listed["jobs"] == []  # nothing half-written

    panel = open_sidebar(lab_page)
    empty = panel.locator(".jp-schedulearn-gpus .jp-schedulearn-empty")
    empty.wait_for(state="visible")
    said = empty.inner_text()
    assert said.startswith("No GPUs: the scheduler has none now.") and HINT in said, said
    shot(lab_page, "sidebar-no-gpus", panel)
