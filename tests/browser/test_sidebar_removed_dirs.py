"""A JupyterLab whose scheduler removes ended jobs' directories soon (`keep_job_dirs`): a job
whose directory is gone keeps its row in the sidebar, in real Chromium, with Logs greyed out and
saying why (its log is gone), instead of a Logs button that opens an error."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .test_sidebar import open_sidebar, row

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab_traits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d: Path = tmp_path_factory.mktemp("rd")
    return {"virtual_gpus": 2, "executor": "local", "job_root": str(d / "jobs"),
            "store_url": f"sqlite:///{d / 'jobs.db'}", "tick": 0.2, "keep_job_dirs": "1"}


def test_a_job_whose_directory_was_removed_greys_out_its_logs(lab_server: Any, lab_page: Any) -> None:
    status, job = lab_server.api("POST", "jobs", {"name": "short-lived", "command": ["echo", "hello"]})
    assert status == 201, job
    t0 = time.monotonic()
    while "files_removed" not in (done := lab_server.api("GET", f"jobs/{job['id']}")[1]):
        assert time.monotonic() - t0 < 30, done
        time.sleep(0.2)
    assert done["state"] == "succeeded"
    status, said = lab_server.api("GET", f"jobs/{job['id']}/logs")
    assert status == 404 and "directory was removed on" in said["error"], said
    open_sidebar(lab_page)
    logs = row(lab_page, job["id"]).locator("button.jp-schedulearn-logs")
    logs.wait_for(timeout=30_000)
    assert logs.is_disabled()
    assert "log was removed with its directory" in logs.get_attribute("title")
