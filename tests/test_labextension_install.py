"""The built wheel, installed in a fresh virtualenv, gives a working JupyterLab: `jupyter labextension
list` shows the sidebar enabled and OK, `jupyter server extension list` shows the server extension
enabled and OK, and the installed extension has the prebuilt bundle and the settings schema.

Bounded time: the wheel is built from this working tree (npm reuses node_modules; the hook rebuilds
the sidebar only when its sources are newer than the bundle); pip's cache makes the venv quick.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, require

pytestmark = pytest.mark.slow

EXT = "schedulearn-labextension"


def run(args: list, timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("npm") is not None, "npm is needed to build the sidebar into the wheel")
    out = tmp_path_factory.mktemp("dist")
    r = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, ROOT], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (whl,) = out.glob("schedulearn-*.whl")
    return whl


def test_wheel_contains_the_prebuilt_sidebar(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    base = f"schedulearn-{wheel.name.split('-')[1]}.data/data/share/jupyter/labextensions/{EXT}/"
    assert base + "package.json" in names
    assert base + "install.json" in names
    assert base + f"schemas/{EXT}/plugin.json" in names
    assert any(re.match(re.escape(base) + r"static/remoteEntry\.[0-9a-f]+\.js$", n) for n in names)
    assert any(n.endswith("etc/jupyter/jupyter_server_config.d/schedulearn_jupyter.json") for n in names)
    # Sources and build leftovers stay out of the Python package.
    assert not any("/node_modules/" in n or n.endswith(".ts") for n in names)


def test_fresh_venv_lists_both_extensions_enabled_and_ok(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    r = run([sys.executable, "-m", "venv", venv], timeout=120)
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    r = run([py, "-m", "pip", "install", "-q", wheel, "jupyterlab>=4.6,<5"], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("JUPYTER", "SCHEDULEARN_", "PYTHONPATH", "VIRTUAL_ENV"))
    }
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    jupyter = venv / "bin" / "jupyter"

    lx = run([jupyter, "labextension", "list"], timeout=120, env=env, cwd=tmp_path)
    text = lx.stdout + lx.stderr
    assert re.search(rf"{EXT} v\d+\.\d+\.\d+\S* .*enabled.*OK.*\(python, schedulearn\)", strip(text)), text
    assert str(venv) in text  # from the fresh venv, not from this checkout

    sx = run([jupyter, "server", "extension", "list"], timeout=120, env=env, cwd=tmp_path)
    text = strip(sx.stdout + sx.stderr)
    assert re.search(r"schedulearn_jupyter\s+enabled", text), text
    assert re.search(r"schedulearn_jupyter\s+\S+\s+OK", text), text

    installed = venv / "share" / "jupyter" / "labextensions" / EXT
    pkg = json.loads((installed / "package.json").read_text())
    assert pkg["name"] == EXT and pkg["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")
    schema = json.loads((installed / "schemas" / EXT / "plugin.json").read_text())
    assert {"refreshInterval", "timelineHours"} <= set(schema["properties"])


def strip(text: str) -> str:
    """Without ANSI colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
