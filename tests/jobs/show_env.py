"""Print what the scheduler gave this job, then optionally wait for a file to appear."""

import os
import sys
import time

NAMES = ("CUDA_VISIBLE_DEVICES", "SCHEDULEARN_JOB_ID", "SCHEDULEARN_NUM_GPUS", "SCHEDULEARN_RESTART_COUNT")
for var in NAMES:
    print(f"{var}={os.environ.get(var, '')}", flush=True)
print(f"cwd={os.getcwd()}", flush=True)
if len(sys.argv) > 1:  # wait until the test lets us go
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
print(f"bye {code}", flush=True)
sys.exit(code)
