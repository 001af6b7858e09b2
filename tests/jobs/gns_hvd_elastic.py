"""A Horovod Elastic job with `schedulearn.elastic.Monitor`, for resizes in place.

Linear regression as `gns_train.py` (D = 8, noise 0.5), each rank drawing its share of the global
batch (`Monitor.micro_batch`), under `hvd.elastic.run` with the step counter in Horovod's state.
Every rank prints, after each step, `rank <r> step <s> world <hvd.size()> monitor <Monitor.world>
micro <micro_batch> accum <accum_steps> batch <batch_size>`. Environment: STEPS, B0, MAXB,
ADAPTIVE=1, STEP_SLEEP (seconds per step), REPORT_EVERY.
"""

import os
import time

import horovod.torch as hvd
import torch
from schedulearn import elastic

D = 8
STEPS = int(os.environ.get("STEPS", "300"))
SLEEP = float(os.environ.get("STEP_SLEEP", "0.1"))


def main():
    hvd.init()
    torch.manual_seed(0)
    w_star = torch.randn(D, dtype=torch.float64)
    model = torch.nn.Linear(D, 1, bias=False).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    b0 = int(os.environ.get("B0", "16"))
    mon = elastic.Monitor(model, opt, batch_size=b0, max_batch_size=int(os.environ.get("MAXB", b0)),
                          adaptive=bool(os.environ.get("ADAPTIVE")), total_steps=STEPS,
                          report_every=float(os.environ.get("REPORT_EVERY", "0.5")))
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)

    @hvd.elastic.run
    def train(state):
        gen = torch.Generator().manual_seed(1000 * state.step + hvd.rank())
        while state.step < STEPS:
            for _ in range(mon.accum_steps + 1):
                x = torch.randn(mon.micro_batch, D, generator=gen, dtype=torch.float64)
                y = x @ w_star + 0.5 * torch.randn(mon.micro_batch, generator=gen, dtype=torch.float64)
                mon.backward(0.5 * ((model(x).squeeze(1) - y) ** 2).mean())
            time.sleep(SLEEP)
            mon.step()
            state.step += 1
            print(f"rank {hvd.rank()} step {state.step} world {hvd.size()} monitor {mon.world} "
                  f"micro {mon.micro_batch} accum {mon.accum_steps} batch {mon.batch_size}", flush=True)
            state.commit()

    train(state)
    mon.close()


if __name__ == "__main__":
    main()
