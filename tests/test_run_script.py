"""The README's first command ends in scripts/run.sh: JupyterLab with Schedulearn on virtual GPUs."""

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

from tests.conftest import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_script_starts_jupyterlab_with_the_scheduler(tmp_path):
    port = _free_port()
    env = dict(os.environ, JUPYTER_PORT=str(port), NO_BROWSER="1", SCHEDULEARN_VIRTUAL_GPUS="3",
               SCHEDULEARN_STORE_URL=f"sqlite:///{tmp_path}/jobs.db",
               SCHEDULEARN_JOB_ROOT=str(tmp_path / "jobs"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    log = open(tmp_path / "log.txt", "w+")
    proc = subprocess.Popen([str(ROOT / "scripts" / "run.sh")], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        token, deadline = None, time.monotonic() + 90
        while token is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            # the printed URL opens the quickstart, not the Launcher
            m = re.search(r"/lab/tree/examples/quickstart\.ipynb\?token=([0-9a-f]+)",
                          (tmp_path / "log.txt").read_text())
            token = m.group(1) if m else None
        assert token, (tmp_path / "log.txt").read_text()[-2000:]
        base = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"token {token}"}
        req = urllib.request.Request(f"{base}/schedulearn/api/gpus", headers=auth)
        while True:  # the URL is printed as the server starts listening: allow it a moment
            try:
                nodes = json.load(urllib.request.urlopen(req, timeout=30))["nodes"]
                break
            except urllib.error.URLError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert [g["index"] for n in nodes for g in n["gpus"]] == [0, 1, 2]
        assert all(n["virtual"] for n in nodes)
        lab = urllib.request.urlopen(urllib.request.Request(
            f"{base}/lab", headers={"Authorization": f"token {token}"}), timeout=30).read().decode()
        assert "schedulearn-labextension" in lab  # the sidebar is installed and announced to the page
        page = urllib.request.urlopen(urllib.request.Request(
            f"{base}/lab/tree/examples/quickstart.ipynb", headers=auth), timeout=30)
        assert page.status == 200  # the printed URL serves the notebook in JupyterLab
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
