"""The cell bundle and launcher detection, run for real (the runner script in a subprocess)."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernel_magics"))

from schedulearn.joblogs import failure_reason  # noqa: E402
from schedulearn_magics import bundle, cell_runner  # noqa: E402
from schedulearn_magics.bundle import BundleError, detect_launcher  # noqa: E402

from tests.conftest import HELD_TO_EXIT  # noqa: E402


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import horovod.torch as hvd\nhvd.init()", "horovod"),
        ("from horovod import torch as hvd", "horovod"),
        ("import torch.distributed as dist\nimport horovod.torch as hvd", "horovod"),
        ("import torch.distributed as dist", "torchrun"),
        ("from torch.distributed import init_process_group", "torchrun"),
        ("from torch import distributed", "torchrun"),
        ("import torch\ntorch.distributed.init_process_group('gloo')", "torchrun"),
        ("from torch.nn.parallel import DistributedDataParallel as DDP", "torchrun"),
        ("def f():\n    import torch.distributed\n", "torchrun"),  # nested imports count
        ("import torch\nx = torch.ones(2)\nx.sum()", "python"),
        ("# import horovod\nimport torch", "python"),  # a comment is not an import
        ("s = 'import torch.distributed'\nprint(s)", "python"),  # nor is a string
        ("import horovodx", "python"),  # a different package
        ("from .horovod import x", "python"),  # a relative import is not the package
        ("import mytorch.distributed", "python"),
    ],
)
def test_launcher_detection(source: str, expected: str) -> None:
    assert detect_launcher(source) == expected


def test_syntax_error_is_one_line_with_line_number() -> None:
    with pytest.raises(BundleError) as e:
        bundle.build_script("x = 1\ny = (2 +\n")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("cell: syntax error")
    assert "line 2" in msg


@pytest.mark.parametrize(
    ("cell", "line"),
    [
        ("x = 3\n%time y = x + 1\ny", "line 2 is IPython syntax (%time y = x + 1)"),
        ("!nvidia-smi\n5", "line 1 is IPython syntax (!nvidia-smi)"),
        ("files = !ls\nfiles", "line 1 is IPython syntax (files = !ls)"),
        ("%%time\nx = 1", "line 1 is IPython syntax (%%time)"),
    ],
)
def test_ipython_syntax_is_named_as_such_not_as_a_python_mistake(cell: str, line: str) -> None:
    """A job runs the cell as plain Python: a magic or a `!` line is refused as what it is."""
    with pytest.raises(BundleError) as e:
        bundle.build_script(cell)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"cell: {line}, which a job does not run")
    assert ("subprocess.run" in msg) == ("!" in cell)
    with pytest.raises(BundleError, match=r"^cell: syntax error"):
        bundle.build_script("%time y = 1\nz = (y +\n")  # not Python even once transformed


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("x = 1\nreturn x", "cell: syntax error ('return' outside function) at line 2: return x"),
        ("for i in []:\n    pass\nbreak", "cell: syntax error ('break' outside loop) at line 3: break"),
        ("def f(a, a):\n    pass", "cell: syntax error (duplicate argument 'a' in function definition) at "
         "line 1"),
    ],
)
def test_what_only_the_compiler_finds_is_refused_before_submitting(cell: str, message: str) -> None:
    """These parse, and failed only in the job, perhaps hours later once its turn came."""
    with pytest.raises(BundleError) as e:
        bundle.build_script(cell)
    assert str(e.value).startswith(message)


def result_of(job_dir: Path) -> Any:
    """The value a job's cell left (its unpickled result file)."""
    return pickle.loads((job_dir / bundle.RESULT_FILE).read_bytes())


def run_script(script: str, job_dir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "main.py").write_text(script)
    full_env = {**os.environ, "SCHEDULEARN_JOB_DIR": str(job_dir), **(env or {})}
    for key in ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if key not in (env or {}):
            full_env.pop(key, None)
    return subprocess.run([sys.executable, "main.py"], cwd=job_dir, env=full_env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)  # a job reads no keyboard



def test_runner_loads_vars_files_and_saves_last_expression(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "data" / "a.txt").write_text("alpha")
    (src / "b.txt").write_text("beta")
    files = bundle.pack_files(["data", "b.txt"], src)
    ns = {"n": 7, "sq": lambda v: v * v, "table": {"k": [1, 2, 3]}}
    variables = bundle.pack_vars(["n", "sq", "table"], ns)
    cell = (
        "print('files', open('data/a.txt').read(), open('b.txt').read())\n"
        "result = sq(n) + sum(table['k'])\n"
        "{'value': result, 'name': __name__}\n"
    )
    proc = run_script(bundle.build_script(cell, files, variables), tmp_path / "job")
    assert proc.returncode == 0, proc.stderr
    assert "files alpha beta" in proc.stdout
    value = result_of(tmp_path / "job")
    assert value == {"value": 55, "name": "__main__"}


