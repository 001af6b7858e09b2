"""The serialisable core model: what a job asks for, what it is, what it runs on.

`JobSpec` is validated with pydantic (it arrives from users); `Job`, `Node` and `Gpu` are plain
slotted dataclasses because the engine touches them millions of times in a simulation.
Everything here converts to and from plain JSON-able dicts: it is also the wire format.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

#: An allocation: node name -> GPU indices on that node.
Allocation = dict[str, tuple[int, ...]]


class SpecError(ValueError):
    """A job specification (or other user input) is invalid; the message is one line."""


class Launcher(str, enum.Enum):
    python = "python"
    torchrun = "torchrun"
    horovod = "horovod"


class Resize(str, enum.Enum):
    """How the executor resizes a running job (`JobSpec.resize`): `restart` stops it (it
    checkpoints on SIGTERM) and starts it again at the new size; `in-place` has the framework
    add or remove workers while the others keep running (Horovod Elastic, torchrun's elastic
    agents; see docs/resize.md). Where an executor cannot resize a job in place, it restarts it."""

    restart = "restart"
    in_place = "in-place"


#: The launchers that can resize a job in place.
IN_PLACE_LAUNCHERS = ("horovod", "torchrun")


class JobState(str, enum.Enum):
    """`starting` is the write-ahead record of a launch: the store holds the run number
    (`restarts`) and the allocation before the executor acts; it becomes `running` once the
    launch returned (or is adopted / rolled back to `queued` after a crash)."""

    queued = "queued"
    starting = "starting"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = {JobState.succeeded, JobState.failed, JobState.cancelled}
LAUNCHERS = tuple(m.value for m in Launcher)
RESIZE_MODES = tuple(m.value for m in Resize)


#: What an environment variable's name may be: a shell identifier (`export` accepts nothing else).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_TEXT = "[A-Za-z_][A-Za-z0-9_]*"
#: Variables the scheduler sets for every job (`executors.launch.job_env`, the GPUs it was given;
#: for a container, `NVIDIA_VISIBLE_DEVICES` and the host's GPU ids): a spec's `env` naming one is
#: refused, as it would be overridden without a word.
SCHEDULER_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "SCHEDULEARN_JOB_ID", "SCHEDULEARN_JOB_DIR",
                           "SCHEDULEARN_RESTART_COUNT", "SCHEDULEARN_NUM_GPUS", "SCHEDULEARN_RESULT_KEY",
                           "NVIDIA_VISIBLE_DEVICES", "SCHEDULEARN_HOST_GPUS"})
#: Control characters (Unicode category Cc: C0, DEL and C1), which a one-line text field refuses.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
#: The longest time limit a job may ask for (a year): a typo such as `--timeout 2000000h` is refused.
MAX_TIME_LIMIT_S = 365 * 86400.0
#: Fields a live server (not the simulator) refuses: they describe a simulated run.
SIMULATION_ONLY = ("duration", "application")


class JobSpec(BaseModel):
    """What a user asks for. Exactly one of `command` (argv) or `script` (Python source), unless
    the spec describes a simulated job (`duration` or `application`).

    Numbers and booleans are strict: `"2"`, `2.0` or `"yes"` are refused, not coerced. Text
    must be encodable (no lone surrogates such as `"\\udfff"`), argv and environment entries
    must be passable to `exec` (no NUL), and environment names must be shell identifiers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("job", min_length=1, max_length=200)
    command: list[str] | None = None
    script: str | None = None
    gpus: StrictInt | Literal["auto"] = 1
    min_gpus: StrictInt | None = Field(None, ge=1)
    max_gpus: StrictInt | None = Field(None, ge=1)
    launcher: Launcher = Launcher.python
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    priority: StrictInt = 0
    user: str = ""
    workdir: str | None = None
    #: how a resize happens: 'restart' (the default: checkpoint-restart) or 'in-place'
    resize: Resize | None = None
    # Simulation-only fields: a rigid job's run time, or an elastic application model's inputs.
    duration: Annotated[float, Field(strict=True)] | None = Field(None, gt=0)
    application: str | None = None
    batch_size: StrictInt | None = Field(None, ge=1)
    adaptive_batch: StrictBool = False
    #: the job's declared length in epochs (its reports' `epoch` count against it; a predictor feature)
    epochs: StrictInt | None = Field(None, ge=1)
    #: finish by this time (seconds since the epoch; virtual seconds in simulation): `deadlines`
    deadline: Annotated[float, Field(strict=True)] | None = Field(None, gt=0, allow_inf_nan=False)
    #: seconds of run time after which the scheduler stops the job (all its runs together; the
    #: queue does not count): `Engine`, failed with exit code 124 as `timeout(1)`
    time_limit: Annotated[float, Field(strict=True)] | None = Field(
        None, gt=0, le=MAX_TIME_LIMIT_S, allow_inf_nan=False)
    #: the notebook cell a `%%schedulearn` job came from (`notebook#cell id`, or `notebook#code-`
    #: and a hash of the cell's code where the front-end gives no id), set by the magics when the
    #: job has their default name (`notebook[N]`, a new N at every run): the runs of one cell
    #: are one job to what the scheduler learns from them (their run time, their step times)
    cell: str | None = Field(None, min_length=1, max_length=300)

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if isinstance(v, bool) or (isinstance(v, int) and v < 1):
            raise ValueError("not an integer >= 1")  # worded by one_line_error with the value
        return v

    # Checks of what a job needs to launch at all, made on user input (`parse`) only: a spec
    # read back from the store was checked when it was submitted.
    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if _at_boundary(info):
            for name, value in v.items():
                if not ENV_NAME.fullmatch(name):
                    raise ValueError(f"names must match {ENV_NAME_TEXT} (a shell identifier), got {name!r}")
                if name in SCHEDULER_ENV:
                    raise ValueError(f"{name} is set by the scheduler for every job (the GPUs it is given, "
                                     f"its folder and run); leave it out")
                if "\x00" in value:
                    raise ValueError(f"NUL characters (\\u0000) are not allowed in a value ({name})")
        return v

    @field_validator("name", "cell")
    @classmethod
    def _name(cls, v: str | None, info: ValidationInfo) -> str | None:
        """A name is one line of text: every view prints it (`schedulearn ls` to a terminal, where
        another user's `\\x1b[2J` would clear the screen, or a tab would shift the columns)."""
        if v is not None and _at_boundary(info) and CONTROL.search(v):
            raise ValueError(f"control characters (tab, newline, escape, ...) are not allowed, got {v!r}")
        return v

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None, info: ValidationInfo) -> str | None:
        """Absolute: a relative one would be taken relative to the server's own working directory,
        which no client knows (`--workdir .` ran the job wherever the server was started)."""
        if v is not None and _at_boundary(info):
            if not v.startswith("/"):
                raise ValueError(f"expected an absolute path (on the machine the job runs on), got {v!r}")
            if "\x00" in v:
                raise ValueError("NUL characters (\\u0000) are not allowed")
        return v

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if v is not None and _at_boundary(info) and any("\x00" in a for a in v):
            raise ValueError("NUL characters (\\u0000) are not allowed in an argument")
        return v

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> JobSpec:
        bad = _unencodable_field(self) if _at_boundary(info) else None
        if bad is not None:
            raise ValueError(f"{bad}: {_SURROGATES}")
        if self.command is not None and self.script is not None:
            raise ValueError("command: give either command or script, not both")
        simulated = self.duration is not None or self.application is not None
        if self.command is None and self.script is None and not simulated:
            raise ValueError("command: give a command (argv list) or a script (Python source)")
        if self.command is not None and not self.command:
            raise ValueError("command: expected a non-empty argv list")
        if self.resize is Resize.in_place and self.launcher.value not in IN_PLACE_LAUNCHERS and not simulated:
            raise ValueError("resize: 'in-place' needs the horovod or torchrun launcher (the framework "
                             f"adds and removes workers), got launcher {self.launcher.value!r}")
        lo, hi = self.min_gpus, self.max_gpus
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min_gpus: must be <= max_gpus ({hi}), got {lo}")
        if isinstance(self.gpus, int):
            if lo is not None and lo > self.gpus:
                raise ValueError(f"min_gpus: must be <= gpus ({self.gpus}), got {lo}")
            if hi is not None and hi < self.gpus:
                raise ValueError(f"max_gpus: must be >= gpus ({self.gpus}), got {hi}")
        return self

    # -- sizes the engine works with -------------------------------------------------------
    @property
    def min_size(self) -> int:
        if self.min_gpus is not None:
            return self.min_gpus
        return 1 if self.gpus == "auto" else int(self.gpus)

    def max_size(self, cluster_gpus: int) -> int:
        if self.max_gpus is not None:
            return min(self.max_gpus, cluster_gpus)
        if self.gpus != "auto":
            return int(self.gpus)
        return min(self.min_size, cluster_gpus) if self.single_process else cluster_gpus

    @property
    def single_process(self) -> bool:
        """A live job whose launcher starts one process (plain Python): `--gpus auto` gives it no
        more than its minimum (1) unless `max_gpus` says it can use more (e.g. it spawns its own
        workers); a simulated job models its own scaling."""
        return self.launcher == Launcher.python and self.duration is None and self.application is None

    @property
    def capped_to_one_process(self) -> bool:
        """`--gpus auto` on a single process with no `max_gpus`: sized at its minimum only (what
        `one_process_note` tells the user who submits it)."""
        return self.gpus == "auto" and self.single_process and self.max_gpus is None

    @property
    def requested(self) -> int:
        """The size a rigid policy gives the job: its GPU count, or its minimum for 'auto'."""
        return self.min_size if self.gpus == "auto" else int(self.gpus)

    @property
    def in_place(self) -> bool:
        """The job asks to be resized in place (see `Resize`)."""
        return self.resize is Resize.in_place

    @property
    def elastic(self) -> bool:
        """Sized by the policy between `min_size` and `max_size`: `auto` (but a single process
        without `max_gpus`), a `max_gpus` above the minimum, or a GPU count above a `min_gpus`
        (`gpus=2, min_gpus=1`: two, or one where two are not to be had)."""
        return ((self.gpus == "auto" and not self.single_process) or (self.max_gpus or 0) > self.min_size
                or (self.gpus != "auto" and int(self.gpus) > self.min_size))

    @classmethod
    def parse(cls, data: Any) -> JobSpec:
        """Validate user input; raise `SpecError` with one line naming the field."""
        try:
            return cls.model_validate(data, context=_BOUNDARY)
        except ValidationError as e:
            raise SpecError(one_line_error(e)) from None


