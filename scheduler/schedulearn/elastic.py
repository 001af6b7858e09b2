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
directory: the hook goodput-aware policies read.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .jobfiles import CHECKPOINT_DIR, METRICS_FILE

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
            backend = torch_dist.get_backend()
            dev = "cuda" if backend == "nccl" else "cpu"
            t = torch.tensor([flag], dtype=torch.int32, device=dev)
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


def report(step_time: float, batch_size: int, **extra: Any) -> None:
    """Append `{"t", "step_time", "batch_size", "num_gpus", "restart", ...}` to the job's
    `metrics.jsonl` (rank 0 only)."""
    if _rank_from_env() != 0:
        return
    rec = {"t": time.time(), "step_time": float(step_time), "batch_size": int(batch_size),
           "num_gpus": int(os.environ.get("SCHEDULEARN_NUM_GPUS", "1")), "restart": restart_count(), **extra}
    with open(job_dir() / METRICS_FILE, "a") as f:
        f.write(json.dumps(rec) + "\n")
