"""Out of memory: jobs go first, and a job the kernel's OOM killer ended says so.

When a job exhausts the machine's memory, the kernel's OOM killer ends the process it scores
worst — often the largest, which on a workstation may be the user's notebook kernel, with its
hours of interactive state, or the Jupyter server itself. Every local run therefore starts with
`oom_score_adj` = `JOB_OOM_SCORE_ADJ` (500: half of the scale added to its score; its processes
inherit it; raising one's own needs no privilege), so that the kernel ends a job — which can
restart from its checkpoints — before the server, the kernels or the desktop.

A run killed so only sees SIGKILL. The memory cgroup its processes are in counts the processes
the OOM killer ended (`oom_kill` in cgroup v2's `memory.events`, or in v1's `memory.oom_control`):
read at the run's start and at its end, a rise says that the failure was likely memory. The count
is its cgroup's, which it shares with the server and its other jobs (the note says "likely").
"""

from __future__ import annotations

from pathlib import Path

#: added to every local job's OOM score (-1000 .. 1000): the kernel ends a job before the server
JOB_OOM_SCORE_ADJ = 500

CGROUP_ROOT = Path("/sys/fs/cgroup")


def counter(pid: int, root: Path = CGROUP_ROOT) -> str | None:
    """The file that counts OOM kills in the memory cgroup of process `pid` (v1's memory
    controller where it is mounted, else the unified hierarchy); None where there is none to read
    (the root cgroup, no cgroup file system, a process gone)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    where: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            where.append(root / "memory" / path.lstrip("/") / "memory.oom_control")
        elif controllers == "":  # cgroup v2: wherever it is mounted
            for base in (root, root / "unified"):
                where.append(base / path.lstrip("/") / "memory.events")
    return next((str(p) for p in where if count(str(p)) is not None), None)


def count(path: str | None) -> int | None:
    """The `oom_kill` count in `path` (None: unreadable, or a kernel that does not count)."""
    if path is None:
        return None
    try:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def note(path: str | None, before: int | None) -> str:
    """`likely out of memory: the kernel's OOM killer ended 1 process of its cgroup during the
    run`, or "" where the count did not rise (or cannot be read)."""
    now = count(path)
    if now is None or before is None or now <= before:
        return ""
    n = now - before
    return (f"likely out of memory: the kernel's OOM killer ended {n} process{'' if n == 1 else 'es'} "
            f"of its cgroup during the run")
