"""Schedulearn's IPython magics: `%%schedulearn` runs a notebook cell as a training job on the
cluster's GPUs; `%schedulearn queue|ls|logs|cancel|result|job|policy|gpus` watches and steers it.

Loaded by `%load_ext schedulearn_magics` (or `%load_ext schedulearn_jupyter`), and in every
IPython kernel of an environment where Schedulearn is installed: the package installs
`{sys.prefix}/etc/ipython/ipython_kernel_config.py`, which appends this extension to
`InteractiveShellApp.extensions` (see docs/magics.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics on `ipython` (once; loading again is harmless)."""
    from .magics import SchedulearnMagics, async_cell_transformer, async_result_transformer
    from .watch import widgets_available

    ipython.register_magics(SchedulearnMagics)
    # In a kernel, a waiting cell awaits its job instead of blocking the event loop (so that the
    # job widget's Cancel button is heard); a terminal or plain shell keeps the blocking magic.
    transformers = ipython.input_transformers_cleanup
    if widgets_available(ipython) and getattr(ipython, "autoawait", False):
        if async_cell_transformer not in transformers:
            transformers.append(async_cell_transformer)
        if async_result_transformer not in ipython.input_transformers_post:  # (run_line_magic calls)
            ipython.input_transformers_post.append(async_result_transformer)
        _fresh_traceback()
        if _fresh_traceback not in ipython.events.callbacks["pre_run_cell"]:
            ipython.events.register("pre_run_cell", _fresh_traceback)


def _fresh_traceback(info: Any = None) -> None:
    """Before each cell, what ipykernel's own `run_cell` resets and its async path does not: an
    awaited cell (ours) goes the async path, and ipykernel's reply to it reads the shell's last
    traceback. A UsageError (bad input: one line, no traceback) in a kernel's first cell so found
    none and the kernel never answered (`AttributeError: ... '_last_traceback'`: the cell stayed
    `[*]`); in a later cell its reply carried the traceback of an earlier cell's error."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell._last_traceback = None
        shell._last_traceback_during_displayhook = False


def unload_ipython_extension(ipython: Any) -> None:
    from .magics import async_cell_transformer, async_result_transformer

    if async_cell_transformer in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(async_cell_transformer)
    if async_result_transformer in ipython.input_transformers_post:
        ipython.input_transformers_post.remove(async_result_transformer)
    if _fresh_traceback in ipython.events.callbacks["pre_run_cell"]:
        ipython.events.unregister("pre_run_cell", _fresh_traceback)
    magics = ipython.magics_manager.magics
    magics["cell"].pop("schedulearn", None)
    magics["line"].pop("schedulearn", None)
