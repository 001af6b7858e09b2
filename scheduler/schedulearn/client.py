"""An HTTP client of the Schedulearn API (the Jupyter extension's or `schedulearn serve`'s).

Where the server is, first found wins:
1. the `url` / `token` arguments (the CLI's `--url` / `--token`);
2. the environment: `SCHEDULEARN_URL`, `SCHEDULEARN_TOKEN` (a Jupyter server with the extension
   sets both for the kernels it starts);
3. the runtime file `schedulearn-server.json` that the extension writes into
   `jupyter_runtime_dir()` (per-pid `schedulearn-server-<pid>.json` files name other running
   servers; files of dead processes are skipped).

`url` is the server's base URL (`http://host:8888/` or `http://host:8888/user/alice/`); the API
lives under `schedulearn/api/` below it. Standard library only: the kernel magics use it too.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .joblogs import LOG_SIZE, NEXT_OFFSET

RUNTIME_FILE = "schedulearn-server.json"
API_PATH = "schedulearn/api/"
URL_ENV = "SCHEDULEARN_URL"
TOKEN_ENV = "SCHEDULEARN_TOKEN"


class ClientError(RuntimeError):
    """The server refused a request (`status`, one-line message) or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def runtime_dir() -> Path:
    try:
        from jupyter_core.paths import jupyter_runtime_dir

        return Path(jupyter_runtime_dir())
    except ImportError:
        return Path(os.environ.get("JUPYTER_RUNTIME_DIR")
                    or Path.home() / ".local" / "share" / "jupyter" / "runtime")


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # cannot tell: keep it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def find_server(folder: Path | None = None) -> dict[str, Any] | None:
    """The running server's `{"url", "token", ...}` from the runtime directory, or None."""
    folder = folder or runtime_dir()
    main = folder / RUNTIME_FILE
    candidates = [main] + sorted(folder.glob("schedulearn-server-*.json"),
                                 key=lambda p: p.stat().st_mtime if p.exists() else 0, reverse=True)
    for path in candidates:
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and info.get("url") and _alive(info.get("pid")):
            info["source"] = str(path)
            return info
    return None


def api_url(url: str) -> str:
    """The API root for a server base URL (already an API URL is kept)."""
    if not url.startswith(("http://", "https://")):
        raise ClientError(f"url: expected http(s)://host:port/..., got {url!r}")
    url = url if url.endswith("/") else url + "/"
    return url if url.endswith(API_PATH) else url + API_PATH


def resolve(url: str | None = None, token: str | None = None) -> tuple[str, str, str]:
    """(API URL, token, where they came from)."""
    if url:
        return api_url(url), token if token is not None else os.environ.get(TOKEN_ENV, ""), "arguments"
    if os.environ.get(URL_ENV):
        return api_url(os.environ[URL_ENV]), token if token is not None else os.environ.get(TOKEN_ENV, ""), \
            "environment"
    info = find_server()
    if info is None:
        raise ClientError(
            "url: no Schedulearn server found; pass --url/--token, set SCHEDULEARN_URL and "
            f"SCHEDULEARN_TOKEN, or start Jupyter with the extension (runtime dir {runtime_dir()})")
    return api_url(info["url"]), token if token is not None else info.get("token", ""), info["source"]


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0):
        self.api, self.token, self.source = resolve(url, token)
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Client({self.api!r}, from {self.source})"

    # -- plumbing ------------------------------------------------------------------------------
    def _open(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
              timeout: float | None = None):
        url = self.api + path.lstrip("/")
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                message = raw.decode("utf-8", "replace").strip()[:300] or e.reason
            raise ClientError(f"{message} (HTTP {e.code})", e.code) from None
        except urllib.error.URLError as e:
            raise ClientError(f"url: cannot reach {self.api} ({e.reason})") from None

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        with self._open(method, path, body, params) as resp:
            raw = resp.read()
            if "json" in resp.headers.get("Content-Type", ""):
                return json.loads(raw) if raw else None
            return raw

    # -- the API -------------------------------------------------------------------------------
    def policies(self) -> list[dict[str, str]]:
        return self.request("GET", "policies")

    def policy(self) -> str:
        return self.request("GET", "policy")["policy"]

    def policy_info(self) -> dict[str, Any]:
        """`{"policy": NAME, "can_switch": BOOL}`: the policy in force and whether this token's
        user may switch it (only admins may, where the server names admins)."""
        return self.request("GET", "policy")

    def set_policy(self, name: str) -> str:
        return self.request("PUT", "policy", {"policy": name})["policy"]

    def gpus(self) -> dict[str, Any]:
        return self.request("GET", "gpus")

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "jobs", spec)

    def jobs(self, state: str | None = None, user: str | None = None, limit: int | None = None) -> list[dict]:
        return self.request("GET", "jobs", params={"state": state, "user": user, "limit": limit})["jobs"]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"jobs/{int(job_id)}")

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self.request("DELETE", f"jobs/{int(job_id)}")

    def script(self, job_id: int) -> str:
        """The script the job runs (a job's dict carries its size only, `script_bytes`)."""
        with self._open("GET", f"jobs/{int(job_id)}/script") as resp:
            return resp.read().decode()

    def logs(self, job_id: int, tail: int | None = None) -> str:
        return b"".join(self.log_bytes(job_id, tail)).decode("utf-8", "replace")

    def log_bytes(self, job_id: int, tail: int | None = None) -> Iterator[bytes]:
        """The log (or its last `tail` lines) as the server sends it, a piece at a time: the
        whole log of a chatty job is never held here either."""
        with self._open("GET", f"jobs/{int(job_id)}/logs", params={"tail": tail}) as resp:
            while chunk := resp.read1(1 << 16):
                yield chunk

    def log_page(self, job_id: int, offset: int = 0) -> tuple[bytes, int, int]:
        """The log's bytes from `offset` on (at most a MiB: it may end inside a UTF-8 character),
        the offset the next page starts at, and the log's size (`LogReader` keeps the place)."""
        with self._open("GET", f"jobs/{int(job_id)}/logs", params={"offset": int(offset)}) as resp:
            data = resp.read()
            return data, int(resp.headers[NEXT_OFFSET]), int(resp.headers[LOG_SIZE])

    def follow(self, job_id: int, tail: int | None = None, timeout: float | None = None) -> Iterator[str]:
        """The log's lines as the job writes them, until it ends; a line a progress bar redraws
        (carriage returns) comes in pieces, as it is drawn."""
        resp = self._open("GET", f"jobs/{int(job_id)}/logs", params={"tail": tail, "follow": 1},
                          timeout=timeout or 24 * 3600)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        rest = ""
        with resp:
            while chunk := resp.read1(1 << 16):
                *lines, rest = (rest + decoder.decode(chunk)).split("\n")
                yield from (line + "\n" for line in lines)
                if "\r" in rest:  # a progress bar's drawings: as they come
                    yield rest
                    rest = ""
            rest += decoder.decode(b"", final=True)
            if rest:
                yield rest

    def result(self, job_id: int) -> bytes:
        return self.request("GET", f"jobs/{int(job_id)}/result")

    def openapi(self) -> dict[str, Any]:
        return self.request("GET", "openapi.json")


