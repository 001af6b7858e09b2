"""Deadlines the way a notebook user gives them (issue 12): `%%schedulearn --deadline` cells in a
real IPython kernel, against a real Jupyter server with the extension on 4 virtual GPUs and the
`qoe` policy, on the wall clock (tests/test_live_deadlines.py is the same story at the engine).

The cells run at a speed proportional to their GPUs, report their progress, and resume from their
checkpoint when a resize restarts them. `loose` (`--no-wait`: the notebook goes on) asks for 2
GPUs with ten minutes to spare; then `tight` asks for 1 but needs 80 s of work on one GPU within
60 s: from its first progress reports the policy gives it more, the cell's value says how many it
ended on, and both deadlines are met (`met` through the REST API). A third cell like `tight` (same
name: the history knows what it needs) with 10 s to go cannot make it on any size: its output says
`will miss` as the cell returns (the job widget; as text, the server's answer to the submission).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from schedulearn.client import Client

from tests.fixtures.jupyter import LiveServer, kernel_env
from tests.magics.conftest import GPUS, collect_until_reply, drain, wait_job

pytestmark = pytest.mark.slow

# What the notebook user writes: a loop that checkpoints each unit of work, reports its progress,
# and stops at a resize (SIGTERM) after the unit in progress; the relaunched cell goes on.
CELL = """\
import os, signal, sys, time
from schedulearn import elastic

units, unit_s = {units}, 1.0  # seconds of work a unit takes on one GPU
gpus = int(os.environ["SCHEDULEARN_NUM_GPUS"])
state = elastic.job_dir() / "units_done"
done = int(state.read_text()) if state.exists() else 0
resized = []
signal.signal(signal.SIGTERM, lambda *_: resized.append(True))
elastic.report(progress=done / units)
while done < units:
    time.sleep(unit_s / gpus)
    done += 1
    (elastic.job_dir() / "units_done.tmp").write_text(str(done))
    os.replace(elastic.job_dir() / "units_done.tmp", state)
    elastic.report(progress=done / units)
    if resized and done < units:
        sys.exit(elastic.EXIT_CHECKPOINTED)
