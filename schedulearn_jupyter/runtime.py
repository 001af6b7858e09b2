"""The runtime file: how clients on this machine find the running server's API.

At start the extension writes `schedulearn-server.json` (and `schedulearn-server-<pid>.json`)
into `jupyter_runtime_dir()`: `{"url", "api", "token", "pid", "base_url"}`, readable by its
owner only. The plain name is the most recently started server; the per-pid file keeps the
others findable. `schedulearn.client` reads them (skipping files of dead processes).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from schedulearn.client import RUNTIME_FILE, runtime_dir

API_PATH = "schedulearn/api/"


def server_info(serverapp: Any) -> dict[str, Any]:
    url = serverapp.connection_url
    if not url.endswith("/"):
        url += "/"
    return {
        "url": url,
        "api": url + API_PATH,
        "token": serverapp.identity_provider.token or "",
        "pid": os.getpid(),
        "base_url": serverapp.base_url,
    }


def write(serverapp: Any) -> list[Path]:
    info = server_info(serverapp)
    folder = Path(getattr(serverapp, "runtime_dir", None) or runtime_dir())
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / RUNTIME_FILE, folder / RUNTIME_FILE.replace(".json", f"-{os.getpid()}.json")]
    data = json.dumps(info, indent=2)
    for path in paths:
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, path)
    return paths


def remove(paths: list[Path]) -> None:
    """Remove this server's files; the shared name only while it still names this process."""
    for path in paths:
        with contextlib.suppress(OSError, ValueError):
            if path.name == RUNTIME_FILE and json.loads(path.read_text()).get("pid") != os.getpid():
                continue
            path.unlink()