def gpus_from_text(text: str) -> int | str:
    """`--gpus` as typed on a command line (the CLI, the magics): 'auto' (any case), a whole
    number, or else the text itself, for `JobSpec.parse` to refuse with the field's message."""
    value = text.strip()
    if value.lower() == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        return text


_BOUNDARY = {"boundary": True}
_SURROGATES = "lone surrogate characters (\\ud800-\\udfff) are not allowed; expected valid Unicode text"


def _at_boundary(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("boundary"))


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unencodable_field(spec: JobSpec) -> str | None:
    """The first field holding text that cannot be encoded (a lone surrogate), or None."""
    for name in ("name", "cell", "script", "image", "user", "workdir", "application"):
        value = getattr(spec, name)
        if value is not None and not _encodable(value):
            return name
    if spec.command is not None and not all(_encodable(a) for a in spec.command):
        return "command"
    if spec.env and not all(_encodable(k) and _encodable(v) for k, v in spec.env.items()):
        return "env"
    return None


_LOC_HINTS = {
    "gpus": "expected an integer >= 1 or 'auto'",
    "launcher": "expected one of " + ", ".join(LAUNCHERS),
    "resize": "expected one of " + ", ".join(RESIZE_MODES),
    "min_gpus": "expected an integer >= 1",
    "max_gpus": "expected an integer >= 1",
    "batch_size": "expected an integer >= 1",
    "priority": "expected an integer",
    "duration": "expected a number of seconds > 0",
    "adaptive_batch": "expected true or false",
    "epochs": "expected an integer >= 1",
    "deadline": "expected a time in seconds since the epoch, after submission and within 30 days",
    "time_limit": f"expected a number of seconds > 0 and <= {MAX_TIME_LIMIT_S:.0f} (a year)",
}


