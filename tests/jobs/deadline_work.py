"""A job whose speed is proportional to its GPUs (virtual ones: `SCHEDULEARN_NUM_GPUS`): `UNITS`
units of work, each `UNIT_S` seconds on one GPU. It reports its progress (`elastic.report`) every
`REPORT_S` seconds, keeps the units done in its job directory, and on SIGTERM (a resize) stops
after the unit in progress and exits `EXIT_CHECKPOINTED`; a relaunch goes on from there."""

import os
import signal
import sys
import time

from schedulearn import elastic

units, unit_s = int(os.environ["UNITS"]), float(os.environ["UNIT_S"])
report_s = float(os.environ.get("REPORT_S", "0.5"))
gpus = int(os.environ.get("SCHEDULEARN_NUM_GPUS", "1"))
state = elastic.job_dir() / "units_done"
done = int(state.read_text()) if state.exists() else 0
stopping = False


def _stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, _stop)
elastic.report(progress=done / units)
last = time.monotonic()
while done < units:
    time.sleep(unit_s / gpus)
    done += 1
    tmp = state.with_suffix(".tmp")
    tmp.write_text(str(done))
    os.replace(tmp, state)
    if time.monotonic() - last >= report_s or done == units:
        elastic.report(progress=done / units)
        last = time.monotonic()
    if stopping and done < units:
        sys.exit(elastic.EXIT_CHECKPOINTED)
print(f"done on {gpus} GPUs")
