"""The kernel's way to the server: `schedulearn.client` (URL and token from the environment the
extension gives its kernels, or from its runtime file)."""

from __future__ import annotations

from typing import Any

from schedulearn.client import Client, ClientError, empty_log_note

ServerError = ClientError


def connect(url: str | None = None, token: str | None = None) -> Any:
    """A client of the running server; `ClientError` (one line) when none can be found."""
    return Client(url, token)


__all__ = ["Client", "ServerError", "connect", "empty_log_note"]
