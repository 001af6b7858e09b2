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
    """`%load_ext schedulearn_jupyter`: register the `%%schedulearn` magics when they are installed.

    PLACEHOLDER for the magics (kernel_magics/, package `schedulearn_magics`): this function only
    forwards to `schedulearn_magics.load_ipython_extension` when that package is importable.
    """
    try:
        import schedulearn_magics
    except ImportError:
        raise ImportError(
            "schedulearn_magics: not installed; the %%schedulearn magics live in kernel_magics/"
        ) from None
    schedulearn_magics.load_ipython_extension(ipython)
