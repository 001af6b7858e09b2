"""Shared test configuration. Fixtures that start real services live in tests/fixtures/."""

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces"  # in the repository: a plain clone is self-sufficient
IN_CI = os.environ.get("CI", "").lower() == "true"

#: A program (or cell) holding an object until exit, as a DDP model holds its process group: it
#: prints what its exit handler sees, then whether the object went before the interpreter
#: finalised (the runner's `release_program`) or in the finalisation.
HELD_TO_EXIT = (
    "import atexit, multiprocessing, os, sys\n"
    "class Held:\n"
    "    def __del__(self, write=os.write, finalizing=sys.is_finalizing):\n"
    "        when = b'while' if finalizing() else b'before'\n"
    "        write(1, b'released ' + when + b' finalizing\\n')\n"
    "held = Held()\n"
    "atexit.register(lambda: print('exit handler sees', type(held).__name__, flush=True))\n")

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.dockerd",
    "tests.fixtures.jupyter",
    "tests.fixtures.slurm",
]

sys.path.insert(0, str(ROOT))


@pytest.fixture
def started() -> Iterator[Callable[..., subprocess.Popen]]:
    """`started(argv, ready, **popen_args)`: a real process, returned once it printed the line
    `ready`; killed (and reaped) at the test's end."""
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], ready: str, **kw: object) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == ready
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture(scope="session")
def traces() -> Path:
    if not TRACES.is_dir():
        pytest.fail(f"traces not found at {TRACES}")
    return TRACES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that read the traces (`-m traces` selects them: the fresh-clone test)."""
    for item in items:
        if "traces" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.traces)


def require(condition: bool, why: str) -> None:
    """Skip when a real component is missing here, but fail in CI, where setup installs it."""
    if not condition:
        if IN_CI:
            pytest.fail(f"missing in CI: {why}")
        pytest.skip(why)


async def wait_for(pred, timeout: float, what: str) -> None:
    """Poll `pred` on the event loop until it is true; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def assert_unresized_weights(job_dir: Path, steps: int) -> list[float]:
    """The weights tests/jobs/elastic_train.py ended with (`final.json` in its job directory)
    equal an unresized run's of `steps` steps within 1e-9 — no step lost or repeated across
    its resizes; returns them."""
    from tests.jobs import elastic_train  # imports torch: only where such a job ran

    final = json.loads((job_dir / "final.json").read_text())
    expected = elastic_train.reference(steps)
    assert max(abs(x - y) for x, y in zip(final, expected, strict=True)) < 1e-9, (final, expected)
    return final
