"""torch.distributed on gloo: all-reduce rank+1 over the world and print the world size and sum."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} WORLD_SIZE={os.environ['WORLD_SIZE']} world={world} allreduce_sum={t.item():g} "
      f"cvd={os.environ.get('CUDA_VISIBLE_DEVICES')} "
      f"agent_store={os.environ.get('TORCHELASTIC_USE_AGENT_STORE')}", flush=True)
dist.destroy_process_group()
