"""Host-wide GPU claims: two schedulers on one machine never start jobs on the same GPU.

Two people on one workstation, each with their own JupyterLab, each get an embedded scheduler
that believes it owns every GPU. Each run of the local executor therefore holds an advisory lock
(`flock`) on one file per GPU it runs on, `<dir>/<GPU UUID>.lock`, in a directory every account of
the machine shares (`/dev/shm/schedulearn-gpus` by default). The server takes the locks just
before the run's first process starts and hands them to it: the run's processes inherit them, so
a claim lasts exactly as long as the run — through a restart of the server (a re-attached run
still holds it) and never after (a killed server or a crashed job leaves no stale claim).

The file says who holds it (JSON: the claiming scheduler's job root, the job, its run and user,
the server's pid, since when), so that another scheduler's inventory can mark the GPU held
(`Gpu.held_by`: `job 12 of alice, another scheduler's (…)`) and its engine places jobs elsewhere; a
run that loses the race for a GPU in between is placed anew (`GpusTaken`), nothing of it run.

What the scheduler's own runs hold is the engine's business: a GPU locked by one of this
scheduler's jobs is marked held only where that job no longer runs on it (a process of its run
outlived it). Virtual GPUs are nobody else's, so they are claimed only where a directory is
configured explicitly (two demo servers sharing "GPUs", tests).

Security: the directory is world-writable and sticky; files are opened without following links,
never created over an existing one (`O_EXCL`, which `fs.protected_regular` requires), and only
regular files with one link are written. Anyone who can run a process can use a GPU anyway:
the claims keep schedulers apart, they are not a fence around the hardware.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .model import Gpu

log = logging.getLogger("schedulearn.gpulocks")

#: where the claims are by default: a tmpfs every account shares (not /tmp, which a systemd
#: service or a JupyterHub spawner may make private)
DEFAULT_DIR = "/dev/shm/schedulearn-gpus"
#: the setting's value that turns claims off
OFF = "off"


class GpusTaken(Exception):
    """GPUs of a run were claimed by another run (of another scheduler) since the inventory was
    read; the message says which and by whom, in one line."""


class GpuLocks:
    """The claims of one scheduler (`owner`: its job root) in `directory`. `virtual`: claim
    virtual GPUs too."""

    #: how long a claim waits for a lock that another scheduler's inventory is only looking at
    wait = 0.5

    def __init__(self, directory: str | os.PathLike[str], owner: str, virtual: bool = False):
        self.directory = Path(directory)
        self.owner = owner
        self.virtual = virtual
        self._lock = threading.Lock()  # this process's own looks and claims, one at a time
        self._said: set[str] = set()  # why the directory (or a file) cannot be used: said once each

    def __repr__(self) -> str:
        return f"GpuLocks({str(self.directory)!r})"

    def key(self, gpu: Gpu) -> str | None:
        """The file name of `gpu`'s claim; None where it is not claimed (a virtual GPU, unless
        asked; a GPU without UUID)."""
        if (gpu.virtual and not self.virtual) or not gpu.uuid or "/" in gpu.uuid:
            return None
        return f"{gpu.uuid}.lock"

    # -- claiming --------------------------------------------------------------------------------
    def claim(self, gpus: Iterable[Gpu], holder: dict[str, Any]) -> dict[int, int]:
        """Lock the files of `gpus` for a run described by `holder` (`job`, `run`, `user`): GPU
        index -> the open descriptor, for the run to inherit (a lock is its open file's: it
        lasts while any copy is open, and `release` of the caller's copy ends it for all).
        `GpusTaken` when another run holds one (none is then held). A directory that cannot be
        used is said once in the log and claims nothing: it never stops a job."""
        text = json.dumps({**holder, "owner": self.owner, "pid": os.getpid(), "since": time.time()})
        fds: dict[int, int] = {}
        try:
            with self._lock:
                for gpu in gpus:
                    name = self.key(gpu)
                    if name is None:
                        continue
                    fd = self._open(name)
                    if fd is None:
                        continue
                    fds[gpu.index] = fd
                    if not self._take(fd):
                        raise GpusTaken(f"GPU {gpu.index} is held by {describe(_read(fd), self.owner)}")
                    _write(fd, text)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        return fds

    @staticmethod
    def release(fds: Iterable[int]) -> None:
        """End claims (for every copy of their descriptors: a run's processes may hold them too)."""
        for fd in fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _take(self, fd: int) -> bool:
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)

    # -- looking ---------------------------------------------------------------------------------
    def holders(self, gpus: Iterable[Gpu]) -> dict[str, dict[str, Any]]:
        """UUID -> what its claim file says (`{}`: unreadable) for each of `gpus` a run holds now."""
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for gpu in gpus:
                name = self.key(gpu)
                if name is None:
                    continue
                fd = self._open(name, create=False)
                if fd is None:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    out[gpu.uuid] = _read(fd)
                finally:
                    os.close(fd)  # (a shared lock taken goes with it)
        return out

    # -- the files -------------------------------------------------------------------------------
    def _open(self, name: str, create: bool = True) -> int | None:
        """The claim file `name`, opened (created, mode 0666, where `create` and missing); None
        where there is none to look at, or the directory cannot be used (said once)."""
        try:
            dirfd = self._dir(create)
        except OSError as e:
            self._broke(f"{e.strerror or e}: {e.filename or self.directory}")
            return None
        if dirfd is None:
            return None
        try:
            return _open_file(dirfd, name, create)
        except OSError as e:
            if e.errno == errno.ENOENT and not create:
                return None
            what = "a link, not a regular file" if e.errno == errno.ELOOP else e.strerror or str(e)
            self._broke(f"{what}: {self.directory / name}")
            return None
        finally:
            os.close(dirfd)

    def _dir(self, create: bool) -> int | None:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(self.directory, flags)
        except FileNotFoundError:
            if not create:
                return None
        try:
            os.mkdir(self.directory, 0o1777)
            os.chmod(self.directory, 0o1777, follow_symlinks=False)  # (past the umask)
        except FileExistsError:
            pass
        return os.open(self.directory, flags)

    def _broke(self, why: str) -> None:
        if why not in self._said:
            self._said.add(why)
            log.warning("GPU claims: cannot use %s (%s): jobs start without claiming their GPUs, and "
                        "another scheduler on this machine could start jobs on them", self.directory, why)


def _open_file(dirfd: int, name: str, create: bool) -> int:
    base = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    while True:
        for flags in (os.O_RDWR, os.O_RDONLY):  # (read-only: someone's file not writable by us)
            try:
                fd = os.open(name, base | flags, dir_fd=dirfd)
                break
            except PermissionError:
                continue
            except FileNotFoundError:
                fd = None
                break
        else:
            raise PermissionError(errno.EACCES, "not readable", name)
        if fd is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such file", name)
            try:
                fd = os.open(name, base | os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dirfd)
                os.fchmod(fd, 0o666)  # (past the umask: other accounts' schedulers write it too)
            except FileExistsError:  # created in between: open that one
                continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise OSError(errno.EINVAL, "not a regular file of its own", name)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd


def _write(fd: int, text: str) -> None:
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
    except OSError:  # opened read-only (a file another account made, not writable): unsaid
        pass


def _read(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def describe(holder: dict[str, Any], owner: str | None = None) -> str:
    """`job 12 of alice, another scheduler's (pid 4121, since 10:02, job root /home/alice/…)`:
    who holds a claim, in words; `owner`: the scheduler asking (its own jobs say so). The file
    is anyone's to write: numbers are taken only as numbers, text only printable and short."""
    kinds: dict[str, Any] = {"job": int, "pid": int, "since": (int, float)}
    holder = {k: _plain(v) if isinstance(v, str) else v for k, v in holder.items()
              if isinstance(v, kinds.get(k, str)) and not isinstance(v, bool)}
    job, user = holder.get("job"), holder.get("user")
    who = f"job {job}" if job is not None else "a job"
    if user:
        who += f" of {user}"
    if owner is not None and holder.get("owner") == owner:
        return f"{who}, this scheduler's (a process of its run is still there)"
    pid, root = holder.get("pid"), holder.get("owner")
    try:
        when = time.strftime("%H:%M", time.localtime(holder["since"])) if "since" in holder else ""
    except (OverflowError, OSError, ValueError):  # (not a time)
        when = ""
    where = ", ".join(x for x in (f"pid {pid}" if pid else "", f"since {when}" if when else "",
                                  f"job root {root}" if root else "") if x)
    return f"{who}, another scheduler's ({where})" if where else f"{who}, another scheduler's"


def _plain(text: str, most: int = 200) -> str:
    short = "".join(c if c.isprintable() else "?" for c in text[:most])
    return short + ("…" if len(text) > most else "")


def from_setting(value: str, owner: str | os.PathLike[str]) -> GpuLocks | None:
    """The claims the `gpu_locks` setting asks for: `""` the default directory, for this host's
    real GPUs; a directory, for every GPU (virtual ones too); `off` none."""
    value = (value or "").strip()
    if value.lower() == OFF:
        return None
    if value and not os.path.isabs(value):
        raise ValueError(f"gpu_locks: expected an absolute directory, '' (the default, {DEFAULT_DIR}) "
                         f"or '{OFF}', got {value!r}")
    return GpuLocks(value or DEFAULT_DIR, str(owner), virtual=bool(value))
