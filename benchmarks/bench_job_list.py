"""What the job views move: the bytes and the time of what the sidebar, the job widget and the
events socket fetch, with notebook-cell jobs in the queue.

Starts a real `schedulearn serve` (sim executor: no process per job; 4 virtual GPUs; SQLite), from
this checkout or from `--root` (another checkout, to compare two versions side by side), and
submits `--jobs` jobs whose script is a real `%%schedulearn` bundle of a one-line cell (what every
cell job carries: the cell and the runner's source, ~30 KB), then one whose cell ships a 1 MiB
variable (`--vars`), each running `--duration` simulated seconds. It measures (medians of
`--repeat`):

1. *a sidebar refresh*: `GET jobs?state=running`, `?state=queued` and `?limit=200` (what the
   sidebar asks every 5 s): bytes and time;
2. *a job poll*: `GET jobs/{id}` of the 1 MiB-vars job (what `%%schedulearn` and the job widget
   ask every 0.1-1 s while they follow a job): bytes and time;
3. *the events*: the bytes the events websocket delivered while the jobs were submitted and ran
   (every open sidebar and queue widget receives them);
4. *the server's memory*: its resident set once every job has ended.

    python benchmarks/bench_job_list.py [--jobs 200] [--repeat 20] [--root ../other-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import platform
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scheduler"), str(ROOT / "kernel_magics")]

from schedulearn_magics.bundle import build_script  # noqa: E402

from benchmarks import bench_job_output  # noqa: E402

TOKEN = "bench-token"


class Server(bench_job_output.Server):
    def __init__(self, root: Path, home: Path):
        super().__init__(root, home, "--executor", "sim", "--virtual-gpus", "4", "--tick", "0.2")

    def get(self, path: str) -> tuple[bytes, float]:
        req = urllib.request.Request(self.api + path, headers={"Authorization": f"token {TOKEN}"})
        start = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            body = r.read()
        return body, time.perf_counter() - start

    def submit(self, spec: dict) -> int:
        headers = {"Authorization": f"token {TOKEN}", "Content-Type": "application/json"}
        req = urllib.request.Request(self.api + "jobs", data=json.dumps(spec).encode(), method="POST",
                                     headers=headers)
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())["id"]


class EventBytes(threading.Thread):
    """The bytes the events websocket delivers (tornado's client, in its own loop)."""

    def __init__(self, server: Server):
        super().__init__(daemon=True)
        self.url = server.api.replace("http://", "ws://") + "events"
        self.bytes = self.messages = 0
        self.ready = threading.Event()
        self.done = False

    def run(self) -> None:
        asyncio.run(self._read())

    async def _read(self) -> None:
        from tornado import httpclient, websocket

        req = httpclient.HTTPRequest(self.url, headers={"Authorization": f"token {TOKEN}"})
        conn = await websocket.websocket_connect(req, max_message_size=1 << 30)
        self.ready.set()
        while not self.done:
            try:
                msg = await asyncio.wait_for(conn.read_message(), 0.5)
            except asyncio.TimeoutError:
                continue
            if msg is None:
                break
            self.bytes += len(msg)
            self.messages += 1
        conn.close()


def median_get(server: Server, paths: list[str], repeat: int) -> tuple[int, float]:
    sizes, times = [], []
    for _ in range(repeat):
        size = took = 0.0
        for p in paths:
            body, t = server.get(p)
            size, took = size + len(body), took + t
        sizes.append(size)
        times.append(took)
    return int(statistics.median(sizes)), statistics.median(times)


def measure(root: Path, jobs: int, repeat: int, duration: float) -> dict:
    home = Path(tempfile.mkdtemp(prefix="bench-job-list-"))
    server = Server(root, home)
    try:
        events = EventBytes(server)
        events.start()
        events.ready.wait(30)
        cell = build_script("sum(range(1000))")
        ids = [server.submit({"name": f"cell{i}", "script": cell, "duration": duration}) for i in range(jobs)]
        blob = pickle.dumps({"blob": pickle.dumps(os.urandom(1 << 20))})
        big = server.submit({"name": "vars", "duration": duration,
                             "script": build_script("len(blob)", variables=blob)})
        for job in (*ids, big):  # every job ends (the sim executor: `duration` each, 4 at a time)
            while json.loads(server.get(f"jobs/{job}")[0])["state"] not in ("succeeded", "failed"):
                time.sleep(0.2)
        time.sleep(1)  # the last events
        events.done = True
        events.join(5)
        refresh = median_get(server, ["jobs?state=running", "jobs?state=queued", "jobs?limit=200"], repeat)
        poll = median_get(server, [f"jobs/{big}"], repeat)
        status = Path(f"/proc/{server.proc.pid}/status").read_text().splitlines()
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return {"script_bytes": len(cell), "rss_mib": rss / 1024, "refresh_bytes": refresh[0],
                "refresh_ms": 1000 * refresh[1],
                "poll_bytes": poll[0], "poll_ms": 1000 * poll[1], "event_bytes": events.bytes,
                "events": events.messages}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--duration", type=float, default=0.5, help="each job's simulated seconds")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose server runs")
    args = ap.parse_args()
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"server from {args.root}")
    r = measure(args.root.resolve(), args.jobs, args.repeat, args.duration)
    kib = lambda n: f"{n / 1024:,.1f} KiB"  # noqa: E731
    print(f"cell script: {kib(r['script_bytes'])}; {args.jobs} cell jobs + one with 1 MiB of --vars")
    print(f"sidebar refresh (3 GETs): {kib(r['refresh_bytes'])}, {r['refresh_ms']:.1f} ms (median)")
    print(f"job poll (GET jobs/ID, 1 MiB vars): {kib(r['poll_bytes'])}, {r['poll_ms']:.1f} ms (median)")
    print(f"events socket: {r['events']} messages, {kib(r['event_bytes'])}")
    print(f"server resident memory, every job ended: {r['rss_mib']:.1f} MiB")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
