"""gpu-check job: what this job sees (one JSON line `GPU_CHECK {...}`).

Its first statement prints `T0 <wall clock>` (launch overhead), then, with GPU_CHECK_CUDA=1, it
imports torch, creates a CUDA context and prints `T1 <wall clock>`. With GPU_CHECK_BARRIER=DIR it
waits until GPU_CHECK_PEERS jobs have written their file there (proof that they ran at once);
with GPU_CHECK_HOLD=FILE it then keeps running until FILE exists.
"""

import time

print(f"T0 {time.time():.6f}", flush=True)

import json  # noqa: E402 - the timestamp above comes first on purpose
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

CUDA = os.environ.get("GPU_CHECK_CUDA") == "1"


def main() -> int:
    seen = {"job_id": os.environ.get("SCHEDULEARN_JOB_ID"),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "cuda": False}
    if CUDA:
        import torch

        if not torch.cuda.is_available():
            print(f"CUDA not available in the job (CUDA_VISIBLE_DEVICES={seen['visible']})", flush=True)
            return 3
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        print(f"T1 {time.time():.6f}", flush=True)
        props = torch.cuda.get_device_properties(0)
        seen.update(cuda=True, device_count=torch.cuda.device_count(), name=props.name,
                    uuid=str(getattr(props, "uuid", "")))
    barrier = os.environ.get("GPU_CHECK_BARRIER")
    if barrier:
        folder = Path(barrier)
        (folder / str(seen["job_id"])).write_text("here")
        peers = int(os.environ.get("GPU_CHECK_PEERS", "2"))
        deadline = time.monotonic() + float(os.environ.get("GPU_CHECK_BARRIER_TIMEOUT", "120"))
        while len(list(folder.iterdir())) < peers:
            if time.monotonic() > deadline:
                print(f"barrier: only {len(list(folder.iterdir()))} of {peers} jobs ran at once", flush=True)
                return 4
            time.sleep(0.05)
        seen["peers"] = sorted(p.name for p in folder.iterdir())
    print("GPU_CHECK " + json.dumps(seen), flush=True)
    hold = os.environ.get("GPU_CHECK_HOLD")
    deadline = time.monotonic() + 300
    while hold and not os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)  # keep the GPU until the checker has looked at the allocations
    return 0


if __name__ == "__main__":
    sys.exit(main())
