"""gpu-check job: deterministic training with `schedulearn.elastic.Checkpointer`.

Full-batch least squares in float64 (a 256x256 matmul per step keeps the GPU busy) with SGD and
momentum; each rank takes a contiguous slice of the batch and the gradients are summed, so the
result does not depend on the world size. On CUDA with GPU_CHECK_CUDA=1 (NCCL under torchrun),
else CPU (gloo); without torchrun one process trains alone. Rank 0 prints
`resume <step> gpus <g> world <w> restart <r> device <name>` at start, `step <n> gpus <g> world <w>
restart <r>` after each step (g: the GPUs the scheduler gave the job, w: its processes) and
writes `final.json` (the weights) at the end.
GPU_CHECK_CKPT_DIR, when set, is the checkpoint folder (kept across separate jobs). A fresh start
(nothing to resume) stops after GPU_CHECK_HOLD_AT steps (default 3) and waits for the scheduler's
SIGTERM, so the restart always falls in the middle of the training, however fast it runs.
"""

import json
import os
import time

import torch
from schedulearn import elastic

STEPS = int(os.environ.get("TRAIN_STEPS", "30"))
SLEEP = float(os.environ.get("STEP_SLEEP", "0.1"))
HOLD_AT = int(os.environ.get("GPU_CHECK_HOLD_AT", "3"))
CUDA = os.environ.get("GPU_CHECK_CUDA") == "1"
N, D = 256, 256


def data():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N, D, generator=g, dtype=torch.float64) / D**0.5
    w = torch.randn(D, 1, generator=g, dtype=torch.float64)
    return x, x @ w + 0.01 * torch.randn(N, 1, generator=g, dtype=torch.float64)


def make_model(device):
    torch.manual_seed(0)
    model = torch.nn.Linear(D, 1).double().to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def loss_of(model, x, y, lo, hi):
    return ((model(x[lo:hi]) - y[lo:hi]) ** 2).sum() / len(x)


def weights(model):
    return [v for p in model.parameters() for v in p.detach().cpu().flatten().tolist()]


def reference(steps=STEPS):
    """The same training on the CPU, one worker, never interrupted."""
    model, opt = make_model("cpu")
    x, y = data()
    for _ in range(steps):
        opt.zero_grad()
        loss_of(model, x, y, 0, len(x)).backward()
        opt.step()
    return weights(model)


def main():
    dist = None
    rank, world, local = 0, 1, 0
    if "RANK" in os.environ:
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", "0"))
        if CUDA:
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if CUDA else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local) if CUDA else torch.device("cpu")
    model, opt = make_model(device)
    ckpt = elastic.Checkpointer(model=model, optimizer=opt, every=5,
                                directory=os.environ.get("GPU_CHECK_CKPT_DIR") or None)
    start = ckpt.restore()
    restart = elastic.restart_count()
    gpus = int(os.environ.get("SCHEDULEARN_NUM_GPUS", "1"))
    name = torch.cuda.get_device_name(device) if CUDA else "cpu"
    if rank == 0:
        print(f"resume {start} gpus {gpus} world {world} restart {restart} device {name}", flush=True)
    x, y = (t.to(device) for t in data())
    lo, hi = rank * len(x) // world, (rank + 1) * len(x) // world
    for step in range(start, STEPS):
        opt.zero_grad()
        loss_of(model, x, y, lo, hi).backward()
        for p in model.parameters():
            if dist is not None:
                dist.all_reduce(p.grad)
        opt.step()
        if CUDA:
            torch.cuda.synchronize(device)
        time.sleep(SLEEP)
        if rank == 0:
            print(f"step {step + 1} gpus {gpus} world {world} restart {restart}", flush=True)
        if start == 0 and step + 1 == HOLD_AT:
            deadline = time.monotonic() + 600
            while not ckpt.stopping and time.monotonic() < deadline:
                time.sleep(0.05)  # the SIGTERM of a resize or preemption ends the wait
        ckpt.step(step + 1)
    ckpt.save()
    if rank == 0:
        with open(os.path.join(elastic.job_dir(), "final.json"), "w") as f:
            json.dump(weights(model), f)
        print("training done", flush=True)
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
