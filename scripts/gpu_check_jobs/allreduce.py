"""gpu-check job under torchrun: every rank all-reduces rank+1 on its own GPU (NCCL), or on the
CPU (gloo) without GPU_CHECK_CUDA=1; rank 0 prints `GPU_CHECK {...}` with the world and the sum."""

import json
import os

import torch
import torch.distributed as dist

CUDA = os.environ.get("GPU_CHECK_CUDA") == "1"


def main() -> None:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if CUDA:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if CUDA else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local) if CUDA else torch.device("cpu")
    t = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(t)
    name = torch.cuda.get_device_name(device) if CUDA else "cpu"
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "")) if CUDA else ""
    every: list = [None] * world
    dist.all_gather_object(every, uuid or f"cpu-{rank}")  # which device each rank used
    if rank == 0:
        print("GPU_CHECK " + json.dumps({
            "world": world, "sum": t.item(), "backend": dist.get_backend(), "name": name,
            "devices": every,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
