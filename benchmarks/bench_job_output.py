"""A job's log and result read back through the REST API: the server's memory, and what a
poller costs.

Starts a real `schedulearn serve` (local executor, virtual GPUs, SQLite) in a subprocess, from
this checkout or from `--root` (another checkout, to compare two versions side by side). Then:

1. *The whole log*: a job writes `--mb` MiB of log lines and ends; `GET jobs/{id}/logs` is read
   (and discarded) by a streaming client while the server's resident memory is sampled every
   10 ms: its peak above what it held before, the time, the bytes received.
2. *Polling for what is new*: a job writes a 1 KiB line every 10 ms for `--seconds` s; two
   pollers ask every 0.5 s, one for the whole log each time (what the magics' text view did),
   one for the page after what it has (`?offset=`, where the server has it): bytes received
   by each, and whether both ended with the job's log.
3. *A large result*: a job's signed `result.pkl` of `--mb` MiB (a model returned by a cell) read
   back with `GET jobs/{id}/result`: the server's memory peak above what it held before, the
   time, and whether the bytes came back whole.
4. *A widget under a progress bar*: a job prints 100 lines, then redraws a 100-character bar
   every 2 ms for `--seconds` s (tqdm's way: carriage returns, one endless line); two job
   widgets' pollers ask every second, the old one for the last 40 lines (`?tail=40`), the new
   one for what is new (`client.LogReader` as `JobWidget.log_behind` sets it): bytes received
   by each, and whether both end showing the same lines.

    python benchmarks/bench_job_output.py [--mb 512] [--seconds 20] [--root ../other-checkout]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scheduler")]

from tests.fixtures.jupyter import free_port, wait_http  # noqa: E402

TOKEN = "bench-token"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    def __init__(self, root: Path, home: Path, *flags: str):
        """`schedulearn serve` from `root`, its store and jobs in `home`; `flags` replace the
        default `--virtual-gpus 2`."""
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/schedulearn/api/"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "scheduler"), str(root)]),
               "SCHEDULEARN_SERVE_TOKEN": TOKEN}
        self.log = open(home / "serve.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(self.port),
             *(flags or ("--virtual-gpus", "2")), "--store", f"sqlite:///{home / 'jobs.db'}",
             "--job-root", str(home / "jobs")], stdout=self.log, stderr=subprocess.STDOUT, env=env,
            cwd=home)
        wait_http(self.api + "policy", proc=self.proc)

    def open(self, path: str, method: str = "GET", body: bytes | None = None):
        req = urllib.request.Request(self.api + path, data=body, method=method, headers={
            "Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=600)

    def submit(self, code: str) -> int:
        import json

        with self.open("jobs", "POST", json.dumps({"command": [sys.executable, "-c", code]}).encode()) as r:
            return json.loads(r.read())["id"]

    def state(self, job_id: int) -> str:
        import json

        with self.open(f"jobs/{job_id}") as r:
            return json.loads(r.read())["state"]

    def wait(self, job_id: int) -> None:
        while self.state(job_id) not in ("succeeded", "failed", "cancelled"):
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def whole_log(server: Server, mb: int) -> dict:
    line = "x" * 1023
    job = server.submit(f"import sys\nfor _ in range({mb} * 1024): sys.stdout.write({line!r} + '\\n')")
    server.wait(job)
    before = rss_mib(server.proc.pid)
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib(server.proc.pid))
            time.sleep(0.01)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    start, got = time.perf_counter(), 0
    with server.open(f"jobs/{job}/logs") as r:
        while chunk := r.read(1 << 20):
            got += len(chunk)
    took = time.perf_counter() - start
    stop.set()
    t.join()
    return {"log_mib": got / 2**20, "rss_before_mib": before, "rss_peak_above_mib": peak[0] - before,
            "seconds": took}


class Peak:
    """The server's resident memory, sampled every 10 ms while the block runs: its peak."""

    def __init__(self, pid: int):
        self.pid = pid

    def __enter__(self) -> Peak:
        self.before = self.peak = rss_mib(self.pid)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._sample, daemon=True)
        self._t.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def large_result(server: Server, home: Path, mb: int) -> dict:
    from schedulearn import results, run

    job = server.submit("pass")
    server.wait(job)
    root = home / "jobs"
    data = os.urandom(mb << 20)
    key = results.job_key(results.server_secret(root), job)
    run.write_result(data, str(root / str(job) / run.RESULT_FILE), key)
    with Peak(server.proc.pid) as peak:
        start = time.perf_counter()
        with server.open(f"jobs/{job}/result") as r:
            got = r.read()
        took = time.perf_counter() - start
    return {"mib": len(got) / 2**20, "whole": got == data, "rss_before_mib": peak.before,
            "rss_peak_above_mib": peak.peak - peak.before, "seconds": took}


