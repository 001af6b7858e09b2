"""A plain `git clone` is self-sufficient: the data the tests, benchmarks, docs and README use is in
the repository, no tracked file names the workspace's shared folder beside the checkout, and the
data-dependent tests pass in a clone that has nothing beside it.

The clone is of what is committed (HEAD): uncommitted changes of a working copy are not in it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("fresh") / "schedulearn"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(where)], check=True,
                   timeout=120)
    assert sorted(p.name for p in where.parent.iterdir()) == ["schedulearn"]  # no shared/ beside it
    return where


def _clone_env(clone: Path) -> dict[str, str]:
    """Run the clone's own code, not the checkout the virtualenv's editable install points at."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(clone / p) for p in ("scheduler", "kernel_magics", "."))
    env.pop("PYTEST_ADDOPTS", None)
    return env


def test_no_tracked_file_names_the_shared_folder(clone: Path):
    outside, traces = "/".join(["..", "shared"]), "/".join(["shared", "traces"])  # not matching itself
    grep = subprocess.run(["git", "grep", "-n", "-F", "-e", outside, "-e", traces], cwd=clone,
                          capture_output=True, text=True, timeout=60)
    assert grep.returncode == 1, f"tracked files name {outside}:\n{grep.stdout}"


def test_data_dependent_tests_pass_in_a_clone_with_nothing_beside_it(clone: Path):
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "traces", "-q", "-p", "no:cacheprovider", "-x",
         "-o", "addopts=", "tests"],
        cwd=clone, env=_clone_env(clone), capture_output=True, text=True, timeout=900)
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    summary = re.search(r"(\d+) passed", r.stdout)
    assert summary and int(summary.group(1)) >= 10, tail  # the trace tests really ran
    assert " failed" not in r.stdout.splitlines()[-1] and "error" not in r.stdout.splitlines()[-1], tail


def test_benchmarks_find_their_traces_in_a_clone(clone: Path):
    r = subprocess.run([sys.executable, "benchmarks/bench_philly.py", "--limit", "300"], cwd=clone,
                       env=_clone_env(clone), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
