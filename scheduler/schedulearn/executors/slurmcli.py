"""Slurm through its command-line tools: the few calls the Slurm executor and inventory need.

Slurm's own CLI with machine-readable output (`sinfo --json`, `squeue --json`, `sbatch
--parsable`, `scancel`), not a binding: pyslurm has no release for every Slurm version a lab runs,
`slurmrestd` must be set up and refuses to run as root, while the CLI is on every login node and
speaks the cluster's own version. The JSON is read tolerantly: Slurm 22.05 (OpenAPI v0.0.38) and
the later layouts (a job state as a list, exit codes as objects) both parse.

Every call has a timeout and fails with a one-line `SlurmError` naming the command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: Job states in which a Slurm job holds (or is about to hold) its resources.
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
                           "RESIZING", "SIGNALING", "STAGE_OUT"})
#: Node states (base state or flag) in which no new job may be placed on a node.
UNHEALTHY_NODE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE",
                            "UNKNOWN", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN",
                            "POWER_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "MAINTENANCE",
                            "RESERVED", "INVALID", "INVALID_REG"})


class SlurmError(RuntimeError):
    """A Slurm command failed or could not be run (one line)."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str
    states: frozenset[str]  # base state and flags, upper case: {"IDLE"}, {"MIXED", "DRAIN"}
    gpus: int
    partitions: tuple[str, ...]
    reason: str = ""
    cpus: int = 0
    alloc_cpus: int = 0
    real_memory: int = 0  # MB; Slurm's default 1 when the node does not declare it
    alloc_memory: int = 0  # MB allocated (0 where memory is not a consumable resource)

    @property
    def healthy(self) -> bool:
        return not (self.states & UNHEALTHY_NODE)

    @property
    def full(self) -> str:
        """Why no job can start on the node whatever its GPUs (`all 8 CPUs allocated`), or ""."""
        if self.cpus and self.alloc_cpus >= self.cpus:
            return f"all {self.cpus} CPUs allocated"
        if self.real_memory > 1 and self.alloc_memory >= self.real_memory:
            return f"all its memory allocated ({self.real_memory} MB)"
        return ""


@dataclass(frozen=True)
class SlurmJob:
    id: int  # this job (a heterogeneous job's component has its own id)
    het_id: int  # the heterogeneous job it belongs to (0 or its own id when it is not one)
    name: str
    user: str
    partition: str
    state: str  # base state, upper case: RUNNING, PENDING, COMPLETED, FAILED, CANCELLED...
    reason: str  # Slurm's state reason (NonZeroExitCode, NodeFail, TimeLimit, Resources...)
    exit_status: int | None  # the wait status of the batch script (code << 8 | signal)
    gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # node -> GPU indices
    comment: str = ""
    nodes: tuple[str, ...] = ()  # where it runs (GPUs or not)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def leader(self) -> int:
        return self.het_id or self.id


