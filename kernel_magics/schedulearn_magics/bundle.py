"""A notebook cell -> the job's main program (one self-contained Python script).

The script travels in the JobSpec's `script` field, so a submission is one POST: the cell's
source, the `--files` (a gzipped tar) and the `--vars` (cloudpickled) are embedded in it, with
the two modules that run it, embedded as source since the job may run where Schedulearn is not
installed (a container):

* `schedulearn_magics/cell_runner.py` runs the cell (files unpacked, variables loaded, the cell
  as `__main__` with its last expression kept, the value written as rank 0's result);
* `schedulearn/run.py` ends the job the way every job ends (the process group destroyed if the
  cell left one, output flushed, the cell's status as the exit status) and signs the result.

Everything that can be checked before submitting is checked here, with a one-line
`BundleError`: syntax errors in the cell, names it reads that only the notebook defines, missing
files, missing or unpicklable variables, and the total size.
"""

from __future__ import annotations

import ast
import base64
import builtins
import hashlib
import io
import os
import symtable
import tarfile
import tokenize
import types
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from schedulearn import run
from schedulearn.jobfiles import MAX_SCRIPT_BYTES, RESULT_FILE

from . import cell_runner
from .cell_runner import CELL_FILENAME

#: The largest script submitted (the server refuses bodies over `jobfiles.MAX_REQUEST_BYTES`).
DEFAULT_MAX_BYTES = MAX_SCRIPT_BYTES


class BundleError(ValueError):
    """The cell cannot be turned into a job; the message is one line naming the option."""


# --- checks ---------------------------------------------------------------------------------
def check_syntax(source: str) -> ast.Module:
    """Parse and compile the cell as the job will (`cell_runner.compile_cell`: what only the
    compiler finds, `return` or `break` outside their place, counts too); a syntax error becomes
    one line with the cell's line number."""
    try:
        tree = ast.parse(source, filename=CELL_FILENAME)
    except SyntaxError as e:
        line = _line(e, source)
        if _is_ipython_syntax(source):
            hint = "; for a shell command use subprocess.run" if "!" in line else ""
            raise BundleError(
                f"cell: line {e.lineno} is IPython syntax ({line}), which a job does not run: "
                f"the cell runs as plain Python{hint}"
            ) from None
        raise _syntax_error(e, source) from None
    try:
        cell_runner.compile_cell(tree)
    except SyntaxError as e:
        raise _syntax_error(e, source) from None
    return tree


def _line(e: SyntaxError, source: str) -> str:
    """The line of the cell `e` points at (a compiler's error from a syntax tree has no text)."""
    if e.text:
        return e.text.strip()
    lines = source.splitlines()
    return lines[e.lineno - 1].strip() if e.lineno and 0 < e.lineno <= len(lines) else ""


def _syntax_error(e: SyntaxError, source: str) -> BundleError:
    line = _line(e, source)
    where = f"line {e.lineno}" + (f": {line}" if line else "")
    return BundleError(f"cell: syntax error ({e.msg}) at {where}")