def empty_log_note(job: dict[str, Any]) -> str:
    """Why a job's log is empty, from its dict: a job that failed at start never wrote one."""
    state = job["state"]
    if state == "cancelled":
        started = job.get("start_time") is not None
        why = "it was cancelled " + ("without writing any" if started else "before it started")
    else:
        why = {"queued": "it has not started yet", "running": "it has written nothing yet"}.get(
            state, f"it {state} without writing any")
    said = job.get("reason") and state != "running" and job["reason"] != state  # ("cancelled": said)
    return f"job {job['id']} has no log: {why}" + (f" ({job['reason']})" if said else "")


class LogReader:
    """A job's log, read on from where the last read stopped: each `read` returns what was
    written since (whole characters), a few pages at most, so that a poll costs what is new,
    not the whole log again. With `behind`, a reader that shows only the log's end (the job
    widget's last lines) skips ahead to the last `behind` bytes whenever it is further behind
    (at its first read of a long log, or a job writing faster than it polls); the line the skip
    lands in is dropped, unless it is all there is, and a progress bar's is kept from its last
    whole drawing."""

    def __init__(self, client: Client, job_id: int, pages: int = 4, behind: int | None = None):
        self.client, self.job_id, self.pages, self.behind = client, int(job_id), pages, behind
        self.offset = 0
        self.skipped = False  # the last read skipped ahead: what it returns starts a new line
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._first = True

    def read(self) -> str:
        out: list[str] = []
        self.skipped = False
        if self._first and self.behind is not None:  # where the log ends, before reading any
            self._skip(self.client.log_page(self.job_id, 1 << 62)[2])
        self._first = False
        for _ in range(self.pages):
            data, after, size = self.client.log_page(self.job_id, self.offset)
            if self._skip(size):
                out = []  # (what came before the skip is left behind too)
                data, after, size = self.client.log_page(self.job_id, self.offset)
            if self.skipped and not out:
                data = _from_a_line(data)
            self.offset = after
            out.append(self._decoder.decode(data))
            if not data or self.offset >= size:
                break
        return "".join(out)

    def _skip(self, size: int) -> bool:
        """Skip ahead to the last `behind` bytes if further behind; whether it did."""
        if self.behind is None or size - self.offset <= self.behind:
            return False
        self.offset, self.skipped = size - self.behind, True
        self._decoder.reset()
        return True


def _from_a_line(data: bytes) -> bytes:
    """A page read from a place a skip landed on: without the piece of the line it landed in,
    unless that is all there is, and from its last whole drawing if a progress bar's."""
    data = data.lstrip(bytes(range(0x80, 0xC0)))  # no half character first
    end = data.find(b"\n") % (len(data) + 1)
    if (redrawn := data.rfind(b"\r", 0, end)) >= 0:
        return data[redrawn:]
    return data[end + 1:] if end < len(data) - 1 else data


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # model.CONTROL (this module is standard library only)


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (`\\t`, `\\x1b`): a table cell that
    cannot move the cursor, clear the screen or shift the columns of the terminal it is printed
    to (a job named before names were checked, a reason quoting what a job printed)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def shown_gpus(job: dict[str, Any]) -> str:
    """The GPUs a job holds now, else those it last held (a finished `--gpus auto` job shows what
    it got, not "auto"), else what it asks for."""
    if job.get("gpus"):
        return str(job["gpus"])
    last = sum(len(idx) for idx in (job.get("last_alloc") or {}).values())
    if last:
        return str(last)
    want = (job.get("spec") or {}).get("gpus")
    return str(want) if want is not None else "-"
