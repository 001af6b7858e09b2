"""The README's `%%schedulearn` example runs as written and returns what it says."""

from IPython.core.interactiveshell import InteractiveShell

from tests.readme import blocks


def test_readme_cell_runs_and_returns_rank0_value(shell: InteractiveShell) -> None:
    (cell,) = [b for b in blocks("python") if b.startswith("%%schedulearn")]
    r = shell.run_cell(cell)
    assert r.success, r.error_in_exec
    assert r.result == {"world": 2, "sum": 3.0}  # 1 + 2 all-reduced over the two processes
    assert shell.user_ns["result"] == r.result  # -o result