def _is_ipython_syntax(source: str) -> bool:
    """True when the cell parses once IPython's own input transforms (`%magic`, `!command`,
    `x = !command`, `obj?`) have run: the cell is notebook syntax, not a Python mistake."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - the magics always run under IPython
        return False
    try:
        transformed = TransformerManager().transform_cell(source)
        ast.parse(transformed)
    except (SyntaxError, ValueError):
        return False
    return transformed.rstrip() != source.rstrip()


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


#: What IPython adds to a kernel's builtins, which a job (plain Python) does not have.
IPYTHON_BUILTINS = ("get_ipython",)  # (`display` the job has: `cell_runner.Shown`)


def check_names(source: str, namespace: Mapping[str, Any], passed: Iterable[str] = (),
                hidden: Iterable[str] = (), tree: ast.Module | None = None) -> None:
    """Refuse a cell that reads a name only the notebook defines: a job starts from a fresh
    interpreter and gets the notebook's variables only through `--vars` (`passed`), so it would
    fail with a NameError once its turn came, perhaps hours later. A name counts when the cell
    reads it as a global (at its top level, or in a function or class as a global) and binds it
    nowhere (assignment, import, def, class, `global` in a function), and the notebook has it
    (`namespace`: not a builtin, not one of IPython's own names in `hidden`, not private `_x`).
    A cell with `from m import *` or `exec` may bind anything: it is not checked. The error
    names the fix: `--vars` for a value, an import line for a module. IPython's `get_ipython` is
    refused too: a job runs plain Python (its `display` the job has). `tree`: the cell's,
    when the caller parsed it already (`check_syntax`)."""
    tree = tree or check_syntax(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return
        if isinstance(node, ast.Name) and node.id == "exec":
            return
    read, bound = _globals(symtable.symtable(source, CELL_FILENAME, "exec"), top=True)
    order = sorted(read - bound - set(passed), key=_first_use(tree))
    ipython = [n for n in order if n in IPYTHON_BUILTINS]
    skip = set(hidden) | set(dir(builtins))
    names = [n for n in order if n not in skip and n in namespace and not n.startswith("_")]
    if not names and not ipython:
        return
    modules = [n for n in names if isinstance(namespace[n], types.ModuleType)]
    values = [n for n in names if n not in modules]
    fixes = []
    if values:
        them = "it" if len(values) == 1 else "them"
        fixes.append(f"{', '.join(values)} (add --vars {','.join(values)}, or define {them} in the cell)")
    if modules:
        lines = "; ".join(_import_line(n, namespace[n]) for n in modules)
        fixes.append(f"{', '.join(modules)} (add {lines} to the cell)")
    if ipython:
        fixes.append(f"{', '.join(ipython)} (IPython's: a job runs plain Python)")
    raise BundleError(f"cell: a job does not see the notebook's names: {'; '.join(fixes)}")


def _globals(table: symtable.SymbolTable, top: bool = False) -> tuple[set[str], set[str]]:
    """(global names `table` and its children read, those they bind)."""
    read: set[str] = set()
    bound: set[str] = set()
    for sym in table.get_symbols():
        name = sym.get_name()
        if top or sym.is_declared_global():
            if sym.is_assigned() or sym.is_imported() or sym.is_namespace():
                bound.add(name)
        if sym.is_referenced() and (top or sym.is_global()):
            read.add(name)
    for child in table.get_children():
        r, b = _globals(child)
        read |= r
        bound |= b
    return read, bound


def _first_use(tree: ast.Module) -> Any:
    """A sort key: names in the order the cell first reads them."""
    first: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            at = (node.lineno, node.col_offset)
            first[node.id] = min(first.get(node.id, at), at)
    return lambda name: first.get(name, (0, 0))


def _import_line(name: str, module: types.ModuleType) -> str:
    real = module.__name__
    if real == name:
        return f"import {real}"
    if "." in real and real.rsplit(".", 1)[1] == name:
        parent, leaf = real.rsplit(".", 1)
        return f"from {parent} import {leaf}"
    return f"import {real} as {name}"


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


def pack_files(paths: Iterable[str], cwd: str | Path | None = None, max_bytes: int | None = None) -> bytes:
    """A gzipped tar of the files and folders in `paths`: paths under `cwd` keep their relative
    path (so `data/x.csv` is `data/x.csv` in the job), others keep their last component.

    Links are packed as what they point to: the job may run where their targets are not (that is
    what `--files` is for), and the job side unpacks no link to an absolute path or out of its
    folder (tarfile's `data` filter). A dangling link, or a folder link back to a folder it is
    in, is one line. `max_bytes`: the most the compressed tar may take; packing stops there, so
    that a large folder is refused at once, not after it was all read and compressed in memory."""
    base = Path(cwd or os.getcwd()).resolve()
    out = _Capped(max_bytes)
    try:
        with tarfile.open(fileobj=out, mode="w:gz") as tar:
            for raw in paths:
                p = Path(raw).expanduser()
                full = Path(os.path.normpath(p if p.is_absolute() else base / p))  # (links kept)
                if not full.exists() and not full.is_symlink():
                    raise BundleError(f"--files: no such file or folder: {raw!r}")
                try:
                    arcname = str(full.relative_to(base))
                except ValueError:
                    arcname = full.name
                if arcname in ("", "."):
                    raise BundleError(f"--files: name files or sub-folders, not the working folder ({raw!r})")
                _add(tar, out, full, arcname, raw, ())
    except _Full:
        raise BundleError(
            f"--files: over the {_mb(out.limit or 0)} limit once compressed (at {out.at!r}); put large "
            "data on a path the job can read and pass the path instead"
        ) from None
    return out.getvalue()


class _Full(Exception):
    pass


class _Capped(io.BytesIO):
    """A BytesIO that refuses to grow past `limit` bytes (`_Full`); `at`: what was being added."""

    def __init__(self, limit: int | None):
        super().__init__()
        self.limit, self.at = limit, ""

    def write(self, data: Any) -> int:
        if self.limit is not None and self.tell() + len(data) > self.limit:
            raise _Full
        return super().write(data)


def _add(tar: tarfile.TarFile, out: _Capped, path: Path, arcname: str, shown: str,
         folders: tuple[Path, ...]) -> None:
    """Add `path` (what a link points to, not the link) as `arcname`; `folders`: the real
    folders it is in (a link back to one of them would never end)."""
    out.at = shown
    if path.is_symlink() and not path.exists():
        raise BundleError(f"--files: {shown!r} is a link to {os.readlink(path)!r}, which does not exist")
    real = path.resolve()
    try:
        if real.is_dir():
            if real in folders:
                raise BundleError(f"--files: {shown!r} is a link back to a folder it is in ({real})")
            tar.addfile(_drop_owner(tar.gettarinfo(str(real), arcname)))
            for child in sorted(os.listdir(real)):
                where = f"{shown.rstrip('/')}/{child}"
                _add(tar, out, real / child, f"{arcname}/{child}", where, (*folders, real))
        elif real.is_file():
            with open(real, "rb") as f:
                tar.addfile(_drop_owner(tar.gettarinfo(str(real), arcname, fileobj=f)), f)
        # (sockets, pipes, devices: nothing a job reads as data)
    except OSError as e:
        raise BundleError(f"--files: cannot read {shown!r} ({e.strerror or e})") from None


def _drop_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# --- the script ----------------------------------------------------------------------------
def _embedded(name: str, module: Any) -> str:
    """Lines that run `module`'s source into the dict `name` (its functions then run from there)."""
    source = Path(module.__file__).read_text()
    return (f"{name} = {{'__name__': {module.__name__!r}}}\n"
            f"exec(compile({source!r}, '<{module.__name__}>', 'exec'), {name})\n")


def ends_quietly(cell: str) -> bool:
    """Whether the cell's last token (comments aside) is `;`: IPython's way to say that the
    last expression's value is not wanted (`trainer.fit(model);`, `plt.plot(x);`)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(cell).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skip = (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
            tokenize.DEDENT)
    last = next((t for t in reversed(tokens) if t.type not in skip), None)
    return last is not None and last.type == tokenize.OP and last.string == ";"


def build_script(
    cell: str,
    files: bytes | None = None,
    variables: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    keep_value: bool = True,
) -> str:
    """The script with the cell, files and variables embedded; checks syntax and size.
    `keep_value=False`: the last expression runs, and the job's result is None (a cell that
    ends with `;` and no `--out`: its value is neither pickled nor sent)."""
    check_syntax(cell)
    script = (
        "# Generated by %%schedulearn: the notebook cell below is this job's main program.\n"
        "# Cell source, files and variables are embedded; see schedulearn_magics/bundle.py.\n\n"
        "# schedulearn/run.py: how every job ends (process group destroyed, output flushed, status)\n"
        + _embedded("_SCHEDULEARN_RUN", run)
        + "# schedulearn_magics/cell_runner.py: how the cell runs\n"
        + _embedded("_SCHEDULEARN_CELL", cell_runner)
        + _MAIN
        + '    _SCHEDULEARN_RUN["release_at_exit"](globals())  # the cell\'s, after its exit handlers\n'
        '    _SCHEDULEARN_RUN["call"](\n'
        '        _SCHEDULEARN_CELL["run_cell"],\n'
        f"        {cell!r},\n"
        "        globals(),\n"
        f"        files_b64={_b64(files)!r},\n"
        f"        vars_b64={_b64(variables)!r},\n"
        f"        result_file={RESULT_FILE!r},\n"
        '        write_result=_SCHEDULEARN_RUN["write_result"],\n'
        '        after_import=_SCHEDULEARN_RUN["after_import"],\n'
        f"        keep_value={keep_value!r},\n"
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


_MAIN = '\nif __name__ == "__main__":\n'


def cell_of(script: str) -> str | None:
    """The notebook cell a script of `build_script` runs; None for any other script (one
    written by hand, or by another version that built it otherwise)."""
    at = script.rfind(_MAIN)
    if at < 0 or not script.startswith("# Generated by %%schedulearn"):
        return None
    try:
        tree = ast.parse(script[at + 1:])
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[0], ast.Subscript)
                and isinstance(node.args[0].value, ast.Name) and node.args[0].value.id == "_SCHEDULEARN_CELL"
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            return node.args[1].value
    return None


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode("ascii") if data else None


def _mb(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


def digest(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()[:12]
