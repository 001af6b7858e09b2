"""A notebook cell -> the job's main program (one self-contained Python script).

The script travels in the JobSpec's `script` field, so a submission is one POST: the cell's
source, the `--files` (a gzipped tar) and the `--vars` (cloudpickled) are embedded in it.
When the job runs (`python main.py`, once per worker under torchrun/horovodrun) it:

1. unpacks the files into its working directory (once per job directory, under a file lock,
   because every rank runs the same script);
2. loads the variables into its globals;
3. runs the cell as `__main__`, the way IPython does: the last statement, if it is an
   expression, is evaluated and kept;
4. on rank 0 (`RANK`, `HOROVOD_RANK`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`; 0 when none is set)
   cloudpickles that value to `$SCHEDULEARN_JOB_DIR/result.pkl` (written atomically, signed
   with the job's `$SCHEDULEARN_RESULT_KEY`: the server hands out no other result);
5. ends the way every job does (`schedulearn.run`, whose source is embedded): the process
   group destroyed if the cell left one, output flushed, the cell's status as the exit status
   (0; a `SystemExit`'s code; 1 after the cell's traceback).

Everything that can be checked before submitting is checked here, with a one-line
`BundleError`: syntax errors in the cell, missing files, missing or unpicklable variables, and
the total size.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import os
import tarfile
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Where the runner writes the result (relative to `$SCHEDULEARN_JOB_DIR`).
RESULT_FILE = "result.pkl"
#: The filename tracebacks show for the cell's lines.
CELL_FILENAME = "<schedulearn-cell>"
#: The server refuses bodies over 4 MiB; the script is most of the body.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024 - 128 * 1024


class BundleError(ValueError):
    """The cell cannot be turned into a job; the message is one line naming the option."""


# --- checks ---------------------------------------------------------------------------------
def check_syntax(source: str) -> ast.Module:
    """Parse the cell; a syntax error becomes one line with the cell's line number."""
    try:
        return ast.parse(source, filename=CELL_FILENAME)
    except SyntaxError as e:
        line = (e.text or "").strip()
        where = f"line {e.lineno}" + (f": {line}" if line else "")
        raise BundleError(f"cell: syntax error ({e.msg}) at {where}") from None


def detect_launcher(source: str | ast.Module) -> str:
    """`horovod` when the cell imports horovod; `torchrun` when it uses torch.distributed
    (an import of it or of DistributedDataParallel, or an attribute `torch.distributed`);
    `python` otherwise. Read from the syntax tree: comments and strings do not count."""
    tree = check_syntax(source) if isinstance(source, str) else source
    torch = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _under(alias.name, "horovod"):
                    return "horovod"
                torch |= _under(alias.name, "torch.distributed")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _under(node.module, "horovod"):
                return "horovod"
            names = {a.name for a in node.names}
            torch |= _under(node.module, "torch.distributed")
            torch |= node.module == "torch" and "distributed" in names
            torch |= _under(node.module, "torch.nn.parallel") and "DistributedDataParallel" in names
        elif isinstance(node, ast.Attribute) and node.attr == "distributed":
            torch |= isinstance(node.value, ast.Name) and node.value.id == "torch"
    return "torchrun" if torch else "python"


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# --- payloads -------------------------------------------------------------------------------
def pack_vars(names: Iterable[str], namespace: Mapping[str, Any]) -> bytes:
    """cloudpickle `names` from `namespace` (the notebook's variables) into one blob: a pickled
    dict name -> cloudpickled value (each value pickled on its own, to name the culprit)."""
    import pickle

    import cloudpickle

    blobs: dict[str, bytes] = {}
    for name in names:
        if not name.isidentifier():
            raise BundleError(f"--vars: expected comma-separated variable names, got {name!r}")
        if name not in namespace:
            raise BundleError(f"--vars: no variable named {name!r} in the notebook")
        try:
            blobs[name] = cloudpickle.dumps(namespace[name])
        except Exception as e:
            why = (str(e).splitlines() or [""])[0]
            raise BundleError(f"--vars: {name!r} cannot be pickled ({type(e).__name__}: {why})") from None
    return zlib.compress(pickle.dumps(blobs))


def pack_files(paths: Iterable[str], cwd: str | Path | None = None) -> bytes:
    """A gzipped tar of the files and folders in `paths`: paths under `cwd` keep their relative
    path (so `data/x.csv` is `data/x.csv` in the job), others keep their last component."""
    base = Path(cwd or os.getcwd()).resolve()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for raw in paths:
            p = Path(raw).expanduser()
            full = (p if p.is_absolute() else base / p).resolve()
            if not full.exists():
                raise BundleError(f"--files: no such file or folder: {raw!r}")
            try:
                arcname = str(full.relative_to(base))
            except ValueError:
                arcname = full.name
            if arcname in ("", "."):
                raise BundleError(f"--files: name files or sub-folders, not the working folder ({raw!r})")
            tar.add(str(full), arcname=arcname, filter=_drop_owner)
    return buf.getvalue()


