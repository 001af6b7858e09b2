"""Real-GPU validation of Schedulearn: the checks behind `scripts/gpu-check.sh` (docs/gpu-check.md).

Run with the Python of an environment where Schedulearn (with its test extras) and torch are
installed. It starts a real Jupyter server with the Schedulearn extension in a temporary folder,
a real kernel through that server, and real jobs, then prints one line per check,
`PASS|FAIL|SKIP <name>: <detail>`, `TIME <figure>: <value>` lines, and a summary
`N passed, N failed, N skipped`. The exit status is 1 when any check failed, 0 otherwise.

Without an NVIDIA GPU (no `nvidia-smi`, no NVML device) or with `--cpu`, the GPU-only checks SKIP
with the reason, and the rest runs on virtual GPUs (`virtual_gpus`) with jobs on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOBS = Path(__file__).resolve().parent / "gpu_check_jobs"
#: linear regression with known gradient statistics (the job of tests/test_elastic_monitor.py)
GNS_JOB = Path(__file__).resolve().parent.parent / "tests" / "jobs" / "gns_train.py"
MARKER = "=== schedulearn:"
TOKEN = "gpu-check-" + os.urandom(8).hex()
#: a 1-GPU job that holds its GPU until the file named by its argument exists
HOLDER = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.1)\n"
#: a process the scheduler did not start, on every GPU: a bare CUDA context (then `<base>.context`
#: exists), then, once `<base>.grow` exists, `argv[2]` MiB more on each (then `<base>.grown`);
#: it ends once `<base>.end` exists
FOREIGN = """import os, sys, time, torch
def wait(name):
    while not os.path.exists(sys.argv[1] + name):
        time.sleep(0.1)
held = [torch.zeros(1, device=f"cuda:{i}") for i in range(torch.cuda.device_count())]
torch.cuda.synchronize()
open(sys.argv[1] + ".context", "w").close()
wait(".grow")
held += [torch.ones(int(sys.argv[2]) << 20, dtype=torch.uint8, device=f"cuda:{i}")
         for i in range(torch.cuda.device_count())]
torch.cuda.synchronize()
open(sys.argv[1] + ".grown", "w").close()
wait(".end")
"""


# ---------------------------------------------------------------------------------------- output
@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=lambda: {"PASS": 0, "FAIL": 0, "SKIP": 0})

    def line(self, status: str, name: str, detail: str) -> None:
        self.counts[status] += 1
        print(f"{status} {name}: {' '.join(str(detail).split())}", flush=True)

    def time(self, name: str, detail: str) -> None:
        print(f"TIME {name}: {detail}", flush=True)

    def summary(self) -> str:
        c = self.counts
        return f"{c['PASS']} passed, {c['FAIL']} failed, {c['SKIP']} skipped"


class Skip(Exception):
    """A check that cannot run here; the message says why."""


class Fail(Exception):
    """A check that ran and found something wrong; the message says what."""


def check(report: Report, name: str, fn: Callable[[], str]) -> bool:
    """Run one check: its return value is the PASS detail; Skip/Fail/any error say otherwise.
    A check that ran (PASS or FAIL) ends its detail with how long it took."""
    t0 = time.monotonic()
    try:
        detail = fn()
    except Skip as e:
        report.line("SKIP", name, str(e))
        return False
    except Fail as e:
        report.line("FAIL", name, f"{e} [{time.monotonic() - t0:.1f} s]")
        return False
    except Exception as e:  # noqa: BLE001 - any error is this check's failure, the others go on
        report.line("FAIL", name, f"{type(e).__name__}: {e} [{time.monotonic() - t0:.1f} s]")
        return False
    report.line("PASS", name, f"{detail} [{time.monotonic() - t0:.1f} s]")
    return True


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# ------------------------------------------------------------------------------ what the host has
@dataclass
class SmiGpu:
    index: int
    name: str
    uuid: str
    migs: list[str] = field(default_factory=list)


def nvidia_smi() -> tuple[list[SmiGpu] | None, str]:
    """GPUs and MIG devices from `nvidia-smi -L`, or (None, why not)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "no nvidia-smi on PATH (no NVIDIA driver)"
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"nvidia-smi -L did not run: {e}"
    if out.returncode != 0:
        return None, f"nvidia-smi -L exited {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}"
    gpus = parse_smi(out.stdout)
    if not gpus:
        return None, "nvidia-smi -L lists no GPU"
    return gpus, ""


def parse_smi(text: str) -> list[SmiGpu]:
    """`nvidia-smi -L` output: `GPU 0: <name> (UUID: GPU-…)` lines, each followed by its MIG
    devices' indented `MIG <profile> Device <n>: (UUID: MIG-…)` lines."""
    gpus: list[SmiGpu] = []
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)", line)
        if m:
            gpus.append(SmiGpu(int(m[1]), m[2], m[3]))
            continue
        m = re.match(r"^\s+MIG .*\(UUID: (MIG-[^)]+)\)", line)
        if m and gpus:
            gpus[-1].migs.append(m[1])
    return gpus


@dataclass
class Host:
    cuda: bool  # jobs compute on CUDA GPUs
    why_not: str  # why not, when not
    smi: list[SmiGpu] | None
    nvml: list[Any]  # schedulearn.inventory's Gpu objects (NVML), empty without NVML
    nvml_error: str | None


