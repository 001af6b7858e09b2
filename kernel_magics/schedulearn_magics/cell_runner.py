"""The job side of a notebook cell: how the script `bundle.build_script` writes runs the cell.

`run_cell` (called through `schedulearn.run.call`, which ends the process the way every job
ends) does, in the job's `main.py`:

1. puts its working directory first on `sys.path`, as a notebook has its folder (the notebook's
   folder, or the job directory with `--files`: see `magics`), and unpacks the `--files` there
   (once per job directory, under a file lock, because every rank runs the same script);
2. loads the `--vars` into the script's globals;
3. runs the cell as `__main__`, the way IPython does: the last statement, if it is an
   expression, is evaluated and kept; a top-level `await` runs the cell in an event loop (as
   IPython's autoawait); an exception prints the cell's part of its traceback (an `input()`,
   which a job cannot answer, says so, and a missing `os.environ[...]` how to pass it) and ends
   the job with status 1 (130 for a KeyboardInterrupt); `sys.exit(N)` ends it with status N,
   and `sys.exit()` / `sys.exit(0)` succeeds with the value None; a `breakpoint()` is skipped,
   and said, unless `$PYTHONBREAKPOINT` names a debugger (`skip_breakpoint`);
4. functions and classes the cell defines reach the processes it starts with `spawn` or
   `forkserver` (`torch.multiprocessing.spawn`, a `DataLoader` or `Pool` of such a context):
   those processes import the job's script as `__mp_main__`, which does not run the cell, so
   pickling `__main__.fn` by name failed there (`Can't get attribute 'fn' on <module
   '__mp_main__'>`; a `Pool` then restarted its workers for ever). Once the cell has started
   such a process, `multiprocessing` pickles them by value (cloudpickle), as `--vars` carries
   them (`share_definitions`); with `fork` alone nothing changes: the children have them;
5. on rank 0 (`RANK`, `HOROVOD_RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`; 0 when none is set)
   cloudpickles that value (tensors moved to the CPU) and hands it to `write_result`
   (`schedulearn.run.write_result`: atomic, signed with the job's `$SCHEDULEARN_RESULT_KEY`).
   A value no pickle takes does not undo the training that made it: the job still succeeds,
   and its result is a stand-in saying so (`not_kept`), which the notebook turns into one line;
6. the matplotlib figures the cell shows come back, as with IPython's inline backend: rank 0
   renders each figure open at a `plt.show()`, and those still open when the cell ends, as PNG,
   then closes them; `display(obj)` (the notebook's builtin, or IPython's) keeps an object's
   rich representations (HTML, images: `mime_bundle`) in their place among the figures, and
   prints one that has only a text repr to the log at once (`Shown`). The result carries what
   was shown beside the value (`with_shown`), and a cell that raised leaves a result with what
   it showed and no value;
7. while the cell runs, rank 0 also appends each figure and display it keeps (and each update
   of one) to the job directory's `shown.jsonl`, one line a record, signed with the job's
   `$SCHEDULEARN_RESULT_KEY` as the result is (`LiveShown`; the server hands out only lines with
   the job's signature, `GET jobs/{id}/shown`): a waiting cell displays them as they come.

Standard library only (cloudpickle and torch when the job has them), no import of Schedulearn:
the bundle embeds this file's source, since the job may run where neither package is installed
(a container). It is a module all the same, so that it is linted and tested as one.
"""

from __future__ import annotations

import ast
import base64
import builtins
import linecache
import os
import sys
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The filename tracebacks show for the cell's lines.
CELL_FILENAME = "<schedulearn-cell>"
_RANK_VARIABLES = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def rank() -> int:
    """This process's rank among the job's workers (0 when no launcher says)."""
    for key in _RANK_VARIABLES:
        if os.environ.get(key, "").strip().isdigit():
            return int(os.environ[key])
    return 0


