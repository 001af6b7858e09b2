"""Announce readiness, then wait. `ignore`: ignore SIGTERM (to be SIGKILLed after the grace);
otherwise say so on SIGTERM and exit 0."""

import os
import signal
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "handle"


def on_term(signum, frame):
    print(f"got SIGTERM in pid {os.getpid()}", flush=True)
    if mode != "ignore":
        sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print(f"ready pgid={os.getpgid(0)}", flush=True)
for _ in range(600):
    time.sleep(0.1)
