"""Schedulearn's Jupyter server extension: the scheduler runs inside Jupyter.

`_jupyter_server_extension_points` tells Jupyter Server where the `ExtensionApp` is;
`load_ipython_extension` (``%load_ext schedulearn_jupyter``) hands over to the kernel magics.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import SchedulearnApp

    return [{"module": "schedulearn_jupyter.app", "app": SchedulearnApp}]


# --- kernel side (owned by the magics engineer) -----------------------------------------------
def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext schedulearn_jupyter`: register the `%%schedulearn` magics (package
    `schedulearn_magics`, kernel_magics/; see docs/magics.md). Kernels of an environment where
    Schedulearn is installed load them by themselves (etc/ipython/ipython_kernel_config.py)."""
    try:
        import schedulearn_magics
    except ImportError:
        raise ImportError(
            "schedulearn_magics: not installed; the %%schedulearn magics live in kernel_magics/"
        ) from None
    schedulearn_magics.load_ipython_extension(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    import schedulearn_magics

    schedulearn_magics.unload_ipython_extension(ipython)
