"""A job's result is handed out only when the job's own run wrote it.

A result is code: the magics unpickle it in the user's kernel, so a `result.pkl` planted in a
job's directory by anyone else (another user's job, a stale run) must never reach the kernel.

* The server keeps a secret: 32 random bytes in `<job_root>/.result-secret`, mode 0600, made on
  first use (jobs never see it; in the shared set-up they run as other OS users).
* Each job gets its own key, `HMAC-SHA256(secret, "schedulearn-result:<job id>")` (hex), in
  `$SCHEDULEARN_RESULT_KEY` — only that job's processes have it.
* The job runner (`schedulearn.run.write_result`, what the magics' cell runner calls) writes
  `result.pkl` and `result.pkl.hmac` = `HMAC-SHA256(key, bytes of result.pkl)`.
* `open_result` (behind `GET jobs/{id}/result`) recomputes the job's key and hands the bytes out
  only when the MAC matches: `ForgedResult` otherwise (the API's 409).

Keys are per job, not per run: every run (restart, resize) of a job may write its result.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import nofollow
from .jobfiles import MAC_SUFFIX, RESULT_FILE, SECRET_NAME
from .run import result_hasher


class ResultError(Exception):
    """No result to hand out; the message is one line."""


class NoResult(ResultError):
    pass


class ForgedResult(ResultError):
    pass


def server_secret(job_root: Path | str) -> bytes:
    """The secret under `job_root`, created (0600, atomically) when there is none yet."""
    path = Path(job_root) / SECRET_NAME
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    tmp = path.with_name(f"{SECRET_NAME}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(32))
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails when another process made it first: theirs wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            mode = stat.S_IMODE(st.st_mode)
            raise ResultError(f"result secret {path}: readable by others (mode {mode:o}); chmod 600 it")
        data = f.read()
    if len(data) < 16:
        raise ResultError(f"result secret {path}: too short ({len(data)} bytes); delete it to make a new one")
    return data


def job_key(secret: bytes, job_id: int) -> str:
    """The key job `job_id` signs its result with."""
    return hmac.new(secret, f"schedulearn-result:{int(job_id)}".encode(), hashlib.sha256).hexdigest()


BLOCK = 1 << 20  # what `SignedResult.blocks` reads and yields at a time


class SignedResult:
    """A job's `result.pkl`, open, its signature checked (`open_result`): `blocks()` hands its
    bytes out a block at a time, so that a result of gigabytes (a model returned by a cell) is
    never held whole in the server's memory."""

    def __init__(self, f: Any, size: int, key: str, mac: str, job_id: int):
        self.f, self.size, self._key, self._mac, self.job_id = f, size, key, mac, job_id

    def blocks(self) -> Iterator[bytes]:
        """The bytes, `BLOCK` at a time. The signature is checked again over what is handed out,
        and the last block held back until it matches: a file changed in place since it was
        opened ends the answer short (`ForgedResult`), never hands it out whole."""
        mac = result_hasher(self._key)
        self.f.seek(0)
        held = None
        while block := self.f.read(BLOCK):
            mac.update(block)
            if held is not None:
                yield held
            held = block
        if not hmac.compare_digest(mac.hexdigest(), self._mac):
            raise ForgedResult(f"result: job {self.job_id}'s result.pkl changed while it was read; "
                               "its signature no longer matches")
        if held is not None:
            yield held

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> SignedResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_result(secret: bytes, job_id: int, job_dir: Path | str) -> SignedResult:
    """The job's `result.pkl`, open, when its run wrote it (its signature checked over the open
    file, a block at a time); `NoResult` when there is none, `ForgedResult` when the file is
    not signed with the job's key."""
    path = Path(job_dir) / RESULT_FILE
    try:  # never following a link the job may have put there (the server may be root)
        f = open(path, "rb", opener=nofollow.opener)  # noqa: SIM115 (closed by the caller)
    except FileNotFoundError:
        raise NoResult(f"result: job {job_id} has no result") from None
    except nofollow.NotAFile:  # a link (or a FIFO...) the job put there: no result of its own
        raise NoResult(f"result: job {job_id} has no result (result.pkl is not a regular file)") from None
    try:
        try:
            signed = nofollow.read_bytes(Path(job_dir) / (RESULT_FILE + MAC_SUFFIX), limit=256)
            mac = signed.decode("ascii", "replace").strip()
        except (FileNotFoundError, nofollow.NotAFile):
            mac = ""
        key = job_key(secret, job_id)
        check = result_hasher(key)
        while block := f.read(BLOCK):
            check.update(block)
        if not mac or not hmac.compare_digest(mac, check.hexdigest()):
            raise ForgedResult(f"result: not written by job {job_id}'s run (its signature is missing or "
                               "wrong); refusing to hand it out")
        return SignedResult(f, f.tell(), key, mac, job_id)
    except BaseException:
        f.close()
        raise


def read_result(secret: bytes, job_id: int, job_dir: Path | str) -> bytes:
    """The bytes of the job's `result.pkl` when its run wrote them (`open_result`, read whole)."""
    with open_result(secret, job_id, job_dir) as signed:
        return b"".join(signed.blocks())
