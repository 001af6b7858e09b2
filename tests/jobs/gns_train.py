"""A training job with known gradient statistics, for `schedulearn.elastic.Monitor`.

Linear regression y = x.w* + noise, x ~ N(0, I_D), noise ~ N(0, SIGMA^2), loss = mean squared
error / 2. At weights w (delta = w - w*) the true gradient is delta and the variance of one
sample's gradient has trace S = (D + 1)|delta|^2 + D SIGMA^2. With `LR=0` the weights stay at
w* + 0.3 and the statistics are exactly |delta|^2 and S / B0.

Runs alone, under torchrun (DDP, gloo) or under horovodrun. Environment: STEPS, B0 (initial
global batch), MAXB, MAXLOCAL, LR, SIGMA, ADAPTIVE=1, LR_SCALING, SMOOTHING, REPORT_EVERY,
PER_SAMPLE (seconds of sleep per sample and micro-step: a GPU's compute time, so the job's
speed-up is known), OVERHEAD (seconds of sleep per optimiser step), SYNC (seconds of sleep per
step and extra replica: a synchronisation that grows with the world size), CKPT=1 (a
Checkpointer in the job directory), STOP_AT (save and stop after that many steps: a resize),
DEVICE (where the model and batches live, default `cpu`; `cuda` in scripts/gpu_check.py: one
process; the samples are drawn on the CPU, so they are the same on either), SKEW (rank 1 starts
its count of steps there, as if its floating point had drifted from rank 0's).
Rank 0 prints one JSON line: the statistics, their true values, the batch sizes used, the
learning-rate factor and the loss before and after.
"""

import json
import os
import time

import torch
from schedulearn import elastic

D = 8
STEPS = int(os.environ.get("STEPS", "1000"))
B0 = int(os.environ.get("B0", "16"))
SIGMA = float(os.environ.get("SIGMA", "0.5"))
LR = float(os.environ.get("LR", "0"))
PER_SAMPLE = float(os.environ.get("PER_SAMPLE", "0"))
OVERHEAD = float(os.environ.get("OVERHEAD", "0"))
SYNC = float(os.environ.get("SYNC", "0"))
DEVICE = torch.device(os.environ.get("DEVICE", "cpu"))


def main():
    dist = hvd = None
    if "HOROVOD_RANK" in os.environ:
        import horovod.torch as hvd

        hvd.init()
        rank = hvd.rank()
    elif "RANK" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    else:
        rank = 0
    torch.manual_seed(0)
    w_star = torch.randn(D, dtype=torch.float64)
    model = torch.nn.Linear(D, 1, bias=False).double().to(DEVICE)
    with torch.no_grad():
        model.weight.copy_((w_star + 0.3).unsqueeze(0))
    if dist is not None:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    if hvd is not None:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    ckpt = elastic.Checkpointer(model=model, optimizer=opt, every=20) if os.environ.get("CKPT") else None
    start = ckpt.restore() if ckpt is not None else 0
    mon = elastic.Monitor(
        model, opt, batch_size=B0, max_batch_size=int(os.environ.get("MAXB", B0)),
        max_local_bsz=int(os.environ.get("MAXLOCAL", "100000")), adaptive=bool(os.environ.get("ADAPTIVE")),
        lr_scaling=os.environ.get("LR_SCALING", "adascale"), total_steps=STEPS,
        smoothing=float(os.environ.get("SMOOTHING", "0.998")),
        report_every=float(os.environ.get("REPORT_EVERY", "1e9")), checkpointer=ckpt)
    if rank == 1 and os.environ.get("SKEW"):  # rank 1 miscounts its steps: rank 0's count must rule
        mon.state["si_steps"] = float(os.environ["SKEW"])
    gen = torch.Generator().manual_seed(1000 * (start + 1) + rank)

    def batch(n):
        x = torch.randn(n, D, generator=gen, dtype=torch.float64)
        y = x @ w_star + SIGMA * torch.randn(n, generator=gen, dtype=torch.float64)
        return x.to(DEVICE), y.to(DEVICE)

    def full_loss():
        with torch.no_grad():
            x, y = batch(4096)
            return float(0.5 * ((elastic._unwrap(model)(x).squeeze(1) - y) ** 2).mean())

    before = full_loss()
    batches = []
    while mon.progress < 1:  # STEPS at the initial batch size (a larger batch's steps count more)
        for _ in range(mon.accum_steps + 1):
            x, y = batch(mon.micro_batch)
            time.sleep(PER_SAMPLE * mon.micro_batch)
            mon.backward(0.5 * ((model(x).squeeze(1) - y) ** 2).mean())
        time.sleep(OVERHEAD + SYNC * (mon.world - 1))
        mon.step()
        if not batches or batches[-1] != mon.batch_size:
            batches.append(mon.batch_size)
        if ckpt is not None and mon.steps == int(os.environ.get("STOP_AT", "0")):
            ckpt.save()
            break
    mon.close()
    delta = elastic._unwrap(model).weight.detach()[0].cpu() - w_star
    d2 = float(delta.pow(2).sum())
    if rank == 0:
        print(json.dumps({
            "sqr": mon.state["sqr"], "var": mon.state["var"], "true_sqr": d2,
            "true_var": ((D + 1) * d2 + D * SIGMA ** 2) / B0, "batches": batches, "start": start,
            "steps": mon.steps, "si_steps": mon.scale_invariant_steps, "lr_factor": mon.lr_factor,
            "lr": opt.param_groups[0]["lr"],
            "micro_batch": mon.micro_batch, "accum_steps": mon.accum_steps, "world": mon.world,
            "device": str(next(model.parameters()).device),
            "loss_before": before, "loss_after": full_loss()}), flush=True)
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