def test_a_cell_runs_as_ipython_runs_it_top_level_await_and_real_annotations(tmp_path: Path) -> None:
    """IPython runs a cell with a top-level `await` (autoawait): the job did not ('await'
    outside function, once the job's turn came). The cell's annotations are the objects, as in
    the notebook, not strings (the runner's own `from __future__ import annotations` leaked in)."""
    cell = (
        "import asyncio\n"
        "async def twice(x: int) -> int:\n"
        "    await asyncio.sleep(0.01)\n"
        "    return 2 * x\n"
        "first = await twice(3)\n"
        "first, await twice(first), twice.__annotations__\n"
    )
    proc = run_script(bundle.build_script(cell), tmp_path / "job")
    assert proc.returncode == 0, proc.stderr
    value = result_of(tmp_path / "job")
    assert value == (6, 12, {"x": int, "return": int})
    proc = run_script(bundle.build_script("import asyncio\nasyncio.run(asyncio.sleep(0, 'plain'))"),
                      tmp_path / "job2")  # no top-level await: no event loop around the cell
    assert proc.returncode == 0, proc.stderr
    assert result_of(tmp_path / "job2") == "plain"
    proc = run_script(bundle.build_script("import asyncio\nawait asyncio.sleep(0)\nraise ValueError('late')"),
                      tmp_path / "job3")
    assert proc.returncode == 1 and "ValueError: late" in proc.stderr
    assert 'File "<schedulearn-cell>", line 3' in proc.stderr


