"""The layering holds: the core (`scheduler/schedulearn`) imports no Jupyter, tornado, IPython or
ipywidgets module, and runs a job through its service without them; `docs/architecture.md`
names only modules and files that exist."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What the core must not need: the server frameworks, the notebook side, our own Jupyter packages.
BLOCKED = ("jupyter_server", "jupyter_core", "jupyter_client", "tornado", "IPython", "ipykernel",
           "ipywidgets", "traitlets", "nbformat", "schedulearn_jupyter", "schedulearn_magics")

PROBE = textwrap.dedent(f"""
    import asyncio, importlib, importlib.abc, pkgutil, sys
    BLOCKED = {BLOCKED!r}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked: {{name}}")
            return None

    sys.meta_path.insert(0, Block())
    import schedulearn
    skip = ("schedulearn.__main__", "schedulearn.store.migrations")  # a command; alembic's scripts
    names = [m.name for m in pkgutil.walk_packages(schedulearn.__path__, "schedulearn.")
             if not m.name.startswith(skip)]
    for name in names:
        importlib.import_module(name)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not leaked, leaked

    from schedulearn import cli
    commands = [line.split()[0] for line in cli.build_parser().format_help().splitlines()
                if line.startswith("    ") and line.split()]
    # the serve command is the Jupyter side's: absent here, the core's own commands all there
    assert "simulate" in commands and "submit" in commands and "serve" not in commands, commands

    from schedulearn.service import SchedulerService, Settings

    async def main():
        service = SchedulerService(Settings(executor="sim", virtual_gpus=2, tick=0.05, inventory_interval=0))
        service.start()
        events = await service.subscribe()
        job = await service.submit({{"duration": 0.1}}, "me")
        async for event in events:
            if event.get("event") == "succeeded" and event["job"]["id"] == job["id"]:
                break
        await service.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
    print(len(names), "modules")
""")


def test_the_core_imports_no_jupyter_tornado_or_widgets():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scheduler")}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[0]) > 40  # every module of the core was imported


def test_the_blocker_blocks():
    """The probe's import hook does what the test above relies on."""
    probe = PROBE.split("import schedulearn\n")[0] + "import tornado\n"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "blocked: tornado" in proc.stderr


# -- docs/architecture.md ---------------------------------------------------------------------------
_PLACES = ("", "scheduler/schedulearn", "schedulearn_jupyter", "kernel_magics/schedulearn_magics",
           "scheduler/schedulearn/executors")
_PATH = re.compile(r"^[\w./*-]+(\.py|/)$")
_MODULE = re.compile(r"^(schedulearn|schedulearn_jupyter|schedulearn_magics)(\.\w+)+$")


def named_in_the_architecture_page() -> tuple[set[str], set[str]]:
    """(file and folder paths, dotted module names) the page names in backticks."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    names = set(re.findall(r"`([^`\s]+)`", text))
    return {n for n in names if _PATH.match(n)}, {n for n in names if _MODULE.match(n)}


def _exists(path: str) -> bool:
    if "*" in path:
        return any(any((ROOT / place).glob(path)) for place in _PLACES)
    return any((ROOT / place / path).exists() for place in _PLACES)


def test_every_file_the_architecture_page_names_exists():
    paths, _ = named_in_the_architecture_page()
    assert len(paths) > 30
    missing = sorted(p for p in paths if not _exists(p))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_module_the_architecture_page_names_exists():
    _, modules = named_in_the_architecture_page()
    assert "schedulearn.policies" in modules
    missing = []
    for name in sorted(modules):
        parts = name.split(".")
        # `package.module.attribute`: the longest prefix that is a module, then the attribute
        for i in range(len(parts), 0, -1):
            if importlib.util.find_spec(".".join(parts[:i])) is not None:
                module = importlib.import_module(".".join(parts[:i]))
                if i < len(parts) and not hasattr(module, parts[i]):
                    missing.append(name)
                break
        else:
            missing.append(name)
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_module_attribute_the_architecture_page_names_exists():
    """`lifecycle.RunExecutor`, `launch.build_workers`...: the module's file defines the name."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    checked, missing = 0, []
    for module, name in sorted(set(re.findall(r"`(\w+)\.(\w+)`", text))):
        files = [f for f in (ROOT / place / f"{module}.py" for place in _PLACES) if f.exists()]
        if not files or name == "py":
            continue  # a file name, or not a module (`settings.options`, an instance's attribute)
        checked += 1
        pattern = re.compile(rf"^\s*(?:(?:async )?def|class) {name}\b|^{name}\s*[:=]", re.M)
        if not any(pattern.search(f.read_text()) for f in files):
            missing.append(f"{module}.{name}")
    assert checked > 5
    assert not missing, f"docs/architecture.md names what its module does not define: {missing}"
