"""Job-side helper for checkpoint-restart resizing (imported by training scripts; torch only).

    from schedulearn import elastic
    ckpt = elastic.Checkpointer(model=model, optimizer=opt, every=50)
    start = ckpt.restore()                 # completed steps so far (0 on a fresh start)
    for step in range(start, total_steps):
        train_one_step()
        ckpt.step(step + 1)                # saves every `every` steps; on SIGTERM saves and exits
    ckpt.save()

A SIGTERM (the scheduler stopping or resizing the job) does not interrupt a step: the handler
only raises a flag, `step()` notices it after the step completes, rank 0 saves that step and
every rank exits with `EXIT_CHECKPOINTED` (143, as a process ended by SIGTERM would). In a
distributed job the ranks agree on the flag with a one-element all-reduce at each `step()`, so
they all stop after the same step (a rank that got the signal later does not start another step
that its peers will never join). Rank 0 writes, atomically; every rank restores.

`report(step_time=..., batch_size=...)` appends one JSON line to `metrics.jsonl` in the job
directory: the hook goodput-aware policies read (fields: `schedulearn.estimates.reports`).

`Monitor` measures what goodput-aware scheduling needs, once per optimiser step, and reports it:
step time, compute time, the gradient noise scale (statistical efficiency) and progress; it can
also adapt the global batch size to the GPUs the job has (see its docstring).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .jobfiles import CHECKPOINT_DIR, METRICS_FILE, REPORT_FIELDS

#: The exit code of a job that saved its checkpoint on SIGTERM (128 + SIGTERM).
EXIT_CHECKPOINTED = 143
CHECKPOINT_NAME = "latest.pt"


def job_dir() -> Path:
    """`SCHEDULEARN_JOB_DIR`, or the working directory outside the scheduler."""
    return Path(os.environ.get("SCHEDULEARN_JOB_DIR") or os.getcwd())


def restart_count() -> int:
    return int(os.environ.get("SCHEDULEARN_RESTART_COUNT", "0"))


def _dist():
    """(rank, world size, all-reduce-max of an int) for torch.distributed, Horovod, or neither."""
    torch_dist = sys.modules.get("torch.distributed")
    if torch_dist is not None and torch_dist.is_available() and torch_dist.is_initialized():
        import torch

        def agree(flag: int) -> int:
            t = torch.tensor([flag], dtype=torch.int32, device=_collective_device(torch_dist))
            torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
            return int(t.item())

        return torch_dist.get_rank(), torch_dist.get_world_size(), agree, torch_dist.barrier
    hvd = sys.modules.get("horovod.torch")
    if hvd is not None:
        try:
            rank, size = hvd.rank(), hvd.size()
        except ValueError:  # horovod imported but not initialised
            rank = None
        if rank is not None:
            import torch

            def agree(flag: int) -> int:
                t = torch.tensor([flag], dtype=torch.int32)
                t = hvd.allreduce(t, op=hvd.Max, name="schedulearn.stop")
                return int(t.item())

            def barrier() -> None:
                hvd.allreduce(torch.tensor([0]), name="schedulearn.barrier")

            return rank, size, agree, barrier
    return 0, 1, (lambda flag: flag), (lambda: None)


def _collective_device(torch_dist: Any) -> str:
    """Where a tensor for a torch.distributed collective must live: NCCL reduces only CUDA
    tensors (a CPU tensor fails: no backend for device type cpu)."""
    return "cuda" if torch_dist.get_backend() == "nccl" else "cpu"


def _rank_from_env() -> int:
    for var in ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


class Checkpointer:
    """Saves and restores `model` (unwrapped from DDP), `optimizer` and the step count."""

    def __init__(self, model: Any = None, optimizer: Any = None, every: int = 100,
                 directory: str | Path | None = None, extra: dict[str, Any] | None = None):
        if every < 1:
            raise ValueError(f"every: expected a number of steps >= 1, got {every}")
        self.model = getattr(model, "module", model)
        self.optimizer = optimizer
        self.every = every
        self.dir = Path(directory) if directory else job_dir() / CHECKPOINT_DIR
        self.path = self.dir / CHECKPOINT_NAME
        self.extra = extra if extra is not None else {}  # other state the job wants kept (picklable)
        self.steps = 0
        self.saved_step: int | None = None
        self._stop = False
        self._in_loop = False
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        if not self._in_loop:  # nothing trained yet: nothing to save
            sys.exit(EXIT_CHECKPOINTED)
        self._stop = True

    @property
    def stopping(self) -> bool:
        return self._stop

    def restore(self) -> int:
        """Load the last checkpoint if there is one; return the number of completed steps."""
        import torch

        if self.path.exists():
            state = torch.load(self.path, map_location="cpu", weights_only=False)
            if self.model is not None:
                self.model.load_state_dict(state["model"])
            if self.optimizer is not None and state.get("optimizer") is not None:
                self.optimizer.load_state_dict(state["optimizer"])
            self.extra.update(state.get("extra", {}))
            self.steps = self.saved_step = int(state["step"])
        self._in_loop = True
        return self.steps

    def save(self, step: int | None = None) -> None:
        """Write the checkpoint (rank 0 only; atomically: a reader never sees half a file)."""
        import torch

        step = self.steps if step is None else step
        rank, _, _, _ = _dist()
        if rank == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            state = {
                "step": step,
                "model": self.model.state_dict() if self.model is not None else None,
                "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
                "extra": self.extra,
                "time": time.time(),
            }
            tmp = self.path.with_suffix(".tmp")
            torch.save(state, tmp)
            os.replace(tmp, self.path)
        self.saved_step = step

    def step(self, step: int | None = None) -> None:
        """Call after each completed step with the number of completed steps (or nothing, to
        count here). Saves every `every` steps; after a SIGTERM, saves and exits."""
        self._in_loop = True
        self.steps = self.steps + 1 if step is None else step
        _, world, agree, barrier = _dist()
        stop = agree(int(self._stop)) if world > 1 else int(self._stop)
        if stop:
            if self.saved_step != self.steps:
                self.save()
            barrier()  # nobody leaves before rank 0 has written
            sys.stdout.flush()
            sys.exit(EXIT_CHECKPOINTED)
        if self.steps % self.every == 0:
            self.save()


def report(step_time: float | None = None, batch_size: int | None = None, **extra: Any) -> None:
    """Append `{"t", "step_time", "batch_size", "num_gpus", "num_nodes", "restart", ...}` to the
    job's `metrics.jsonl` (rank 0 only). Any field of `schedulearn.estimates.reports` may be
    given, e.g. `report(progress=0.4)` alone for a job that only knows how far it is; the
    placement and run number are filled in from the launcher's environment unless given."""
    if _rank() != 0:
        return
    rec: dict[str, Any] = {"t": time.time()}
    world, hvd = _world(), _live_horovod()
    nodes = max(-(-world // max(int(hvd.local_size()), 1)), 1) if hvd is not None else _nodes_from_env(world)
    rec.update({"num_gpus": world, "num_nodes": nodes, "restart": restart_count()})
    given = {**{k: v for k, v in (("step_time", step_time), ("batch_size", batch_size)) if v is not None},
             **extra}  # what the caller says wins (a loop that knows its own placement better)
    for key, value in given.items():
        if value is None:  # not given (`report(progress=None)` where the loop does not know yet)
            continue
        kind = int if key == "batch_size" else float if key in REPORT_FIELDS else None
        plain = _plain(value, kind)
        if isinstance(plain, float) and not math.isfinite(plain):  # JSON has no NaN: written, it
            _say_once(f"{key}/finite", f"{key}: expected a finite number, got {plain}; left out of "
                                       "the report")  # was a token a strict reader refuses
        elif plain is _UNWRITABLE:
            what = "a number" if kind else "a number or text"
            _say_once(f"{key}/type", f"{key}: expected {what}, got {type(value).__name__} {_short(value)}; "
                                     f"left out of the report")
        else:
            rec[key] = plain
    _say_what_is_ignored({k: v for k, v in extra.items() if k in rec})
    with open(job_dir() / METRICS_FILE, "a") as f:
        f.write(json.dumps(rec) + "\n")


_UNWRITABLE = object()


def _plain(value: Any, kind: type | None = None) -> Any:
    """`value` as a report can hold it: a torch or numpy scalar (a 0-d tensor, `loss` without its
    `.item()`, `np.float32`) as its Python number, `kind` where given (a field the scheduler
    reads: a number, an int left one, never a bool); `_UNWRITABLE` where it has none. Such a value
    made `report` raise (`Object of type Tensor is not JSON serializable`) and
    stop the training run it was only meant to describe."""
    if kind is None:
        try:
            json.dumps(value)
            return value
        except (TypeError, ValueError):
            pass
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):  # (a tensor of several elements)
            return _UNWRITABLE
    if kind is None and isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bool):  # a field the scheduler reads is a number (True made a batch of 1)
        return _UNWRITABLE
    if kind is float and isinstance(value, int):
        return value  # (a count stays one: `num_gpus` 4, not 4.0)
    try:
        return (kind or float)(value)
    except (TypeError, ValueError, OverflowError):
        return _UNWRITABLE


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_said: set[str] = set()