def one_line_error(e: ValidationError) -> str:
    """Turn a pydantic error into `field: what is allowed, got X` (first error only)."""
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if not isinstance(p, int)) or None
    msg = err["msg"].removeprefix("Value error, ")
    if loc is None:  # raised by the model validator: the message already names the field
        return msg
    head = loc.split(".")[0]
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown field; allowed: {', '.join(JobSpec.model_fields)}"
    if err["type"] == "string_unicode":  # pydantic-core's own check of a constrained string
        return f"{head}: {_SURROGATES}"
    allowed = _LOC_HINTS.get(head, msg if msg[1:2].isupper() else msg[0].lower() + msg[1:])
    got = err.get("input")
    return f"{head}: {allowed}, got {got!r}" if head in _LOC_HINTS else f"{loc}: {allowed}"


@dataclass(slots=True)
class Gpu:
    index: int
    uuid: str = ""
    name: str = "virtual GPU"
    memory_total_mb: int = 0
    memory_used_mb: int = 0
    utilization: float | None = 0.0  # None: not known here (Slurm nodes: no NVML from the server)
    virtual: bool = True
    mig_parent: str | None = None
    #: held by something the scheduler does not run (a Slurm job submitted outside it): not
    #: free for its jobs; says what holds it
    held_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_total_mb": self.memory_total_mb,
            "memory_used_mb": self.memory_used_mb,
            "utilization": self.utilization,
            "virtual": self.virtual,
            "mig_parent": self.mig_parent,
            "held_by": self.held_by,
        }


