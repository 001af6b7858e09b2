"""Deterministic Horovod Elastic training for the resize-in-place tests.

The training of `elastic_train.py` (linear regression on a fixed full batch, float64, SGD with
momentum; each rank's slice of the summed squared error over the global batch size, gradients
all-reduced), under `hvd.elastic.run`: the model, the optimiser (momentum) and the step counter
are Horovod's elastic state, committed after every step, so a resize in place loses no step and
the run ends with the weights of an unresized run whatever the world sizes it went through.

Rank 0 prints `step <n> world <w> pid <pid> restart <r>` after each step, reports it
(`schedulearn.elastic.report`) and writes `final.json`; every rank prints `worker rank <r> local
<l> size <w> cuda <CUDA_VISIBLE_DEVICES> pid <pid>` whenever it (re)joins the training, then
`worker pid <pid> env <digest> prewarmed <0|1>`: a digest of its environment but
`CUDA_VISIBLE_DEVICES`, and whether the run's prewarm server forked it, and `worker host
<HOROVOD_HOSTNAME> rank <r> local <l> size <w> cuda <...> restart <SCHEDULEARN_RESTART_COUNT>`.
`STEP_SLEEP` slows the steps so that a test can resize the job while it trains.
"""

import hashlib
import json
import os
import time

import horovod.torch as hvd
from elastic_train import backward, data, make_model, weights
from schedulearn import elastic

STEPS = int(os.environ.get("TRAIN_STEPS", "60"))
SLEEP = float(os.environ.get("STEP_SLEEP", "0.05"))


def env_digest():
    """The worker's environment but its GPUs (what a worker of the same slot must share)."""
    env = sorted((k, v) for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES")
    return hashlib.sha1(repr(env).encode()).hexdigest()[:12]


def prewarmed():
    """Whether this worker was forked by the run's prewarm server (schedulearn.prewarm)."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return b"prewarm.py\0serve" in f.read()
    except OSError:
        return False


def main():
    hvd.init()
    model, opt = make_model()
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)
    x, y = data()

    @hvd.elastic.run
    def train(state):
        print(f"worker rank {hvd.rank()} local {hvd.local_rank()} size {hvd.size()} "
              f"cuda {os.environ.get('CUDA_VISIBLE_DEVICES')} pid {os.getpid()}", flush=True)
        print(f"worker pid {os.getpid()} env {env_digest()} prewarmed {int(prewarmed())}", flush=True)
        print(f"worker host {os.environ.get('HOROVOD_HOSTNAME')} rank {hvd.rank()} "
              f"local {hvd.local_rank()} size {hvd.size()} cuda {os.environ.get('CUDA_VISIBLE_DEVICES')} "
              f"restart {elastic.restart_count()}", flush=True)
        while state.step < STEPS:
            rank, world = hvd.rank(), hvd.size()
            lo, hi = rank * len(x) // world, (rank + 1) * len(x) // world
            t0 = time.perf_counter()
            opt.zero_grad()
            backward(model, x, y, lo, hi)
            for i, p in enumerate(model.parameters()):
                if world > 1:
                    p.grad.copy_(hvd.allreduce(p.grad, op=hvd.Sum, name=f"grad{i}"))
            opt.step()
            time.sleep(SLEEP)
            state.step += 1
            if rank == 0:
                print(f"step {state.step} world {world} pid {os.getpid()} restart {elastic.restart_count()}",
                      flush=True)
            elastic.report(step_time=time.perf_counter() - t0, batch_size=len(x), step=state.step)
            state.commit()

    train(state)
    if hvd.rank() == 0:
        out = os.path.join(os.environ.get("SCHEDULEARN_JOB_DIR", "."), "final.json")
        with open(out, "w") as f:
            json.dump(weights(model), f)
        print("training done", flush=True)


if __name__ == "__main__":
    main()
