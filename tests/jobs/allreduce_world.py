"""torch.distributed on gloo: all-reduce rank+1 and print the world size and the sum.

`fail-last`: afterwards the last rank raises and the others sleep (not in a collective), so only
the executor can end them (a failing worker must stop the job's other workers)."""

import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} WORLD_SIZE={os.environ['WORLD_SIZE']} world={world} allreduce_sum={t.item():g} "
      f"cvd={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
if sys.argv[1:] == ["fail-last"]:
    if rank == world - 1:
        raise RuntimeError(f"rank {rank} fails on purpose")
    time.sleep(120)
dist.destroy_process_group()
