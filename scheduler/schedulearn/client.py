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
import http.client
import json
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .joblogs import LOG_SIZE, NEXT_OFFSET, TAIL_BYTES, last_lines

RUNTIME_FILE = "schedulearn-server.json"
API_PATH = "schedulearn/api/"
URL_ENV = "SCHEDULEARN_URL"
TOKEN_ENV = "SCHEDULEARN_TOKEN"


class ClientError(RuntimeError):
    """The server refused a request (`status`, one-line message) or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def transient(self) -> bool:
        """The server could not answer now (unreachable: a restart; a proxy's 502/504; a 503,
        its store away), as opposed to a refusal: asking again later may work."""
        return self.status in (None, 502, 503, 504)


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
            "url: no Schedulearn server found; set SCHEDULEARN_URL and SCHEDULEARN_TOKEN (the CLI "
            "also takes --url/--token), or start Jupyter with the extension (runtime dir "
            f"{runtime_dir()})")
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
        except (OSError, http.client.HTTPException) as e:  # the connection closed or reset, a timeout
            raise self._lost(e) from None

    def _lost(self, e: BaseException) -> ClientError:
        return ClientError(f"url: lost the connection to {self.api} ({e or type(e).__name__})")

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        with self._open(method, path, body, params) as resp:
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:  # cut short: the server went away
                raise self._lost(e) from None
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

    def pause(self, reason: str = "") -> dict[str, Any]:
        """Pause scheduling (admins): nothing starts or moves until `resume`; who, since, why."""
        return self.request("PUT", "pause", {"reason": reason})["paused"]

    def resume(self) -> bool:
        """Resume scheduling; whether it was paused (`resume` said `scheduling resumed` of a
        scheduler that was not)."""
        was = self.policy_info().get("paused") is not None
        self.request("DELETE", "pause")
        return was

    def gpus(self) -> dict[str, Any]:
        return self.request("GET", "gpus")

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.request("POST", "jobs", spec)
        except ClientError as e:
            raise self._older(e, spec) from None

    def _older(self, e: ClientError, spec: dict[str, Any]) -> ClientError:
        """A server refusing as unknown a field of the spec that this client's own `JobSpec` has
        runs an older Schedulearn (the notebook's kernel was upgraded, a shared server not):
        said so, instead of a list of the fields it allows. A field neither knows (a typo in a
        `--spec` file) keeps the server's message."""
        m = re.match(r"(\w+): unknown field; allowed: ", str(e))
        if e.status != 400 or m is None or m[1] not in spec:
            return e
        from . import __version__
        from .model import JobSpec  # (here only: the client itself stays light to import)

        if m[1] not in JobSpec.model_fields:
            return e
        return ClientError(f"{m[1]}: the server at {self.api} does not know this field: it runs an older "
                           f"Schedulearn than this client ({__version__}); upgrade schedulearn where the "
                           "server runs, then restart it (HTTP 400)", 400)

    def default_workdir(self) -> str | None:
        """Where a job runs when its spec does not say, as with `sbatch`: the current directory,
        when the server is on this machine and runs its jobs here (local executor) or on nodes
        sharing its file system (Slurm); else None, the job's own directory (a Docker
        container's paths, a remote server's machine are not this directory)."""
        host = urllib.parse.urlsplit(self.api).hostname or ""
        if not (host in ("localhost", "::1", socket.gethostname()) or host.startswith("127.")):
            return None
        try:
            here = os.getcwd()
        except OSError:  # a directory removed under the shell
            return None
        return here if self.gpus().get("executor") in ("local", "slurm") else None

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
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise self._lost(e) from None
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

    def shown(self, job_id: int, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """What a notebook cell's job has shown from byte `offset` of its live record on: its
        records (`{"run", "at", "bundle"}`, `schedulearn.liveshown`) and the next page's offset."""
        page = self.request("GET", f"jobs/{int(job_id)}/shown", params={"offset": int(offset)})
        return page["items"], int(page["next"])

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
        """What was written since the last read. A request that fails after pages were read
        returns those (the next read goes on from them); one that fails first raises."""
        out: list[str] = []
        self.skipped = False
        if self._first and self.behind is not None:  # where the log ends, before reading any
            self._skip(self.client.log_page(self.job_id, 1 << 62)[2])
        self._first = False
        for _ in range(self.pages):
            try:
                data, after, size = self.client.log_page(self.job_id, self.offset)
            except ClientError:
                if not out:
                    raise
                break
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


class Reconnecting:
    """Calls a client method again while the server cannot answer (`ClientError.transient`: a
    restart, a proxy's 502), backing off (up to `most` seconds apart), for up to `patience`
    seconds; `say` tells of the outage once, and of the server's return. What a wait on a job
    (`schedulearn submit --wait`, `logs -f`, a waiting notebook cell) goes through: the job runs
    on while its server restarts, and so does the wait."""

    def __init__(self, say: Callable[[str], object] | None = None, patience: float = 600.0,
                 most: float = 10.0, sleep: Callable[[float], object] = time.sleep):
        self.say = say or (lambda text: print(f"schedulearn: {text}", file=sys.stderr))
        self.patience, self.most, self.sleep = patience, most, sleep
        self.lost_at: float | None = None  # when the server stopped answering (monotonic)
        self._delay = 0.5  # the next pause between tries

    def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        while True:
            try:
                value = fn(*args)
            except ClientError as e:
                self.sleep(self.lost(e))
                continue
            self.answered()
            return value

    def lost(self, e: ClientError) -> float:
        """A call failed with `e`: the seconds to wait before the next try; `e` again when it is
        a refusal, or when the server has not answered for `patience` seconds."""
        if not e.transient:
            raise e
        now = time.monotonic()
        if self.lost_at is None:
            self.lost_at, self._delay = now, 0.5
            self.say(f"lost touch with the server ({e}); trying again for up to "
                     f"{self.patience / 60:.0f} min (the job is not affected)")
        elif now - self.lost_at >= self.patience:
            raise ClientError(f"{e}; gave up after {self.patience / 60:.0f} min", e.status) from None
        delay, self._delay = self._delay, min(self._delay * 2, self.most)
        return delay

    def answered(self) -> None:
        """A call succeeded: the server is back, if it was away."""
        if self.lost_at is not None:
            self.say(f"the server answers again (after {time.monotonic() - self.lost_at:.0f} s)")
            self.lost_at = None


def follow_pages(client: Client, job_id: int, tail: int | None = None, call: Callable[..., Any] | None = None,
                 poll: float = 1.0, final: tuple[str, ...] = ("succeeded", "failed", "cancelled"),
                 ) -> Iterator[str]:
    """The log (its last `tail` lines, or all of it), then what the job writes, until it has
    ended and all is read: read a page at a time from where the last read stopped (`LogReader`,
    every `poll` seconds at most), so that a call that fails can be made again without losing
    or repeating a byte (`call`: `Reconnecting()` survives a server restart). A progress bar's
    drawings come as they are drawn."""
    call = call or (lambda fn, *args: fn(*args))
    reader = LogReader(client, job_id)
    if tail is not None:
        size = call(client.log_page, job_id, 1 << 62)[2]
        text, reader.offset = call(_tail_until, client, job_id, tail, size), size
        if text:
            yield text
    delay = 0.1
    while True:
        ended = call(client.job, job_id)["state"] in final  # before the log: nothing written is missed
        text = call(reader.read)
        if text:
            yield text
            delay = 0.1
            continue
        if ended:
            return
        time.sleep(delay)
        delay = min(delay * 1.5, poll)


def _tail_until(client: Client, job_id: int, lines: int, size: int) -> str:
    """The last `lines` lines of the log's first `size` bytes, as `GET logs?tail=` answers for
    the whole log (read back a page at a time, at most `TAIL_BYTES`)."""
    if lines <= 0:
        return ""
    data, start = b"", size
    while start > 0 and data.count(b"\n") <= lines and size - start < TAIL_BYTES:
        begin = max(0, start - min(1 << 20, TAIL_BYTES - (size - start)))
        piece, offset = b"", begin
        while offset < start:
            page, offset, _ = client.log_page(job_id, offset)
            if not page:
                break
            piece += page
        data, start = piece[:start - begin] + data, begin
    return last_lines(data, lines, cut_short=start > 0)


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


def paused_text(paused: dict[str, Any], resume: str = "schedulearn resume") -> str:
    """`scheduling paused by carol since 2026-11-29 18:40 (reboot at 19:00): ...` (`GET policy`'s
    `paused`), under the CLI's and the magics' job tables."""
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(paused["since"]))
    why = f" ({paused['reason']})" if paused.get("reason") else ""
    # the scheduler's own pause (the job root's disk is full) says when it ends by itself
    until = paused.get("until") or f"an admin runs {resume}"
    return f"scheduling paused by {paused['by'] or '?'} since {since}{why}: no job starts until {until}"


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
