"""Schedulearn: schedule deep-learning training jobs on shared GPUs (framework-free core)."""

__version__ = "0.1.0"

from .engine import Engine, JobFinished, JobNotFound, RealClock  # noqa: E402
from .model import Job, JobSpec, JobState, Launcher, Node, SpecError, virtual_cluster  # noqa: E402

__all__ = [
    "Engine", "Job", "JobFinished", "JobNotFound", "JobSpec", "JobState", "Launcher", "Node",
    "RealClock", "SpecError", "__version__", "virtual_cluster",
]
