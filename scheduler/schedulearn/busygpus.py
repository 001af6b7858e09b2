"""GPUs in use by processes the scheduler did not start: held, not given to its jobs.

On a workstation the scheduler is not alone: someone's `python train.py` in a terminal, a
notebook kernel that loaded a model, a program of another user's. A job placed on such a GPU
shares its memory and compute with it and runs out of memory, or at half speed. So the local
executor marks held (`Gpu.held_by`: `process 4242 of alice (python train.py --epochs 10)`) a GPU
that none of the scheduler's jobs is placed on where NVML lists a compute process on it
(`HostInventory.processes`) using at least `gpu_busy_mib` MiB of its memory (default 2,048; 0:
never). A process that only opened a CUDA context — a kernel that checked
`torch.cuda.is_available()` and moved a tensor, 300–1,000 MiB — does not hold its GPU; one whose
memory NVML does not report (it says so on some systems) does.

The engine then places jobs elsewhere and a job that needs that GPU waits, its reason saying
`1 held outside the scheduler`; `schedulearn gpus`, `GET /gpus` and the sidebar name the process.
The GPU is free again at the first inventory read after the process ended or freed its memory
(every `inventory_interval`, 30 s). Other schedulers' jobs on this host are named by their
claims instead (`gpulocks`); a GPU those hold is not looked at here.

The text names the lowest pid (stable from one read to the next: a changed text is a changed
inventory); its account and command line come from `/proc`, where the server can see them.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable

#: the default of `gpu_busy_mib`: a bare CUDA context stays under it, a training process does not
DEFAULT_MIB = 2048


def holder(processes: Iterable[tuple[int, int | None]], least_mib: int) -> str:
    """What holds a GPU, in words, or "" when nothing does: the processes on it (pid, MiB or
    None) that use at least `least_mib` MiB (None: not reported, counted); 0: nothing does."""
    if least_mib <= 0:
        return ""
    busy = sorted(pid for pid, mib in processes if mib is None or mib >= least_mib)
    if not busy:
        return ""
    more = f" and {len(busy) - 1} more" if len(busy) > 1 else ""
    return describe(busy[0]) + more


def describe(pid: int) -> str:
    """`process 4242 of alice (python train.py --epochs 10)`; `process 4242 (not visible from
    the server)` where /proc does not show it (another PID namespace)."""
    command, user = _cmdline(pid), _user(pid)
    if command is None:
        return f"process {pid} (not visible from the server)"
    who = f"process {pid} of {user}" if user else f"process {pid}"
    return f"{who} ({command})" if command else who


def _cmdline(pid: int, most: int = 80) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if args:
        args[0] = args[0].rsplit("/", 1)[-1]  # python, not /home/alice/.venv/bin/python
    # one line: a `python -c` script's newlines and indents as single spaces, other control
    # characters (a terminal escape in an argument) as `?`
    text = " ".join("".join(c if c.isprintable() or c.isspace() else "?" for c in " ".join(args)).split())
    return text[: most - 1] + "…" if len(text) > most else text


def _user(pid: int) -> str:
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
