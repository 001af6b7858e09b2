"""REST API load: `POST jobs` rate and `GET jobs` with 10,000 jobs stored.

Starts a real server in a subprocess (a Jupyter server with the extension, or `schedulearn
serve` with --target serve) on a SQLite store in a temporary directory, with the simulated
executor (jobs that never end: the queue only grows, no processes are spawned; the HTTP,
engine and store path is the live one). Then:

1. POST jobs: N submissions (default 10,000) from C concurrent keep-alive connections; the rate
   and latency percentiles. Every submission is then checked to be stored exactly once: the API
   lists N jobs with N distinct ids and N distinct names, and so does the SQLite file after the
   server has stopped.
2. GET jobs with those N jobs stored (the whole list, `?limit=100`, `?state=running`):
   latency percentiles and response size.

    python benchmarks/bench_api.py [--jobs 10000] [--concurrency 16] [--target jupyter|serve]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scheduler")]

from tests.fixtures.jupyter import LiveServer, free_port, wait_http  # noqa: E402

TOKEN = "bench-token"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def start(target: str, home: Path) -> tuple[str, object]:
    traits = {"executor": "sim", "virtual_gpus": 4, "job_root": str(home / "jobs"),
              "store_url": f"sqlite:///{home / 'jobs.db'}", "inventory_interval": 0, "tick": 5.0}
    if target == "jupyter":
        server = LiveServer(home / "jupyter", traits, token=TOKEN).start()
        return server.url, server
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
    log = open(home / "serve.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(port), "--token", TOKEN,
         "--executor", "sim", "--virtual-gpus", "4", "--store", traits["store_url"],
         "--job-root", traits["job_root"]], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/"
    wait_http(url + "schedulearn/api/policy", proc=proc)
    return url, proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def stop(server: object) -> None:
    if isinstance(server, LiveServer):
        server.stop()
    else:
        server.terminate()
        server.wait(30)


class Connection:
    """A minimal HTTP/1.1 keep-alive client (tornado's simple client opens a connection per
    request, which would measure the client, not the server)."""

    def __init__(self, api: str):
        u = urllib.parse.urlsplit(api)
        self.host, self.port, self.path = u.hostname, u.port, u.path

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (f"{method} {self.path}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: token {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def post_jobs(api: str, n: int, concurrency: int) -> tuple[float, list[float], list[int]]:
    latencies: list[float] = []
    ids: list[int] = []
    todo = iter(range(n))
    conns = [await Connection(api).open() for _ in range(concurrency)]

    async def worker(conn: Connection) -> None:
        for i in todo:
            body = json.dumps({"name": f"bench-{i}", "duration": 1e9, "gpus": 1 + i % 2}).encode()
            t = time.perf_counter()
            code, data = await conn.request("POST", "jobs", body)
            latencies.append(time.perf_counter() - t)
            if code != 201:
                raise RuntimeError(f"POST jobs answered {code}: {data[:200]!r}")
            ids.append(json.loads(data)["id"])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    return elapsed, latencies, ids


async def get_jobs(api: str, query: str, repeat: int) -> tuple[list[float], int, int]:
    conn = await Connection(api).open()
    latencies = []
    size = count = 0
    for _ in range(repeat):
        t = time.perf_counter()
        code, data = await conn.request("GET", "jobs" + query)
        latencies.append(time.perf_counter() - t)
        assert code == 200, data[:200]
        size = len(data)
        count = len(json.loads(data)["jobs"])
    conn.close()
    return latencies, size, count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=20, help="GET requests per query")
    ap.add_argument("--target", choices=("jupyter", "serve"), default="jupyter")
    args = ap.parse_args()

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{platform.platform()}")
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        home = Path(tmp)
        url, server = start(args.target, home)
        api = url + "schedulearn/api/"
        pid = server.proc.pid if isinstance(server, LiveServer) else server.pid
        try:
            print(f"before: {load()}")
            cpu0 = cpu_seconds(pid)
            elapsed, lat, ids = asyncio.run(post_jobs(api, args.jobs, args.concurrency))
            cpu = cpu_seconds(pid) - cpu0
            print(f"after: {load()}")
            print(f"\nPOST jobs ({args.target}): {args.jobs} submissions, {args.concurrency} connections: "
                  f"{args.jobs / elapsed:.0f} submits/s ({elapsed:.2f} s); latency p50 "
                  f"{pct(lat, 50) * 1e3:.1f} ms, p95 {pct(lat, 95) * 1e3:.1f} ms, "
                  f"p99 {pct(lat, 99) * 1e3:.1f} ms")
            print(f"server CPU: {cpu / args.jobs * 1e3:.2f} ms per submit (user+sys) -> capacity "
                  f"~{args.jobs / cpu:.0f} submits/s per core, whatever else the machine runs")
            _, size, count = asyncio.run(get_jobs(api, "", 1))
            ok_api = count == args.jobs and len(set(ids)) == args.jobs
            print(f"stored exactly once (API): {count} jobs listed, {len(set(ids))} distinct ids returned "
                  f"-> {'OK' if ok_api else 'MISMATCH'}")
            print(f"\nGET jobs with {count} jobs stored ({args.repeat} requests each):")
            for query in ("", "?limit=100", "?state=running", "?state=queued&limit=50"):
                cpu0 = cpu_seconds(pid)
                lat, size, n = asyncio.run(get_jobs(api, query, args.repeat))
                cpu = (cpu_seconds(pid) - cpu0) / args.repeat
                print(f"  jobs{query or ' (all)':<24} {n:>6} jobs, {size / 1024:8.0f} KiB: p50 "
                      f"{pct(lat, 50) * 1e3:7.1f} ms, p95 {pct(lat, 95) * 1e3:7.1f} ms, "
                      f"server CPU {cpu * 1e3:6.1f} ms/request")
        finally:
            stop(server)
        db = sqlite3.connect(home / "jobs.db")
        rows, names = db.execute("SELECT count(*), count(DISTINCT name) FROM jobs").fetchone()
        db.close()
        ok_db = rows == names == args.jobs
        print(f"\nstored exactly once (SQLite file after stop): {rows} rows, {names} distinct names "
              f"-> {'OK' if ok_db else 'MISMATCH'}")
        return 0 if ok_api and ok_db else 1


if __name__ == "__main__":
    sys.exit(main())
