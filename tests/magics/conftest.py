"""Fixtures of the magics tests: a module-scoped live `jupyter server` with the Schedulearn
extension, with `SCHEDULEARN_URL` / `SCHEDULEARN_TOKEN` pointing at it (as the extension sets them for
the kernels it starts), and an IPython shell with the magics loaded."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

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


# pytest-jupyter's autouse fixtures close "the" asyncio loop after each test; once the browser
# tests' session-scoped Playwright runs its loop in this thread, that fails. These tests start
# their servers as subprocesses and need neither fixture.
@pytest.fixture
def jp_asyncio_loop():
    yield None


@pytest.fixture
def jp_server_cleanup():
    yield