def survey(force_cpu: bool) -> Host:
    from schedulearn.inventory import HostInventory

    smi, smi_error = nvidia_smi()
    inv = HostInventory(virtual_gpus=0)
    try:
        nodes = inv.refresh()
        nvml = [] if inv.virtual else list(nodes[0].gpus)
        nvml_error = inv.nvml_error
    finally:
        inv.close()
    if force_cpu:
        return Host(False, "--cpu given", smi, nvml, nvml_error)
    if smi is None:
        return Host(False, smi_error, smi, nvml, nvml_error)
    if not nvml:
        return Host(False, f"no NVML device ({nvml_error})", smi, nvml, nvml_error)
    try:
        import torch
    except ImportError:
        return Host(False, "torch is not installed", smi, nvml, nvml_error)
    if not torch.cuda.is_available():
        return Host(False, f"torch {torch.__version__} sees no CUDA device (a CPU-only build?)",
                    smi, nvml, nvml_error)
    return Host(True, "", smi, nvml, nvml_error)


# ------------------------------------------------------------------------------ server and kernel
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`jupyter server` with the Schedulearn extension, in its own folders under `home`."""

    def __init__(self, home: Path, traits: dict[str, Any]):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = home / "server.log"
        self.runtime = home / "runtime"
        self.env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.runtime),
                    "JUPYTER_DATA_DIR": str(home / "data"), "JUPYTER_CONFIG_DIR": str(home / "config"),
                    "IPYTHONDIR": str(home / "ipython")}
        for key in ("URL", "TOKEN", "REMOTE_URL", "REMOTE_TOKEN"):
            self.env.pop(f"SCHEDULEARN_{key}", None)
        self.args = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
                     f"--port={self.port}", "--ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
                     f"--ServerApp.root_dir={home}", "--ServerApp.jpserver_extensions="
                     "{'schedulearn_jupyter': True, 'jupyterlab': False, 'jupyter_lsp': False, "
                     "'notebook_shim': False, 'notebook': False}"]
        self.args += [f"--SchedulearnApp.{k}={v if isinstance(v, str) else json.dumps(v)}"
                      for k, v in traits.items()]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> Server:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         cwd=self.home, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise Fail(f"jupyter server exited with {self.proc.returncode}: {self.tail()}")
            try:
                self.http("GET", "schedulearn/api/policy")
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise Fail(f"jupyter server did not answer within {timeout} s: {self.tail()}") from None
                time.sleep(0.2)

    def tail(self, lines: int = 3) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def http(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {TOKEN}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Kernel:
    """A kernel started by the Jupyter server (as JupyterLab starts one), driven over ZeroMQ."""

    def __init__(self, server: Server):
        from jupyter_client import BlockingKernelClient

        self.server = server
        self.id = server.http("POST", "api/kernels", {"name": "python3"})["id"]
        self.kc = BlockingKernelClient(connection_file=str(server.runtime / f"kernel-{self.id}.json"))
        self.kc.load_connection_file()
        self.kc.start_channels()
        # kernel_info until it answers (wait_for_ready can give up on a heartbeat not yet beating)
        deadline = time.monotonic() + 120
        while True:
            msg_id = self.kc.kernel_info()
            try:
                while self.kc.get_shell_msg(timeout=2)["parent_header"].get("msg_id") != msg_id:
                    pass
                return
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise Fail(f"the kernel did not answer within 120 s: {server.tail()}") from None

    def run(self, code: str, timeout: float) -> tuple[dict, str, list[str]]:
        """(execute_reply content, stream text, execute_result texts)."""
        streams: list[str] = []
        results: list[str] = []

        def hook(msg: dict) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                streams.append(content["text"])
            elif kind == "execute_result":
                results.append(content["data"].get("text/plain", ""))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook, allow_stdin=False)
        return reply["content"], "".join(streams), results

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        with contextlib.suppress(Exception):
            self.server.http("DELETE", f"api/kernels/{self.id}")


# ---------------------------------------------------------------------------------------- checks
class Checks:
    def __init__(self, args: argparse.Namespace, host: Host, work: Path, report: Report):
        from schedulearn.client import Client

        self.args, self.host, self.work, self.report = args, host, work, report
        self.cuda = host.cuda
        self.server = Server(work / "server", {
            "virtual_gpus": 0 if host.cuda else args.virtual_gpus,
            "executor": "local", "job_root": str(work / "jobs"),
            "store_url": f"sqlite:///{work / 'jobs.db'}", "tick": 0.5,
            "inventory_interval": 1, "cancel_grace": 30.0,
        })
        self.client_class = Client
        self.client: Any = None
        self.kernel: Kernel | None = None
        self.utilisation = ("SKIP", "not measured")

    # -- helpers ---------------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        return {"GPU_CHECK_CUDA": "1" if self.cuda else "0", **extra}

    def job_script(self, name: str) -> str:
        return str(JOBS / name)

    def gpus(self) -> list[dict[str, Any]]:
        return [g for n in self.client.gpus()["nodes"] for g in n["gpus"]]

    def wait_job(self, job_id: int, timeout: float) -> dict[str, Any]:
        return wait_until(lambda: (j := self.client.job(job_id))["state"] in
                          ("succeeded", "failed", "cancelled") and j, timeout, f"job {job_id} to end")

    def succeeded(self, job: dict[str, Any]) -> None:
        if job["state"] != "succeeded":
            last = self.client.logs(job["id"], tail=5).strip().replace("\n", " | ")
            raise Fail(f"job {job['id']} {job['state']}: {job.get('reason')}; log: {last}")

    def allocated(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The GPU entries (from the `gpus` route) of a running job's allocation."""
        by_index = {g["index"]: g for g in self.gpus()}
        return [by_index[i] for idx in job["alloc"].values() for i in idx]

    def given(self, job_id: int) -> list[dict[str, Any]]:
        """The GPU entries of the devices the scheduler gave the job's last run, read from its
        log's start line (`CUDA_VISIBLE_DEVICES=...`: NVML indices, or UUIDs for MIG devices)."""
        starts = re.findall(rf"^{MARKER} start #\d+ of job {job_id} .*? CUDA_VISIBLE_DEVICES=(\S*):",
                            self.client.logs(job_id), re.M)
        if not starts:
            raise Fail(f"job {job_id}: no start line in its log")
        gpus = self.gpus()
        out = []
        for dev in filter(None, starts[-1].split(",")):
            match = [g for g in gpus if dev in (g["uuid"], str(g["index"]))]
            if len(match) != 1:
                raise Fail(f"job {job_id} was started with CUDA_VISIBLE_DEVICES entry {dev!r}, "
                           f"which names {len(match)} GPUs of the gpus route")
            out += match
        return out

    def result_line(self, job_id: int) -> dict[str, Any]:
        for line in self.client.logs(job_id).splitlines():
            if line.startswith("GPU_CHECK "):
                return json.loads(line[len("GPU_CHECK "):])
        raise Fail(f"job {job_id} printed no GPU_CHECK line")

    def same_device(self, seen: dict[str, Any], gpu: dict[str, Any]) -> str:
        """Fail unless what a job saw is the GPU it was given; return a short description."""
        if seen.get("visible") is None or "," in seen["visible"]:
            raise Fail(f"job saw CUDA_VISIBLE_DEVICES={seen.get('visible')!r}, expected one device")
        mig = gpu["uuid"].startswith("MIG-")
        if seen["visible"] != (gpu["uuid"] if mig else str(gpu["index"])):
            raise Fail(f"CUDA_VISIBLE_DEVICES={seen['visible']} but the job holds GPU {gpu['index']} "
                       f"({gpu['uuid']})")
        if not self.cuda:
            return f"virtual GPU {gpu['index']}" if gpu["uuid"].startswith("virtual-") else \
                f"GPU {gpu['index']} (CUDA not used)"
        if seen.get("device_count") != 1:
            raise Fail(f"torch in the job sees {seen.get('device_count')} CUDA devices, expected 1")
        if mig or not seen.get("uuid"):
            note = "MIG device" if mig else "this torch reports no device UUID"
            return f"GPU {gpu['index']} {seen.get('name')} ({gpu['uuid']}; {note}: CUDA UUID not compared)"
        if "GPU-" + seen["uuid"] != gpu["uuid"]:
            raise Fail(f"the job computed on GPU-{seen['uuid']} but was given {gpu['uuid']} "
                       f"(index {gpu['index']})")
        return f"GPU {gpu['index']} {seen.get('name')} ({gpu['uuid']} = the CUDA device's UUID)"

    # -- 1. inventory ----------------------------------------------------------------------------
    def nvml_inventory(self) -> str:
        h = self.host
        if h.smi is None:
            raise Skip(h.why_not if not self.args.cpu else "--cpu given and no nvidia-smi here")
        if not h.nvml:
            raise Fail(f"nvidia-smi -L lists {len(h.smi)} GPUs but schedulearn.inventory found none "
                       f"({h.nvml_error})")
        expected = {}
        for g in h.smi:
            for u in g.migs or [g.uuid]:
                expected[u] = g.index
        found = {g.uuid: g for g in h.nvml}
        if set(found) != set(expected):
            raise Fail(f"UUIDs differ: only nvidia-smi {sorted(set(expected) - set(found))}, "
                       f"only NVML inventory {sorted(set(found) - set(expected))}")
        wrong = [f"{u}: index {g.index} vs {expected[u]}" for u, g in found.items()
                 if g.mig_parent is None and g.index != expected[u]]
        if wrong:
            raise Fail("indices differ from nvidia-smi -L: " + "; ".join(wrong))
        names = sorted({g.name for g in h.nvml})
        return f"{len(found)} devices ({', '.join(names)}), UUIDs and indices match nvidia-smi -L"

    def mig_devices(self) -> str:
        h = self.host
        if h.smi is None:
            raise Skip(h.why_not if not self.args.cpu else "--cpu given and no nvidia-smi here")
        smi_migs = {u: g.uuid for g in h.smi for u in g.migs}
        if not smi_migs:
            raise Skip("no MIG devices (nvidia-smi -L lists none: MIG mode is off)")
        listed = {g.uuid: g.mig_parent for g in h.nvml if g.mig_parent}
        if listed != smi_migs:
            raise Fail(f"MIG devices in the inventory {listed} differ from nvidia-smi -L {smi_migs}")
        served = {g["uuid"] for g in self.gpus()}
        if not set(smi_migs) <= served:
            raise Fail(f"the gpus route lacks MIG devices {sorted(set(smi_migs) - served)}")
        return f"{len(listed)} MIG devices listed with their parents, and by the gpus route"

    # -- 2. a cell through the server ------------------------------------------------------------
    def cell_matmul(self) -> str:
        import torch

        n, seed = 1024, 1234
        code = (
            "%%schedulearn --gpus 1 --launcher python --name gpu-check-matmul -o gpu_check_result\n"
            "import os, torch\n"
            f"g = torch.Generator().manual_seed({seed})\n"
            f"a = torch.randn({n}, {n}, generator=g, dtype=torch.float64)\n"
            f"b = torch.randn({n}, {n}, generator=g, dtype=torch.float64)\n"
            f"if {self.cuda!r} and not torch.cuda.is_available():\n"
            "    raise RuntimeError('CUDA not available in the job, CUDA_VISIBLE_DEVICES='\n"
            "                       + str(os.environ.get('CUDA_VISIBLE_DEVICES')))\n"
            f"dev = torch.device('cuda' if {self.cuda!r} else 'cpu')\n"
            "c = (a.to(dev) @ b.to(dev)).cpu()\n"
            "props = torch.cuda.get_device_properties(0) if dev.type == 'cuda' else None\n"
            "{'visible': os.environ.get('CUDA_VISIBLE_DEVICES'),\n"
            " 'job_id': os.environ['SCHEDULEARN_JOB_ID'],\n"
            " 'device': dev.type, 'device_count': torch.cuda.device_count() if props else 0,\n"
            " 'name': props.name if props else 'cpu',\n"
            " 'uuid': str(getattr(props, 'uuid', '')) if props else '',\n"
            " 'sum': c.sum().item(), 'abs_sum': c.abs().sum().item()}\n"
        )
        if self.kernel is None:
            self.kernel = Kernel(self.server)
        self.kernel.run("%load_ext schedulearn_jupyter", timeout=120)
        t0 = time.monotonic()
        reply, _, results = self.kernel.run(code, timeout=600)
        took = time.monotonic() - t0
        if reply["status"] != "ok":
            raise Fail(f"the cell raised {reply.get('ename')}: {reply.get('evalue')}")
        if not results:
            raise Fail("the cell returned no value")
        reply, out, _ = self.kernel.run("import json; print(json.dumps(gpu_check_result))", timeout=60)
        if reply["status"] != "ok":
            raise Fail(f"the result did not reach the kernel: {reply.get('evalue')}")
        seen = json.loads(out.strip().splitlines()[-1])
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(n, n, generator=g, dtype=torch.float64)
        b = torch.randn(n, n, generator=g, dtype=torch.float64)
        c = a @ b
        ref_sum, ref_abs = c.sum().item(), c.abs().sum().item()
        if abs(seen["sum"] - ref_sum) > 1e-9 * ref_abs or abs(seen["abs_sum"] - ref_abs) > 1e-9 * ref_abs:
            raise Fail(f"checksum {seen['sum']!r}/{seen['abs_sum']!r} != CPU {ref_sum!r}/{ref_abs!r}")
        if seen["device"] != ("cuda" if self.cuda else "cpu"):
            raise Fail(f"the matmul ran on {seen['device']}")
        job_id = int(seen["job_id"])
        given = self.given(job_id)
        if len(given) != 1:
            raise Fail(f"the job was given {len(given)} GPUs, expected 1")
        where = self.same_device(seen, given[0])
        return (f"job {job_id} on {where}: {n}x{n} float64 matmul on {seen['device']}, "
                f"checksum {seen['sum']:.6f} matches the CPU, cell took {took:.1f} s")

    # -- 3. two concurrent 1-GPU jobs ------------------------------------------------------------
    def concurrent_jobs(self) -> str:
        total = len(self.gpus())
        if total < 2:
            raise Skip(f"{total} GPU on this machine: two 1-GPU jobs cannot run side by side")
        barrier, hold = self.work / "barrier", self.work / "release-concurrent"
        barrier.mkdir()
        env = self.env(GPU_CHECK_BARRIER=str(barrier), GPU_CHECK_PEERS="2", GPU_CHECK_HOLD=str(hold))
        jobs = [self.client.submit({"name": f"gpu-check-concurrent-{i}", "gpus": 1, "env": env,
                                    "command": ["python", self.job_script("probe.py")]}) for i in range(2)]
        try:
            wait_until(lambda: all(self._log_has(j["id"], "^GPU_CHECK ") or self._ended(j["id"])
                                   for j in jobs), 300, "both jobs to report their device")
            running = [self.client.job(j["id"]) for j in jobs]
            route = self.gpus()
        finally:
            hold.touch()
        done = [self.wait_job(j["id"], 120) for j in jobs]
        for j in done:
            self.succeeded(j)
        seen = [self.result_line(j["id"]) for j in done]
        given = [self.allocated(j) for j in running]
        if any(len(g) != 1 for g in given):
            raise Fail(f"allocations {[j['alloc'] for j in running]}, expected one GPU each")
        for j, g in zip(running, given, strict=True):
            shown = [x["index"] for x in route if x["job_id"] == j["id"]]
            if shown != [g[0]["index"]]:
                raise Fail(f"the gpus route shows job {j['id']} on {shown}, its allocation is {j['alloc']}")
        where = [self.same_device(s, g[0]) for s, g in zip(seen, given, strict=True)]
        if given[0][0]["uuid"] == given[1][0]["uuid"] or seen[0]["visible"] == seen[1]["visible"]:
            raise Fail(f"both jobs saw the same device: {where[0]}")
        if self.cuda and seen[0].get("uuid") == seen[1].get("uuid"):
            raise Fail(f"both jobs computed on the same CUDA device {seen[0].get('uuid')}")
        return f"jobs {done[0]['id']} and {done[1]['id']} ran at once on {where[0]} and {where[1]}"

    # -- 4. torchrun + NCCL ----------------------------------------------------------------------
    def torchrun_nccl(self) -> str:
        if not self.cuda:
            raise Skip(f"NCCL needs CUDA GPUs ({self.host.why_not})")
        gpus = self.gpus()
        mig = any(g["uuid"].startswith("MIG-") for g in gpus)
        world = 1 if mig else len(gpus)
        job = self.client.submit({"name": "gpu-check-nccl", "gpus": world, "launcher": "torchrun",
                                  "env": self.env(), "command": ["python", self.job_script("allreduce.py")]})
        job = self.wait_job(job["id"], 300)
        self.succeeded(job)
        seen = self.result_line(job["id"])
        want = world * (world + 1) / 2
        if seen["world"] != world or seen["sum"] != want or seen["backend"] != "nccl":
            raise Fail(f"world {seen['world']} backend {seen['backend']} sum {seen['sum']}, "
                       f"expected world {world} nccl sum {want:g}")
        if len(set(seen["devices"])) != world:
            raise Fail(f"ranks shared devices: {seen['devices']}")
        note = " (MIG: one process, NCCL does not span MIG devices)" if mig else ""
        return (f"{world} processes on {world} GPUs ({seen['name']}), NCCL all-reduce sum "
                f"{seen['sum']:g}{note}")

    # -- 5. checkpoint-restart -------------------------------------------------------------------
    def checkpoint_restart(self) -> str:
        steps = self.args.train_steps
        env = self.env(TRAIN_STEPS=str(steps), STEP_SLEEP=str(self.args.step_sleep))
        train = ["python", self.job_script("train.py")]
        if len(self.gpus()) >= 2:
            how, ids = self._resize(train, env)
            want_sizes = [2, 1]
        else:
            how, ids = self._preempt(train, env)
            want_sizes = [1]
        text = "".join(self.client.logs(i) for i in ids)
        found = [tuple(map(int, m)) for m in
                 re.findall(r"^step (\d+) gpus (\d+) world (\d+) restart \d+$", text, re.M)]
        numbers = [s for s, _, _ in found]
        if numbers != list(range(1, steps + 1)):
            raise Fail(f"steps not continuous across the restart: {numbers}")
        if self.args.train_launcher == "torchrun" and any(g != w for _, g, w in found):
            raise Fail(f"torchrun ran a process count other than the GPU count: {found}")
        sizes = [g for i, (_, g, _) in enumerate(found) if i == 0 or found[i - 1][1] != g]
        if sizes != want_sizes:
            raise Fail(f"the job trained on {' then '.join(map(str, sizes))} GPUs, expected "
                       f"{' then '.join(map(str, want_sizes))}")
        resumed = [int(s) for s in
                   re.findall(r"^resume (\d+) gpus \d+ world \d+ restart \d+ device", text, re.M)]
        if len(resumed) < 2 or resumed[0] != 0 or not all(s > 0 for s in resumed[1:]):
            raise Fail(f"expected a fresh start then a resume from a checkpoint, got resume steps {resumed}")
        device = re.search(r"^resume 0 gpus \d+ world \d+ restart 0 device (.+)$", text, re.M)
        final = json.loads((self.work / "jobs" / str(ids[-1]) / "final.json").read_text())
        sys.path.insert(0, str(JOBS))
        try:
            import train as reference_run
        finally:
            sys.path.remove(str(JOBS))
        expected = reference_run.reference(steps)
        err = max(abs(x - y) for x, y in zip(final, expected, strict=True))
        if err > 1e-6:
            raise Fail(f"final weights differ from an uninterrupted CPU run by {err:.3g}")
        return (f"{how}: steps 1..{steps} continuous, resumed at {resumed[1:]}, on "
                f"{device[1] if device else '?'}; final weights match an uninterrupted CPU run ({err:.1e})")

    def _ended(self, job_id: int) -> bool:
        return self.client.job(job_id)["state"] in ("succeeded", "failed", "cancelled")

    def _log_has(self, job_id: int, pattern: str) -> bool:
        return re.search(pattern, self.client.logs(job_id), re.M) is not None

    def _resize(self, train: list[str], env: dict[str, str]) -> tuple[str, list[int]]:
        """elastic-fifo: a 1..2-GPU torchrun job on 2 GPUs shrinks to 1 when a 1-GPU job arrives."""
        self.client.set_policy("elastic-fifo")
        release = self.work / "release-holder"
        try:
            a = self.client.submit({"name": "gpu-check-train", "gpus": "auto", "min_gpus": 1, "max_gpus": 2,
                                    "launcher": self.args.train_launcher, "env": env, "command": train})
            wait_until(lambda: self._log_has(a["id"], r"^step 3 gpus 2 "), 300,
                       "the training job to run 3 steps on 2 GPUs")
            holder = self.client.submit({
                "name": "gpu-check-holder", "gpus": 1, "command": [
                    "python", "-c", HOLDER, str(release)]})
            wait_until(lambda: self._log_has(a["id"], r"^step \d+ gpus 1 "), 300,
                       "the training job to continue on 1 GPU after the shrink")
            a = self.wait_job(a["id"], 600)
        finally:
            release.touch()
            self.client.set_policy("fifo")
        self.succeeded(a)
        self.succeeded(self.wait_job(holder["id"], 60))
        if a["restarts"] < 1:
            raise Fail(f"job {a['id']} was never restarted (restarts={a['restarts']})")
        return (f"{self.args.train_launcher} job {a['id']} resized 2 -> 1 GPUs by elastic-fifo "
                f"({a['restarts']} restart)", [a["id"]])

    def _preempt(self, train: list[str], env: dict[str, str]) -> tuple[str, list[int]]:
        """One GPU: no resize is possible, so the job is stopped with DELETE (SIGTERM: it saves
        its checkpoint) and a second job resumes from the same checkpoint folder."""
        env = {**env, "GPU_CHECK_CKPT_DIR": str(self.work / "checkpoints")}
        spec = {"name": "gpu-check-train", "gpus": 1, "env": env, "command": train,
                "launcher": self.args.train_launcher}
        a = self.client.submit(spec)
        wait_until(lambda: self._log_has(a["id"], r"^step 3 gpus 1 "), 300,
                   "the training job to run 3 steps")
        self.client.cancel(a["id"])
        a = self.wait_job(a["id"], 120)
        if not (self.work / "checkpoints" / "latest.pt").exists():
            raise Fail(f"job {a['id']} ({a['state']}) left no checkpoint after SIGTERM")
        b = self.wait_job(self.client.submit(spec)["id"], 600)
        self.succeeded(b)
        return (f"{self.args.train_launcher} job {a['id']} stopped by DELETE (one GPU: no resize "
                f"possible), job {b['id']} resumed", [a["id"], b["id"]])

    # -- 5b. the Monitor's gradient statistics on the job's device ---------------------------------
    def monitor_statistics(self) -> str:
        """`schedulearn.elastic.Monitor` in a 1-GPU job whose model and batches are on the GPU
        (float64 linear regression, weights frozen: the statistics are known exactly), two
        micro-batches a step: its |g|^2 and per-sample variance within 10 % of the analytic
        values, and its reports reach the server (the job's progress in the REST API is 1)."""
        device = "cuda" if self.cuda else "cpu"
        env = self.env(DEVICE=device, STEPS="1500", B0="32", MAXLOCAL="16", SMOOTHING="0.998",
                       REPORT_EVERY="1")
        job = self.client.submit({"name": "gpu-check-monitor", "gpus": 1, "launcher": "python",
                                  "env": env, "command": ["python", str(GNS_JOB)]})
        job = self.wait_job(job["id"], 600)
        self.succeeded(job)
        lines = [x for x in self.client.logs(job["id"]).splitlines() if x.startswith("{")]
        if not lines:
            raise Fail(f"job {job['id']} printed no result line")
        out = json.loads(lines[-1])
        if not out["device"].startswith(device) or (out["accum_steps"], out["micro_batch"]) != (1, 16):
            raise Fail(f"the job trained on {out['device']} with {out['accum_steps'] + 1} micro-batches "
                       f"of {out['micro_batch']}, expected {device} and 2 of 16")
        errs = {k: out[k] / out[f"true_{k}"] - 1 for k in ("sqr", "var")}
        if any(abs(e) > 0.10 for e in errs.values()):
            raise Fail(f"statistics off their analytic values by more than 10 %: |g|^2 {out['sqr']:.4g} "
                       f"(true {out['true_sqr']:.4g}), variance {out['var']:.4g} "
                       f"(true {out['true_var']:.4g})")
        if job.get("progress") != 1:
            raise Fail(f"the server shows progress {job.get('progress')!r} for the finished job, expected 1")
        return (f"job {job['id']} on {out['device']}: |g|^2 {errs['sqr']:+.1%}, per-sample variance "
                f"{errs['var']:+.1%} off their analytic values over {out['steps']} steps of 2 micro-batches; "
                f"progress 1 in the REST API")

    # -- 5c. GPUs a process outside the scheduler uses ------------------------------------------------
    def busy_gpu(self) -> str:
        """A process the scheduler did not start (`busygpus`): with a bare CUDA context on every
        GPU, the GPUs stay free; with 4 GiB more on each, the `gpus` route names it on every GPU,
        a 1-GPU job waits (its reason says so), and it starts once the process ends."""
        if not self.cuda:
            raise Skip(f"virtual GPUs: no processes for NVML to list ({self.host.why_not})")
        if any(g["uuid"].startswith("MIG-") for g in self.gpus()):
            raise Skip("MIG devices: NVML lists no processes per MIG device here")
        base, mib = str(self.work / "foreign"), 4096
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        with open(base + ".log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-c", FOREIGN, base, str(mib)], env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: Path(base + ".context").exists() or proc.poll() is not None, 120,
                       "the foreign process to open its CUDA context")
            if proc.poll() is not None:
                tail = Path(base + ".log").read_text(errors="replace")[-300:]
                raise Fail(f"the foreign process exited with {proc.returncode}: {tail!r}")
            time.sleep(3)  # three inventory reads
            context = self._used_mib(proc.pid)
            held = [g["index"] for g in self.gpus() if g["held_by"]]
            if held:
                raise Fail(f"a bare CUDA context ({context} MiB) held GPUs {held}")
            Path(base + ".grow").touch()
            wait_until(lambda: Path(base + ".grown").exists() or proc.poll() is not None, 120,
                       f"the foreign process to take {mib} MiB")
            shown = wait_until(lambda: (h := [g["held_by"] for g in self.gpus()]) and all(
                f"process {proc.pid}" in (x or "") for x in h) and h, 30,
                f"the gpus route to show process {proc.pid} on every GPU")
            job = self.client.submit({"name": "gpu-check-busy-wait", "gpus": 1,
                                      "command": ["python", "-c", "print('ran')"]})
            time.sleep(3)
            waiting = self.client.job(job["id"])
            reason = waiting.get("reason") or ""
            if waiting["state"] != "queued" or "held outside the scheduler" not in reason:
                raise Fail(f"job {job['id']} is {waiting['state']} ({reason}) beside a GPU "
                           f"held by process {proc.pid}")
        finally:
            Path(base + ".end").touch()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        ended = time.monotonic()
        done = self.wait_job(job["id"], 120)
        self.succeeded(done)
        return (f"a bare CUDA context ({context} MiB) left the GPU free; with {mib} MiB more the gpus route "
                f"showed {shown[0]!r}, job {job['id']} waited ({reason!r}) and succeeded "
                f"{time.monotonic() - ended:.1f} s after the process ended")

    @staticmethod
    def _used_mib(pid: int) -> str:
        """The GPU memory NVML reports for `pid` (nvidia-smi), in MiB, or "?"."""
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return "?"
        rows = [[x.strip() for x in line.split(",")] for line in out.splitlines()]
        return "+".join(r[1] for r in rows if len(r) == 2 and r[0] == str(pid)) or "?"

    # -- 6. the gpus route while a job computes --------------------------------------------------
    def gpus_route(self) -> str:
        """A job that computes: the `gpus` route shows it on its GPU (the PASS detail), and its
        GPU's utilisation moves (the gpu-utilisation line, kept in `self.utilisation`)."""
        stop = self.work / "stop-busy"
        before = {g["uuid"]: g["utilization"] for g in self.gpus()}
        job = self.client.submit({"name": "gpu-check-busy", "gpus": 1, "command": [
            "python", self.job_script("busy.py")], "env": self.env(GPU_CHECK_STOP=str(stop))})
        samples: list[float] = []
        try:
            wait_until(lambda: self._log_has(job["id"], r"^busy$"), 300, "the busy job to compute")
            job = self.client.job(job["id"])
            mine = self.allocated(job)
            held = [g for g in self.gpus() if g["job_id"] == job["id"]]
            if [g["uuid"] for g in held] != [g["uuid"] for g in mine]:
                raise Fail(f"the gpus route shows job {job['id']} on {[g['index'] for g in held]}, "
                           f"its allocation is {job['alloc']}")
            route = f"job {job['id']} shown on GPU {mine[0]['index']} ({mine[0]['uuid']}) while it runs"
            if self.cuda:
                deadline = time.monotonic() + self.args.util_seconds
                while time.monotonic() < deadline:
                    samples += [g["utilization"] for g in self.gpus() if g["uuid"] == mine[0]["uuid"]]
                    if samples and max(samples) >= 10 and max(samples) > before.get(mine[0]["uuid"], 0):
                        break
                    time.sleep(0.5)
        finally:
            stop.touch()
        self.succeeded(self.wait_job(job["id"], 120))
        if not self.cuda:
            self.utilisation = ("SKIP", f"virtual GPUs report no utilisation ({self.host.why_not})")
        elif mine[0]["uuid"].startswith("MIG-"):
            self.utilisation = ("SKIP", "NVML reports no utilisation for MIG devices")
        else:
            time.sleep(2)  # the inventory is re-read every second
            after = [g["utilization"] for g in self.gpus() if g["uuid"] == mine[0]["uuid"]][0]
            peak, idle = max(samples, default=0.0), before.get(mine[0]["uuid"], 0.0)
            if peak < 10 or peak <= idle:
                self.utilisation = ("FAIL", f"utilisation of GPU {mine[0]['index']} stayed at "
                                            f"{samples} % while computing (before: {idle:g} %)")
            else:
                self.utilisation = ("PASS", f"GPU {mine[0]['index']}: {idle:g} % before, {peak:g} % while "
                                            f"computing, {after:g} % after")
        return route

    # -- 7. timing -------------------------------------------------------------------------------
    def timing(self) -> str:
        first, start, cuda_init, total = [], [], [], []
        for i in range(self.args.repeat):
            t_submit = time.time()
            job = self.client.submit({"name": f"gpu-check-launch-{i}", "gpus": 1, "env": self.env(),
                                      "command": ["python", "-u", self.job_script("probe.py")]})
            t_first = None
            for line in self.client.follow(job["id"], timeout=300):
                if t_first is None and line.strip() and not line.startswith(MARKER):
                    t_first = time.time()
            job = self.wait_job(job["id"], 60)
            t_done = time.time()
            self.succeeded(job)
            text = self.client.logs(job["id"])
            t0 = re.search(r"^T0 ([\d.]+)$", text, re.M)
            t1 = re.search(r"^T1 ([\d.]+)$", text, re.M)
            if t_first is None or t0 is None:
                raise Fail(f"job {job['id']} streamed no first line")
            first.append(t_first - t_submit)
            start.append(float(t0[1]) - t_submit)
            total.append(t_done - t_submit)
            if t1:
                cuda_init.append(float(t1[1]) - float(t0[1]))

        def fig(xs: list[float]) -> str:
            return f"median {statistics.median(xs):.3f} s (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"

        where = "GPU" if self.cuda else "CPU, virtual GPU"
        self.report.time(f"submit->first log line ({where})", fig(first))
        self.report.time(f"launch overhead, submit->job's first statement ({where})", fig(start))
        if cuda_init:
            self.report.time("CUDA start in the job (import torch + first kernel)", fig(cuda_init))
        self.report.time(f"submit->job succeeded, 1-GPU probe job ({where})", fig(total))
        n = self.args.repeat
        return f"{n} probe job{'s' if n > 1 else ''} through the REST API, figures on the TIME lines"

    # -- running them all --------------------------------------------------------------------------
    def run(self) -> None:
        r = self.report
        check(r, "nvml-inventory", self.nvml_inventory)
        check(r, "mig-devices", self.mig_devices)
        names = ["cell-cuda-matmul", "concurrent-jobs", "torchrun-nccl", "checkpoint-restart",
                 "monitor-statistics", "busy-gpu", "gpus-route", "gpu-utilisation", "launch-timing"]
        try:
            self.server.start()
            self.client = self.client_class(self.server.url, TOKEN, timeout=60)
        except Exception as e:  # noqa: BLE001 - reported, and the checks that need it are skipped
            r.line("FAIL", "jupyter-server", f"{type(e).__name__}: {e}")
            for name in names:
                r.line("SKIP", name, "the Jupyter server did not start")
            return
        check(r, "cell-cuda-matmul", self.cell_matmul)
        check(r, "concurrent-jobs", self.concurrent_jobs)
        check(r, "torchrun-nccl", self.torchrun_nccl)
        check(r, "checkpoint-restart", self.checkpoint_restart)
        check(r, "monitor-statistics", self.monitor_statistics)
        check(r, "busy-gpu", self.busy_gpu)
        if check(r, "gpus-route", self.gpus_route):
            status, detail = self.utilisation
            r.line(status, "gpu-utilisation", detail)
        else:
            r.line("FAIL" if self.cuda else "SKIP", "gpu-utilisation",
                   "the busy job did not run (see gpus-route)")
        check(r, "launch-timing", self.timing)

    def close(self) -> None:
        if self.kernel is not None:
            self.kernel.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                for job in self.client.jobs():
                    if job["state"] in ("queued", "running"):
                        self.client.cancel(job["id"])
                wait_until(lambda: not any(j["state"] in ("queued", "running") for j in self.client.jobs()),
                           60, "the jobs to end")
        self.server.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true",
                   help="do not use CUDA even where there is a GPU: virtual GPUs, jobs on the CPU")
    p.add_argument("--virtual-gpus", type=int, default=2,
                   help="virtual GPUs of the server without NVML (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="probe jobs for the timing figures (default 3)")
    p.add_argument("--train-steps", type=int, default=20,
                   help="steps of the checkpoint-restart job (at least 4: it is stopped after step 3)")
    p.add_argument("--train-launcher", choices=("torchrun", "python"), default="torchrun",
                   help="launcher of the checkpoint-restart job (default torchrun: one process per GPU, "
                        "NCCL on CUDA; python: one process, quicker on a loaded CPU)")
    p.add_argument("--step-sleep", type=float, default=0.2, help="seconds each training step sleeps")
    p.add_argument("--util-seconds", type=float, default=30, help="how long to watch the utilisation")
    p.add_argument("--keep-work", action="store_true", help="keep the work folder (server log, job dirs)")
    args = p.parse_args(argv)
    for name, least in (("virtual_gpus", 1), ("repeat", 1), ("train_steps", 4)):
        if getattr(args, name) < least:
            p.error(f"--{name.replace('_', '-')}: expected an integer >= {least}, got {getattr(args, name)}")
    if not math.isfinite(args.step_sleep) or args.step_sleep < 0:
        p.error(f"--step-sleep: expected seconds >= 0, got {args.step_sleep}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="schedulearn-gpu-check-"))
    host = survey(args.cpu)
    mode = "CUDA" if host.cuda else f"CPU with {args.virtual_gpus} virtual GPUs ({host.why_not})"
    print(f"schedulearn gpu-check: {mode}; python {sys.executable}; work folder {work}", flush=True)
    checks = Checks(args, host, work, report)

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        checks.run()
    except KeyboardInterrupt:
        report.line("FAIL", "interrupted", "the checks were interrupted")
    finally:
        checks.close()
    failed = report.counts["FAIL"] > 0
    if failed or args.keep_work:
        print(f"work folder kept: {work} (server.log, jobs/<id>/log.txt)", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(report.summary(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
