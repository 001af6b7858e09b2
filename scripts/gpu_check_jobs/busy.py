"""gpu-check job: keeps its GPU busy (float32 matmuls) until GPU_CHECK_STOP exists or
GPU_CHECK_BUSY_SECONDS pass; without GPU_CHECK_CUDA=1 it only waits. Prints `busy` once computing."""

import os
import time
from pathlib import Path

CUDA = os.environ.get("GPU_CHECK_CUDA") == "1"
STOP = Path(os.environ["GPU_CHECK_STOP"])
LIMIT = time.monotonic() + float(os.environ.get("GPU_CHECK_BUSY_SECONDS", "120"))


def main() -> None:
    step = None
    if CUDA:
        import torch

        a = torch.randn(4096, 4096, device="cuda")
        b = torch.randn(4096, 4096, device="cuda")

        def step():
            for _ in range(20):
                a.copy_(a @ b).div_(a.norm())
            torch.cuda.synchronize()

    print("busy", flush=True)
    while not STOP.exists() and time.monotonic() < LIMIT:
        if step is not None:
            step()
        else:
            time.sleep(0.1)
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
