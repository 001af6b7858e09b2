"""The README's `%%schedulearn` example runs as written and returns what it says — and, run 30
times, never dies at exit (issue 10: the cell has no `destroy_process_group()`; a gloo rank used to
abort at interpreter exit about once in five runs and the cell raised `JobFailed`)."""

import time

import pytest
from IPython.core.interactiveshell import InteractiveShell
from schedulearn.client import Client
from schedulearn_magics.handle import JobHandle

from tests.readme import blocks

REPEAT = 30


def _readme_cell() -> str:
    (cell,) = [b for b in blocks("python") if b.startswith("%%schedulearn")]
    return cell


def test_readme_cell_runs_and_returns_rank0_value(shell: InteractiveShell) -> None:
    r = shell.run_cell(_readme_cell())
    assert r.success, r.error_in_exec
    assert r.result == {"world": 2, "sum": 3.0}  # 1 + 2 all-reduced over the two processes
    assert shell.user_ns["result"] == r.result  # -o result


@pytest.mark.slow  # 30 torchrun jobs through the server: about 7 minutes on a loaded 2-core machine
def test_readme_cell_30_times_in_a_row_without_one_abort(shell: InteractiveShell, client: Client) -> None:
    """The cell as written, submitted 30 times with `--no-wait` added (so that the jobs queue at
    once and run two at a time on the server's 4 GPUs): every one succeeds with the value."""
    first, body = _readme_cell().split("\n", 1)
    handles = []
    for i in range(REPEAT):
        r = shell.run_cell(f"{first} --no-wait --name readme-{i}\n{body}")
        assert r.success, r.error_in_exec
        assert isinstance(r.result, JobHandle)
        handles.append(r.result)
    deadline = time.monotonic() + 900
    values, failed = [], []
    for h in handles:
        job = h.wait(timeout=max(1.0, deadline - time.monotonic()))
        if job["state"] != "succeeded":
            failed.append((h.id, job["state"], job.get("reason"), h.logs(tail=15)))
            continue
        values.append(h.result())
        assert "terminate called" not in client.logs(h.id)
    assert not failed, failed
    assert values == [{"world": 2, "sum": 3.0}] * REPEAT
