"""2-process DDP on gloo: train a few steps on rank-dependent data, print a parameter checksum
per rank (DDP keeps them equal)."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)  # different data on each rank
for _ in range(5):
    x = torch.randn(32, 16, generator=gen)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
checksum = sum(p.detach().double().sum().item() for p in model.parameters())
print(f"rank {rank}/{world} local_rank {os.environ['LOCAL_RANK']} "
      f"cvd={os.environ.get('CUDA_VISIBLE_DEVICES')} checksum={checksum:.12f}", flush=True)
dist.destroy_process_group()