gpus
"""


def cell(options: str, units: int) -> str:
    return f"%%schedulearn --gpus {options}\n" + CELL.format(units=units)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """This module's Jupyter server: the `qoe` policy, and a restart priced as what it costs here
    (the server's `restart_cost`: a process restart of these cells costs about a second, where
    the default assumes 30 s until a job's own restarts are measured)."""
    home = tmp_path_factory.mktemp("deadline-server")
    traits = {"virtual_gpus": GPUS, "executor": "local", "job_root": str(home / "jobs"),
              "store_url": f"sqlite:///{home / 'jobs.db'}", "tick": 0.5, "inventory_interval": 0,
              "cancel_grace": 10.0, "default_policy": "qoe", "restart_cost": 2.0}
    srv = LiveServer(home / "srv", traits).start()
    with kernel_env(srv):
        yield srv


class Sizes:
    """Polls the REST API in a thread while a cell runs: each job's sizes, in order."""

    def __init__(self, client: Client):
        self.client, self.seen = client, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for j in self.client.jobs():
                sizes = self.seen.setdefault(j["name"], [])
                if j["state"] == "running" and j["gpus"] and (not sizes or sizes[-1] != j["gpus"]):
                    sizes.append(j["gpus"])

    def __enter__(self) -> Sizes:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


def plain_text(iopub: list[dict]) -> list[str]:
    """The text/plain of what a cell displayed."""
    return [m["content"]["data"].get("text/plain", "") for m in iopub
            if m["msg_type"] in ("display_data", "execute_result")]


def shown_text(iopub: list[dict]) -> list[str]:
    """What a cell showed: text/plain outputs and the values of its widgets' HTML parts."""
    texts = []
    for m in iopub:
        c = m["content"]
        if m["msg_type"] in ("display_data", "execute_result"):
            texts.append(c["data"].get("text/plain", ""))
        elif m["msg_type"] == "stream":
            texts.append(c["text"])
        elif m["msg_type"] in ("comm_open", "comm_msg"):
            state = c["data"].get("state") or {}
            if isinstance(state.get("value"), str):
                texts.append(state["value"])
    return texts


def test_the_tight_cell_gets_the_gpus_it_needs_and_an_infeasible_one_is_flagged_at_submission(
    kernel: tuple[Any, Any], client: Client
) -> None:
    _, kc = kernel
    drain(kc)
    assert client.policy() == "qoe"
    reply, _ = collect_until_reply(kc, kc.execute(
        cell("2 --min-gpus 1 --max-gpus 2 --name loose --deadline 10m --no-wait -o loose", 60)))
    assert reply["status"] == "ok", reply
    wait_job(client, "loose", "running", timeout=60)

    with Sizes(client) as sizes:
        reply, iopub = collect_until_reply(kc, kc.execute(
            cell("1 --min-gpus 1 --max-gpus 4 --name tight --deadline 60s", 80)), timeout=240)
    assert reply["status"] == "ok", reply
    (tight,) = [j for j in client.jobs() if j["name"] == "tight"]
    on = [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "execute_result"]
    # what it asked for, then what it needs; it ended on more than it asked for
    assert sizes.seen["tight"][0] == 1 and max(sizes.seen["tight"]) >= 2, sizes.seen
    assert len(on) == 1 and int(on[0]) >= 2 and tight["restarts"] >= 1, (on, tight)
    assert tight["state"] == "succeeded" and tight["deadline_status"] == "met", tight
    assert tight["end_time"] <= tight["deadline"], (tight["end_time"] - tight["deadline"], sizes.seen)

    reply, iopub = collect_until_reply(kc, kc.execute("loose.result()"), timeout=240)
    assert reply["status"] == "ok", reply
    (loose,) = [j for j in client.jobs() if j["name"] == "loose"]
    assert loose["state"] == "succeeded" and loose["deadline_status"] == "met", loose

    # like `tight`, which needed 80 GPU-seconds: 20 s on all 4 GPUs at best, and it has 10. In
    # JupyterLab the cell shows the job widget, which says so as the cell returns; as text (a
    # terminal, `SCHEDULEARN_WIDGETS=0`) the cell prints the server's answer to the submission.
    doomed = []
    for widgets in ("1", "0"):
        collect_until_reply(kc, kc.execute(f"%env SCHEDULEARN_WIDGETS={widgets}"))
        reply, iopub = collect_until_reply(kc, kc.execute(
            cell("1 --min-gpus 1 --max-gpus 4 --name tight --deadline 10s --no-wait -o doomed", 80)))
        assert reply["status"] == "ok", reply
        job = [j for j in client.jobs() if j["name"] == "tight"][-1]
        assert job["id"] != tight["id"] and job["deadline_status"] == "will_miss", job
        shown = shown_text(iopub)
        # the deadline first, before the long waiting reason: the widget's text view (what
        # notebook viewers show of it), which ipywidgets cuts to 110 characters, keeps it
        line = re.compile(rf"job {job['id']} 'tight': \w+, deadline in \d+ s, will miss, ")
        if widgets == "1":  # the widget's header and its text/plain
            assert any(t.startswith(f"<b>job {job['id']}</b>") and re.search(
                r"<span>deadline in \d+ s, will miss, ", t) for t in shown), shown
            assert any(line.match(t) and len(t) <= 110 for t in plain_text(iopub)), shown
        else:  # the printed line
            assert any(line.match(t) and "  (handle: " in t for t in shown), shown
        doomed.append(job["id"])
        reply, _ = collect_until_reply(kc, kc.execute("doomed.cancel()"))
        assert reply["status"] == "ok", reply
    deadline = time.monotonic() + 60
    while {client.job(i)["state"] for i in doomed} != {"cancelled"} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [client.job(i)["state"] for i in doomed] == ["cancelled", "cancelled"]