def _say_what_is_ignored(extra: dict[str, Any]) -> None:
    """A field the scheduler does not read (a typo: `progess=0.5` left the job without a progress
    bar, without a word), or a progress it reads otherwise than meant, is said once per field (a
    progress once per reading: 2 and then -0.5 are two slips) on stderr (the job's log). Never
    raised: a slip in a report must not stop a training run."""
    for key, value in extra.items():
        if key not in REPORT_FIELDS:
            note = (f"{key!r} is not a field the scheduler reads (it reads: "
                    f"{', '.join(sorted(REPORT_FIELDS))}); written, and ignored")
        elif key == "progress" and (read := _progress_read(value)) is not None:
            note = f"progress: expected a fraction from 0 to 1, got {value!r} (read as {read})"
            key = f"progress/{read}"  # (2 said, then -0.5 is another slip)
        else:
            continue
        _say_once(key, note)


def _say_once(key: str, note: str) -> None:
    """`note` on stderr (the job's log), once per `key`: a report field and what is wrong with it."""
    if key not in _said:
        _said.add(key)
        print(f"schedulearn.elastic.report: {note}", file=sys.stderr, flush=True)


def _progress_read(value: Any) -> str | None:
    """How the scheduler reads a progress that is not a fraction from 0 to 1 (None: it is one)."""
    try:
        p = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        p = math.nan
    if not math.isfinite(p):
        return "nothing"
    return "1: done" if p > 1 else "0" if p < 0 else None


