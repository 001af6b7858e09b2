"""Real-browser fixtures: a real `jupyter lab` subprocess and Debian's Chromium driven by Playwright.

- `lab_server` (module scope): `jupyter lab` on a free port with a token, `--allow-root`, no browser,
  a tmp root dir, isolated Jupyter config/data/runtime/settings dirs, and the Schedulearn extension
  with 4 virtual GPUs and the local executor. `lab_server.api(method, path, body)` calls the REST API.
- `browser` (module scope): Chromium from /usr/bin/chromium (no `playwright install`).
  Playwright's sync API delivers page events only while it runs: to wait for events, use
  `page.wait_for_timeout(ms)`, not `time.sleep`.
- `lab_page`: a fresh page with JupyterLab loaded (`window.jupyterapp` exposed for commands).
- `shot(page, name)`: saves `test-output/screenshots/<name>.png` and returns the path.

Other browser tests (e.g. the queue widget of the magics in a notebook) reuse these fixtures:
`lab_server.root` is the server's root dir, `open_notebook(page, lab_server, "x.ipynb")` opens a file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, require
from tests.fixtures.jupyter import free_port, wait_http

CHROMIUM = os.environ.get("SCHEDULEARN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
EXTENSION = "schedulearn-labextension"
TOKEN = "browser-test-token"


def labextension_installed() -> Path | None:
    """Where the built sidebar is installed for this interpreter (None when it is not)."""
    from jupyter_core.paths import jupyter_path

    for base in jupyter_path("labextensions"):
        if (Path(base) / EXTENSION / "package.json").exists():
            return Path(base) / EXTENSION
    return None


class LabServer:
    """`jupyter lab` in a subprocess, with its own dirs and the Schedulearn extension."""

    def __init__(self, home: Path, traits: dict[str, Any], enable_schedulearn: bool = True):
        self.home = home
        self.root = home / "root"
        self.traits = traits
        self.enable = enable_schedulearn
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.token = TOKEN
        self.log = home / "lab.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> LabServer:
        for d in ("root", "config", "data", "runtime", "settings", "workspaces"):
            (self.home / d).mkdir(parents=True, exist_ok=True)
        # No "get notified about Jupyter news?" toast over the screenshots (and no fetch).
        news = self.home / "settings" / "@jupyterlab" / "apputils-extension"
        news.mkdir(parents=True, exist_ok=True)
        (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(self.home / "config"),
            "JUPYTER_DATA_DIR": str(self.home / "data"),
            "JUPYTER_RUNTIME_DIR": str(self.home / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(self.home / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.home / "workspaces"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)]),
        }
        for key in ("SCHEDULEARN_URL", "SCHEDULEARN_TOKEN"):
            env.pop(key, None)
        args = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
            "--ServerApp.open_browser=False", f"--port={self.port}", "--ip=127.0.0.1",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            "--LabApp.expose_app_in_browser=True",
            f"--ServerApp.jpserver_extensions={{'schedulearn_jupyter': {self.enable}}}",
        ]
        for key, value in self.traits.items():
            text = value if isinstance(value, str) else json.dumps(value)
            args.append(f"--SchedulearnApp.{key}={text}")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.root)
        wait_http(self.url + "lab", timeout=90, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def lab_url(self, path: str = "lab") -> str:
        return f"{self.url}{path}?token={self.token}"

    def api(self, method: str, path: str, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
        """Calls `schedulearn/api/<path>`; returns (status, parsed JSON or text); never raises on 4xx."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}schedulearn/api/{path}", data=data, method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        text = raw.decode(errors="replace")
        return status, (json.loads(text) if "json" in ctype and text else text)

    def put_settings(self, plugin: str, values: dict[str, Any]) -> int:
        """Saves a plugin's user settings through JupyterLab's settings API (schema-validated)."""
        req = urllib.request.Request(
            f"{self.url}lab/api/settings/{plugin}", method="PUT",
            data=json.dumps({"raw": json.dumps(values)}).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def wait_job(self, job_id: int, states: set[str], timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status, job = self.api("GET", f"jobs/{job_id}")
            assert status == 200, job
            if job["state"] in states:
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not in {states} within {timeout}s: {job}")


def browser_requirements() -> None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        require(False, "playwright is not installed (pip install playwright)")
    require(Path(CHROMIUM).exists(), f"{CHROMIUM} missing (apt-get install chromium)")
    require(shutil.which("jupyter-lab") is not None or _has_module("jupyterlab"),
            "jupyterlab is not installed")
    require(labextension_installed() is not None,
            f"{EXTENSION} is not built/installed (scripts/setup.sh builds and links it)")


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# pytest-jupyter's autouse fixtures close "the" asyncio loop after each test; Playwright's sync API
# runs its own loop in this thread, so these tests (which start servers as subprocesses) opt out.
@pytest.fixture
def jp_asyncio_loop():
    yield None


@pytest.fixture
def jp_server_cleanup():
    yield


@pytest.fixture(scope="module")
def lab_traits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """SchedulearnApp traits of the module's server (a test module may redefine this fixture)."""
    d = tmp_path_factory.mktemp("sl")
    return {
        "virtual_gpus": 4,
        "executor": "local",
        "job_root": str(d / "jobs"),
        "store_url": f"sqlite:///{d / 'jobs.db'}",
        "tick": 0.2,
        "cancel_grace": 2.0,
    }


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory, lab_traits: dict[str, Any]):
    browser_requirements()
    server = LabServer(tmp_path_factory.mktemp("lab"), lab_traits).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    """Chromium for one test module. Not session-wide: while Playwright's sync API is alive its
    event loop counts as running in this thread, and the autouse loop fixture of pytest-jupyter
    would fail every later (non-browser) test at teardown."""
    browser_requirements()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def open_lab(browser: Any, server: LabServer, path: str = "lab", width: int = 1400, height: int = 900):
    """A new page with JupyterLab (or `path`, e.g. `lab/tree/x.ipynb`) loaded and started."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and print(f"[browser console] {m.text}"))
    page.goto(server.lab_url(path))
    page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started !== undefined")
    page.evaluate("() => window.jupyterapp.restored")  # the workspace layout is restored
    return page


def open_notebook(page: Any, server: LabServer, name: str) -> None:
    """Opens `name` (relative to `server.root`) in the running JupyterLab page."""
    page.evaluate("(p) => window.jupyterapp.commands.execute('docmanager:open', {path: p})", name)
    page.wait_for_selector(".jp-NotebookPanel", timeout=60_000)


@pytest.fixture
def lab_page(browser: Any, lab_server: LabServer):
    page = open_lab(browser, lab_server)
    yield page
    page.context.close()


@pytest.fixture
def shot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page: Any, name: str, locator: Any = None) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        (locator or page).screenshot(path=str(path))
        return path

    return take