def polling(server: Server, seconds: float) -> dict:
    line = "y" * 1023
    job = server.submit(f"import sys, time\nfor _ in range({int(seconds * 100)}):\n"
                        f"    sys.stdout.write({line!r} + '\\n'); sys.stdout.flush(); time.sleep(0.01)")
    whole_bytes = paged_bytes = 0
    paged, offset, pages_ok = b"", 0, True
    last_whole = b""
    while True:
        done = server.state(job) in ("succeeded", "failed", "cancelled")
        with server.open(f"jobs/{job}/logs") as r:
            last_whole = r.read()
        whole_bytes += len(last_whole)
        if pages_ok:
            try:
                while True:
                    with server.open(f"jobs/{job}/logs?offset={offset}") as r:
                        data = r.read()
                        nxt = r.headers.get("X-Schedulearn-Next-Offset")
                    if nxt is None:  # a server without pages: it answered the whole log
                        pages_ok = False
                        break
                    paged_bytes += len(data)
                    paged += data
                    offset = int(nxt)
                    if not data:
                        break
            except urllib.error.HTTPError:
                pages_ok = False
        if done:
            break
        time.sleep(0.5)
    return {"log_mib": len(last_whole) / 2**20, "whole_mib": whole_bytes / 2**20,
            "paged_mib": paged_bytes / 2**20 if pages_ok else None,
            "paged_equal": (paged == last_whole) if pages_ok else None}


def widget(server: Server, seconds: float) -> dict:
    sys.path.insert(0, str(ROOT / "kernel_magics"))
    from schedulearn.client import Client, LogReader
    from schedulearn_magics.views import Screen

    client = Client(server.api.removesuffix("schedulearn/api/"), TOKEN)
    bar = "x" * 80
    job = server.submit(f"import sys, time\nprint('\\n'.join(f'setup {{i}}' for i in range(100)))\n"
                        f"for i in range({int(seconds * 500)}):\n"
                        f"    sys.stdout.write(f'\\rtraining {{i:09d}} {bar}'); sys.stdout.flush()\n"
                        "    time.sleep(0.002)\nprint()\nprint('saved')")
    reader, screen = LogReader(client, job, behind=1 << 18), Screen(rows=40)
    tail_bytes = new_bytes = 0
    page = client.log_page

    def counted(job_id: int, offset: int = 0) -> tuple[bytes, int, int]:
        nonlocal new_bytes
        data, after, size = page(job_id, offset)
        new_bytes += len(data)
        return data, after, size

    client.log_page = counted  # type: ignore[method-assign]
    tail_text = ""
    while True:
        done = server.state(job) in ("succeeded", "failed", "cancelled")
        with server.open(f"jobs/{job}/logs?tail=40") as r:
            raw = r.read()
        tail_bytes += len(raw)
        tail_text = raw.decode("utf-8", "replace")
        text = reader.read()
        if reader.skipped:
            screen.skip()
        screen.write(text)
        if done:
            break
        time.sleep(1.0)
    old = Screen(rows=40)
    old.write(tail_text)
    return {"log_mib": reader.offset / 2**20, "tail_mib": tail_bytes / 2**20, "new_mib": new_bytes / 2**20,
            "same": old.lines()[-3:] == screen.lines()[-3:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=512, help="MiB the first job writes (default 512)")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the second job writes (default 20)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose server is measured")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; code: {args.root.resolve()}")
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(args.root.resolve(), Path(tmp))
        try:
            w = whole_log(server, args.mb)
            print(f"whole log: {w['log_mib']:.0f} MiB read in {w['seconds']:.1f} s; server RSS "
                  f"{w['rss_before_mib']:.0f} MiB before, peak +{w['rss_peak_above_mib']:.0f} MiB")
            p = polling(server, args.seconds)
            paged = "n/a (no ?offset= on this server)" if p["paged_mib"] is None else (
                f"{p['paged_mib']:.1f} MiB (the log, whole: {p['paged_equal']})")
            print(f"polling every 0.5 s a job that writes {p['log_mib']:.1f} MiB in {args.seconds:.0f} s: "
                  f"the whole log each time {p['whole_mib']:.1f} MiB, the pages after what was read {paged}")
            r = large_result(server, Path(tmp), args.mb)
            print(f"result: {r['mib']:.0f} MiB read in {r['seconds']:.1f} s (whole: {r['whole']}); "
                  f"server RSS {r['rss_before_mib']:.0f} MiB before, peak +{r['rss_peak_above_mib']:.0f} MiB")
            g = widget(server, args.seconds)
            print(f"a widget under a progress bar for {args.seconds:.0f} s (a {g['log_mib']:.1f} MiB log), "
                  f"polling every second: the last 40 lines each time {g['tail_mib']:.1f} MiB, "
                  f"what is new {g['new_mib']:.2f} MiB (the same lines shown: {g['same']})")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