@dataclass(slots=True)
class Node:
    name: str
    gpus: list[Gpu]
    virtual: bool = True
    address: str | None = None  # how executors reach it (a Docker URL, a hostname)
    healthy: bool = True

    @classmethod
    def virtual_node(cls, name: str, count: int) -> Node:
        gpus = [Gpu(index=i, uuid=f"virtual-{name}-{i}") for i in range(count)]
        return cls(name=name, gpus=gpus, virtual=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "virtual": self.virtual,
            "address": self.address,
            "healthy": self.healthy,
            "gpus": [g.to_dict() for g in self.gpus],
        }


def virtual_cluster(hosts: int, gpus_per_host: int, prefix: str = "node") -> list[Node]:
    """`hosts` virtual nodes of `gpus_per_host` GPUs each (names node0, node1, ...)."""
    return [Node.virtual_node(f"{prefix}{i}", gpus_per_host) for i in range(hosts)]


def parse_cluster(text: str) -> list[Node]:
    """Parse `HxG` (H hosts with G GPUs each) into virtual nodes."""
    try:
        h, g = (int(x) for x in text.lower().split("x"))
        if h < 1 or g < 1:
            raise ValueError
    except ValueError:
        raise SpecError(
            f"cluster: expected HxG with H hosts and G GPUs each (e.g. 4x8), got {text!r}") from None
    return virtual_cluster(h, g)


@dataclass(slots=True, eq=False)
class Job:
    """A job the scheduler knows. Times are seconds (wall clock live, virtual in simulation)."""

    id: int
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.queued
    alloc: Allocation = field(default_factory=dict)
    start_time: float | None = None  # first start
    end_time: float | None = None
    # Service accounting, updated lazily: GPU-seconds attained before `since`, plus the current
    # allocation's size times the time since.
    attained_base: float = 0.0
    run_base: float = 0.0
    since: float = 0.0
    restarts: int = 0  # preemptions + checkpoint-restart resizes (not resizes in place)
    exit_code: int | None = None
    reason: str = ""
    batch_size: int | None = None  # current global batch size (elastic simulation)
    stopping: str | None = None  # 'preempt' | 'cancel' | 'time-limit' while the executor stops it
    extra: dict[str, Any] = field(default_factory=dict)
    #: the allocation the job held last (kept after it ends; equals `alloc` while it has one)
    last_alloc: Allocation = field(default_factory=dict)
    #: GPUs given up by a shrink whose old run has not exited yet (out of the free pool until
    #: the executor confirms the exit)
    releasing: Allocation = field(default_factory=dict)
    #: a finished job's script is kept in the store only (`Engine._shed_script`): its size
    script_bytes: int | None = None

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.alloc.values())

    def attained(self, now: float) -> float:
        """GPU-seconds of service received up to `now`."""
        return self.attained_base + self.size * (now - self.since)

    def run_time(self, now: float) -> float:
        return self.run_base + ((now - self.since) if self.alloc else 0.0)

    def set_alloc(self, alloc: Allocation, now: float) -> None:
        """Change the allocation, closing the service accounting of the old one at `now`."""
        self.attained_base = self.attained(now)
        self.run_base = self.run_time(now)
        self.since = now
        self.alloc = alloc
        if alloc:
            self.last_alloc = alloc

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        t = self.end_time if self.end_time is not None else now
        d = {
            "id": self.id,
            "spec": self.spec.model_dump(mode="json", exclude_none=True),
            "name": self.spec.name,
            "user": self.spec.user,
            "state": self.state.value,
            "submit_time": self.submit_time,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "gpus": self.size,
            "alloc": {k: list(v) for k, v in self.alloc.items()},
            "last_alloc": {k: list(v) for k, v in self.last_alloc.items()},
            "releasing": {k: list(v) for k, v in self.releasing.items()},
            "restarts": self.restarts,
            "exit_code": self.exit_code,
            "reason": self.reason,
        }
        if t is not None:
            d["attained_gpu_s"] = self.attained(t)
            d["run_s"] = self.run_time(t)
        return d


#: what a user who submits `--gpus auto` for one Python process is told (`JobSpec.single_process`)
ONE_PROCESS_NOTE = ("note: this {what} runs as one Python process, so --gpus auto gives it {n} GPU(s); "
                    "add --max-gpus N if it starts its own workers, or use --launcher torchrun")


def one_process_note(spec: JobSpec, what: str = "job") -> str | None:
    """The note for a job `--gpus auto` cannot grow (one process, no `max_gpus`), else None."""
    return ONE_PROCESS_NOTE.format(what=what, n=spec.min_size) if spec.capped_to_one_process else None
