"""Deterministic elastic training for the resize test.

Linear regression on a fixed full batch of 64 samples, float64, SGD with momentum. Each rank
computes the summed squared error of its contiguous slice divided by the global batch size and
the gradients are all-reduced (summed), so every step uses the full-batch gradient whatever the
world size: a run resized 2 -> 1 -> 2 must end with the weights of an unresized run.
Rank 0 prints `step <n> world <w> restart <r>` after each step and writes `final.json`; every
rank prints `worker rank <r> world <w> cuda <CUDA_VISIBLE_DEVICES> pid <pid>` when it starts,
then `worker pid <pid> prewarmed <0|1>`: whether the run's prewarm server forked it, and
`worker pid <pid> store port <MASTER_PORT>`.
Runs under torchrun (torch.distributed, gloo), horovodrun (Horovod, gloo) or alone.

`HOLD_EXIT_GPU=<gpu>`: a worker on that GPU (`CUDA_VISIBLE_DEVICES`) that is stopped holds its
exit (atexit) until the job has reported a step at a world without it (a smaller one), for up
to 20 s, then prints `held exit: the others resumed first <True|False>`.
"""

import json
import os
import time

import torch
from schedulearn import elastic

STEPS = int(os.environ.get("TRAIN_STEPS", "60"))
SLEEP = float(os.environ.get("STEP_SLEEP", "0.05"))


def prewarmed():
    """Whether this worker was forked by the run's prewarm server (schedulearn.prewarm)."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return b"prewarm.py\0serve" in f.read()
    except OSError:
        return False


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g, dtype=torch.float64)
    w = torch.randn(8, 1, generator=g, dtype=torch.float64)
    y = x @ w + 0.1 * torch.randn(64, 1, generator=g, dtype=torch.float64)
    return x, y


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).double()
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def backward(model, x, y, lo, hi):
    (((model(x[lo:hi]) - y[lo:hi]) ** 2).sum() / len(x)).backward()


def weights(model):
    return [v for p in model.parameters() for v in p.detach().flatten().tolist()]


def reference(steps=STEPS):
    """The same training in this process, on one worker, never resized."""
    model, opt = make_model()
    x, y = data()
    for _ in range(steps):
        opt.zero_grad()
        backward(model, x, y, 0, len(x))
        opt.step()
    return weights(model)


def hold_exit(world):
    """Wait (up to 20 s) until the job reports a step at a world smaller than `world`."""
    path = os.path.join(os.environ["SCHEDULEARN_JOB_DIR"], "metrics.jsonl")
    deadline = time.monotonic() + 20
    resumed = False
    while not resumed and time.monotonic() < deadline:
        time.sleep(0.05)
        with open(path) as f:
            resumed = any(json.loads(line).get("num_gpus", world) < world for line in f if line.strip())
    print(f"held exit: the others resumed first {resumed}", flush=True)


def main():
    dist = hvd = None
    rank, world = 0, 1
    if "HOROVOD_RANK" in os.environ:
        import horovod.torch as hvd

        hvd.init()
        rank, world = hvd.rank(), hvd.size()
    elif "RANK" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    model, opt = make_model()
    ckpt = elastic.Checkpointer(model=model, optimizer=opt, every=5)
    start = ckpt.restore()
    if os.environ.get("HOLD_EXIT_GPU") not in (None, "") and \
            os.environ.get("HOLD_EXIT_GPU") == os.environ.get("CUDA_VISIBLE_DEVICES"):
        import atexit

        atexit.register(lambda: ckpt.stopping and hold_exit(world))
    restart = elastic.restart_count()
    if rank == 0:
        print(f"restart {restart} world {world} resuming at {start}", flush=True)
    print(f"worker rank {rank} world {world} cuda {os.environ.get('CUDA_VISIBLE_DEVICES')} pid {os.getpid()}",
          flush=True)
    print(f"worker pid {os.getpid()} prewarmed {int(prewarmed())}", flush=True)
    print(f"worker pid {os.getpid()} store port {os.environ.get('MASTER_PORT')}", flush=True)
    x, y = data()
    lo, hi = rank * len(x) // world, (rank + 1) * len(x) // world
    for step in range(start, STEPS):
        t0 = time.perf_counter()
        opt.zero_grad()
        backward(model, x, y, lo, hi)
        for i, p in enumerate(model.parameters()):
            if dist is not None:
                dist.all_reduce(p.grad)
            elif hvd is not None and world > 1:
                p.grad.copy_(hvd.allreduce(p.grad, op=hvd.Sum, name=f"grad{i}"))
        opt.step()
        time.sleep(SLEEP)
        if rank == 0:
            print(f"step {step + 1} world {world} restart {restart}", flush=True)
        elastic.report(step_time=time.perf_counter() - t0, batch_size=len(x))
        ckpt.step(step + 1)
    ckpt.save()
    if rank == 0:
        out = os.path.join(os.environ.get("SCHEDULEARN_JOB_DIR", "."), "final.json")
        with open(out, "w") as f:
            json.dump(weights(model), f)
        print("training done", flush=True)
    if dist is not None:
        dist.destroy_process_group()
    if hvd is not None:
        hvd.shutdown()


if __name__ == "__main__":
    main()