class SlurmCli:
    """Runs Slurm's commands with `env` on top of the server's environment (`SLURM_CONF`...)."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout: float = 30.0):
        self.env = {**os.environ, **(env or {})}
        self.timeout = timeout

    def run(self, *argv: str, input: str | None = None, env: Mapping[str, str] | None = None) -> str:
        try:
            r = subprocess.run(list(argv), capture_output=True, text=True, input=input, timeout=self.timeout,
                               env=self.env if env is None else env)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]}: not found (install Slurm's client commands)") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]}: no answer from Slurm in {self.timeout:g} s") from None
        if r.returncode != 0:
            text = (r.stderr or r.stdout).strip().splitlines()
            raise SlurmError(f"{argv[0]}: {text[-1] if text else f'exit code {r.returncode}'}")
        return r.stdout

    def job_env(self) -> dict[str, str]:
        """What a job submitted from here starts with: what Slurm's commands need to find the
        cluster (`SLURM_CONF`), a PATH, the locale; nothing else of the server's."""
        keep = ("PATH", "LANG", "LC_ALL", "TZ", "SLURM_CONF")
        return {k: v for k, v in self.env.items() if k in keep}

    # -- reading -------------------------------------------------------------------------------
    def nodes(self, partition: str | None = None) -> list[SlurmNode]:
        data = self._json("sinfo", "--json")
        out = []
        for n in data.get("nodes", []):
            parts = tuple(n.get("partitions") or ())
            if partition and partition not in parts:
                continue
            states = {s.upper() for s in _as_list(n.get("state"))} | {
                s.upper() for s in _as_list(n.get("state_flags"))}
            out.append(SlurmNode(name=n["name"], address=n.get("address") or n.get("hostname") or n["name"],
                                 states=frozenset(states), gpus=gres_count(n.get("gres", "")),
                                 partitions=parts, reason=n.get("reason") or "",
                                 cpus=int(_number(n.get("cpus")) or 0),
                                 alloc_cpus=int(_number(n.get("alloc_cpus")) or 0),
                                 real_memory=int(_number(n.get("real_memory")) or 0),
                                 alloc_memory=int(_number(n.get("alloc_memory")) or 0)))
        return out

    def default_partition(self) -> str | None:
        """The cluster's default partition (marked `*` by sinfo)."""
        for line in self.run("sinfo", "-h", "-o", "%P").split():
            if line.endswith("*"):
                return line[:-1]
        return None

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld knows: active ones and those that ended within `MinJobAge`."""
        data = self._json("squeue", "--json")
        return [parse_job(j, self.hostnames) for j in data.get("jobs", [])]

    def hostnames(self, nodelist: str) -> list[str]:
        """`n[1-3],m4` -> ['n1', 'n2', 'n3', 'm4'] (scontrol's own expansion for anything odd)."""
        simple = expand_nodelist(nodelist)
        if simple is not None:
            return simple
        return self.run("scontrol", "show", "hostnames", nodelist).split()

    def _json(self, *argv: str) -> dict:
        text = self.run(*argv)
        try:
            data = json.loads(text)
        except ValueError:
            raise SlurmError(f"{argv[0]}: its --json output is not JSON") from None
        errors = [e for e in data.get("errors", []) if e]
        if errors:
            raise SlurmError(f"{argv[0]}: {errors[0].get('error') or errors[0]}")
        return data

    # -- acting --------------------------------------------------------------------------------
    def submit(self, script: str, argv: Sequence[str] = ()) -> int:
        """`sbatch --parsable [argv] script` -> the job id.

        sbatch runs with `job_env()`, not the server's environment: Slurm hands the submitting
        environment to the job (`--export=ALL`), and `--export=NONE`/`NIL` would cost every job
        about a second (Slurm then loads the user's login environment)."""
        out = self.run("sbatch", "--parsable", "--export=ALL", *argv, script, env=self.job_env()).strip()
        try:
            return int(out.split(";")[0].split("+")[0])
        except ValueError:
            raise SlurmError(f"sbatch: unexpected answer {out!r}") from None

    def signal(self, job_id: int, sig: str = "TERM") -> None:
        """Send `sig` to every process of the job, the batch script included (no cancel)."""
        self.run("scancel", f"--signal={sig}", "--full", str(job_id))

    def cancel(self, job_id: int) -> None:
        """Slurm's own cancel: SIGCONT, SIGTERM, SIGKILL after the cluster's KillWait."""
        self.run("scancel", str(job_id))


# -- parsing ---------------------------------------------------------------------------------------
def parse_job(j: Mapping, hostnames=None) -> SlurmJob:
    state = _as_list(j.get("job_state"))
    nodes = (hostnames or expand_nodelist)(j.get("nodes") or "") if j.get("nodes") else []
    gpus: dict[str, tuple[int, ...]] = {}
    for node, detail in zip(nodes or [], j.get("gres_detail") or [], strict=False):
        idx = gpu_indices(detail)
        if idx:
            gpus[node] = idx
    return SlurmJob(
        id=int(j["job_id"]), het_id=int(_number(j.get("het_job_id")) or 0), name=j.get("name") or "",
        user=j.get("user_name") or "", partition=j.get("partition") or "",
        state=(state[0] if state else "UNKNOWN").upper(), reason=str(j.get("state_reason") or ""),
        exit_status=_exit_status(j.get("exit_code")), gpus=gpus, comment=j.get("comment") or "",
        nodes=tuple(nodes or ()))


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value]


def _number(value):
    """A plain number, or Slurm 23's `{"set": true, "number": N}`."""
    if isinstance(value, Mapping):
        return value.get("number") if value.get("set", True) else None
    return value


def _exit_status(value) -> int | None:
    """A wait status (code << 8 | signal) from 22.05's integer or 23's object."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        code = _number(value.get("return_code")) or 0
        signal = value.get("signal")
        sig = _number(signal.get("id")) if isinstance(signal, Mapping) else 0
        return (int(code) << 8) | int(sig or 0)
    return int(value)


def decode_exit(status: int | None) -> tuple[int | None, int]:
    """A wait status -> (exit code or None, signal number or 0)."""
    if status is None:
        return None, 0
    sig = status & 0x7F
    return (None, sig) if sig else (status >> 8, 0)


_GRES = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")


def gres_count(gres: str) -> int:
    """GPUs in a node's gres string: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8` -> 4, 4, 2."""
    return sum(int(m.group(1)) for m in _GRES.finditer(gres or ""))


def gpu_indices(detail: str) -> tuple[int, ...]:
    """`gpu:2(IDX:0-1)`, `gpu:a100:3(IDX:0,2-3)` -> (0, 1), (0, 2, 3); no IDX -> ()."""
    m = re.search(r"IDX:([0-9,\-]+)", detail or "")
    if not m:
        return ()
    out: list[int] = []
    for part in m.group(1).split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return tuple(out)


def expand_nodelist(nodelist: str) -> list[str] | None:
    """Expand the common forms (`n1,n2`, `n[1-3,5]`, `gpu[01-02]`); None for anything else."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?(?:,|$)", nodelist or ""):
        prefix, ranges = m.group(1), m.group(2)
        if not ranges:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            if "-" in part:
                a, b = part.split("-", 1)
                if not (a.isdigit() and b.isdigit()):
                    return None
                out.extend(f"{prefix}{i:0{len(a)}d}" for i in range(int(a), int(b) + 1))
            elif part.isdigit():
                out.append(prefix + part)
            else:
                return None
    return out


def nodelist(names: Sequence[str]) -> str:
    return ",".join(names)


__all__ = ["SlurmCli", "SlurmError", "SlurmJob", "SlurmNode", "decode_exit", "expand_nodelist",
           "gpu_indices", "gres_count", "parse_job"]