SPAWNED_POOL_CELL = """
import multiprocessing as mp
k = 10
def times_k(x):
    return x * k
class Box:
    def __init__(self, v):
        self.v = v
def unbox(b):
    return b.v + 1
with mp.get_context("{method}").Pool(2) as pool:
    out = pool.map(times_k, range(4)), pool.map(unbox, [Box(1), Box(2)])
out
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_processes_the_cell_starts_by_spawn_or_forkserver_get_its_functions_and_classes(
        tmp_path: Path, method: str) -> None:
    """Such a child imports the script as `__mp_main__`, which does not run the cell: pickled by
    name, `times_k` was not found there and the Pool restarted its workers for ever."""
    proc = run_script(bundle.build_script(SPAWNED_POOL_CELL.format(method=method)), tmp_path / "job")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Can't get attribute" not in proc.stderr
    value = result_of(tmp_path / "job")
    assert value == ([0, 10, 20, 30], [2, 3])


def test_torch_spawn_and_a_spawned_data_loader_run_what_the_cell_defines(tmp_path: Path) -> None:
    """The PyTorch DDP tutorial's `mp.spawn(fn, nprocs=2)`, and a DataLoader whose workers
    start by spawn, with the function and the Dataset class defined in the cell."""
    cell = (
        "import os, torch, torch.multiprocessing as tmp\n"
        "from torch.utils.data import DataLoader, Dataset\n"
        "def work(rank, out):\n"
        "    open(os.path.join(out, f'rank{rank}'), 'w').write(str(rank * 7))\n"
        "class Squares(Dataset):\n"
        "    def __len__(self):\n"
        "        return 6\n"
        "    def __getitem__(self, i):\n"
        "        return torch.tensor(i * i)\n"
        "tmp.spawn(work, args=(os.getcwd(),), nprocs=2, join=True)\n"
        "loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context='spawn')\n"
        "[open(f'rank{r}').read() for r in range(2)], sorted(int(x) for b in loader for x in b)\n"
    )
    proc = run_script(bundle.build_script(cell), tmp_path / "job")
    assert proc.returncode == 0, proc.stderr[-3000:]
    value = result_of(tmp_path / "job")
    assert value == (["0", "7"], [0, 1, 4, 9, 16, 25])


def test_a_fork_pool_still_finds_the_cells_functions_by_name(tmp_path: Path) -> None:
    """With `fork` alone nothing is pickled by value: a function that reads a global no pickle
    can copy (a lock) works in a fork Pool as in a script."""
    cell = (
        "import multiprocessing as mp, threading\n"
        "lock = threading.Lock()\n"
        "def locked(x):\n"
        "    with lock:\n"
        "        return -x\n"
        "with mp.get_context('fork').Pool(2) as pool:\n"
        "    out = pool.map(locked, range(3))\n"
        "out\n"
    )
    proc = run_script(bundle.build_script(cell), tmp_path / "job")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result_of(tmp_path / "job") == [0, -1, -2]


def test_only_rank_zero_writes_the_result(tmp_path: Path) -> None:
    script = bundle.build_script("41 + 1")
    proc = run_script(script, tmp_path / "r1", {"RANK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "r1" / bundle.RESULT_FILE).exists()
    proc = run_script(script, tmp_path / "h0", {"HOROVOD_RANK": "0"})
    assert result_of(tmp_path / "h0") == 42


def test_cell_without_final_expression_returns_none(tmp_path: Path) -> None:
    proc = run_script(bundle.build_script("x = 3\nfor i in range(2):\n    x += i\n"), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    assert result_of(tmp_path / "j") is None


@pytest.mark.parametrize("code, status", [("", 0), ("0", 0), ("None", 0), ("False", 0), ("3", 3)])
def test_a_cell_that_exits_ends_with_its_status_and_a_success_has_the_value_none(
        tmp_path: Path, code: str, status: int) -> None:
    """`sys.exit(0)` succeeded without a result, and the waiting cell then failed with `result: job
    N has no result (yet); state succeeded (HTTP 404)`."""
    proc = run_script(bundle.build_script(f"import sys\nsys.exit({code})\n'never'"), tmp_path / "j")
    assert proc.returncode == status, proc.stderr
    result = tmp_path / "j" / bundle.RESULT_FILE
    if status == 0:
        assert pickle.loads(result.read_bytes()) is None
    else:
        assert not result.exists()
    proc = run_script(bundle.build_script("import sys\nsys.exit(0)"), tmp_path / "r1", {"RANK": "1"})
    assert proc.returncode == 0 and not (tmp_path / "r1" / bundle.RESULT_FILE).exists()


def test_error_in_cell_fails_with_cell_traceback(tmp_path: Path) -> None:
    proc = run_script(bundle.build_script("def f():\n    return 1 / 0\nf()\n"), tmp_path / "j")
    assert proc.returncode == 1
    assert "ZeroDivisionError" in proc.stderr
    assert 'File "<schedulearn-cell>", line 2, in f' in proc.stderr
    assert "return 1 / 0" in proc.stderr  # the cell's own line is shown
    assert not (tmp_path / "j" / bundle.RESULT_FILE).exists()


def test_an_input_the_job_cannot_answer_says_so_where_the_cell_called_it(tmp_path: Path) -> None:
    proc = run_script(bundle.build_script("x = 1\nname = input('run name? ')\n"), tmp_path / "j")
    assert proc.returncode == 1
    assert 'File "<schedulearn-cell>", line 2' in proc.stderr and "name = input(" in proc.stderr
    said = f"EOFError: {cell_runner.NO_ONE_TO_ANSWER}"
    assert proc.stderr.rstrip().splitlines()[-1] == said
    assert failure_reason(proc.stdout + proc.stderr) == said  # the line the notebook's JobFailed shows
    # the cell's own EOFError stays its own, and a cell that expects the end of input still gets it
    proc = run_script(bundle.build_script("raise EOFError('mine')"), tmp_path / "k")
    assert proc.stderr.rstrip().splitlines()[-1] == "EOFError: mine"
    cell = "try:\n    name = input()\nexcept EOFError:\n    name = 'default'\nname"
    proc = run_script(bundle.build_script(cell), tmp_path / "m")
    assert proc.returncode == 0, proc.stderr
    assert result_of(tmp_path / "m") == "default"


def test_a_variable_the_jobs_environment_lacks_says_how_to_pass_it(tmp_path: Path) -> None:
    cell = "import os\nkey = os.environ['NOT_IN_THE_JOB']\n"
    proc = run_script(bundle.build_script(cell), tmp_path / "j", {"NOT_IN_THE_JOB": ""})
    assert proc.returncode == 0, proc.stderr  # (there, it is)
    env = {k: v for k, v in os.environ.items() if k != "NOT_IN_THE_JOB"}
    proc = subprocess.run([sys.executable, "main.py"], cwd=tmp_path / "j", env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    lines = proc.stderr.rstrip().splitlines()
    assert lines[-2:] == ["KeyError: 'NOT_IN_THE_JOB'",
                          "schedulearn: a job's environment is not the notebook's: --env NOT_IN_THE_JOB "
                          "passes the notebook's value of it, --env NAME=VALUE another"]
    proc = run_script(bundle.build_script("{}['k']"), tmp_path / "k")  # any other KeyError: as it is
    assert proc.stderr.rstrip().splitlines()[-1] == "KeyError: 'k'"


def test_a_breakpoint_the_job_cannot_stop_at_is_skipped_and_said_once_per_place(tmp_path: Path) -> None:
    cell = "def step(i):\n    breakpoint()\n    return i\ntotal = 0\nfor i in range(3):\n" \
           "    total += step(i)\nbreakpoint()\ntotal"
    proc = run_script(bundle.build_script(cell), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr  # pdb would have quit at once: bdb.BdbQuit
    assert result_of(tmp_path / "j") == 3
    said = [ln for ln in proc.stderr.splitlines() if "breakpoint()" in ln]
    assert [ln.split(" skipped")[0] for ln in said] == [
        "schedulearn: breakpoint() at line 2 of the cell", "schedulearn: breakpoint() at line 7 of the cell"]
    # a debugger the job names is the one called
    proc = run_script(bundle.build_script("breakpoint('to the hook')\n1"), tmp_path / "k",
                      {"PYTHONBREAKPOINT": "builtins.print"})
    assert proc.returncode == 0 and "to the hook" in proc.stdout and "skipped" not in proc.stderr


def test_the_cell_ends_like_every_job_and_signs_its_result(tmp_path: Path) -> None:
    """The script embeds `schedulearn/run.py` (one implementation): the cell's status is the exit
    status, a process group the cell left is destroyed before exit, the result is signed with
    `$SCHEDULEARN_RESULT_KEY`. Run bare (`python main.py`), without the launcher's runner."""
    from schedulearn import run

    assert repr(Path(run.__file__).read_text()) in bundle.build_script("1")
    proc = run_script(bundle.build_script("import sys\nprint('bye')\nsys.exit(3)\n"), tmp_path / "x")
    assert (proc.returncode, proc.stdout) == (3, "bye\n")
    proc = run_script(bundle.build_script("raise KeyError('k')"), tmp_path / "e")
    assert proc.returncode == 1 and proc.stderr.count("Traceback") == 1, proc.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cell = ("import atexit, torch.distributed as dist\n"
            "dist.init_process_group('gloo')\n"
            "atexit.register(lambda: print('at exit initialised:', dist.is_initialized(), flush=True))\n"
            "dist.get_world_size()")
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
           run.RESULT_KEY_ENV: "k-123"}
    proc = run_script(bundle.build_script(cell), tmp_path / "d", env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "at exit initialised: False\n"
    data = (tmp_path / "d" / bundle.RESULT_FILE).read_bytes()
    assert pickle.loads(data) == 1
    assert (tmp_path / "d" / "result.pkl.hmac").read_text() == run.result_mac("k-123", data)


def test_what_the_cell_holds_is_released_after_its_exit_handlers(tmp_path: Path) -> None:
    """The cell runs in the script's own globals: a DDP model there held its gloo group into the
    interpreter's finalisation (an abort about one job in 30); the runner releases the cell's
    names after the cell's exit handlers, which still see them, and before the interpreter
    finalises (`schedulearn.run.release_program`)."""
    proc = run_script(bundle.build_script(HELD_TO_EXIT), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "exit handler sees Held\nreleased before finalizing\n", (proc.stdout, proc.stderr)


FIGURES_CELL = """\
import matplotlib.pyplot as plt
for epoch in range(2):
    plt.plot([1, 2, 3][epoch:])
    plt.show()  # rendered and closed here, as the inline backend does
plt.figure()  # no axes: nothing to show
fig, ax = plt.subplots()
ax.plot([3, 2, 1])
"""


def test_the_figures_a_cell_shows_come_back_beside_its_value(tmp_path: Path) -> None:
    proc = run_script(bundle.build_script(FIGURES_CELL + "len(plt.get_fignums())"), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    envelope = result_of(tmp_path / "j")
    assert getattr(envelope, cell_runner.SHOWN_MARK) == 1
    assert pickle.loads(envelope.value) == 2  # the figures still open at the cell's last line
    assert len(envelope.shown) == 3  # two shown, the one open at the end; not the empty one
    assert all(kind == "figure" and png.startswith(b"\x89PNG\r\n\x1a\n") and text.startswith("<Figure size")
               for kind, png, text in envelope.shown)
    proc = run_script(bundle.build_script(FIGURES_CELL + "fig;", keep_value=False), tmp_path / "q")
    envelope = result_of(tmp_path / "q")
    assert pickle.loads(envelope.value) is None and len(envelope.shown) == 3  # `plt.plot(x);` still shows


def test_a_cell_that_raises_still_hands_back_the_figures_it_showed(tmp_path: Path) -> None:
    proc = run_script(bundle.build_script(FIGURES_CELL + "raise FloatingPointError('loss is nan')"),
                      tmp_path / "j")
    assert proc.returncode == 1 and proc.stderr.rstrip().endswith("FloatingPointError: loss is nan")
    envelope = result_of(tmp_path / "j")  # the figures, as the inline backend shows them beside a traceback
    assert pickle.loads(envelope.value) is None and len(envelope.shown) == 3
    proc = run_script(bundle.build_script("import matplotlib.pyplot as plt\nplt.figure()\n1 / 0"),
                      tmp_path / "k")  # nothing shown: no result, as for any failed cell
    assert proc.returncode == 1 and not (tmp_path / "k" / bundle.RESULT_FILE).exists()
    proc = run_script(bundle.build_script(FIGURES_CELL + "raise SystemExit(3)"), tmp_path / "m")
    assert proc.returncode == 3  # an exit, not an error: the cell chose its end
    assert not (tmp_path / "m" / bundle.RESULT_FILE).exists()


def test_a_figure_that_does_not_render_is_said_and_fails_nothing(tmp_path: Path) -> None:
    cell = ("import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\n"  # then bad mathtext:
            "fig, ax = plt.subplots()\nax.set_title('$\\\\frac{$')\n'trained'")
    proc = run_script(bundle.build_script(cell), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr  # the training stands
    assert "schedulearn: the cell's open figures could not be rendered: ValueError" in proc.stderr
    envelope = result_of(tmp_path / "j")
    assert pickle.loads(envelope.value) == "trained" and len(envelope.shown) == 1  # the one shown


def test_a_cell_keeps_the_first_figures_and_says_how_many_more(tmp_path: Path) -> None:
    many = cell_runner.MAX_SHOWN + 2
    cell_text = f"import matplotlib.pyplot as plt\nfor i in range({many}):\n    plt.plot([i])\n" \
                "    plt.show()\n"
    proc = run_script(bundle.build_script(cell_text + "'done'"), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == (f"schedulearn: the cell showed {many} figures and displayed "
                                            f"objects; the first {cell_runner.MAX_SHOWN} come back")
    envelope = result_of(tmp_path / "j")
    assert len(envelope.shown) == cell_runner.MAX_SHOWN and pickle.loads(envelope.value) == "done"


DISPLAY_CELL = """\
import matplotlib.pyplot as plt
class Table:
    def __init__(self, rows):
        self.rows = rows
    def _repr_html_(self):
        return "<table>" + "".join(f"<tr><td>{r}</td></tr>" for r in self.rows) + "</table>"
    def __repr__(self):
        return f"Table({self.rows})"
class Broken:
    def _repr_html_(self):
        raise RuntimeError("no html today")
    def __getattr__(self, name):  # answers every attribute: not taken for a representation
        return lambda *a, **k: "anything"
for epoch in range(2):
    display(f"epoch {epoch}")  # a text alone: a log line now, as a progress line
    display(Table([epoch]))
plt.plot([1, 2]); plt.show()
from IPython.display import display as ipy_display, Markdown, clear_output
ipy_display(Markdown("**done**"), Broken())
display({"text/html": "<b>raw</b>", "text/plain": "raw"}, raw=True)
progress = display(Markdown("step 0"), display_id=True)
for step in range(1, 4):
    progress.update(Markdown(f"step {step}"))  # in its place, as in the notebook
clear_output()  # nothing to clear: no escapes in the log
import threading
display({"text/html": threading.Lock()}, raw=True)  # said, and fails nothing
import ipywidgets
display(ipywidgets.IntProgress(max=5), ipywidgets.IntSlider())  # live in the job: their text, said once
"""


def test_what_a_cell_displays_comes_back_in_its_place_among_the_figures(tmp_path: Path) -> None:
    """`display(obj)`, the notebook's builtin (and IPython's, imported), keeps the object's rich
    representations in their place among the figures; an object with only a text repr is
    printed to the log at once; a representation that raises is left out; an update of a
    display replaces it. Other ranks show nothing."""
    proc = run_script(bundle.build_script(DISPLAY_CELL + "'value'"), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["'epoch 0'", "'epoch 1'"] and len(lines) == 5, proc.stdout
    assert lines[2].startswith("<__main__.Broken object at")  # its html raised, its __getattr__ not asked
    assert lines[3:] == ["IntProgress(value=0, max=5)", "IntSlider(value=0)"]
    assert proc.stderr.count("schedulearn: a widget displayed in a job stays there (the notebook cannot show "
                             "it); its text stands in for it\n") == 1
    envelope = result_of(tmp_path / "j")
    assert pickle.loads(envelope.value) == "value"
    assert [item[0] for item in envelope.shown] == ["display", "display", "figure"] + ["display"] * 3
    first, second = envelope.shown[0][1], envelope.shown[1][1]
    assert first == {"text/html": "<table><tr><td>0</td></tr></table>", "text/plain": "Table([0])"}
    assert second["text/plain"] == "Table([1])"
    markdown, raw = envelope.shown[3][1], envelope.shown[4][1]
    assert markdown["text/markdown"] == "**done**"
    assert markdown["text/plain"].startswith("<IPython.core.display")
    assert raw == {"text/html": "<b>raw</b>", "text/plain": "raw"}
    assert envelope.shown[5][1]["text/markdown"] == "step 3"  # the last update, where the first was
    assert len(envelope.shown) == 6
    assert "schedulearn: a displayed dict does not come back: its representation could not be pickled: " \
           "TypeError" in proc.stderr
    proc = run_script(bundle.build_script(DISPLAY_CELL + "'value'"), tmp_path / "r1", env={"RANK": "1"})
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    assert not (tmp_path / "r1" / bundle.RESULT_FILE).exists()


DISPLAY_ID_CELL = """\
from IPython.display import DisplayHandle, HTML, Markdown, update_display
display(Markdown("loss 1.0"), display_id="loss")
display(HTML("<p>between</p>"))
display(Markdown("loss 1.0 again"), display_id="loss")  # a second display of the same id
update_display(Markdown("loss 0.5"), display_id="loss")  # IPython's function: both, in place
display(Markdown("loss 0.2"), display_id="loss", update=True)  # the keyword: the same
update_display(Markdown("never shown"), display_id="unknown")  # nothing, as in the notebook
slot = display(display_id=True)  # no object: an empty display an update fills
handle = DisplayHandle()  # IPython's class: its display and update go through the job's display()
handle.display(Markdown("handle 1"))
handle.update(Markdown("handle 2"))
slot.update(HTML("<p>filled</p>"))
display(display_id="never filled")  # an empty place no update filled: nothing comes back
text = display("epoch 0", display_id=True)  # text: a log line; its updates are lines after it
text.update("epoch 1")
text.update(Markdown("**trained**"))  # rich after text: kept, then updated in its place
text.update(Markdown("**trained, saved**"))
print(repr(slot).startswith("<DisplayHandle display_id="), len(slot.display_id))
try:
    display(Markdown("x"), update=True)
except TypeError as e:
    print("TypeError:", e)
"""


def test_a_display_id_is_updated_in_place_as_ipython_does(tmp_path: Path) -> None:
    """`update_display(obj, display_id=...)`, `display(..., update=True)` and IPython's
    `DisplayHandle` replace every display of that id where it was (an update of an id never
    displayed shows nothing); `display(display_id=True)` with no object keeps an empty place,
    which comes back only if an update filled it."""
    proc = run_script(bundle.build_script(DISPLAY_ID_CELL), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["'epoch 0'", "'epoch 1'", "True 32",
                                        "TypeError: display_id required for update_display"]
    shown = [item[1] for item in result_of(tmp_path / "j").shown]
    assert [b.get("text/markdown") or b.get("text/html") for b in shown] == [
        "loss 0.2", "<p>between</p>", "loss 0.2", "<p>filled</p>", "handle 2", "**trained, saved**"]


LIVE_CELL = """\
from IPython.display import Markdown
import matplotlib.pyplot as plt
loss = display(Markdown("loss 1.0"), display_id=True)
plt.plot([1, 2]); plt.show()
display("epoch 1")  # text: the log's, not the record's
loss.update(Markdown("loss 0.5"))
slot = display(display_id=True)  # an empty place: nothing to show yet, nor at the end
display({"application/json": {"a": 1}, "text/plain": "{'a': 1}"}, raw=True)
"""
KEY = "ab" * 32


def test_a_cell_records_what_it_shows_as_it_shows_it_signed_with_the_jobs_key(tmp_path: Path) -> None:
    """Rank 0 appends each figure and display it keeps, and each update, to `shown.jsonl`, each
    line signed with `$SCHEDULEARN_RESULT_KEY`: the server's reader hands out those lines (a
    line another wrote, or one being written, not); the last record of each place is what the
    result carries there, and the result says which places and run its items are."""
    from schedulearn import liveshown

    job = tmp_path / "j"
    proc = run_script(bundle.build_script(LIVE_CELL + "'value'"), job, env={"SCHEDULEARN_RESULT_KEY": KEY})
    assert proc.returncode == 0, proc.stderr
    records, after = liveshown.page(KEY, 7, job, 0)
    assert after == (job / "shown.jsonl").stat().st_size
    assert [(r["at"], sorted(r["bundle"])) for r in records] == [
        (0, ["text/markdown", "text/plain"]), (1, ["image/png", "text/plain"]),
        (0, ["text/markdown", "text/plain"]), (3, ["application/json", "text/plain"])]
    assert [r["bundle"].get("text/markdown") for r in records] == ["loss 1.0", None, "loss 0.5", None]
    assert base64.b64decode(records[1]["bundle"]["image/png"]).startswith(b"\x89PNG")
    envelope = result_of(job)
    assert {r["run"] for r in records} == {envelope.run} and len(envelope.run) == 32
    assert envelope.places == [0, 1, 3]  # (2: the empty place, left out)
    last = {r["at"]: r["bundle"] for r in records}
    assert last[0] == envelope.shown[0][1] and last[3] == envelope.shown[2][1]
    assert base64.b64decode(last[1]["image/png"]) == envelope.shown[1][1]
    # only the job's lines: one signed with another key, and one not yet ended, are not handed out
    forged = records_line("cd" * 32, {"run": "x", "at": 0, "bundle": {"text/html": "<script>"}})
    late = {"run": "y", "at": 5, "bundle": {"text/plain": "late"}}
    with open(job / "shown.jsonl", "ab") as f:
        f.write(forged + records_line(KEY, late)[:-1])
    assert liveshown.page(KEY, 7, job, after) == ([], after + len(forged))
    assert liveshown.page("cd" * 32, 7, job, 0) == ([forged_record := json.loads(forged.split(b" ", 1)[1])],
                                                    after + len(forged))  # another job's key: its line only
    assert forged_record["run"] == "x"
    with open(job / "shown.jsonl", "ab") as f:
        f.write(b"\n")
    assert liveshown.page(KEY, 7, job, after + len(forged)) == ([late], (job / "shown.jsonl").stat().st_size)
    (job / "shown.jsonl").unlink()
    (job / "shown.jsonl").symlink_to(job / "main.py")  # a link the job put there: not read
    assert liveshown.page(KEY, 7, job, 0) == ([], 0)
    for where, env in (("nokey", {}), ("r1", {"RANK": "1", "SCHEDULEARN_RESULT_KEY": KEY})):
        proc = run_script(bundle.build_script(LIVE_CELL), tmp_path / where, env=env)
        assert proc.returncode == 0, proc.stderr
        assert not (tmp_path / where / "shown.jsonl").exists()  # no key (by hand), or not rank 0


def records_line(key: str, record: dict[str, Any]) -> bytes:
    import hashlib
    import hmac

    body = json.dumps(record, separators=(",", ":")).encode()
    return hmac.new(key.encode(), body, hashlib.sha256).hexdigest().encode() + b" " + body + b"\n"


def test_a_value_no_pickle_takes_leaves_the_job_succeeded_with_a_stand_in(tmp_path: Path) -> None:
    """The training that made the value stands: the job succeeds, says why on stderr, and hands
    back a stand-in (type, why, the start of its repr) that unpickles without Schedulearn."""
    cell_text = ("import threading\nclass Trainer:\n    def __init__(self):\n"
                 "        self.lock = threading.Lock()\n    def __repr__(self):\n"
                 "        return 'Trainer(loss=0.1)' + 'x' * 5000\nTrainer()")
    proc = run_script(bundle.build_script(cell_text), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == ("schedulearn: the cell's value (Trainer) cannot be pickled: "
                                            "TypeError: cannot pickle '_thread.lock' object; "
                                            "the job succeeds without it")
    standin = result_of(tmp_path / "j")
    assert type(standin).__name__ == "SimpleNamespace" and getattr(standin, cell_runner.NOT_KEPT_MARK) == 1
    assert (standin.type, standin.error) == ("Trainer", "TypeError: cannot pickle '_thread.lock' object")
    assert standin.repr.startswith("Trainer(loss=0.1)xxx") and len(standin.repr) == cell_runner.REPR_CHARS + 3


def test_the_stand_in_names_a_module_type_and_survives_a_failing_repr() -> None:
    class BadRepr:
        def __repr__(self) -> str:
            raise ValueError("no")

    gen = (i for i in range(3))
    assert cell_runner.not_kept(gen, TypeError("x")).type == "generator"
    assert cell_runner.not_kept(threading.Lock(), TypeError("x")).type == "_thread.lock"
    assert cell_runner.not_kept(BadRepr(), TypeError("x")).repr == "<BadRepr: its repr failed: ValueError>"


def test_missing_and_unpicklable_vars_name_the_variable() -> None:
    with pytest.raises(BundleError, match=r"^--vars: no variable named 'nope' in the notebook$"):
        bundle.pack_vars(["nope"], {})
    with pytest.raises(BundleError, match=r"^--vars: 'lock' cannot be pickled \(TypeError"):
        bundle.pack_vars(["lock"], {"lock": threading.Lock()})


def test_missing_file_and_size_cap(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"^--files: no such file or folder: 'nope.csv'$"):
        bundle.pack_files(["nope.csv"], tmp_path)
    (tmp_path / "big.bin").write_bytes(os.urandom(300_000))
    files = bundle.pack_files(["big.bin"], tmp_path)
    with pytest.raises(BundleError) as e:
        bundle.build_script("1", files, max_bytes=200_000)
    assert str(e.value).startswith("bundle: ") and "limit" in str(e.value) and "\n" not in str(e.value)


def test_files_pack_what_links_point_to_and_refuse_what_cannot_be_packed(tmp_path: Path) -> None:
    """A notebook folder with a link to a file elsewhere (`ln -s /data/labels.csv`) was packed as
    a link to an absolute path, which the job refused to unpack (`AbsoluteLinkError`) once its
    turn came; a top-level link took its target's name. Now the content travels under the
    link's name; a dangling link or a link loop is one line, and packing stops at the limit."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "set").mkdir(parents=True)
    (elsewhere / "labels.csv").write_text("cat,dog\n")
    (elsewhere / "set" / "x.txt").write_text("x\n")
    nb = tmp_path / "nb"
    (nb / "proj").mkdir(parents=True)
    (nb / "proj" / "a.txt").write_text("a\n")
    (nb / "proj" / "labels.csv").symlink_to(elsewhere / "labels.csv")
    (nb / "data").symlink_to(elsewhere / "set")  # a folder link, named at the top
    files = bundle.pack_files(["proj", "data"], nb)
    with tarfile.open(fileobj=io.BytesIO(files)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"proj", "proj/a.txt", "proj/labels.csv", "data", "data/x.txt"}
    assert not any(m.issym() or m.islnk() for m in members.values())
    cell = "open('proj/labels.csv').read() + open('data/x.txt').read()"
    proc = run_script(bundle.build_script(cell, files), tmp_path / "job")
    assert proc.returncode == 0, proc.stderr
    assert result_of(tmp_path / "job") == "cat,dog\nx\n"

    (nb / "proj" / "gone").symlink_to(tmp_path / "nowhere")
    dangling = r"^--files: 'proj/gone' is a link to '.*nowhere', which does not exist$"
    with pytest.raises(BundleError, match=dangling):
        bundle.pack_files(["proj"], nb)
    (nb / "proj" / "gone").unlink()
    (nb / "proj" / "up").symlink_to(nb / "proj")
    with pytest.raises(BundleError, match=r"^--files: 'proj/up' is a link back to a folder it is in "):
        bundle.pack_files(["proj"], nb)
    (nb / "proj" / "up").unlink()
    (nb / "big").mkdir()
    for i in range(4):
        (nb / "big" / f"{i}.bin").write_bytes(os.urandom(400_000))
    with pytest.raises(BundleError) as e:
        bundle.pack_files(["big"], nb, max_bytes=500_000)
    assert str(e.value) == ("--files: over the 0.5 MiB limit once compressed (at 'big/1.bin'); put large "
                            "data on a path the job can read and pass the path instead")


def test_gpu_tensors_in_the_result_come_back_on_the_cpu(tmp_path: Path) -> None:
    # No CUDA here: a stand-in `torch` module whose tensor says it lives on a GPU. The runner must
    # pickle `tensor.detach().cpu()` in its place (and leave everything else alone).
    cell = (
        "import sys, types\n"
        "class Device:\n    type = 'cuda'\n"
        "class OnCpu:\n    def __reduce_ex__(self, protocol):\n        return (str, ('moved to cpu',))\n"
        "class Tensor:\n    device = Device()\n"
        "    def detach(self):\n        return self\n"
        "    def cpu(self):\n        return OnCpu()\n"
        "fake = types.ModuleType('torch')\nfake.Tensor = Tensor\nsys.modules['torch'] = fake\n"
        "{'weights': Tensor(), 'step': 7}"
    )
    proc = run_script(bundle.build_script(cell), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    value = result_of(tmp_path / "j")
    assert value == {"weights": "moved to cpu", "step": 7}


def test_cpu_torch_tensors_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    cell = "import torch\n{'w': torch.arange(4.0), 'n': torch.nn.Linear(2, 1)}"
    proc = run_script(bundle.build_script(cell), tmp_path / "j")
    assert proc.returncode == 0, proc.stderr
    value = result_of(tmp_path / "j")
    assert torch.equal(value["w"], torch.arange(4.0))
    assert isinstance(value["n"], torch.nn.Linear)


def test_the_cell_runner_is_a_module_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    """What the bundle embeds runs in this process too: the cell in the namespace given, its
    value handed to `write_result` on rank 0 only, an exception as the cell's traceback and 1."""
    from schedulearn_magics import cell_runner

    for name in ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SCHEDULEARN_JOB_DIR", str(tmp_path))
    written: dict[str, bytes] = {}
    namespace: dict = {"__name__": "__main__"}
    cell_runner.run_cell("def double(x):\n    return 2 * x\ndouble(21)", namespace,
                         write_result=lambda data, path: written.update({path: data}))
    assert pickle.loads(written.pop(str(tmp_path / "result.pkl"))) == 42 and "double" in namespace
    monkeypatch.setenv("RANK", "1")
    cell_runner.run_cell("7", {}, write_result=lambda data, path: written.update({path: data}))
    assert written == {}  # not rank 0: no result
    with pytest.raises(SystemExit) as e:
        cell_runner.run_cell("x = 1\n1 / 0", {}, write_result=lambda data, path: None)
    err = capsys.readouterr().err
    assert e.value.code == 1 and 'File "<schedulearn-cell>", line 2' in err and "ZeroDivisionError" in err
    assert "cell_runner" not in err  # the cell's own frames only


def test_the_cell_is_read_back_from_its_script_and_from_no_other() -> None:
    """`%schedulearn script ID` shows the cell, not the ~30 KB script it travels in."""
    cell = 'if __name__ == "__main__":\n    print("x\\n", """y""")\n'
    script = bundle.build_script(cell, files=None, variables=b"\x00vars")
    assert bundle.cell_of(script) == cell
    assert bundle.cell_of("print(1)\n") is None
    assert bundle.cell_of(script.replace("# Generated by", "# Written by")) is None
    assert bundle.cell_of(script[:-20]) is None  # cut short: no syntax, no cell


NOTEBOOK = {"lr": 0.1, "data": [1, 2], "helper": len, "os": os, "_hidden": 1,
            "In": [], "list": 3}


@pytest.mark.parametrize(
    ("cell", "refused"),
    [
        ("print(lr)", ["lr"]),
        ("def f():\n    return data\nf()", ["data"]),  # read in a function, as a global
        ("class C:\n    x = lr\n", ["lr"]),  # read in a class body
        ("[helper(x) for x in range(2)]", ["helper"]),  # in a comprehension
        ("import math\nmath.sqrt(lr) + len(data)", ["lr", "data"]),  # in the order first read
        ("os.getcwd()", ["os"]),
        ("lr = 0.2\nprint(lr)", []),  # defined in the cell
        ("print(lr)\nlr = 1", []),  # bound somewhere in the cell (a NameError or not: the user's code)
        ("def f():\n    global data\n    data = 3\nf()\nprint(data)", []),  # bound by a global statement
        ("import os\nos.getcwd()", []),
        ("for lr in range(3):\n    pass\nprint(lr)", []),
        ("try:\n    pass\nexcept Exception as data:\n    print(data)", []),
        ("def f(lr):\n    return lr\nf(1)", []),  # a parameter, not the notebook's
        ("print(_hidden, In, list)", []),  # private, IPython's own, a builtin
        ("print(nope)", []),  # not the notebook's either: the job's NameError says it
        ("from os.path import *\nprint(lr)", []),  # may bind anything: not checked
        ("exec('lr = 1')\nprint(lr)", []),
        ("display(lr)", ["lr"]),  # IPython's builtin `display` the job has (`cell_runner.Shown`)
        ("get_ipython().system('ls')\nprint(lr)", ["lr", "get_ipython"]),  # this one it has not
        ("from IPython.display import display\ndisplay(1)", []),
    ],
)
def test_a_cell_reading_the_notebooks_names_is_refused(cell: str, refused: list[str], tmp_path: Path) -> None:
    if not refused:
        bundle.check_names(cell, NOTEBOOK, hidden={"In"})
        return
    with pytest.raises(BundleError) as e:
        bundle.check_names(cell, NOTEBOOK, hidden={"In"})
    msg = str(e.value)
    assert msg.startswith("cell: a job does not see the notebook's names: ") and "\n" not in msg
    assert ", ".join(part.split(" (")[0] for part in msg.split(": ", 2)[2].split("); ")) == ", ".join(refused)
    # what it refuses a job would have failed on, in the order the cell reads them
    proc = run_script(bundle.build_script(cell), tmp_path / "j")
    assert any(f"NameError: name '{name}' is not defined" in proc.stderr for name in refused), proc.stderr


def test_the_refusal_names_the_fix() -> None:
    import json.decoder

    ns = {"lr": 0.1, "data": [1], "np": os, "decoder": json.decoder, "T": json.decoder}
    with pytest.raises(BundleError) as e:
        bundle.check_names("print(lr, data, np, decoder, T)", ns)
    assert str(e.value) == (
        "cell: a job does not see the notebook's names: lr, data (add --vars lr,data, or define them in the "
        "cell); np, decoder, T (add import os as np; from json import decoder; import json.decoder as T to "
        "the cell)")
    with pytest.raises(BundleError, match=r"\(add --vars lr, or define it in the cell\)$"):
        bundle.check_names("print(lr)", ns)
    bundle.check_names("print(lr, data, np, decoder, T)", ns, passed=["lr", "data", "np", "decoder", "T"])
    with pytest.raises(BundleError) as e:
        bundle.check_names("get_ipython()", ns)
    assert str(e.value) == ("cell: a job does not see the notebook's names: get_ipython (IPython's: a job "
                            "runs plain Python)")
    bundle.check_names("display(1)", ns)  # a job has it (`cell_runner.Shown.display`)