def _live_horovod() -> Any:
    """`horovod.torch` where the program initialised it (under Horovod Elastic its rank and size
    change with a resize in place, the environment's `HOROVOD_*` do not)."""
    hvd = sys.modules.get("horovod.torch")
    if hvd is None:
        return None
    try:
        hvd.size()
    except ValueError:  # imported, not initialised
        return None
    return hvd


def _rank() -> int:
    hvd = _live_horovod()
    return int(hvd.rank()) if hvd is not None else _rank_from_env()


def _world() -> int:
    hvd = _live_horovod()
    return int(hvd.size()) if hvd is not None else _world_from_env()


def _world_from_env() -> int:
    for var in ("WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if var in os.environ:
            return int(os.environ[var])
    return int(os.environ.get("SCHEDULEARN_NUM_GPUS", "1"))


def _nodes_from_env(world: int) -> int:
    if os.environ.get("SCHEDULEARN_NUM_NODES", "").isdigit():  # torchrun resized in place: one
        return max(int(os.environ["SCHEDULEARN_NUM_NODES"]), 1)  # agent per GPU on one host
    for var in ("LOCAL_WORLD_SIZE", "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        if var in os.environ:
            local = max(int(os.environ[var]), 1)
            return max(-(-world // local), 1)
    return 1


#: how the learning rate follows the batch size B (B0: the initial batch size)
LR_SCALING = ("adascale", "sqrt", "linear", "none")
#: an adaptive job changes its batch size where the new one promises this much more goodput than
#: the one it has, by the estimate (AdaptDL's threshold): seen live, a job alone on one GPU
#: switched 38 times in 1,826 steps, to its initial batch of 32 and back to 110-190 nine times
SWITCH_GAIN = 1.05


class Monitor:
    """Per-step measurements for goodput-aware scheduling (Pollux / AdaptDL), reported to the
    scheduler; optionally adapts the global batch size (AdaptiveBatch-style).

        mon = elastic.Monitor(model, opt, batch_size=64, max_batch_size=1024, epochs=10,
                              adaptive=True, checkpointer=ckpt)
        while mon.progress < 1:
            for _ in range(mon.accum_steps + 1):       # micro-steps of one optimiser step
                x, y = next_batch(mon.micro_batch)      # this process's micro-batch
                mon.backward(loss_fn(model(x), y))      # mean loss of the micro-batch
            mon.step(epoch=epochs_done)                  # optimiser step, measure, report

    `model` is the module whose parameters train (plain, `DistributedDataParallel`, or with a
    Horovod `DistributedOptimizer`); `backward` scales the loss for accumulation and skips the
    gradient synchronisation of all but the last micro-step (DDP's `no_sync`).

    What it measures, per step: the step time (between consecutive `step()` calls), the time of a
    micro-step without synchronisation (accumulating, or on one GPU), and the gradient noise:
    with N micro-batch gradients g_i of m samples each (every replica's, every micro-step's) and
    their mean G, E|g_i|^2 = |grad|^2 + S/m and E|G|^2 = |grad|^2 + S/(N m), which give the
    squared norm of the true gradient |grad|^2 (`grad_sqr`) and the per-sample variance S
    (`grad_var` = S / B0, the variance at the initial batch size) — unbiased, then smoothed (an
    exponential moving average, `smoothing`). With a single gradient per step (one GPU, no
    accumulation) the previous step's gradient is the second one. The local |g_i|^2 come from
    tensor hooks (before any all-reduce); their mean over replicas takes one small all-reduce a
    step, which also carries rank 0's word that a report is due (all ranks report and adapt
    together: their collectives must match).

    Reports (`report`, rank 0) go out every `report_every` seconds, and at the step that
    completes the work (progress 1): mean step time, compute time, gradient statistics, batch
    bounds, progress (`step(progress=)`, `step(epoch=)` with `epochs`, or `total_steps`).

    `total_steps` counts steps at the initial batch size: a step at a larger batch counts its gain
    (var + sqr)/(var/s + sqr), s = B/B0, at the statistics it ran with — AdaScale's
    scale-invariant iterations (Johnson et al., 2020), the statistical progress the scheduler's
    estimates and its simulated jobs count (`scale_invariant_steps`; the same as `steps` while
    the batch stays at its initial size). So an adaptive job that declares `total_steps` runs
    `while mon.progress < 1`, not a fixed count of optimiser steps (one that steps on past the
    work is told so once on stderr): a larger batch does that work in fewer steps. (Counted in
    optimiser steps, a job grown to 4 GPUs and a batch 8x its first read as slower than on 1 —
    seen live: its time left went from 85 s to 7 min — while its gradient statistics said each
    step did the work of 6.9.)

    `adaptive=True`: at each report the job refits the estimator (`schedulearn.estimates`, the
    scheduler's own) on its reports (under the scheduler, those of its earlier runs too: the
    job directory's `metrics.jsonl`) and takes the global batch size in [batch_size,
    max_batch_size] with the most goodput on its current GPUs where that is `SWITCH_GAIN` more
    than the batch it has (rank 0 decides, all ranks follow);
    the learning rate follows `lr_scaling`: `adascale` (x the measured gain (var+sqr)/(var/s+sqr),
    s = B/B0, at every step: AdaScale, as Pollux), `sqrt` (x sqrt(B/B0)), `linear` (x B/B0) or `none`. With a
    `Checkpointer`, the batch size, step count and statistics survive restarts.
    """

    def __init__(self, model: Any, optimizer: Any, batch_size: int, max_batch_size: int | None = None,
                 max_local_bsz: int | None = None, *, adaptive: bool = False, lr_scaling: str = "adascale",
                 epochs: int | None = None, total_steps: int | None = None, report_every: float = 10.0,
                 smoothing: float = 0.9, checkpointer: Checkpointer | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size}")
        if max_batch_size is not None and max_batch_size < batch_size:
            raise ValueError(f"max_batch_size: expected >= batch_size ({batch_size}), got {max_batch_size}")
        if lr_scaling not in LR_SCALING:
            raise ValueError(f"lr_scaling: expected one of {', '.join(LR_SCALING)}, got {lr_scaling!r}")
        if not 0 <= smoothing < 1:
            raise ValueError(f"smoothing: expected a number in [0, 1), got {smoothing}")
        self.model, self.optimizer = model, optimizer
        self.init_batch = int(batch_size)
        self.max_batch = int(max_batch_size or batch_size)
        self.max_local = int(max_local_bsz or self.max_batch)
        self.adaptive, self.lr_scaling = adaptive, lr_scaling
        self.epochs, self.total_steps = epochs, total_steps
        self.report_every, self.smoothing = report_every, smoothing
        self.rank, self.world, _, _ = _dist()
        self.nodes = _nodes_from_env(self.world)
        self._hvd = hasattr(optimizer, "synchronize") and hasattr(optimizer, "skip_synchronize")
        self.state: dict[str, Any] = {"batch_size": self.init_batch, "steps": 0, "sqr": None, "var": None,
                                      "bias": 0.0, "progress": 0.0,
                                      "base_lr": [g["lr"] for g in optimizer.param_groups]}
        self.ckpt = checkpointer
        if checkpointer is not None:  # restored: the batch size, statistics and the unscaled rates
            kept = checkpointer.extra.get("schedulearn.monitor")
            if isinstance(kept, dict):
                self.state.update(kept)
            checkpointer.extra["schedulearn.monitor"] = self.state
        # steps' worth at the initial batch (`scale_invariant_steps`); a checkpoint written before
        # they were counted resumes from its optimiser steps, the same at the initial batch
        self.state.setdefault("si_steps", float(self.state["steps"]))
        self._base_lr = list(self.state["base_lr"])
        self._params = [p for p in _unwrap(model).parameters() if p.requires_grad]
        self._local_sq: list = []  # |g_i|^2 parts of this step's micro-steps (this replica)
        self._micro = 0
        self._prev: list | None = None
        self._hooks = [p.register_hook(self._on_grad) for p in self._params]
        self._mark = self._last_report = None  # end of the last micro-step or step
        self._micro_times: list[float] = []
        self._times: list[float] = []
        self._measure_started: float | None = None
        self._est_job = self._estimator() if adaptive and self.rank == 0 else None
        self.batch_size = int(self.state["batch_size"])
        # Horovod Elastic: the ranks agree on the state at the first use (`_follow`)
        self._hvd_elastic = "horovod.torch" in sys.modules and os.environ.get("HOROVOD_ELASTIC") == "1"
        self._synced: tuple[int, int] | None = None
        self._said_done = False  # that the loop went on past the work of `total_steps`
        self._configure()

    # -- what the training loop reads ------------------------------------------------------
    @property
    def progress(self) -> float:
        return float(self.state.get("progress") or 0.0)

    @property
    def steps(self) -> int:
        """Optimiser steps taken (across restarts, with a `Checkpointer`)."""
        return int(self.state["steps"])

    @property
    def scale_invariant_steps(self) -> float:
        """The steps taken, each counted at its gain: how many steps at the initial batch size
        they are worth (AdaScale's scale-invariant iterations; `steps` while the batch stays at
        its initial size). What `total_steps` counts."""
        return float(self.state["si_steps"])

    @property
    def accum_steps(self) -> int:
        """Micro-steps to accumulate before each optimiser step, beyond the first."""
        self._follow()
        return self._accum

    @property
    def micro_batch(self) -> int:
        """Samples of one micro-step on this process."""
        self._follow()
        return self._micro_batch

    def _follow(self) -> None:
        """Under Horovod Elastic a resize in place changes the world under running processes: at
        the first use of the Monitor after one, every rank (a worker that joined too) takes rank
        0's state — batch size, steps, statistics — and the new world's share of the batch (each
        had kept its own: seen live, rank 0 went on with the whole batch of 16 while the worker
        added took 8, and the job hung at its next step on an all-reduce rank 0 never joined)."""
        if not self._hvd_elastic:
            return
        hvd = sys.modules["horovod.torch"]
        now = (int(hvd.rank()), int(hvd.size()))
        if now == self._synced:
            return
        self.state = hvd.broadcast_object(self.state, root_rank=0, name="schedulearn.monitor")
        if self.ckpt is not None:
            self.ckpt.extra["schedulearn.monitor"] = self.state
        self.rank, self.world = now
        self.nodes = max(-(-self.world // max(int(hvd.local_size()), 1)), 1)
        self.batch_size = int(self.state["batch_size"])
        self._base_lr = list(self.state["base_lr"])
        self._local_sq, self._micro, self._prev = [], 0, None
        self._micro_times, self._times = [], []
        self._mark = self._measure_started = None
        if self.adaptive and self.rank == 0 and self._est_job is None:
            self._est_job = self._estimator()  # (a new rank 0)
        self._synced = now
        self._configure()

    def _configure(self) -> None:
        local = -(-self.batch_size // self.world)
        a = -(-local // self.max_local) - 1
        if self.world == 1 and self.batch_size > self.init_batch:
            a = max(a, 1)  # two micro-batches: the gradient noise needs a pair
        self._accum = max(a, 0)
        self._micro_batch = max(-(-local // (self._accum + 1)), 1)
        passes = getattr(self.optimizer, "backward_passes_per_step", None)
        if self._hvd and passes is not None and passes != self._accum + 1:
            # Horovod's optimizer all-reduces once every that many backward passes (and refuses
            # more: seen live, an adaptive job on one GPU under Horovod Elastic accumulating two
            # micro-batches failed with "Gradients were computed more than
            # backward_passes_per_step times")
            self.optimizer.set_backward_passes_per_step(self._accum + 1)
        self._apply_lr()

    def _gain(self, batch: int) -> float:
        sqr, var = self.state.get("sqr"), self.state.get("var")
        if not sqr or var is None:
            return 1.0
        s = batch / self.init_batch
        return (var + sqr) / (var / s + sqr)

    def _apply_lr(self) -> None:
        ratio = self.batch_size / self.init_batch
        factor = {"adascale": self._gain(self.batch_size), "sqrt": math.sqrt(ratio), "linear": ratio,
                  "none": 1.0}[self.lr_scaling]
        self.lr_factor = factor
        for g, lr in zip(self.optimizer.param_groups, self._base_lr, strict=True):
            g["lr"] = lr * factor

    # -- the loop --------------------------------------------------------------------------
    def _on_grad(self, grad: Any) -> None:
        self._local_sq.append(grad.detach().double().pow(2).sum())  # summed once per step (no sync here)

    def backward(self, loss: Any) -> None:
        """Backward of one micro-batch's mean loss; the gradient is synchronised on the last."""
        self._follow()
        last = self._micro >= self._accum
        scaled = loss / (self._accum + 1)
        no_sync = getattr(self.model, "no_sync", None)
        if not last and no_sync is not None:
            with no_sync():
                scaled.backward()
        else:
            scaled.backward()
        self._micro += 1
        now = time.perf_counter()
        if self._mark is not None and (not last or self.world == 1):
            # a whole micro-step (data, forward, backward) that did not synchronise
            self._micro_times.append(now - self._mark)
        self._mark = now

    def step(self, progress: float | None = None, epoch: float | None = None) -> None:
        """The optimiser step (and zero_grad), then the measurements; `progress` (0..1) or
        `epoch` (epochs done, with `epochs`) say how far the job is, else `total_steps` does."""
        import torch

        if self._micro == 0:
            raise RuntimeError("Monitor.step: call backward() for each micro-batch first")
        if self._hvd:
            self.optimizer.synchronize()
        big = sum(float(p.grad.detach().double().pow(2).sum()) for p in self._params if p.grad is not None)
        flat = None
        n_local = self._micro
        parts = torch.stack(self._local_sq).sum() if self._local_sq else torch.zeros(())
        local_sq = float(parts) * (self._accum + 1) ** 2  # undo the 1/(a+1) loss scaling
        if self.world == 1 and n_local == 1:  # one gradient a step: pair it with the previous one
            flat = torch.cat([p.grad.detach().double().flatten() for p in self._params if p.grad is not None])
        if self._hvd:
            with self.optimizer.skip_synchronize():
                self.optimizer.step()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad()
        now = time.perf_counter()
        st = self.state
        st["steps"] += 1
        # the step's worth in steps at the initial batch size (AdaScale's scale-invariant
        # iterations): its gain at the statistics it ran with, 1 at the initial batch
        st["si_steps"] += self._gain(self.batch_size)
        if progress is None and epoch is not None and self.epochs:
            progress = epoch / self.epochs
        counted = progress is None and bool(self.total_steps)  # progress: the steps counted
        if counted:
            if st["progress"] >= 1 and self.rank == 0 and not self._said_done:
                self._said_done = True  # a loop of `total_steps` optimiser steps, most likely
                print(f"schedulearn.elastic.Monitor: the work of total_steps={self.total_steps} is done "
                      f"(in {st['steps'] - 1} steps: at a larger batch a step counts its gain) but the "
                      "loop goes on; run it `while mon.progress < 1`", file=sys.stderr, flush=True)
            progress = st["si_steps"] / self.total_steps
        if progress is not None:
            st["progress"] = min(max(float(progress), 0.0), 1.0)
        # the step that completes the work is reported at once: the run's last stretch reaches
        # the scheduler (and what later jobs of its kind learn from) before the job exits
        final = st["progress"] >= 1 and not st.get("final_reported")
        due = final or (self._last_report is not None and now - self._last_report >= self.report_every)
        # one all-reduce: the replicas' gradient norms, and rank 0's word that a report is due (so
        # every rank reports, and adapts, at the same step: their collectives must match)
        # and rank 0's count of scale-invariant steps, which every rank takes: a loop `while
        # mon.progress < 1` ends at the same step on all ranks, whatever their floating point
        small_sum, count, due, si = self._sum_over_replicas(local_sq, n_local, float(due and self.rank == 0),
                                                            st["si_steps"] if self.rank == 0 else 0.0)
        if self.world > 1:
            st["si_steps"] = si
            if counted:
                st["progress"] = min(max(si / self.total_steps, 0.0), 1.0)
        self._noise(small_sum / count, big, count, flat)
        if self.lr_scaling == "adascale" and self.batch_size != self.init_batch:
            self._apply_lr()  # AdaScale's gain follows the statistics at every step, not only at a resize
        self._local_sq, self._micro = [], 0
        if self._measure_started is not None:
            self._times.append(now - self._measure_started)
        if due:
            self._report(final=final)
            self._last_report = now
        elif self._last_report is None:
            self._last_report = now
        self._measure_started = self._mark = time.perf_counter()
        if self.ckpt is not None:
            self.ckpt.step()

    def _sum_over_replicas(self, local_sq: float, n: int, due: float,
                           si: float) -> tuple[float, int, bool, float]:
        if self.world == 1:
            return local_sq, n, due > 0, si
        import torch

        t = torch.tensor([local_sq, float(n), due, si], dtype=torch.float64)
        torch_dist = sys.modules.get("torch.distributed")
        if torch_dist is not None and torch_dist.is_available() and torch_dist.is_initialized():
            t = t.to(_collective_device(torch_dist))
            torch_dist.all_reduce(t)
        else:
            hvd = sys.modules["horovod.torch"]
            t = hvd.allreduce(t, op=hvd.Sum, name="schedulearn.gns")
        return float(t[0]), int(round(float(t[1]))), float(t[2]) > 0, float(t[3])

    def _noise(self, small: float, big: float, n: int, flat: Any) -> None:
        """Fold one step's |g_i|^2 mean (`small`, micro-batches of `micro_batch` samples, n of
        them) and |G|^2 (`big`) into the smoothed statistics."""
        m = float(self._micro_batch)
        if n < 2:
            if flat is None or self._prev is None or self._prev.shape != flat.shape:
                self._prev = flat
                return
            small = 0.5 * (float(flat.pow(2).sum()) + float(self._prev.pow(2).sum()))
            big = float(((flat + self._prev) / 2).pow(2).sum())
            self._prev, n, m = flat, 2, float(self.batch_size)
        var = (small - big) / (1.0 / m - 1.0 / (n * m))  # per-sample variance S
        sqr = big - var / (n * m)
        st, k = self.state, self.smoothing
        st["bias"] = k * st["bias"] + (1 - k)
        st["sqr_ema"] = k * st.get("sqr_ema", 0.0) + (1 - k) * sqr
        st["var_ema"] = k * st.get("var_ema", 0.0) + (1 - k) * var
        st["sqr"] = max(st["sqr_ema"] / st["bias"], 1e-30)
        st["var"] = max(st["var_ema"] / st["bias"], 0.0) / self.init_batch

    def _report(self, final: bool = False) -> None:
        st = self.state
        rec: dict[str, Any] = {"t": time.time(), "batch_size": self.batch_size,
                               "accum_steps": self._accum, "init_batch_size": self.init_batch,
                               "max_batch_size": self.max_batch, "max_local_bsz": self.max_local,
                               "progress": st["progress"], "step": st["steps"]}
        if self._times:
            rec["step_time"] = sum(self._times) / len(self._times)
            rec["timed_steps"] = len(self._times)
        if self._micro_times:
            rec["compute_time"] = sum(self._micro_times) / len(self._micro_times)
        if st.get("sqr") is not None:
            rec["grad_sqr"], rec["grad_var"] = st["sqr"], st["var"]
        if self.rank == 0 and ("step_time" in rec or final):
            report(**rec)
        if final:
            st["final_reported"] = True
        if self.adaptive and "step_time" in rec:
            self._adapt(rec)
        self._times, self._micro_times = [], []

    def _estimator(self) -> Any:
        """The job as the estimator knows it, for rank 0's batch-size choice: under the scheduler
        seeded with the reports the job wrote before this process started (its earlier runs; for
        a torchrun job resized in place, this run's too, its workers restarted). Fed only its
        own first reports at a new size, a restarted worker fitted its step time to two of them
        and picked its batch from their noise (seen live: 4 GPUs, batch 134 then 143, then 16 —
        its initial size, under a third of the goodput — then 204; its earlier reports say 204)."""
        from .estimates import ingest, load_reports
        from .model import Job, JobSpec

        spec = JobSpec(command=["monitor"], batch_size=self.init_batch, adaptive_batch=True)
        job = Job(id=0, spec=spec, submit_time=0.0)
        if os.environ.get("SCHEDULEARN_JOB_DIR"):  # outside the scheduler a file there is not this job's
            ingest(job, load_reports(job_dir() / METRICS_FILE))
        return job

    def _adapt(self, rec: dict[str, Any]) -> None:
        """Rank 0 picks the batch size with the most goodput on this placement — where that is
        `SWITCH_GAIN` more than the one it has; all follow."""
        choice = 0
        if self.rank == 0:
            from .estimates import estimate, ingest, packed_shape

            ingest(self._est_job, [{**rec, "num_gpus": self.world,
                                    "num_nodes": self.nodes, "restart": restart_count()}])
            shape = packed_shape(self.world, -(-self.world // self.nodes))
            self._est_job.batch_size = None
            est = estimate(self._est_job, 0.0)
            choice = min(max(int(est.best_batch(shape) or self.batch_size), self.init_batch), self.max_batch)
            if choice != self.batch_size and est.goodput(shape, choice) < SWITCH_GAIN * est.goodput(
                    shape, self.batch_size):
                choice = self.batch_size  # within the fit's noise of the batch size it has
        if self.world > 1:
            _, _, agree, _ = _dist()
            choice = agree(choice)
        if choice and choice != self.batch_size:
            self.batch_size = self.state["batch_size"] = choice
            self._prev = None
            self._configure()

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)