def run_cell(cell: str, namespace: dict[str, Any], files_b64: str | None = None, vars_b64: str | None = None,
             result_file: str = "result.pkl",
             write_result: Callable[[bytes, str], None] | None = None,
             after_import: Callable[[str, Callable[[Any], None]], None] | None = None,
             keep_value: bool = True) -> None:
    """Run `cell` in `namespace` (the script's globals) as described above; `after_import`
    is `schedulearn.run.after_import` (how `share_definitions` waits for `multiprocessing`);
    `keep_value=False`: the result is None whatever the last expression's value (the cell ended
    with `;`)."""
    job_dir = os.environ.get("SCHEDULEARN_JOB_DIR") or os.getcwd()
    if rank() == 0:
        SHOWN.live = LiveShown.to(job_dir)
    os.environ.setdefault("MPLBACKEND", "agg")  # no window: `plt.show()` hands figures back
    if "PYTHONBREAKPOINT" not in os.environ:  # (a debugger that listens, e.g. remote_pdb, is the user's)
        sys.breakpointhook = skip_breakpoint
    if after_import is not None:
        after_import("multiprocessing.spawn", share_definitions)
        after_import("matplotlib.pyplot", SHOWN.keep_shown)
        after_import("IPython.display", SHOWN.keep_displayed)
    if not hasattr(builtins, "display"):  # the notebook's builtin (IPython puts it there)
        builtins.display = SHOWN.display
    sys.path.insert(0, os.getcwd())  # as in the notebook: its folder's modules import
    if files_b64:
        unpack(base64.b64decode(files_b64), os.getcwd())
    if vars_b64:
        namespace.update(load_vars(base64.b64decode(vars_b64)))
    linecache.cache[CELL_FILENAME] = (len(cell), None, cell.splitlines(True), CELL_FILENAME)
    tree = ast.parse(cell, filename=CELL_FILENAME)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    try:
        body, tail = compile_cell(tree), compile_cell(last) if last is not None else None
        if any(code is not None and code.co_flags & _CO_COROUTINE for code in (body, tail)):
            import asyncio

            value = asyncio.run(_run_async(body, tail, namespace))
        else:
            exec(body, namespace)
            value = eval(tail, namespace) if tail is not None else None
    except SystemExit as e:  # the cell ended the job: `sys.exit(0)` succeeds with no value, as in IPython
        if (e.code is None or e.code == 0) and rank() == 0 and write_result is not None:
            SHOWN.at_end()  # (else: "no result" for a success)
            write_result(SHOWN.with_shown(dumps(None)), os.path.join(job_dir, result_file))
        raise
    except BaseException as e:
        import traceback

        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != CELL_FILENAME:
            tb = tb.tb_next
        if isinstance(e, EOFError) and e.args == (INPUT_EOF,):  # `input()`: say why, where it was called
            e = EOFError(NO_ONE_TO_ANSWER)
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        if isinstance(e, KeyError) and _raised_by_environ(e):
            sys.stderr.write(f"schedulearn: a job's environment is not the notebook's: --env {e.args[0]} "
                             "passes the notebook's value of it, --env NAME=VALUE another\n")
        if isinstance(e, Exception) and rank() == 0 and write_result is not None:
            SHOWN.after_failure(os.path.join(job_dir, result_file), write_result)
        raise SystemExit(130 if isinstance(e, KeyboardInterrupt) else 1) from None
    if rank() == 0 and write_result is not None:
        SHOWN.at_end()  # (before the value is pickled: a figure in it, closed, does not join the
        # kernel's pyplot figures when it is unpickled there, so the inline backend shows it no more)
        data = SHOWN.with_shown(dumps(value if keep_value else None))
        write_result(data, os.path.join(job_dir, result_file))


#: What `input()` raises at the end of its stdin, and what the cell's traceback says instead: a
#: job reads no keyboard (no executor gives it a stdin), which a bare EOFError does not tell.
INPUT_EOF = "EOF when reading a line"
NO_ONE_TO_ANSWER = ("input() has no one to answer it in a job (a job has no stdin): set the value in the "
                    "cell, or pass it with --env NAME=VALUE and read os.environ['NAME']")


