"""binder/ (environment.yml + requirements.txt + postBuild) exercised like repo2docker would:
scripts/check_binder.sh runs postBuild in a fresh virtualenv on a clean copy of the tree, then
checks both extensions are enabled and OK and a started JupyterLab has 4 virtual GPUs and opens
examples/quickstart.ipynb. Slow (a fresh npm install and pip install): a few minutes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT, require

pytestmark = pytest.mark.slow


def test_binder_postbuild_in_a_fresh_venv() -> None:
    require(shutil.which("npm") is not None, "npm is needed by binder/postBuild")
    require(shutil.which("curl") is not None, "curl is needed by scripts/check_binder.sh")
    r = subprocess.run([str(ROOT / "scripts" / "check_binder.sh")], capture_output=True, text=True,
                       timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert "OK: binder environment builds" in out, out[-3000:]
