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

Faults: an image that is not on the host fails the start with a one-line `ExecutorError` (images
are not pulled unless `pull="missing"`: pre-pull them on every host). A host that does not answer
fails the job with a one-line reason and is marked unhealthy (`engine.set_nodes`), so that
nothing more is placed there; a health thread pings every host and marks it healthy again when
its daemon answers.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import signal
import socket
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import joblogs, nofollow
from ..jobfiles import CHECKPOINT_DIR, RUNNER_COPY
from ..model import Allocation, Job, JobSpec, Launcher, Node
from .base import ExecutorError
from .hosts import DockerHost, host_nodes, parse_hosts, short_error
from .launch import RUNNER, build_workers, job_environment
from .lifecycle import Run, RunExecutor, reattached_line, start_line
from .registry import ExecutorKind, Option

if TYPE_CHECKING:
    from ..service import Settings

log = logging.getLogger("schedulearn.executors.docker")

LABEL_JOB = "schedulearn.job"
LABEL_RANK = "schedulearn.rank"
LABEL_RESTART = "schedulearn.restart"
LABEL_JOBDIR = "schedulearn.jobdir"
PULL_POLICIES = ("never", "missing")
_TAIL_LINES = 60


@dataclass(eq=False)
class _Worker:
    host: str
    rank: int
    cid: str
    sidecar: bool = False  # a Horovod sshd container: its exit is not the job's
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
        self.volumes = list(volumes)
        self.env = dict(env or {})
        self.shm_size = shm_size
        self.user = user
        self.run_as = run_as  # user name -> accounts.Account: per-job uid:gid (the shared set-up)
        self.cancel_grace = cancel_grace
        self.pull = pull
        self.rdzv_port = rdzv_port
        self.horovod_ssh_port = horovod_ssh_port
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
            run = self._find_run(job)
        except ExecutorError as e:
            self._report(job.id, -1, f"lost on restart: {e}")
            return None
        if run is None:
            self._report(job.id, -1, "lost on restart")
        return run

    def adopt(self, job: Job) -> bool:
        mine = [(n, c) for n, c in self._find(job) if int(c["Labels"].get(LABEL_RESTART, 0)) == job.restarts]
        if not mine:
            return False
        if any(c.get("State") == "created" for _, c in mine):  # cut short before every worker started
            for name, c in mine:
                self._remove(_Worker(name, -1, c["Id"]))
            return False
        run = self._find_run(job)
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
        workers = build_workers(
            spec, job_id, alloc, d, restarts, nodes, python=self.python,
            addresses={n: self.hosts[n].address for n in alloc}, rdzv_port=self._rdzv_port(first, job_id),
            use_uuids=self.use_uuids, runner=str(d / RUNNER_COPY), result_key=self.result_key(job_id))
        plans = self._plans(spec, workers, alloc)
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
            for rank, (host, argv, env, devices, sidecar) in enumerate(plans):
                cid = self._create(job_id, rank, restarts, host, image, argv, env, devices, cwd, account)
                started.append(_Worker(host, rank, cid, sidecar=sidecar))
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
        run = _Run(job_id=job_id, restarts=restarts, workers=started, logf=logf, multi=len(alloc) > 1)
        self._watch(run)
        return run

    def _plans(self, spec: JobSpec, workers: list, alloc: Allocation) -> list[tuple]:
        """(host, argv, env, device ids or None, sidecar) per container."""
        plans = []
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        for w in workers:
            env = job_environment(w.env, spec.env, extra=self.env)  # the image's PATH, HOME, ...
            devices = self._devices(nodes.get(w.node), w.gpus)
            if devices is not None:  # real GPUs: the container sees them as 0..k-1
                env["SCHEDULEARN_HOST_GPUS"] = env["CUDA_VISIBLE_DEVICES"]
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(devices)))
            plans.append((w.node, _pin_rendezvous_host(list(w.argv), len(plans)), env, devices, False))
        if Launcher(spec.launcher) is Launcher.horovod and len(alloc) > 1:
            # horovodrun on the first host reaches the others over ssh: an sshd container on each
            # (the image must have sshd and the hosts' keys; see docs/docker.md)
            host, argv, env, devices, _ = plans[0]
            i = argv.index("horovod.runner.launch") + 1
            plans[0] = (host, argv[:i] + ["-p", str(self.horovod_ssh_port)] + argv[i:], env, devices, False)
            for name in list(alloc)[1:]:
                env2 = job_environment({}, spec.env, extra=self.env)
                plans.append((name, ["/usr/sbin/sshd", "-D", "-e", "-p", str(self.horovod_ssh_port)], env2,
                              self._devices(nodes.get(name), tuple(alloc[name])), True))
        return plans

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
                device_requests=requests,
                group_add=[str(g) for g in account.groups if g != account.gid] if account else None)
            user = account.docker_user if account is not None else self.user or ""
            kwargs = dict(
                command=argv, environment=env, working_dir=cwd, user=user, host_config=host_config,
                name=f"schedulearn-{job_id}-r{restarts}-w{rank}-{uuidlib.uuid4().hex[:6]}",
                labels={LABEL_JOB: str(job_id), LABEL_RANK: str(rank), LABEL_RESTART: str(restarts),
                        LABEL_JOBDIR: d})
            try:
                return api.create_container(image, **kwargs)["Id"]
            except ImageNotFound:
                if self.pull != "missing":
                    raise ExecutorError(f"image: {image!r} not found on docker host {host} (pull it there "
                                        f"first, or set pull='missing')") from None
                try:
                    client.images.pull(image)
                except Exception as e:  # noqa: BLE001
                    raise ExecutorError(f"image: {image!r} not found on docker host {host} and the pull "
                                        f"failed: {short_error(e)}") from None
                return api.create_container(image, **kwargs)["Id"]
        except ExecutorError:
            raise
        except APIError as e:
            raise self._start_error(job_id, host, image, e) from None
        except Exception as e:  # noqa: BLE001 - connection refused, no socket, timeout: host down
            raise self._host_down(host, e) from None

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
        if not self.user or os.geteuid() != 0:
            return
        try:
            uid, _, gid = self.user.partition(":")
            u, g = int(uid), int(gid or uid)
        except ValueError:
            return  # a user name: its ids are the image's business
        for p in (d, d / CHECKPOINT_DIR):
            os.chown(p, u, g)

    # -- following, exits --------------------------------------------------------------------------
    def _watch(self, run: Run) -> None:
        assert isinstance(run, _Run)
        for w in run.workers:
            threading.Thread(target=self._follow, args=(run, w), name=f"docker-{run.job_id}-{w.rank}",
                             daemon=True).start()

    def _follow(self, run: _Run, w: _Worker) -> None:
        """Copy the container's output into the job log until it exits, then record its exit."""
        prefix = f"[{w.host}] ".encode() if run.multi else b""
        skip = w.skip
        try:
            stream = self._client(w.host, stream=True).api.logs(w.cid, stdout=True, stderr=True, stream=True,
                                                                 follow=True)
            buf = b""
            for chunk in stream:
                if self._closed.is_set():
                    return
                buf += chunk
                if b"\n" not in chunk:
                    continue
                *lines, buf = buf.split(b"\n")
                out = []
                for line in lines:
                    w.lines.append(line.decode("utf-8", "replace"))
                    if skip:
                        skip -= 1
                    else:
                        out.append(prefix + line + b"\n")
                self._write(run, b"".join(out))
            if buf and not self._closed.is_set():
                w.lines.append(buf.decode("utf-8", "replace"))
                if not skip:
                    self._write(run, prefix + buf + b"\n")
            state = self._client(w.host).api.wait(w.cid, timeout=self.api_timeout)
            w.code = int(state.get("StatusCode", -1))
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
            w.code = -1
        if self._closed.is_set():
            return
        if w.lost is None:
            self._remove(w)
        self._worker_ended(run, w)

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
        if run.stopping in ("cancel", "preempt"):
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
        self._write(run, text.encode())

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
        try:
            self._client(w.host).api.remove_container(w.cid, force=True)
        except Exception as e:  # noqa: BLE001 - gone already, or the host is down
            log.debug("could not remove container %s on %s: %s", w.cid[:12], w.host, e)

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

    def _find_run(self, job: Job) -> _Run | None:
        """The job's containers of its latest run (not followed yet), or None when there are none."""
        found = self._find(job)
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
        text = joblogs.tail(self.log_path(job.id))
        for w in workers:
            w.skip = _lines_written(text, f"[{w.host}] " if multi else "")
        logf = open(self.log_path(job.id), "ab", buffering=0, opener=nofollow.opener)
        logf.write(reattached_line(latest, ", ".join(f"{w.host}:{w.cid[:12]}" for w in workers)).encode())
        return _Run(job_id=job.id, restarts=latest, workers=workers, logf=logf, multi=multi)


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


def _lines_written(text: str, prefix: str) -> int:
    """How many output lines of the current run (with `prefix`) the log file already holds."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(joblogs.MARKER) and " start #" in lines[i]:
            lines = lines[i + 1:]
            break
    return sum(1 for ln in lines if not ln.startswith(joblogs.MARKER) and ln.startswith(prefix))


# -- the registration ------------------------------------------------------------------------------
DOCKER_HOSTS = Option(
    "docker_hosts", [], "Docker daemons to run jobs on: URLs (unix://, tcp://host:port, ssh://user@host) "
    "or name=URL[?gpus=N] (default: this machine's daemon)", flag="--docker-host")
DEFAULT_IMAGE = Option("default_image", "", "Docker image for jobs that name none")


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
    return DockerExecutor(docker_hosts(settings), settings.job_root,
                          image=settings.options.get(DEFAULT_IMAGE.name) or None,
                          cancel_grace=settings.cancel_grace, run_as=settings.run_as())


KIND = ExecutorKind("docker", "containers on one or more Docker hosts", DockerExecutor, _make,
                    (DOCKER_HOSTS, DEFAULT_IMAGE))

__all__ = ["KIND", "DockerExecutor", "docker_hosts"]