def _raised_by_environ(e: KeyError) -> bool:
    """`os.environ[name]` raised `e`: a variable the notebook has, perhaps, and the job not."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (tb is not None and tb.tb_frame.f_code.co_name == "__getitem__"
            and tb.tb_frame.f_globals.get("__name__") == "os"
            and len(e.args) == 1 and isinstance(e.args[0], str))


#: `inspect.CO_COROUTINE` (inspect itself is a large import): the code has a top-level `await`.
_CO_COROUTINE = 0x0080


def compile_cell(tree: ast.Module | ast.Expression) -> types.CodeType:
    """The cell's code (`exec` for a module, `eval` for its last expression) as IPython compiles
    it: a top-level `await` allowed, and none of this module's `__future__` imports (its
    `annotations` would have turned the cell's annotations into strings)."""
    mode = "eval" if isinstance(tree, ast.Expression) else "exec"
    return compile(tree, CELL_FILENAME, mode, flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


async def _run_async(body: types.CodeType, tail: types.CodeType | None, namespace: dict[str, Any]) -> Any:
    """Run a cell with a top-level `await` in one event loop, as IPython does (`asyncio.run`)."""
    done = eval(body, namespace)
    if body.co_flags & _CO_COROUTINE:
        await done
    if tail is None:
        return None
    value = eval(tail, namespace)
    return (await value) if tail.co_flags & _CO_COROUTINE else value


def share_definitions(spawn: Any) -> None:
    """Once a process is started with `spawn` or `forkserver` (both ask
    `multiprocessing.spawn.get_preparation_data` for what the child needs), pickle the
    functions and classes defined in `__main__` (the cell's, and those `--vars` brought) by value
    wherever `multiprocessing` pickles: the process object (its target, a `DataLoader`'s
    dataset) and what goes through its queues (a `Pool`'s tasks). Only after such a start: with
    `fork` the children have them already, and by value would copy what they reference (a large
    array) into every task. Without cloudpickle in the job's environment, nothing changes."""
    try:
        from multiprocessing import reduction

        import cloudpickle
    except ImportError:
        return
    started = [False]
    original = spawn.get_preparation_data

    def get_preparation_data(name: str) -> Any:
        started[0] = True
        return original(name)

    def reducer_override(self: Any, obj: Any) -> Any:
        if (started[0] and isinstance(obj, (type, types.FunctionType))
                and getattr(obj, "__module__", None) == "__main__"):
            return cloudpickle.loads, (cloudpickle.dumps(obj),)
        return NotImplemented

    spawn.get_preparation_data = get_preparation_data
    reduction.ForkingPickler.reducer_override = reducer_override


def unpack(data: bytes, dest: str) -> None:
    """Extract the gzipped tar `data` into `dest`, once for all the ranks that call this."""
    import fcntl
    import hashlib
    import io
    import tarfile

    marker = os.path.join(dest, ".schedulearn-files-" + hashlib.sha256(data).hexdigest()[:16])
    with open(os.path.join(dest, ".schedulearn-files.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # every rank runs this: the first one unpacks
        if not os.path.exists(marker):
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(dest, filter="data")
                else:
                    tar.extractall(dest)
            open(marker, "w").close()


def load_vars(data: bytes) -> dict[str, Any]:
    """The variables `bundle.pack_vars` packed: name -> value."""
    import pickle
    import zlib

    try:
        import cloudpickle  # noqa: F401  (what unpickles functions pickled by value)
    except ImportError:
        pass
    blobs = pickle.loads(zlib.decompress(data))
    return {name: pickle.loads(blob) for name, blob in blobs.items()}


def dumps(value: Any) -> bytes:
    """The cell's value, cloudpickled with tensors on the CPU; for a value that cannot be pickled
    (a lock, a generator, an open file inside it), a line on stderr and the stand-in `not_kept`."""
    import io
    import pickle

    try:
        try:
            import cloudpickle

            base = cloudpickle.Pickler
        except ImportError:
            base = pickle.Pickler

        class ToCpu(base):  # type: ignore[misc, valid-type]
            # Tensors on a GPU come back on the CPU: unpickling them in the notebook kernel would
            # otherwise take memory on a GPU the scheduler may have given to another job.
            def reducer_override(self, obj: Any) -> Any:
                torch = sys.modules.get("torch")
                tensor = torch is not None and isinstance(obj, torch.Tensor)
                if tensor and obj.device.type not in ("cpu", "meta"):
                    return obj.detach().cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
                parent = getattr(super(), "reducer_override", None)
                return parent(obj) if parent is not None else NotImplemented

        buf = io.BytesIO()
        ToCpu(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
        return buf.getvalue()
    except Exception as e:
        standin = not_kept(value, e)
        sys.stderr.write(f"schedulearn: the cell's value ({standin.type}) cannot be pickled: "
                         f"{standin.error}; the job succeeds without it\n")
        return pickle.dumps(standin, protocol=pickle.HIGHEST_PROTOCOL)


#: The places whose `breakpoint()` has been said to be skipped (said once each, not at every step).
_SKIPPED: set[tuple[str, int]] = set()


def skip_breakpoint(*args: Any, **kwargs: Any) -> None:
    """`breakpoint()` in a job: pdb would read its commands from a stdin the job does not have,
    quit at once and fail the job (`bdb.BdbQuit`), perhaps hours into its training; so the job
    goes on, and says once per place that it did."""
    caller = sys._getframe(1)
    place = (caller.f_code.co_filename, caller.f_lineno)
    if place in _SKIPPED:
        return
    _SKIPPED.add(place)
    where = f"line {place[1]} of the cell" if place[0] == CELL_FILENAME else f"{place[0]}:{place[1]}"
    sys.stderr.write(f"schedulearn: breakpoint() at {where} skipped: a job has no terminal for a debugger "
                     "(--env PYTHONBREAKPOINT=... names one that listens, e.g. remote_pdb.set_trace)\n")


#: The most figures and displayed objects a cell hands back; later ones are counted and said, not kept.
MAX_SHOWN = 50
#: The attribute that marks the result that carries what the cell showed beside the value (`with_shown`).
SHOWN_MARK = "schedulearn_cell_shown"
#: A Jupyter widget's view: its model lives in the process that made it, which a job's is not.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: The representations `display()` asks an object for, as IPython's formatters do, and their MIME types.
_REPR_METHODS = (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
                 ("text/latex", "_repr_latex_"), ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"),
                 ("image/jpeg", "_repr_jpeg_"), ("application/json", "_repr_json_"))


class Shown:
    """What the cell showed, in order (rank 0's; other ranks only close their figures): each
    item ("figure", PNG, repr) or ("display", MIME bundle)."""

    def __init__(self) -> None:
        self.items: list[tuple] = []
        self.dropped = 0
        self.widget_said = False
        self.ids: dict[str, list[int]] = {}  # display_id -> where its displays are kept
        self.live: LiveShown | None = None  # where each item goes as it is kept (rank 0's)

    def _keep(self, make: Callable[[], tuple]) -> int | None:
        """Keep the item `make()` makes, unless MAX_SHOWN are kept (counted, and not made); where
        it is kept (also sent to `live`), or None."""
        if len(self.items) >= MAX_SHOWN:
            self.dropped += 1
            return None
        self.items.append(make())
        self._send(len(self.items) - 1)
        return len(self.items) - 1

    def _send(self, at: int) -> None:
        """The item kept at `at` to the live record, as a MIME bundle (a figure: its PNG and repr)."""
        if self.live is not None:
            item = self.items[at]
            figure = item[0] == "figure"
            self.live.send(at, {"image/png": item[1], "text/plain": item[2]} if figure else item[1])

    def keep_shown(self, pyplot: Any) -> None:
        """`pyplot.show()` renders and closes the open figures, as IPython's inline backend does."""
        pyplot.show = lambda *args, **kwargs: self.take_open()

    def take_open(self) -> None:
        """Render the open figures that have axes and close them all (a figure that is also the
        cell's value is among them, as the inline backend shows it beside the cell's `Out`)."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        if rank() == 0:
            for num in pyplot.get_fignums():
                fig = pyplot.figure(num)
                if fig.axes:
                    self._keep(lambda: ("figure", _png(fig), repr(fig)))  # noqa: B023 (called at once)
        pyplot.close("all")

    def display(self, *objs: Any, raw: bool = False, display_id: Any = None, update: bool = False,
                **ignored: Any) -> Any:
        """The notebook's `display()` in the job: an object with a rich representation (HTML, an
        image, a figure...) comes back to the notebook beside the value and is displayed there in
        its place among the figures; one with only a text repr is printed to the log now (a
        progress line, as a notebook shows it). `raw=True`: the objects are MIME bundles. With a
        `display_id` (True: a new one), IPython's: a handle (`update(obj)`, `display(obj)`,
        `display_id`); `update=True` (`update_display`) replaces every display of that id in its
        place, and shows nothing for an id never displayed, as the notebook; no object: an empty
        display that an update fills."""
        if display_id is True:
            display_id = uuid.uuid4().hex
        if update:
            if display_id is None:
                raise TypeError("display_id required for update_display")
            self._update(self.ids.get(display_id), objs, raw)
            return None
        if display_id is None:
            for obj in objs:
                self._show(obj, raw)
            return None
        if not objs:
            objs, raw = ({},), True
        kept = self.ids.setdefault(display_id, [])
        for obj in objs:
            if (at := self._show(obj, raw)) is not None:
                kept.append(at)
        return _Handle(self, display_id)

    def _update(self, kept: list[int] | None, objs: tuple, raw: bool) -> None:
        """Replace the displays kept at `kept` (an id's) by each of `objs` in turn; None: an id
        never displayed, nothing shown; empty: it was text in the log, and an update comes after
        it (a log line is not replaced)."""
        if kept is None:
            return
        for obj in objs:
            if kept:
                for at in kept:
                    self._show(obj, raw, at)
            elif (at := self._show(obj, raw)) is not None:
                kept.append(at)

    def _show(self, obj: Any, raw: bool = False, at: int | None = None) -> int | None:
        """Show `obj` (at `at`, in place of what was there); where it is kept, or None."""
        if rank() != 0:
            return None
        bundle = dict(obj) if raw and isinstance(obj, dict) else mime_bundle(obj)
        if bundle.pop(WIDGET_VIEW, None) is not None and not self.widget_said:
            self.widget_said = True  # (its model lives in the job's process: the notebook has none)
            sys.stderr.write("schedulearn: a widget displayed in a job stays there (the notebook cannot "
                             "show it); its text stands in for it\n")
        if bundle and set(bundle) <= {"text/plain"}:
            print(bundle.get("text/plain", ""), flush=True)
            return at
        try:  # (a representation no pickle takes would fail the job at its end, after its work)
            import pickle

            pickle.dumps(bundle)
        except Exception as e:
            sys.stderr.write(f"schedulearn: a displayed {type(obj).__name__} does not come back: its "
                             f"representation could not be pickled: {type(e).__name__}: {e}\n")
            return at
        if at is not None:
            self.items[at] = ("display", bundle)
            self._send(at)
            return at
        return self._keep(lambda: ("display", bundle))

    def keep_displayed(self, module: Any) -> None:
        """`from IPython.display import display` in the cell gets `display` above (and so do
        `update_display` and `DisplayHandle`, which call IPython's module-level `display`), and
        a `clear_output()` that clears nothing (a job has no screen; IPython's would print escapes)."""
        module.display = self.display
        module.clear_output = lambda wait=False: None
        functions = sys.modules.get("IPython.core.display_functions")
        if functions is not None:
            functions.display = self.display
            functions.clear_output = module.clear_output

    def at_end(self) -> None:
        """`take_open` once the cell is over: a figure that does not render (bad data in it) is
        said, and neither fails the job after its work nor hides the cell's own error."""
        try:
            self.take_open()
        except Exception as e:
            sys.stderr.write(f"schedulearn: the cell's open figures could not be rendered: "
                             f"{type(e).__name__}: {e}\n")

    def after_failure(self, path: str, write_result: Callable[[bytes, str], None]) -> None:
        """The cell raised: what it showed until then still comes back (as the inline backend
        shows figures beside a traceback), in a result with no value; nothing shown, no result."""
        self.at_end()
        if self.items:
            write_result(self.with_shown(dumps(None)), path)

    def with_shown(self, value: bytes) -> bytes:
        """The result: the pickled value alone, or with what the cell showed beside it (a
        `SimpleNamespace`, which the kernel unpickles without this module)."""
        if self.dropped:
            sys.stderr.write(f"schedulearn: the cell showed {len(self.items) + self.dropped} figures and "
                             f"displayed objects; the first {MAX_SHOWN} come back\n")
        places = [at for at, item in enumerate(self.items) if item[0] != "display" or item[1]]  # (not
        if not places:  # an empty place that no update filled)
            return value
        import pickle

        run = self.live.run if self.live is not None else None  # (the live record's places: `places`)
        return pickle.dumps(types.SimpleNamespace(**{SHOWN_MARK: 1}, value=value,
                                                  shown=[self.items[at] for at in places], places=places,
                                                  run=run), protocol=pickle.HIGHEST_PROTOCOL)


class LiveShown:
    """The live record of what the cell shows (`shown.jsonl` in the job directory): a line per
    item kept or updated, `<HMAC-SHA256 hex> <JSON>`, the JSON `{"run", "at", "bundle"}` — this
    process's run (a restart's places are new ones), the item's place among what the cell shows
    (an update: the place it replaces), its MIME bundle (bytes as base64, as Jupyter sends
    images). Signed with the job's result key, so that the server hands out only what the job
    wrote. A bundle JSON cannot carry, one over `LINE_LIMIT`, or anything once `LIMIT` is
    written, is left out here (it comes back with the result)."""

    LIMIT = 256 << 20
    LINE_LIMIT = 4 << 20  # (the server reads pages of twice that: a line always fits one)

    def __init__(self, path: Path, key: str):
        self.path, self.key, self.run, self.written = path, key, uuid.uuid4().hex, 0

    @classmethod
    def to(cls, job_dir: str) -> LiveShown | None:
        """The record in `job_dir`, for a job given a key (none for a script run by hand)."""
        key = os.environ.get("SCHEDULEARN_RESULT_KEY")
        return cls(Path(job_dir) / SHOWN_FILE, key) if key else None

    def send(self, at: int, bundle: dict[str, Any]) -> None:
        import hashlib
        import hmac
        import json

        if not bundle:  # (an empty place: nothing to show until an update fills it)
            return
        data = {mime: base64.b64encode(v).decode("ascii") if isinstance(v, bytes | bytearray) else v
                for mime, v in bundle.items()}
        try:
            body = json.dumps({"run": self.run, "at": at, "bundle": data}, separators=(",", ":"))
        except (TypeError, ValueError):
            return
        mac = hmac.new(self.key.encode("ascii"), body.encode(), hashlib.sha256).hexdigest()
        line = f"{mac} {body}\n".encode()
        if len(line) > self.LINE_LIMIT or self.written + len(line) > self.LIMIT:
            return
        try:
            with open(self.path, "ab") as f:
                f.write(line)
            self.written += len(line)
        except OSError:  # (a full disk: the cell's work goes on; what it showed comes at its end)
            pass


#: The live record's name in the job directory (`schedulearn.jobfiles.SHOWN_FILE` is the same).
SHOWN_FILE = "shown.jsonl"

SHOWN = Shown()


class _Handle:
    """What `display(obj, display_id=...)` returns in a job, as IPython's `DisplayHandle`."""

    def __init__(self, shown: Shown, display_id: str):
        self.shown, self.display_id = shown, display_id

    def __repr__(self) -> str:
        return f"<DisplayHandle display_id={self.display_id}>"

    def update(self, obj: Any, **kwargs: Any) -> None:
        self.shown.display(obj, display_id=self.display_id, **{**kwargs, "update": True})

    def display(self, obj: Any, **kwargs: Any) -> None:
        self.shown.display(obj, display_id=self.display_id, **kwargs)


def _png(fig: Any) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def mime_bundle(obj: Any) -> dict[str, Any]:
    """`obj`'s representations by MIME type, as IPython's display formatters ask for them
    (`_repr_mimebundle_`, `_repr_html_`, ...; looked up on its type, so that a class answering
    every attribute is not taken at its word), a matplotlib figure as PNG, and always its repr
    as text/plain. A representation that raises is left out."""
    bundle: dict[str, Any] = {}
    kind = type(obj)
    if kind.__name__ == "Figure" and kind.__module__.startswith("matplotlib."):
        try:
            bundle["image/png"] = _png(obj)
        except Exception as e:
            sys.stderr.write(f"schedulearn: a displayed figure could not be rendered: "
                             f"{type(e).__name__}: {e}\n")
    method = getattr(kind, "_repr_mimebundle_", None)
    if callable(method):
        try:
            data = method(obj, include=None, exclude=None)
            data = data[0] if isinstance(data, tuple) else data
            bundle.update(data if isinstance(data, dict) else {})
        except Exception:
            pass
    for mime, name in _REPR_METHODS:
        method = getattr(kind, name, None)
        if mime in bundle or not callable(method):
            continue
        try:
            data = method(obj)
        except Exception:
            continue
        data = data[0] if isinstance(data, tuple) else data  # (data, metadata)
        if data is not None:
            bundle[mime] = data
    if "text/plain" not in bundle:
        try:
            bundle["text/plain"] = repr(obj)
        except Exception as e:
            bundle["text/plain"] = f"<{kind.__name__}: its repr failed: {type(e).__name__}>"
    return bundle


#: The attribute that marks `not_kept`'s stand-in (`handle.ValueNotKept` reads it).
NOT_KEPT_MARK = "schedulearn_value_not_kept"
#: How much of the value's repr the stand-in carries.
REPR_CHARS = 2000


def not_kept(value: Any, error: BaseException) -> types.SimpleNamespace:
    """What the job hands back in place of a value no pickle takes: a `SimpleNamespace` (the
    kernel unpickles it without this module) with the mark, the value's type, why pickling failed,
    and the start of its repr (what IPython would have shown)."""
    try:
        shown = repr(value)
    except Exception as e:  # a repr that fails too: say so rather than fail the job
        shown = f"<{type(value).__name__}: its repr failed: {type(e).__name__}>"
    if len(shown) > REPR_CHARS:
        shown = shown[:REPR_CHARS] + "..."
    kind = type(value)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = f"{kind.__module__}.{name}"
    return types.SimpleNamespace(**{NOT_KEPT_MARK: 1}, type=name, error=f"{type(error).__name__}: {error}",
                                 repr=shown)
