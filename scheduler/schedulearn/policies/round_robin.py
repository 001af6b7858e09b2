"""Round Robin (thesis): FIFO order, but each placement starts from the next host in turn,
spreading consecutive jobs over the hosts instead of packing the first ones."""

from ..model import Allocation, Job
from ..placement import FreePool
from .fifo import Fifo


class RoundRobin(Fifo):
    name = "round-robin"
    description = "FIFO order; each new job's placement starts from the next host in turn."

    def __init__(self) -> None:
        self.next_host = 0

    def place(self, job: Job, n: int, pool: FreePool) -> Allocation | None:
        if not pool.order:
            return None
        alloc = pool.from_host(n, self.next_host % len(pool.order))
        if alloc is not None:
            self.next_host = (self.next_host + 1) % len(pool.order)
        return alloc
