"""How fast the sidebar shows what happens, in real Chromium against a real `jupyter lab`.

- submit → row: a job POSTed over the REST API until its row is in the panel (events websocket →
  refresh → render);
- done → shown: a job's `succeeded` (as the API reports it) until the panel shows it;
- refresh cost: the time of one refresh (GET gpus, policy, 3× jobs) measured in the page, with N
  finished jobs stored.
Optionally (`--build`) the npm figures: `npm ci` from an empty node_modules (a copy of the tree)
and `npm run build:prod`.

Usage: .venv/bin/python benchmarks/bench_sidebar.py [--jobs 20] [--stored 2000] [--build]
Prints a table; nothing is asserted (the browser tests check behaviour).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, LabServer, open_lab  # noqa: E402

PANEL = "#schedulearn-sidebar"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]


def npm_figures() -> list[tuple[str, float]]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split()
        for f in files:
            if (ROOT / f).is_file() and (f.startswith("labextension/") or f in (
                    "package.json", "package-lock.json")):
                (Path(tmp) / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, Path(tmp) / f)
        env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        for name, cmd in [("npm ci (empty node_modules)", ["npm", "ci", "--no-audit", "--no-fund"]),
                          ("npm run build:prod", ["npm", "run", "build:prod"]),
                          ("npm run build (dev)", ["npm", "run", "build"])]:
            t = time.perf_counter()
            subprocess.run(cmd, cwd=tmp, env=env, check=True, capture_output=True)
            out.append((name, time.perf_counter() - t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--stored", type=int, default=2000, help="finished jobs stored for the refresh cost")
    ap.add_argument("--build", action="store_true")
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    home = Path(tempfile.mkdtemp(prefix="bench-sidebar-"))
    traits = {"virtual_gpus": 4, "executor": "local", "job_root": str(home / "jobs"),
              "store_url": f"sqlite:///{home / 'jobs.db'}", "tick": 0.2}
    server = LabServer(home / "lab", traits)
    t = time.perf_counter()
    server.start()
    start_s = time.perf_counter() - t
    rows, shown = [], []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            t = time.perf_counter()
            page = open_lab(browser, server)
            page.click('.jp-SideBar .lm-TabBar-tab[data-id="schedulearn-sidebar"]')
            page.locator(f"{PANEL} .jp-schedulearn-gpu").first.wait_for()
            load_s = time.perf_counter() - t
            for i in range(args.jobs):
                t = time.perf_counter()
                _, job = server.api("POST", "jobs", {"name": f"b{i}", "script": "pass"})
                page.locator(f'{PANEL} tr[data-job-id="{job["id"]}"]').wait_for(timeout=30_000)
                rows.append(time.perf_counter() - t)
                server.wait_job(job["id"], {"succeeded", "failed"})
                t = time.perf_counter()
                page.locator(f'{PANEL} tr[data-job-id="{job["id"]}"][data-state="succeeded"]').wait_for(
                    timeout=30_000)
                shown.append(time.perf_counter() - t)
            for i in range(args.stored):
                server.api("POST", "jobs", {"name": f"s{i}", "script": "pass"})
            deadline = time.monotonic() + 600
            while server.api("GET", "jobs?state=queued")[1]["jobs"] or \
                    server.api("GET", "jobs?state=running")[1]["jobs"]:
                if time.monotonic() > deadline:
                    break
                time.sleep(1)
            refresh = page.evaluate("""async () => {
                const base = document.querySelector('body').dataset.baseUrl || '/';
                const get = (p) => fetch(base + 'schedulearn/api/' + p).then(r => r.json());
                const times = [];
                for (let i = 0; i < 10; i++) {
                    const t = performance.now();
                    await Promise.all(['gpus', 'policy', 'jobs?state=running', 'jobs?state=queued',
                                       'jobs?limit=200'].map(get));
                    times.push(performance.now() - t);
                }
                return times;
            }""")
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)

    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    print("| figure | n | median | p95 | max |")
    print("|---|---|---|---|---|")
    print(f"| jupyter lab start (to /lab answering) | 1 | {start_s:.2f} s | | |")
    print(f"| page load to GPUs shown | 1 | {load_s:.2f} s | | |")
    for name, vals in [("submit → row in the panel", rows), ("succeeded → shown", shown)]:
        print(f"| {name} | {len(vals)} | {statistics.median(vals) * 1000:.0f} ms | "
              f"{pct(vals, 0.95) * 1000:.0f} ms | {max(vals) * 1000:.0f} ms |")
    print(f"| one refresh, {args.stored + args.jobs} jobs stored | {len(refresh)} | "
          f"{statistics.median(refresh):.0f} ms | {pct(refresh, 0.95):.0f} ms | {max(refresh):.0f} ms |")
    if args.build:
        for name, secs in npm_figures():
            print(f"| {name} | 1 | {secs:.1f} s | | |")


if __name__ == "__main__":
    main()
