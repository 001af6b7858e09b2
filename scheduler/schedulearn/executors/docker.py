"""Run jobs as Docker containers on one or more Docker hosts (the docker SDK).

One container per host a job is placed on ("worker"), argv and env from `launch.build_workers`:
a torchrun job across hosts gets one torchrun per host with a c10d rendezvous on the first host.
Every container is labelled `schedulearn.job=<id>`, `schedulearn.rank`, `schedulearn.restart` and
`schedulearn.jobdir=<job dir>` (what `recover` looks for after a restart), runs with
`network_mode="host"` (workers reach each other on the hosts' addresses), `init=True` (so that
`docker stop`'s SIGTERM reaches the job: a process that is PID 1 ignores it), `shm_size`
(default 1g: Docker's 64 MB breaks DataLoader workers), and mounts the job directory at the same
path (on remote hosts the job root must therefore be a shared file system mounted at the same
path everywhere). GPUs: real ones are passed with `device_requests` by device ID (inside, the
container sees them as 0..k-1, and `CUDA_VISIBLE_DEVICES` says so); virtual ones are only named in
`CUDA_VISIBLE_DEVICES`, exactly as the local executor does.

The run lifecycle (stop with a grace period, resize, restart, exit reports) is
`lifecycle.RunExecutor`'s; what is Docker's is how a run starts (its containers), how it is
signalled (`docker kill`) and watched: one thread per container follows its log stream into the
job's `log.txt` (lines prefixed with `[host] ` when a job spans hosts), then reads the exit
status, removes the container (its log is kept) and, when it was the job's last worker, ends the
run. A worker that fails stops the other workers; the job fails with that worker's reason.

Resize in place (docs/docker.md): an elastic Horovod job that asks for it runs under Horovod
Elastic in its first host's container; a grow onto another host starts an sshd container there
first (horovodrun starts the new workers over ssh), a shrink waits for the removed workers, then
stops the sshd container of a host the job left. Where that cannot be done (no sshd in the
image, real GPUs a running container lacks, ...) the resize is a checkpoint-restart.

Faults: an image that is not on the host fails the start with a one-line `ExecutorError` (images
are not pulled unless `pull="missing"`: pre-pull them on every host). A host that does not answer
fails the job with a one-line reason and is marked unhealthy (`engine.set_nodes`), so that
nothing more is placed there; a health thread pings every host and marks it healthy again when
its daemon answers.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import joblogs, nofollow
from ..jobfiles import CHECKPOINT_DIR, RUNNER_COPY
from ..model import Allocation, Job, JobSpec, Launcher, Node
from . import oom
from .base import ExecutorError
from .hosts import DockerHost, host_nodes, parse_hosts, short_error
from .launch import (
    GPUS_FILE,
    RUNNER,
    WORKERS_DIR,
    build_workers,
    elastic_host_files,
    job_environment,
    prepare_elastic_dir,
    visible_devices,
)
from .lifecycle import ENGINE_STOPS, Run, RunExecutor, reattached_line, resized_line, start_line
from .registry import ExecutorKind, Option

if TYPE_CHECKING:
    from ..service import Settings

log = logging.getLogger("schedulearn.executors.docker")

LABEL_JOB = "schedulearn.job"
LABEL_RANK = "schedulearn.rank"
LABEL_RESTART = "schedulearn.restart"
LABEL_JOBDIR = "schedulearn.jobdir"
PULL_POLICIES = ("never", "missing")
_BIND_MODES = {"ro", "rw", "z", "Z", "shared", "slave", "private", "rshared", "rslave", "rprivate", "nocopy"}
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TAIL_LINES = joblogs.REASON_LINES  # the log tail kept for the failure reason


@dataclass(eq=False)
class _Worker:
    host: str
    rank: int
    cid: str
    sidecar: bool = False  # a Horovod sshd container: its exit is not the job's
    devices: list[str] | None = None  # the real GPUs the container was given (None: virtual)
    retired: bool = False  # a sidecar a shrink is stopping (its host is no longer the job's)
    skip: int = 0  # log lines already in the log file (re-attached after a restart)
    code: int | None = None
    oom: bool = False
    lost: str | None = None  # contact with the daemon lost: why
    lines: collections.deque = field(default_factory=lambda: collections.deque(maxlen=_TAIL_LINES))


@dataclass(eq=False, kw_only=True)
class _Run(Run):
    workers: list[_Worker]
    logf: Any  # the job's log, open (unbuffered) while the run goes
    failed: _Worker | None = None  # the first worker that failed on its own
    log_lock: threading.Lock = field(default_factory=threading.Lock)
    multi: bool = False  # the job spans hosts: log lines get a `[host] ` prefix
    elastic: tuple[int, int] | None = None  # Horovod Elastic's (min, max) workers: resized in place
    image: str = ""
    cwd: str = ""
    applying: bool = False  # a resize in place is being applied (sidecars, files, a shrink's wait)
    spans: bool = False  # Horovod's network interface is one other hosts have: grows onto them in place


#: what the NVIDIA container toolkit reads to decide which GPUs a container gets
NVIDIA_VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def nvidia_visible(devices: list[str] | None) -> str:
    """`NVIDIA_VISIBLE_DEVICES` for a container given `devices` (None: no real GPU). Set by the
    executor, over the job's and the image's (CUDA images say `all`): where the NVIDIA runtime
    is the daemon's default, or an older toolkit preferred `all` among duplicate values, a job
    whose variable said `all` got every GPU of the host, whatever it was given."""
    return ",".join(devices) if devices else "void"


class DockerExecutor(RunExecutor):
    """Jobs as containers on `hosts` (`name=url,...` or `DockerHost`s; see `hosts.py`).

    `image` is the default for jobs whose spec names none; `python` the interpreter inside the
    image; `volumes` extra binds (`"/src:/dst:ro"`); `env` variables every container gets;
    `user` an optional `uid[:gid]` to run as (the job directory is chowned to it when the
    scheduler runs as root)."""

    run_noun = "container"

    def __init__(
        self,
        hosts: str | Iterable[Any],
        job_root: Path | str,
        image: str | None = None,
        python: str = "python3",
        volumes: Iterable[str] = (),
        env: dict[str, str] | None = None,
        shm_size: str = "1g",
        user: str | None = None,
        cancel_grace: float = 10.0,
        pull: str = "never",
        rdzv_port: int | None = None,
        horovod_ssh_port: int = 12345,
        horovod_network_interface: str | None = None,
        use_uuids: bool = False,
        health_interval: float = 10.0,
        api_timeout: float = 30.0,
        run_as: Callable[[str], Any] | None = None,
    ):
        if cancel_grace < 0:
            raise ValueError(f"cancel_grace: expected seconds >= 0, got {cancel_grace}")
        if pull not in PULL_POLICIES:
            raise ValueError(f"pull: expected one of {', '.join(PULL_POLICIES)}, got {pull!r}")
        self.hosts: dict[str, DockerHost] = {h.name: h for h in parse_hosts(hosts)}
        self.job_root = Path(job_root).resolve()
        self.job_root.mkdir(parents=True, exist_ok=True)
        self.image = image
        self.python = python
        self.volumes = [check_volume(v) for v in volumes]
        self.env = dict(env or {})
        self.shm_size = shm_size
        self.user = user
        self.run_as = run_as  # user name -> accounts.Account: per-job uid:gid (the shared set-up)
        self.cancel_grace = cancel_grace
        self.pull = pull
        self.rdzv_port = rdzv_port
        self.horovod_ssh_port = horovod_ssh_port
        self.horovod_network_interface = horovod_network_interface
        self._sshd: dict[tuple[str, str], bool] = {}  # (host, image) -> the image runs sshd there
        self.use_uuids = use_uuids
        self.health_interval = health_interval
        self.api_timeout = api_timeout
        self.kill_wait = api_timeout  # after SIGKILL, the daemon's answer is what we wait for
        self._clients: dict[tuple[str, bool], Any] = {}
        self._down: dict[str, str] = {}  # host name -> why it is considered down
        self._health: threading.Thread | None = None
        self._init_runs()

    # -- inventory -------------------------------------------------------------------------------
    def nodes(self, probe_image: str | None = None) -> list[Node]:
        """The engine's nodes: one per host, GPUs declared (virtual) or discovered (real: a probe
        container per host and call), a host that does not answer marked unhealthy."""
        nodes = host_nodes(self.hosts.values(), probe_image or self.image)
        with self._lock:
            for n in nodes:
                if n.healthy:
                    self._down.pop(n.name, None)
                else:
                    self._down[n.name] = self.hosts[n.name].error or "unreachable"
        return nodes

    def bind(self, engine: Any) -> None:
        super().bind(engine)
        if self.health_interval > 0 and self._health is None:
            self._health = threading.Thread(target=self._health_loop, name="docker-health", daemon=True)
            self._health.start()

    # -- the Executor interface --------------------------------------------------------------------
    def spec_defaults(self) -> dict[str, Any]:
        return {"image": self.image} if self.image else {}

    def prepare(self, job: Job, now: float) -> Path:
        d = super().prepare(job, now)  # owned by the job's account under run_as
        if self.run_as is None:
            self._chown(d)
        return d

    def _reattach(self, job: Job) -> _Run | None:
        try:
            found = self._find(job)
            if job.stopping is None and self._cut_short(_current(found, job)):
                self._relaunch_now(job.id, job.spec, dict(job.alloc), job.restarts)  # (a resize's)
                return None
            run = self._find_run(job, found)
        except ExecutorError as e:
            self._report(job.id, -1, f"lost on restart: {e}")
            return None
        if run is None:
            self._report(job.id, -1, "lost on restart")
        return run

    def adopt(self, job: Job) -> bool:
        found = self._find(job)
        mine = _current(found, job)
        if not mine or self._cut_short(mine):
            return False
        run = self._find_run(job, found)
        if run is None:
            return False
        self._adopted(run)
        return True

    def close(self) -> None:
        """Stop reporting and following; the containers go on running (`recover` finds them)."""
        super().close()
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for c in clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass

    # -- beyond the Executor interface -------------------------------------------------------------
    def containers(self, job_id: int) -> list[tuple[str, str]]:
        """(host, container id) of the job's current workers."""
        with self._lock:
            run = self._runs.get(job_id)
            return [(w.host, w.cid) for w in run.workers] if run else []

    # -- resizing in place (Horovod Elastic, on one or more hosts) -----------------------------------
    #: seconds the workers a shrink removes get to leave on their own (Horovod stops them at
    #: their next `state.commit()`), then SIGTERM, `cancel_grace`, SIGKILL
    shrink_wait = 60.0
    #: seconds a new host's sshd container gets to listen before discovery lists the host
    sshd_wait = 15.0

    def _elastic_np(self, spec: JobSpec, alloc: Allocation) -> tuple[int, int] | None:
        """(min, max) workers when the job runs under Horovod Elastic: a Horovod job that is
        elastic and asks to be resized in place (torchrun jobs checkpoint-restart here)."""
        if not (spec.in_place and spec.elastic and Launcher(spec.launcher) is Launcher.horovod):
            return None
        total = self.engine.total_gpus if self.engine is not None else sum(len(v) for v in alloc.values())
        n = sum(len(v) for v in alloc.values())
        return min(spec.min_size, n), max(spec.max_size(total), n)

    def _horovod_nic(self, alloc: Allocation) -> str | None:
        """Horovod Elastic's network interface: the executor's; else `lo` for a job that starts on
        one host (Horovod finds common interfaces only among two hosts or more, and would wait for
        a second one), which then grows in place on that host only."""
        return self.horovod_network_interface or ("lo" if len(alloc) == 1 else None)

    def _probe_sshd(self, image: str) -> None:
        """Find out, in the background, on which hosts `image` runs an sshd (`sshd -t`: the binary,
        its configuration and host keys): a grow onto a host is in place only there."""
        def probe(name: str) -> None:
            try:
                self._client(name).containers.run(image, ["/usr/sbin/sshd", "-t"], remove=True,
                                                  network_mode="none", user="0")
                ok = True
            except Exception as e:  # noqa: BLE001 - no sshd, no keys, host down: not in place there
                log.info("docker host %s: no usable sshd in %s (%s): Horovod grows onto it restart the job",
                         name, image, short_error(e))
                ok = False
            with self._lock:
                self._sshd[(name, image)] = ok

        with self._lock:
            todo = [n for n in self.hosts if (n, image) not in self._sshd and n not in self._down]
        for name in todo:
            threading.Thread(target=probe, args=(name,), name=f"sshd-probe-{name}", daemon=True).start()

    def _host_container(self, run: _Run, host: str) -> _Worker | None:
        """The run's live container on `host`: horovodrun's, or the host's sshd container."""
        return next((w for w in run.workers if w.host == host and w.code is None and not w.retired), None)

    def _elastic_files(self, job_id: int, alloc: Allocation, devices: dict[str, list[str] | None]) -> dict:
        """`hosts`, `gpus`, `gpus@<address>` for `alloc`; `devices`: each host's container's real
        GPUs (its workers see them as 0..k-1), None for virtual ones."""
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        hosts = []
        for name, idx in alloc.items():
            have = devices.get(name)
            if have is None:
                cuda = visible_devices(nodes.get(name), tuple(idx), self.use_uuids)
            else:
                cuda = ",".join(str(have.index(i)) for i in self._devices(nodes.get(name), tuple(idx)) or ())
            # horovodrun's own host as `localhost`: Horovod starts its workers there without ssh
            hosts.append(("localhost" if not hosts else self.hosts[name].address, cuda, len(idx)))
        return elastic_host_files(hosts)

    def _write_files(self, job_id: int, files: dict[str, str]) -> None:
        """Each file replaced atomically, the GPUs before `hosts` (a worker a grow adds reads its
        GPUs before discovery can show it)."""
        d = self.job_dir(job_id)
        for name in sorted(files, key=lambda n: n == "hosts"):
            tmp = d / (name + ".tmp")
            tmp.unlink(missing_ok=True)
            nofollow.write_text(tmp, files[name])
            os.chmod(tmp, 0o644)
            os.replace(tmp, d / name)

    def _prepare_elastic(self, job_id: int, alloc: Allocation, devices: dict[str, list[str] | None],
                         account: Any = None) -> None:
        d = self.job_dir(job_id)
        try:
            workers = prepare_elastic_dir(d)
            for old in d.glob(GPUS_FILE + "@*"):  # other hosts' GPUs from an earlier run
                old.unlink()
            self._write_files(job_id, self._elastic_files(job_id, alloc, devices))
            if account is not None:  # the workers write their pids there, as the job's user
                os.chown(workers, account.uid, account.gid, follow_symlinks=False)
            else:
                self._chown(workers)
        except OSError as e:
            raise ExecutorError(f"job {job_id}: cannot write its Horovod Elastic files: {e.strerror}: "
                                f"{e.filename}") from None

    def resizes_in_place(self, job: Job, alloc: Allocation) -> bool:
        """In place when the run is under Horovod Elastic and no earlier resize in place is being
        applied, horovodrun's host stays the first, the size is within `--min-np`..`--max-np`,
        every host that already runs a container of the job keeps GPUs that container was given
        (real GPUs cannot be added to a running container), and a new host runs the image's sshd."""
        n = sum(len(v) for v in alloc.values())
        nodes = {x.name: x for x in self.engine.nodes} if self.engine is not None else {}
        with self._lock:
            run = self._runs.get(job.id)
            if not (isinstance(run, _Run) and run.elastic is not None and run.stopping is None
                    and not run.applying and job.id not in self._relaunch
                    and run.elastic[0] <= n <= run.elastic[1] and alloc and run.workers
                    and next(iter(alloc)) == run.workers[0].host):
                return False
            for name, idx in alloc.items():
                if name not in self.hosts or name in self._down:
                    return False
                w = self._host_container(run, name)
                if w is None:
                    if not run.spans or not self._sshd.get((name, run.image)):
                        return False
                elif w.devices is not None:
                    ids = self._devices(nodes.get(name), tuple(idx))
                    if ids is None or not set(ids) <= set(w.devices):
                        return False
        return True

    def resize_in_place(self, job: Job, old: Allocation, now: float) -> None:
        with self._lock:
            run = self._runs.get(job.id)
            if not isinstance(run, _Run):
                return  # it has just ended: that exit is reported
            run.applying = True
        threading.Thread(target=self._apply_resize, args=(run, job.spec, dict(old), dict(job.alloc)),
                         name=f"resize-{job.id}", daemon=True).start()

    def _apply_resize(self, run: _Run, spec: JobSpec, old: Allocation, alloc: Allocation) -> None:
        """A new host's sshd container first, then the files Horovod's discovery reads; after a
        shrink, the removed workers' end (then their hosts' sshd containers go, and the GPUs are
        reported free)."""
        try:
            was, n = sum(len(v) for v in old.values()), sum(len(v) for v in alloc.values())
            try:
                for host in alloc:
                    if self._host_container(run, host) is None:
                        self._start_sidecar(run, spec, host, tuple(alloc[host]))
                devices = {h: w.devices for h in alloc if (w := self._host_container(run, h)) is not None}
                files = self._elastic_files(run.job_id, alloc, devices)
                self._write_files(run.job_id, files)
            except (ExecutorError, OSError) as e:  # the run goes on at its old size
                log.error("job %s: resize in place not applied: %s", run.job_id, e)
                self._append_log(run, f"{joblogs.MARKER} run #{run.restarts} resize in place to {n} GPUs "
                                      f"not applied: {e} ===\n")
                return
            where = {self.hosts[h].address: h for h in alloc}
            cuda = " ".join(f"{where[k.partition('@')[2]]}:{v.strip()}" if "@" in k else
                            f"{next(iter(alloc))}:{v.strip()}" for k, v in files.items() if k != "hosts")
            self._append_log(run, resized_line(run.restarts, was, n, cuda if len(alloc) > 1 else
                                               files[GPUS_FILE].strip(), horovod=True))
            if n < was:
                self._wait_removed(run, old, alloc)
                self._released(run.job_id)
        finally:
            run.applying = False

    def _start_sidecar(self, run: _Run, spec: JobSpec, host: str, gpus: tuple[int, ...]) -> None:
        """The sshd container through which horovodrun starts the workers of a host the job
        did not use (it has the host's new GPUs); returns once its port answers."""
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        _, argv, env, devices, _ = self._sidecar_plan(spec, host, gpus, nodes)
        account = self.account_for(spec)
        if account is not None:
            env.update({**account.env(), "HOME": str(self.job_dir(run.job_id))})
        rank = max(w.rank for w in run.workers) + 1
        cid = self._create(run.job_id, rank, run.restarts, host, run.image, argv, env, devices, run.cwd,
                           account)
        w = _Worker(host, rank, cid, sidecar=True, devices=devices)
        try:
            self._client(host).api.start(cid)
        except Exception as e:  # noqa: BLE001
            self._remove(w)
            raise self._start_error(run.job_id, host, run.image, e) from None
        with self._lock:
            run.workers.append(w)
        threading.Thread(target=self._follow, args=(run, w), name=f"docker-{run.job_id}-{rank}",
                         daemon=True).start()
        address, deadline = self.hosts[host].address, time.monotonic() + self.sshd_wait
        while time.monotonic() < deadline and w.code is None:
            try:
                with socket.create_connection((address, self.horovod_ssh_port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise ExecutorError(f"the sshd container on {host} does not answer on "
                            f"{address}:{self.horovod_ssh_port}")

    def _wait_removed(self, run: _Run, old: Allocation, alloc: Allocation) -> None:
        """Wait until the workers of the slots a shrink removed are gone (their pids, recorded in
        `workers/` by the slot wrapper, checked inside their container); stop them if they stay.
        A host the job no longer uses loses its sshd container (and whatever is left in it)."""
        d = self.job_dir(run.job_id) / WORKERS_DIR
        first = next(iter(alloc))
        removed: dict[str, list[str]] = {}
        for host, idx in old.items():
            keep = len(alloc.get(host, ()))
            suffix = "" if host == first else "@" + self.hosts[host].address
            pids = []
            for slot in range(keep, len(idx)):
                try:
                    pids += nofollow.read_text(d / f"{slot}{suffix}", limit=4096).split()  # (a few)
                except (OSError, ValueError):
                    continue
            removed[host] = [p for p in pids if p.isdigit()]
        deadline, sig = time.monotonic() + self.shrink_wait, "TERM"
        while not run.gone.is_set():
            left = {h: self._alive_in(run, h, pids) for h, pids in removed.items()}
            removed = {h: p for h, p in left.items() if p}
            if not removed:
                break
            if time.monotonic() >= deadline:
                log.warning("job %s: workers removed by a shrink are still there: %s: SIG%s", run.job_id,
                            removed, sig)
                for h, pids in removed.items():
                    self._exec(run, h, ["/bin/sh", "-c", f'kill -{sig} "$@"', "kill", *pids])
                deadline = time.monotonic() + (self.cancel_grace if sig == "TERM" else 5.0)
                sig = "KILL"
            time.sleep(0.2)
        for host in old:
            w = self._host_container(run, host)
            if host not in alloc and w is not None and w.sidecar:
                w.retired = True
                try:
                    self._client(host).api.stop(w.cid, timeout=max(0, int(round(self.cancel_grace))))
                except Exception as e:  # noqa: BLE001 - gone already, or the host is down
                    log.debug("stop %s on %s: %s", w.cid[:12], host, e)

    def _alive_in(self, run: _Run, host: str, pids: list[str]) -> list[str]:
        """Which of `pids` still run in the job's container on `host` (none once it is gone)."""
        if not pids or self._host_container(run, host) is None:
            return []
        script = 'for p; do kill -0 "$p" 2>/dev/null && echo "$p"; done; true'
        out = self._exec(run, host, ["/bin/sh", "-c", script, "alive", *pids])
        return pids if out is None else out.split()

    def _exec(self, run: _Run, host: str, argv: list[str]) -> str | None:
        """Run `argv` in the job's container on `host` (as root); its output, None on failure."""
        w = self._host_container(run, host)
        if w is None:
            return ""
        try:
            api = self._client(host).api
            eid = api.exec_create(w.cid, argv, user="0")["Id"]
            return api.exec_start(eid).decode("utf-8", "replace")
        except Exception as e:  # noqa: BLE001 - the container has just exited, or the host is down
            log.debug("exec in %s on %s: %s", w.cid[:12], host, e)
            return None

    # -- clients and host health -------------------------------------------------------------------
    def _client(self, name: str, stream: bool = False) -> Any:
        """The docker client of host `name` (`stream`: no read timeout, for log streams)."""
        key = (name, stream)
        with self._lock:
            c = self._clients.get(key)
            if c is None:
                c = self.hosts[name].client(timeout=None if stream else self.api_timeout, pool=64)
                self._clients[key] = c
            return c

    def _host_down(self, name: str, e: BaseException) -> ExecutorError:
        host = self.hosts[name]
        why = f"docker host {name} ({host.url}) unreachable: {short_error(e)}"
        host.error = why
        self._set_health(name, False, why)
        return ExecutorError(why)

    def _set_health(self, name: str, healthy: bool, why: str = "") -> None:
        with self._lock:
            was_down = name in self._down
            if healthy == (not was_down):
                return
            if healthy:
                del self._down[name]
            else:
                self._down[name] = why
        log.warning("docker host %s is %s%s", name, "back" if healthy else "down", f": {why}" if why else "")
        if self.engine is not None and not self._closed.is_set():
            self.engine.call_soon(self._apply_health)  # on the engine's loop

    def _apply_health(self) -> None:
        engine = self.engine
        if engine is None:
            return
        with self._lock:
            down = set(self._down)
        changed = False
        nodes = []
        for n in engine.nodes:
            want = n.name not in down if n.name in self.hosts else n.healthy
            if n.healthy != want:
                n = replace(n, healthy=want)
                changed = True
            nodes.append(n)
        if changed:
            engine.set_nodes(nodes)

    def check_hosts(self) -> dict[str, bool]:
        """Ping every host now; mark each healthy or down. Returns name -> up."""
        out = {}
        for name in self.hosts:
            try:
                self._client(name).ping()
                up, why = True, ""
            except Exception as e:  # noqa: BLE001
                up, why = False, f"docker host {name} ({self.hosts[name].url}) unreachable: {short_error(e)}"
                with self._lock:
                    self._clients.pop((name, False), None)
            self._set_health(name, up, why)
            out[name] = up
        return out

    def _health_loop(self) -> None:
        while not self._closed.wait(self.health_interval):
            try:
                self.check_hosts()
            except Exception:  # noqa: BLE001 - never let the health thread die
                log.exception("docker host health check failed")

    # -- launching ---------------------------------------------------------------------------------
    def _launch(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int) -> _Run:
        unknown = [n for n in alloc if n not in self.hosts]
        if unknown:
            raise ExecutorError(f"job {job_id}: node {unknown[0]!r} is not a Docker host of this executor "
                                f"(hosts: {', '.join(self.hosts)})")
        image = spec.image or self.image
        if not image:
            raise ExecutorError("image: no image given (set the job's image or the executor's default image)")
        d = self.job_dir(job_id)
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        first = self.hosts[next(iter(alloc))]
        shutil.copyfile(RUNNER, d / RUNNER_COPY)  # the image need not have schedulearn
        elastic = self._elastic_np(spec, alloc)
        workers = build_workers(
            spec, job_id, alloc, d, restarts, nodes, python=self.python,
            addresses={n: self.hosts[n].address for n in alloc}, rdzv_port=self._rdzv_port(first, job_id),
            use_uuids=self.use_uuids, runner=str(d / RUNNER_COPY), result_key=self.result_key(job_id),
            elastic_np=elastic, network_interface=self._horovod_nic(alloc) if elastic else None)
        plans = self._plans(spec, workers, alloc, elastic is not None)
        account = self.account_for(spec)
        if account is not None:  # HOME: the job directory, the account's home is not mounted
            for plan in plans:
                plan[2].update({**account.env(), "HOME": str(d)})
        cwd = spec.workdir or str(d)
        where = "in " + image + " on " + " ".join(f"{n}{list(alloc[n])}" for n in alloc)
        logf = self._open_log(job_id, buffering=0)
        logf.write(start_line(job_id, restarts, plans[0][2]["CUDA_VISIBLE_DEVICES"], " ".join(plans[0][1]),
                              where).encode())
        started: list[_Worker] = []
        try:
            if elastic is not None:  # discovery's files, before horovodrun starts
                self._prepare_elastic(job_id, alloc, {plan[0]: plan[3] for plan in plans}, account)
                self._probe_sshd(image)
            for rank, (host, argv, env, devices, sidecar) in enumerate(plans):
                cid = self._create(job_id, rank, restarts, host, image, argv, env, devices, cwd, account)
                started.append(_Worker(host, rank, cid, sidecar=sidecar, devices=devices))
                try:
                    self._client(host).api.start(cid)
                except Exception as e:  # noqa: BLE001
                    raise self._start_error(job_id, host, image, e) from None
        except ExecutorError as e:
            for w in started:
                self._remove(w)
            logf.write(f"{joblogs.MARKER} start failed: {e} ===\n".encode())
            logf.close()
            raise
        run = _Run(job_id=job_id, restarts=restarts, workers=started, logf=logf, multi=len(alloc) > 1,
                   elastic=elastic, image=image, cwd=cwd,
                   spans=self.horovod_network_interface is not None or len(alloc) > 1)
        self._watch(run)
        return run

    def _plans(self, spec: JobSpec, workers: list, alloc: Allocation, elastic: bool = False) -> list[tuple]:
        """(host, argv, env, device ids or None, sidecar) per container."""
        plans = []
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        for w in workers:
            env = job_environment(w.env, spec.env, extra=self.env)  # the image's PATH, HOME, ...
            devices = self._devices(nodes.get(w.node), w.gpus)
            if devices is not None:  # real GPUs: the container sees them as 0..k-1
                env["SCHEDULEARN_HOST_GPUS"] = env["CUDA_VISIBLE_DEVICES"]
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(devices)))
            env[NVIDIA_VISIBLE] = nvidia_visible(devices)
            plans.append((w.node, _pin_rendezvous_host(list(w.argv), len(plans)), env, devices, False))
        if Launcher(spec.launcher) is Launcher.horovod and (len(alloc) > 1 or elastic):
            # horovodrun on the first host reaches the others over ssh: an sshd container on each
            # (the image must have sshd and the hosts' keys; see docs/docker.md)
            host, argv, env, devices, _ = plans[0]
            i = argv.index("horovod.runner.launch") + 1
            plans[0] = (host, argv[:i] + ["-p", str(self.horovod_ssh_port)] + argv[i:], env, devices, False)
            for name in list(alloc)[1:]:
                plans.append(self._sidecar_plan(spec, name, alloc[name], nodes))
        return plans

    def _sidecar_plan(self, spec: JobSpec, host: str, gpus: tuple[int, ...], nodes: dict) -> tuple:
        env = job_environment({}, spec.env, extra=self.env)
        devices = self._devices(nodes.get(host), tuple(gpus))
        env[NVIDIA_VISIBLE] = nvidia_visible(devices)
        return (host, ["/usr/sbin/sshd", "-D", "-e", "-p", str(self.horovod_ssh_port)], env, devices, True)

    def _devices(self, node: Node | None, gpus: tuple[int, ...]) -> list[str] | None:
        if node is None or node.virtual:
            return None
        by_index = {g.index: g for g in node.gpus}
        if any(by_index.get(i) is None or by_index[i].virtual for i in gpus):
            return None
        return [by_index[i].uuid if (self.use_uuids or by_index[i].mig_parent) else str(i) for i in gpus]

    def _create(self, job_id: int, rank: int, restarts: int, host: str, image: str, argv: list[str],
                env: dict[str, str], devices: list[str] | None, cwd: str, account: Any = None) -> str:
        if host in self._down:
            raise ExecutorError(self._down[host])
        from docker.errors import APIError, ImageNotFound
        from docker.types import DeviceRequest

        d = str(self.job_dir(job_id))
        try:
            client = self._client(host)
            api = client.api
            requests = [DeviceRequest(device_ids=devices, capabilities=[["gpu"]])] if devices else None
            host_config = api.create_host_config(
                binds=[f"{d}:{d}:rw", *self.volumes], network_mode="host", shm_size=self.shm_size, init=True,
                device_requests=requests, oom_score_adj=oom.JOB_OOM_SCORE_ADJ,  # (the OOM killer: jobs first)
                group_add=[str(g) for g in account.groups if g != account.gid] if account else None,
                # the shared set-up: a setuid binary in the image (the user's pick) must not make
                # the job root, with the host's network and whatever the volumes hold
                security_opt=["no-new-privileges"] if account is not None else None)
            user = account.docker_user if account is not None else self.user or ""
            kwargs = dict(
                command=argv, environment=env, working_dir=cwd, user=user, host_config=host_config,
                name=f"schedulearn-{job_id}-r{restarts}-w{rank}-{uuidlib.uuid4().hex[:6]}",
                labels={LABEL_JOB: str(job_id), LABEL_RANK: str(rank), LABEL_RESTART: str(restarts),
                        LABEL_JOBDIR: d})
            try:
                kwargs["environment"] = self._python_first(api, image, env)
                return api.create_container(image, **kwargs)["Id"]
            except ImageNotFound:
                if self.pull != "missing":
                    raise ExecutorError(f"image: {image!r} not found on docker host {host} (pull it there "
                                        "first, or set docker_pull=missing: serve --docker-pull "
                                        "missing)") from None
                try:
                    client.images.pull(image)
                except Exception as e:  # noqa: BLE001
                    raise ExecutorError(f"image: {image!r} not found on docker host {host} and the pull "
                                        f"failed: {short_error(e)}") from None
                kwargs["environment"] = self._python_first(api, image, env)
                return api.create_container(image, **kwargs)["Id"]
        except ExecutorError:
            raise
        except APIError as e:
            raise self._start_error(job_id, host, image, e) from None
        except Exception as e:  # noqa: BLE001 - connection refused, no socket, timeout: host down
            raise self._host_down(host, e) from None

    def _python_first(self, api: Any, image: str, env: dict[str, str]) -> dict[str, str]:
        """`env` with the folder of `docker_python`, when it is a path, first on the image's `PATH`
        (as the local executor puts its interpreter's): `python train.py`, `torchrun`,
        `pip` in a job's command are that environment's. Unchanged when the job or the operator
        set `PATH` (theirs wins), or `docker_python` is a bare name (the image's `PATH` finds it)."""
        if not os.path.isabs(self.python) or "PATH" in env:
            return env
        config = api.inspect_image(image).get("Config") or {}
        path = next((e.split("=", 1)[1] for e in config.get("Env") or [] if e.startswith("PATH=")),
                    IMAGE_PATH)
        return {**env, "PATH": os.pathsep.join([os.path.dirname(self.python), path])}

    def _start_error(self, job_id: int, host: str, image: str, e: BaseException) -> ExecutorError:
        from docker.errors import APIError

        if not isinstance(e, APIError):
            return self._host_down(host, e)
        return ExecutorError(f"job {job_id}: container did not start on docker host {host} "
                             f"(image {image}): {short_error(e)}")

    def _rdzv_port(self, first: DockerHost, job_id: int) -> int:
        if self.rdzv_port is not None:
            return self.rdzv_port
        if first.url.startswith("unix://"):  # this machine, host network: any free port
            with socket.socket() as s:
                s.bind(("", 0))
                return s.getsockname()[1]
        return 29400 + job_id % 500

    def _chown(self, d: Path) -> None:
        """`d` (and its checkpoints folder, for a job directory) to the executor's `user`."""
        if not self.user or os.geteuid() != 0:
            return
        try:
            uid, _, gid = self.user.partition(":")
            u, g = int(uid), int(gid or uid)
        except ValueError:
            return  # a user name: its ids are the image's business
        for p in (d, d / CHECKPOINT_DIR):
            if p.exists():
                os.chown(p, u, g)

    # -- following, exits --------------------------------------------------------------------------
    def _watch(self, run: Run) -> None:
        assert isinstance(run, _Run)
        for w in run.workers:
            threading.Thread(target=self._follow, args=(run, w), name=f"docker-{run.job_id}-{w.rank}",
                             daemon=True).start()

    def _follow(self, run: _Run, w: _Worker) -> None:
        """Copy the container's output into the job log until it exits, then remove it and record
        its exit. The exit is recorded (`w.code`) only once the container is gone: the last
        worker to be recorded ends the run, and a job reported ended has no container left on any
        host (another worker's thread may still have been removing its own)."""
        prefix = f"[{w.host}] ".encode() if run.multi or w.sidecar else b""
        skip = w.skip
        try:
            stream = self._client(w.host, stream=True).api.logs(w.cid, stdout=True, stderr=True, stream=True,
                                                                 follow=True)
            buf, open_line, chunk = b"", False, b""  # (open: a piece of the line is in the log)
            for chunk in stream:
                if self._closed.is_set():
                    return
                buf += chunk
                if b"\n" not in chunk and b"\r" not in chunk and len(buf) < joblogs.PAGE:
                    continue
                *lines, buf = buf.split(b"\n")
                out = []
                for line in lines:
                    w.lines.append(line.decode("utf-8", "replace"))
                    if skip:
                        skip -= 1
                    else:
                        out.append((b"" if open_line else prefix) + line + b"\n")
                        open_line = False
                if buf and not skip and not prefix and (b"\r" in buf or len(buf) >= joblogs.PAGE):
                    out.append(buf)  # a progress bar's drawings, as they come (as in a local job's log)
                    buf, open_line = b"", True
                elif len(buf) >= joblogs.PAGE:  # (hosts' lines interleave whole) too long: its end
                    buf = buf[max(buf.rfind(b"\r"), len(buf) - joblogs.PAGE // 2):]
                self._write(run, b"".join(out))
            if not self._closed.is_set():
                buf += self._lost_end(w, chunk)
            if (buf or open_line) and not self._closed.is_set():
                w.lines.append(buf.decode("utf-8", "replace"))
                if not skip:
                    self._write(run, (b"" if open_line else prefix) + buf + b"\n")
            state = self._client(w.host).api.wait(w.cid, timeout=self.api_timeout)
            code = int(state.get("StatusCode", -1))
            try:
                w.oom = bool(self._client(w.host).api.inspect_container(w.cid)["State"].get("OOMKilled"))
            except Exception:  # noqa: BLE001
                pass
        except Exception as e:  # noqa: BLE001 - the daemon went away (or the container did)
            if self._closed.is_set():
                return
            from docker.errors import NotFound

            if isinstance(e, NotFound):
                w.lost = "its container was removed from outside"
            else:
                w.lost = f"lost contact with docker host {w.host}: {short_error(e)}"
                self._set_health(w.host, False, w.lost)
            code = -1
        if self._closed.is_set():
            return
        if w.lost is None:
            self._remove(w)
        w.code = code
        self._worker_ended(run, w)

    def _lost_end(self, w: _Worker, last: bytes) -> bytes:
        """What the container wrote last, if the daemon's follow stream (`last`: its last
        piece) ended without it: it may, when that output did not end its line (seen with the
        json-file driver: `printf x` as a container's last words). Asked again, without follow."""
        try:
            end = self._client(w.host).api.logs(w.cid, stdout=True, stderr=True, tail=1)
        except Exception:  # noqa: BLE001 - gone: nothing more to learn
            return b""
        return end if end and not end.endswith(b"\n") and end != last else b""

    def _write(self, run: _Run, data: bytes) -> None:
        if not data:
            return
        with run.log_lock:
            try:
                run.logf.write(data)
            except (OSError, ValueError):  # closed
                pass

    def _worker_ended(self, run: _Run, w: _Worker) -> None:
        stop_others = False
        with self._lock:
            main_left = [x for x in run.workers if x.code is None and not x.sidecar]
            if w.code != 0 and not w.sidecar and run.stopping is None and run.failed is None:
                run.failed = w
                stop_others = bool(main_left)
            if run.stopping is not None and w.code == 128 + signal.SIGKILL:
                run.killed = True
            sidecars_left = [x for x in run.workers if x.code is None and x.sidecar]
            last = not main_left and not sidecars_left
            if not main_left and sidecars_left:
                stop_others = True  # the job is over: its sshd containers go
        if stop_others:
            threading.Thread(target=self._stop_containers, args=(run, 2.0), daemon=True).start()
        if last:
            self._run_ended(run)

    def _run_ended(self, run: _Run) -> None:
        mains = [x for x in run.workers if not x.sidecar]
        if run.stopping in ENGINE_STOPS:
            code = next((x.code for x in mains if x.code), 0)
        elif run.stopping is not None:
            code = mains[0].code or 0
        elif run.failed is not None:
            code = run.failed.code or -1
        else:
            code = 0
        self._run_over(run, code, self._end_reason(run, code))
        with run.log_lock:
            try:
                run.logf.close()
            except (OSError, ValueError):
                pass

    def _append_log(self, run: Run, text: str) -> None:
        assert isinstance(run, _Run)
        with run.log_lock, contextlib.suppress(OSError):  # (as `_write`: the log is best effort)
            super()._append_log(run, text)

    def _failure(self, run: Run, code: int | None) -> str:
        assert isinstance(run, _Run) and run.failed is not None
        w = run.failed
        code = w.code if w.code is not None else -1
        who = f"worker {w.rank} on {w.host}: " if run.multi else ""
        if w.lost:
            return who + w.lost
        last = joblogs.failure_reason("\n".join(w.lines))
        if code > 128 and code - 128 < signal.NSIG:
            sig = signal.Signals(code - 128).name
            text = f"killed: exit {code} ({'out of memory' if w.oom else sig + ', not by the scheduler'})"
            return who + (f"{text}; last log line: {last}" if last else text)
        return who + (last or f"exit code {code}")

    def _remove(self, w: _Worker) -> None:
        """Remove the worker's container and return once it is gone, so that a job reported
        ended has left nothing behind. A loaded daemon may answer after the client's timeout
        (the removal goes on there: "removal already in progress"): asked again until it says
        the container is not there, for up to three API timeouts; so is a daemon that answers
        with an error (a 409 conflict, a 500 "device or resource busy"). A daemon that cannot be
        reached is not waited for: the container stays, logged as a warning."""
        from docker.errors import APIError, NotFound
        from requests.exceptions import ReadTimeout

        deadline = time.monotonic() + 3 * self.api_timeout
        while True:
            try:
                self._client(w.host).api.remove_container(w.cid, force=True)
                return
            except NotFound:
                return
            except Exception as e:  # noqa: BLE001 - a timeout, a conflict, or the host is down
                busy = isinstance(e, (APIError, ReadTimeout))  # the daemon is there, just busy
                if not busy or w.host in self._down or time.monotonic() > deadline:
                    log.warning("could not remove container %s on docker host %s: %s", w.cid[:12], w.host,
                                short_error(e))
                    return
                log.debug("removing container %s on %s: %s; asking again", w.cid[:12], w.host, e)
            time.sleep(0.5)

    # -- signalling ----------------------------------------------------------------------------------
    def _signal(self, run: Run, sig: int) -> None:
        """`docker kill --signal` every worker still running, in parallel."""
        assert isinstance(run, _Run)
        name = signal.Signals(sig).name

        def kill(w: _Worker) -> None:
            try:
                self._client(w.host).api.kill(w.cid, signal=name)
            except Exception as e:  # noqa: BLE001 - exited meanwhile, or host down (the follower says)
                log.debug("kill %s %s on %s: %s", name, w.cid[:12], w.host, e)

        _each(kill, [w for w in run.workers if w.code is None])

    def _stop_containers(self, run: _Run, grace: float) -> None:
        """`docker stop` (SIGTERM, `grace` seconds, SIGKILL) every worker still running, in parallel
        (the other workers of a run one of whose workers failed)."""
        def stop(w: _Worker) -> None:
            try:
                self._client(w.host).api.stop(w.cid, timeout=max(0, int(round(grace))))
            except Exception as e:  # noqa: BLE001 - exited meanwhile, or host down (the follower says)
                log.debug("stop %s on %s: %s", w.cid[:12], w.host, e)

        _each(stop, [w for w in run.workers if w.code is None])

    # -- re-attaching after a restart ----------------------------------------------------------------
    def _find(self, job: Job) -> list[tuple[str, dict]]:
        """(host, container) of every container of `job` on its allocation's hosts."""
        d = str(self.job_dir(job.id))
        found: list[tuple[str, dict]] = []
        for name in job.alloc:
            if name not in self.hosts:
                continue
            try:
                found += [(name, c) for c in self._client(name).api.containers(
                    all=True, filters={"label": [f"{LABEL_JOB}={job.id}", f"{LABEL_JOBDIR}={d}"]})]
            except Exception as e:  # noqa: BLE001
                raise self._host_down(name, e) from None
        return found

    def _cut_short(self, mine: list[tuple[str, dict]]) -> bool:
        """Whether a run's launch was cut short before every worker started (a container still
        `created`): nothing of it is a run to follow (a created container's "exit" would end the
        job as if it had run). Its containers are removed: the run is to be started again."""
        if not any(c.get("State") == "created" for _, c in mine):
            return False
        for name, c in mine:
            self._remove(_Worker(name, -1, c["Id"]))
        return True

    def _find_run(self, job: Job, found: list[tuple[str, dict]]) -> _Run | None:
        """The job's containers of its latest run (not followed yet), or None when there are none
        (`found`: `_find`'s list)."""
        if not found:
            return None
        latest = max(int(c["Labels"].get(LABEL_RESTART, 0)) for _, c in found)
        workers = []
        for name, c in found:
            if int(c["Labels"].get(LABEL_RESTART, 0)) != latest:  # left by a resize cut short
                self._remove(_Worker(name, -1, c["Id"]))
                continue
            workers.append(_Worker(name, int(c["Labels"].get(LABEL_RANK, 0)), c["Id"],
                                   sidecar=c.get("Command", "").startswith("/usr/sbin/sshd")))
        workers.sort(key=lambda w: w.rank)
        multi = len(job.alloc) > 1
        for w in workers:  # the daemon sends a container's output from its start again
            w.skip = joblogs.lines_since_start(self.log_path(job.id), f"[{w.host}] " if multi else "")
        joblogs.append_line(self.log_path(job.id),
                            reattached_line(latest, ", ".join(f"{w.host}:{w.cid[:12]}" for w in workers)))
        logf = open(self.log_path(job.id), "ab", buffering=0, opener=nofollow.opener)
        return _Run(job_id=job.id, restarts=latest, workers=workers, logf=logf, multi=multi)


def _current(found: list[tuple[str, dict]], job: Job) -> list[tuple[str, dict]]:
    """Of `found`, the (host, container) of the job's current run (`job.restarts`)."""
    return [(n, c) for n, c in found if int(c["Labels"].get(LABEL_RESTART, 0)) == job.restarts]


def _each(fn: Callable[[_Worker], None], workers: list[_Worker]) -> None:
    """`fn(w)` for every worker at once (a daemon call each, a host that is down costs its timeout)."""
    threads = [threading.Thread(target=fn, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _pin_rendezvous_host(argv: list[str], rank: int) -> list[str]:
    """A multi-host torchrun worker: only the first host's agent runs the c10d store.

    (torchrun guesses it from the endpoint's address; hosts sharing a machine would all guess
    yes, and the store would live wherever the race put it.) Not in `launch.py`, which the local
    executor shares: there is one host there."""
    if "--rdzv-backend=c10d" not in argv:
        return argv
    return [f"{a},is_host={int(rank == 0)}" if a.startswith("--rdzv-conf=") else a for a in argv]


def check_volume(bind: str) -> str:
    """`bind` if Docker takes it as a bind: `SRC:DST[:MODE]`, SRC an absolute path or a volume's
    name, DST an absolute path, MODE e.g. `ro` (each job's container would fail at start
    otherwise); `ValueError`, one line, naming the setting."""
    parts = bind.split(":")
    modes = parts[2].split(",") if len(parts) == 3 else []
    if not (2 <= len(parts) <= 3 and (parts[0].startswith("/") or _VOLUME_NAME.fullmatch(parts[0]))
            and parts[1].startswith("/") and all(m in _BIND_MODES for m in modes)):
        raise ValueError(f"docker_volumes: expected SRC:DST[:ro] (SRC an absolute path or a volume "
                         f"name, DST an absolute path; MODE ro or rw), got {bind!r}")
    return bind


# -- the registration ------------------------------------------------------------------------------
DOCKER_HOSTS = Option(
    "docker_hosts", [], "Docker daemons to run jobs on: URLs (unix://, tcp://host:port, ssh://user@host) "
    "or name=URL[?gpus=N] (default: this machine's daemon)", flag="--docker-host")
#: A container's `PATH` when its image sets none (Docker's default)
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_IMAGE = Option("default_image", "", "Docker image for jobs that name none")
VOLUMES = Option("docker_volumes", [], "binds every job's containers get, SRC:DST[:ro] (datasets, a "
                 "read-only code tree; SRC on every Docker host)", flag="--docker-volume")
PYTHON = Option("docker_python", "python3", "the Python interpreter in the jobs' images")
PULL = Option("docker_pull", "never", "pull a job's image onto a host that lacks it: never (a missing "
              "image fails the job) or missing", choices=PULL_POLICIES)


def docker_hosts(settings: Settings) -> list[str]:
    """The `docker_hosts` setting as the Docker executor takes them (`name=url[?gpus=N]`): a bare
    URL is named after its host, `virtual_gpus` becomes `?gpus=N` where a host declares none,
    and no hosts at all means this machine's daemon."""
    hosts = list(settings.options.get(DOCKER_HOSTS.name) or [])
    hosts = hosts or [f"{_safe_name(settings.node_name)}=unix:///var/run/docker.sock"]
    out = []
    for h in hosts:
        if "=" not in h.split("?", 1)[0]:
            h = f"{_safe_name(_host_name(h).split(':')[0]) or 'docker'}={h}"
        if settings.virtual_gpus > 0 and "gpus=" not in h.split("?", 1)[-1]:
            h += ("&" if "?" in h else "?") + f"gpus={settings.virtual_gpus}"
        out.append(h)
    return out


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip("-._")[:63]


def _host_name(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0] or url


def _make(settings: Settings) -> DockerExecutor:
    get = settings.options.get
    pull = get(PULL.name) or PULL.default
    if pull not in PULL_POLICIES:  # (named as the setting, not as the constructor's `pull`)
        raise ValueError(f"docker_pull: expected one of {', '.join(PULL_POLICIES)}, got {pull!r}")
    return DockerExecutor(docker_hosts(settings), settings.job_root,
                          image=get(DEFAULT_IMAGE.name) or None, python=get(PYTHON.name) or PYTHON.default,
                          volumes=get(VOLUMES.name) or (), pull=pull,
                          cancel_grace=settings.cancel_grace, run_as=settings.run_as())


KIND = ExecutorKind("docker", "containers on one or more Docker hosts", DockerExecutor, _make,
                    (DOCKER_HOSTS, DEFAULT_IMAGE, VOLUMES, PYTHON, PULL))

__all__ = ["KIND", "DockerExecutor", "docker_hosts"]
