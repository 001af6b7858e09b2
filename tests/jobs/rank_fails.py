"""A torchrun worker that needs no torch: the last rank raises, the others sleep (only the
executor can end them: a failing worker must stop the job's other workers)."""

import os
import time

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
print(f"rank {rank} of {world} up", flush=True)
if rank == world - 1:
    time.sleep(1)  # let the others print
    raise RuntimeError(f"rank {rank} fails on purpose")
time.sleep(120)
