"""Opening files inside job directories without following links.

In the shared set-up a job directory belongs to the job's user while the server (root) still
writes log markers, the pid file and the bundled script there, and reads logs, results and
metrics back for the API. A job could replace one of those files with a symbolic link (to
`/etc/shadow`, another user's job) or a FIFO; these helpers refuse anything but a regular file
at the last path component (`O_NOFOLLOW`; hard links to files the user does not own are what
the kernel's `protected_hardlinks` prevents). Pass `opener=opener` to `open()`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotAFile(OSError):
    """The path is a symbolic link, a FIFO, a directory...: anything but a regular file."""


def opener(path: str | os.PathLike[str], flags: int) -> int:
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a link; a directory; a FIFO (write)
            raise NotAFile(e.errno, f"not a regular file ({e.strerror})", str(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotAFile(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike[str], owner: int | None = None, offset: int = 0,
               limit: int = -1) -> bytes:
    """The file's bytes (from byte `offset` on, at most `limit` of them when it is not -1); with
    `owner`, only if that uid owns it (PermissionError otherwise): a file the server wrote, not
    one a job put in its place."""
    with open(path, "rb", opener=opener) as f:
        if owner is not None and os.fstat(f.fileno()).st_uid != owner:
            raise PermissionError(errno.EPERM, f"not owned by uid {owner}", str(path))
        if offset:
            f.seek(offset)
        return f.read(limit)


def read_text(path: str | os.PathLike[str], owner: int | None = None, limit: int = -1) -> str:
    """`read_bytes`, decoded (UTF-8: `UnicodeDecodeError`, a ValueError, otherwise); `limit`
    bounds a file a job may have written (its first `limit` bytes)."""
    return read_bytes(path, owner, limit=limit).decode()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with open(Path(path), "w", opener=opener) as f:
        f.write(text)
