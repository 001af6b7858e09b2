"""The sidebar of a scheduler's admin, in real Chromium: a `jupyter lab` whose extension uses a
shared `schedulearn serve --tokens --admins carol` with carol's token may cancel another user's
job (an operator stopping a runaway job); the dialog says whose it is, and the job's reason names
the admin. Before, Cancel was greyed out on every job not carol's, and the server refused it.
"""

from __future__ import annotations

from typing import Any

import pytest
from schedulearn.client import Client

from .test_sidebar import open_sidebar, row, wait_until
from .test_sidebar_readonly import shared_serve  # noqa: F401 (the module's shared scheduler)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab_traits(shared_serve: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    d = tmp_path_factory.mktemp("sl")
    return {"remote_url": shared_serve, "remote_token": "carol-token", "job_root": str(d / "jobs")}


def test_an_admin_cancels_another_users_job_from_the_sidebar(
        lab_page: Any, shared_serve: str, shot: Any) -> None:  # noqa: F811
    alice = Client(shared_serve, "alice-token")
    theirs = alice.submit({"name": "runaway", "duration": 3600.0})
    panel = open_sidebar(lab_page)
    lab_page.evaluate("() => window.jupyterapp.commands.execute('schedulearn:refresh')")
    wait_until(lambda: row(lab_page, theirs["id"]).count(), what="alice's job in the panel")
    other = row(lab_page, theirs["id"])
    cancel = other.locator("button.jp-schedulearn-cancel")
    wait_until(cancel.is_enabled, what="Cancel enabled for the admin")
    assert cancel.get_attribute("title") == f"Cancel job #{theirs['id']}, alice's (you are an admin)"
    assert other.locator("button.jp-schedulearn-logs").is_disabled()  # her log stays hers
    shot(lab_page, "sidebar-admin-cancel", panel)
    cancel.click()
    dialog = lab_page.locator(".jp-Dialog")
    dialog.wait_for()
    assert "It is alice's: its reason will name you." in dialog.inner_text()
    dialog.locator("button.jp-mod-accept").click()
    wait_until(lambda: alice.job(theirs["id"])["state"] == "cancelled", what="alice's job cancelled")
    assert alice.job(theirs["id"])["reason"] == "cancelled by carol (an admin)"


def test_a_pause_shows_under_the_policy_until_resumed(lab_page: Any, shared_serve: str, shot: Any) -> None:  # noqa: F811
    """An admin's pause of scheduling is said in everyone's sidebar (a queued job would otherwise
    wait there without a word), and goes when scheduling resumes; the panel follows the events."""
    carol = Client(shared_serve, "carol-token")
    panel = open_sidebar(lab_page)
    note = panel.locator(".jp-schedulearn-paused")
    assert note.is_hidden()
    carol.pause("reboot at 19:00")
    wait_until(note.is_visible, what="the pause in the panel")
    assert note.inner_text().startswith("Scheduling paused by carol at ")
    assert note.inner_text().endswith(" (reboot at 19:00): no job starts until an admin resumes it.")
    shot(lab_page, "sidebar-paused", panel)
    carol.resume()
    wait_until(note.is_hidden, what="the pause to go")
