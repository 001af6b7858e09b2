from .base import Executor, ExecutorError

__all__ = ["Executor", "ExecutorError"]
