"""Horovod on gloo: sum rank+1 over all ranks and print it."""

import horovod.torch as hvd
import torch

hvd.init()
t = torch.tensor([float(hvd.rank() + 1)])
total = hvd.allreduce(t, op=hvd.Sum)
print(f"hvd rank {hvd.rank()} size {hvd.size()} allreduce_sum={total.item():g}", flush=True)
hvd.shutdown()
