"""The sidebar of a user who may not switch the policy, in real Chromium: a `jupyter lab` whose
extension uses a shared `schedulearn serve --tokens --admins carol` with alice's token shows the
policy selector disabled, with the tooltip saying why, and still follows a switch by an admin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from schedulearn.client import Client

from tests.conftest import ROOT
from tests.fixtures.jupyter import free_port, wait_http

from .test_sidebar import open_sidebar, row, wait_until

pytestmark = pytest.mark.slow

READ_ONLY_TIP = "Only the scheduler's admins can switch the policy"


@pytest.fixture(scope="module")
def shared_serve(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("serve")
    tokens = home / "tokens.json"
    tokens.write_text(json.dumps({"alice-token": "alice", "carol-token": "carol"}))
    tokens.chmod(0o600)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
    with open(home / "serve.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(port), "--tokens", str(tokens),
             "--admins", "carol", "--executor", "sim", "--virtual-gpus", "2", "--tick", "0.2",
             "--store", f"sqlite:///{home / 'serve.db'}", "--job-root", str(home / "jobs")],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_http(url + "schedulearn/api/policy", proc=proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.fixture(scope="module")
def lab_traits(shared_serve: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d: Path = tmp_path_factory.mktemp("sl")
    return {"remote_url": shared_serve, "remote_token": "alice-token", "job_root": str(d / "jobs")}


def test_policy_selector_is_read_only_for_a_non_admin(lab_page: Any, shared_serve: str, shot: Any) -> None:
    panel = open_sidebar(lab_page)
    select = panel.locator("select.jp-schedulearn-policy")
    wait_until(lambda: select.get_attribute("data-policy") == "fifo", what="the panel's policy")
    assert select.is_disabled()
    assert select.get_attribute("title") == READ_ONLY_TIP
    assert "jp-mod-readonly" in (select.get_attribute("class") or "")
    shot(lab_page, "sidebar-policy-read-only", panel)
    # the palette command is disabled too
    enabled = lab_page.evaluate(
        "() => window.jupyterapp.commands.isEnabled('schedulearn:set-policy', {policy: 'las'})")
    assert enabled is False
    # an admin's switch still shows, and the selector stays read-only
    assert Client(shared_serve, "carol-token").set_policy("las") == "las"
    lab_page.evaluate("() => window.jupyterapp.commands.execute('schedulearn:refresh')")
    wait_until(lambda: select.get_attribute("data-policy") == "las", what="the admin's switch")
    assert select.input_value() == "las" and select.is_disabled()


def test_another_users_job_cannot_be_cancelled_or_its_log_read_from_the_sidebar(
        lab_page: Any, shared_serve: str, shot: Any) -> None:
    """On a shared scheduler a job's log is its user's (403 for others), and so is cancelling
    it: the sidebar showed both buttons on everyone's jobs, and each click ended in an error."""
    theirs = Client(shared_serve, "carol-token").submit({"name": "carols", "duration": 3600.0,
                                                         "env": {"API_KEY": "carol's"}})
    mine = Client(shared_serve, "alice-token").submit({"name": "alices", "duration": 3600.0})
    open_sidebar(lab_page)
    lab_page.evaluate("() => window.jupyterapp.commands.execute('schedulearn:refresh')")
    wait_until(lambda: row(lab_page, theirs["id"]).count() and row(lab_page, mine["id"]).count(),
               what="both jobs in the panel")
    other, own = row(lab_page, theirs["id"]), row(lab_page, mine["id"])
    assert other.locator("button.jp-schedulearn-cancel").is_disabled()
    assert other.locator("button.jp-schedulearn-cancel").get_attribute("title") == \
        f"Job #{theirs['id']} is carol's: only they or an admin may cancel it"
    assert other.locator("button.jp-schedulearn-logs").is_disabled()
    assert other.locator("button.jp-schedulearn-logs").get_attribute("title") == \
        f"Job #{theirs['id']} is carol's: only they may read its log"
    assert own.locator("button.jp-schedulearn-cancel").is_enabled()
    assert own.locator("button.jp-schedulearn-logs").is_enabled()
    shot(lab_page, "sidebar-another-users-job", other)
