"""Fixtures of the magics tests: a module-scoped live `jupyter server` with the Schedulearn
extension, with `SCHEDULEARN_URL` / `SCHEDULEARN_TOKEN` pointing at it (as the extension sets them for
the kernels it starts), an IPython shell with the magics loaded, and a real IPython kernel
(ipykernel over ZeroMQ, as JupyterLab runs it) with them, plus helpers to run its cells."""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from schedulearn.client import Client

from tests.fixtures.jupyter import LiveServer, kernel_env

GPUS = 4
# Importable without an install too (the editable install puts kernel_magics/ on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernel_magics"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    home = tmp_path_factory.mktemp("magics-server")
    traits = {
        "virtual_gpus": GPUS, "executor": "local", "job_root": str(home / "jobs"),
        "store_url": f"sqlite:///{home / 'jobs.db'}", "tick": 0.2, "inventory_interval": 0,
        "cancel_grace": 2.0,
    }
    srv = LiveServer(home / "srv", traits).start()
    with kernel_env(srv):
        yield srv


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Client:
    return Client(server.url, server.token)


@pytest.fixture
def shell(server: LiveServer) -> InteractiveShell:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "schedulearn_jupyter")  # the documented way, via the extension
    magics = sh.magics_manager.registry["SchedulearnMagics"]
    magics._client = None  # find the module's server from the environment
    magics.cancel_on_interrupt = True
    return sh


@pytest.fixture(scope="module")
def kernel(server: LiveServer) -> Iterator[tuple[Any, Any]]:
    """(kernel manager, client) of an ipykernel with the magics, talking to this module's server."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")  # inherits SCHEDULEARN_URL/TOKEN
    try:
        kc.execute_interactive("%load_ext schedulearn_jupyter", timeout=60)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def drain(kc: Any) -> None:
    while True:
        try:
            kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            return


def collect_until_reply(kc: Any, msg_id: str, timeout: float = 120) -> tuple[dict, list[dict]]:
    """(execute_reply content, iopub messages of that request): both the reply (shell channel)
    and the kernel's `idle` for the request (iopub, in whichever order the two sockets deliver)."""
    iopub: list[dict] = []
    deadline = time.monotonic() + timeout
    reply, idle = None, False
    while time.monotonic() < deadline:
        if reply is None:
            try:
                msg = kc.get_shell_msg(timeout=0.1)
                if msg["parent_header"].get("msg_id") == msg_id:
                    reply = msg["content"]
            except queue.Empty:
                pass
        if reply is not None and idle:
            return reply, iopub
        if idle:
            continue
        try:
            msg = kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            iopub.append(msg)
            idle = msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
            if idle and reply is not None:
                return reply, iopub
    raise AssertionError(f"no reply to {msg_id} within {timeout}s")


def wait_job(client: Client, name: str, state: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [j for j in client.jobs() if j["name"] == name]
        if jobs and jobs[-1]["state"] == state:
            return jobs[-1]
        time.sleep(0.1)
    raise AssertionError(f"job {name!r} not {state} within {timeout}s")


# pytest-jupyter's autouse fixtures close "the" asyncio loop after each test; once the browser
# tests' session-scoped Playwright runs its loop in this thread, that fails. These tests start
# their servers as subprocesses and need neither fixture.
@pytest.fixture
def jp_asyncio_loop():
    yield None


@pytest.fixture
def jp_server_cleanup():
    yield