def _drop_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# --- the runner -----------------------------------------------------------------------------
_RUNNER = '''\
# Generated by %%schedulearn: the notebook cell below is this job's main program.
# Cell source, files and variables are embedded; see schedulearn_magics/bundle.py.

def _schedulearn_run(cell, files_b64, vars_b64, timeout, result_file):
    import ast, base64, os, sys, linecache
    job_dir = os.environ.get("SCHEDULEARN_JOB_DIR") or os.getcwd()
    rank = 0
    for key in ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if os.environ.get(key, "").strip().isdigit():
            rank = int(os.environ[key])
            break
    if files_b64:
        _schedulearn_unpack(base64.b64decode(files_b64), os.getcwd())
    g = globals()
    if vars_b64:
        import pickle, zlib
        try:
            import cloudpickle  # noqa: F401  (what unpickles functions pickled by value)
        except ImportError:
            pass
        blobs = pickle.loads(zlib.decompress(base64.b64decode(vars_b64)))
        g.update({name: pickle.loads(blob) for name, blob in blobs.items()})
    if timeout:
        _schedulearn_watchdog(timeout)
    linecache.cache[CELL_FILENAME] = (len(cell), None, cell.splitlines(True), CELL_FILENAME)
    tree = ast.parse(cell, filename=CELL_FILENAME)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    try:
        exec(compile(tree, CELL_FILENAME, "exec"), g)
        value = eval(compile(last, CELL_FILENAME, "eval"), g) if last is not None else None
    except SystemExit:
        raise
    except BaseException as e:
        import traceback
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != CELL_FILENAME:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        raise SystemExit(130 if isinstance(e, KeyboardInterrupt) else 1) from None
    if rank == 0:
        _schedulearn_save(value, os.path.join(job_dir, result_file))


def _schedulearn_unpack(data, dest):
    import fcntl, hashlib, io, os, tarfile
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


def _schedulearn_watchdog(timeout):
    import os, sys, threading

    def expire():
        sys.stderr.write("schedulearn: the job ran past --timeout %ss; stopping it\\n" % timeout)
        sys.stderr.flush()
        os._exit(124)

    t = threading.Timer(timeout, expire)
    t.daemon = True
    t.start()


def _schedulearn_save(value, path):
    import io, pickle, sys
    try:
        try:
            import cloudpickle
            base = cloudpickle.Pickler
        except ImportError:
            base = pickle.Pickler

        class ToCpu(base):
            # Tensors on a GPU come back on the CPU: unpickling them in the notebook kernel would
            # otherwise take memory on a GPU the scheduler may have given to another job.
            def reducer_override(self, obj):
                torch = sys.modules.get("torch")
                tensor = torch is not None and isinstance(obj, torch.Tensor)
                if tensor and obj.device.type not in ("cpu", "meta"):
                    return obj.detach().cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
                parent = getattr(super(), "reducer_override", None)
                return parent(obj) if parent is not None else NotImplemented

        buf = io.BytesIO()
        ToCpu(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
        data = buf.getvalue()
    except Exception as e:
        sys.stderr.write("schedulearn: the cell's value (%s) cannot be pickled: %s: %s\\n"
                         % (type(value).__name__, type(e).__name__, e))
        raise SystemExit(1) from None
    _SCHEDULEARN_RUN["write_result"](data, path)


'''


def _run_module_source() -> str:
    """`schedulearn/run.py`, the one implementation of how a job ends, embedded in every
    bundle (the job may run where `schedulearn` is not installed, e.g. in a container)."""
    from schedulearn import run

    return Path(run.__file__).read_text()


def build_script(
    cell: str,
    files: bytes | None = None,
    variables: bytes | None = None,
    timeout: float | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> str:
    """The runner script with the cell, files and variables embedded; checks syntax and size."""
    check_syntax(cell)
    script = _RUNNER + (
        f"\nCELL_FILENAME = {CELL_FILENAME!r}\n"
        "# schedulearn/run.py: how every job ends (process group destroyed, output flushed, status)\n"
        "_SCHEDULEARN_RUN = {'__name__': 'schedulearn_run'}\n"
        f"exec(compile({_run_module_source()!r}, '<schedulearn.run>', 'exec'), _SCHEDULEARN_RUN)\n\n"
        'if __name__ == "__main__":\n'
        '    _SCHEDULEARN_RUN["call"](\n'
        "        _schedulearn_run,\n"
        f"        {cell!r},\n"
        f"        files_b64={_b64(files)!r},\n"
        f"        vars_b64={_b64(variables)!r},\n"
        f"        timeout={timeout!r},\n"
        f"        result_file={RESULT_FILE!r},\n"
        "    )\n"
    )
    size = len(script.encode())
    if size > max_bytes:
        parts = f"files {len(files or b'')} B, vars {len(variables or b'')} B, cell {len(cell.encode())} B"
        raise BundleError(
            f"bundle: {_mb(size)} is over the {_mb(max_bytes)} limit ({parts}); "
            "put large data on a path the job can read and pass the path instead"
        )
    return script


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode("ascii") if data else None


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


def digest(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()[:12]
