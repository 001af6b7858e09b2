"""torchrun jobs resized in place on one host: one torchrun elastic agent per GPU.

A `torchrun` job that asks for `resize: "in-place"` and is elastic runs, on the local executor,
as this file's *supervisor* (`python torchrun_elastic.py supervise ...`, the run's one process
as the executor sees it: its pid file, its process group, its exit status). The supervisor
starts one torchrun elastic agent per GPU of the job — each an elastic "node" of
`--nproc-per-node 1` in one c10d rendezvous (`--nnodes MIN:MAX`, `127.0.0.1:<port>`, hosted by
the agent of slot 0, which a shrink never removes) — and watches the job's `gpus` file (written
by the executor, the job's GPUs in slot order, see `launch.elastic_files`):

* **grow** — an agent is started for each new GPU; it waits in the rendezvous, the running
  agents see a node waiting and restart their workers (a membership change: not a failure, it
  does not use up `--max-restarts`), and a new round runs on all of them.
* **shrink** — the agents of the removed slots get SIGTERM: each *leaves* the rendezvous at once
  (`agent` below: torchrun itself, on a signal, neither leaves nor closes it; a node that merely
  died would hold the next round up until its heartbeats expire), then stops its worker (which
  saves its checkpoint, `schedulearn.elastic.Checkpointer`, after the step it is in; its peers,
  who agree on stopping at every step, save the same step and stop too). The surviving agents
  see their workers stop, restart them, and a new round runs without the removed ones — without
  waiting for the removed workers to end.

What survives a resize in place: the job in the scheduler (same run, `job.restarts` and
`SCHEDULEARN_RESTART_COUNT` unchanged), the supervisor and the agents of the surviving GPUs
(their processes, the rendezvous and its store, hosted by slot 0), the job's log and directory,
and each surviving slot's GPU. What does not: every worker process (torchrun restarts all the
workers of a rendezvous round), so nothing in a worker's memory survives — the workers resume
from the job's checkpoint exactly as after a checkpoint-restart, which the stop at a step
boundary makes exact (no step lost or repeated).

A surviving agent counts the stop of its worker in a shrink as a failure (its
`--max-restarts`; in a grow too, when its worker stopped with its peers' before the agent saw
the new node), so the agents run with a `--max-restarts` that cannot run out, and the
supervisor keeps the job's own failure policy: a slot whose worker was restarted for failures
more often than the resizes it went through (its agent's `TORCHELASTIC_RESTART_COUNT`, recorded
in `workers/<slot>.restarts` by the slot wrapper) had a real failure, and the job stops with
it, as a `torchrun` job does without `--max-restarts`.

Each agent's worker runs through a `/bin/sh` wrapper that records its pid in `workers/<slot>`
(what the executor waits for before it gives a shrink's GPUs back) and its agent's restart
count; `CUDA_VISIBLE_DEVICES` of each agent (and its worker) is its slot's GPU, `LOCAL_RANK` is
0, `RANK`/`WORLD_SIZE` are the round's. `SCHEDULEARN_NUM_NODES=1` tells `schedulearn.elastic`
that the job is on one host (torchrun's `LOCAL_WORLD_SIZE` is 1 here).

This file is run by its path with the job's Python (the supervisor uses the standard library
only; the agent imports torch), like `schedulearn/run.py`; `supervisor_argv` is the executor's
side. See docs/resize.md.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time

#: the job directory's files (the same names as `launch.GPUS_FILE`, `launch.WORKERS_DIR`)
GPUS_FILE = "gpus"
WORKERS_DIR = "workers"
#: what the agents' `--max-restarts` is: never reached (the supervisor counts failures itself)
AGENT_MAX_RESTARTS = 1_000_000
#: the rendezvous settings: 1 s of last call (one host), heartbeats every second, a node
#: silent for 3 s is dead (what holds a round up when an agent dies without leaving)
RDZV_CONF = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"
#: torch's rendezvous re-reads its shared state once a second while it waits, and caches it for
#: a second (both hard-wired); the agents here read it every `RDZV_POLL` seconds (one host: a
#: read of a local TCP store)
RDZV_POLL = 0.02
#: seconds between an agent's looks at its worker and at nodes waiting to join (torchrun's 0.1)
MONITOR_INTERVAL = 0.05
#: the last call of every round but an agent's first (the first keeps `RDZV_CONF`'s 1 s, in which
#: the agents a run starts together all join), where the job's GPU count is unknown (no `gpus`
#: file; with it a round completes as soon as that many agents joined, and the 1 s last call only
#: bounds the wait for one that does not come): a resize's round is waited for by no one else
#: (a shrink's survivors stop at the same step; a grow's new agent is already waiting)
LATER_LAST_CALL = 0.25
#: seconds the other agents get to end once one has ended well (those of the last round end
#: together, past torchrun's exit barrier; one a grow started too late never would)
FINISH_WAIT = 10.0
#: seconds between two looks at the `gpus` file and the agents
POLL = 0.1
#: each worker's wrapper: its pid and its agent's failure restarts under `workers/`, then the job's
#: command through the prewarm client (`$1`: Python, `$2`: prewarm.py), which forks the worker
#: from the run's server of pre-warmed workers (or else execs the command)
_SLOT_WRAPPER = ('w="$SCHEDULEARN_JOB_DIR/workers/$SCHEDULEARN_SLOT"; echo $$ > "$w"; '
                 'echo "${TORCHELASTIC_RESTART_COUNT:-0}" > "$w.restarts"; '
                 'p="$1"; q="$2"; shift 2; exec "$p" -I -S "$q" fork "$@"')
SCRIPT = os.path.abspath(__file__)
#: the fork server of pre-warmed workers (`schedulearn/prewarm.py`, run by its path)
PREWARM = os.path.join(os.path.dirname(os.path.dirname(SCRIPT)), "prewarm.py")
#: what it imports for a torchrun job (unless the job's `$SCHEDULEARN_PREWARM` says otherwise):
#: no Horovod; torch.distributed imported, never initialised
PRELOAD = "torch,torch._dynamo,torch.distributed,schedulearn.elastic"
#: what the supervisor sets for every agent and its worker (and so for the prewarm server, whose
#: environment a worker must match to be forked)
AGENT_ENV = {"SCHEDULEARN_NUM_NODES": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
#: an unmeasured resize in place younger than this (seconds) keeps the next one from being in
#: place: a round may still be forming (see `resizable`)
SETTLE_S = 60.0
#: `agent`'s first argument where it hosts the rendezvous store on a socket it is handed
LISTEN_FD_FLAG = "--schedulearn-listen-fd"
#: the host's ephemeral ports (what binding port 0 and outgoing connections take) and the ports
#: kept out of them for services
EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED = "/proc/sys/net/ipv4/ip_local_reserved_ports"
#: the fewest ports a range outside the ephemeral one must have to pick the workers' store port
#: from (see `store_ports`)
MIN_STORE_PORTS = 1000


def supervisor_argv(python: str, job_dir: str, nnodes: tuple[int, int], command: list[str]) -> list[str]:
    """The run's command: the supervisor for a job of `nnodes` (min, max) GPUs whose workers
    run `command` (the job's own command, through the job runner)."""
    return [python, "-u", SCRIPT, "supervise", "--job-dir", job_dir, "--nnodes", f"{nnodes[0]}:{nnodes[1]}",
            "--", *command]


def resizable(old: list[int], new: list[int], pending: dict | None, now: float) -> bool:
    """Whether a job on GPUs `old` (slot order) can move to `new` in place: the running slots
    keep their GPUs (a grow appends, a shrink keeps the first: the slot-0 agent hosts the
    rendezvous), and the previous resize in place has taken effect — its pause is measured
    (the job reported a step at its new size) or `SETTLE_S` have passed. A resize that lands
    while a round is forming could leave a worker waiting for a peer whose agent has gone;
    it is a checkpoint-restart instead."""
    k = min(len(old), len(new))
    if list(old[:k]) != list(new[:k]):
        return False
    return not (pending and pending.get("in_place") and now - float(pending.get("t", 0)) < SETTLE_S)


def agent_argv(python: str, slot: int, nnodes: str, port: int, run_id: str, command: list[str],
               listen_fd: int | None = None) -> list[str]:
    """One GPU's torchrun elastic agent (through `agent`, which leaves the rendezvous on SIGTERM).
    `listen_fd`: for slot 0, the host of the rendezvous store, the supervisor's socket already
    listening at `port`, which the store takes over (see `agent`)."""
    conf = f"{RDZV_CONF},is_host={1 if slot == 0 else 0}"
    fd = [f"{LISTEN_FD_FLAG}={listen_fd}"] if listen_fd is not None else []
    return [python, "-u", SCRIPT, "agent", *fd, f"--nnodes={nnodes}", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
            f"--rdzv-conf={conf}",
            f"--max-restarts={AGENT_MAX_RESTARTS}", f"--monitor-interval={MONITOR_INTERVAL}", "--no-python",
            "/bin/sh", "-c", _SLOT_WRAPPER, "schedulearn-slot", python, PREWARM, *command]


# -- the agent: torchrun, leaving the rendezvous when it is stopped -------------------------------
def agent(argv: list[str]) -> None:
    """`torch.distributed.run` with `argv`; on SIGTERM (a shrink, or the job stopped) its
    worker is stopped as torchrun does, then this node leaves the rendezvous, so that the next
    round starts at once instead of after its heartbeats expire. (torchrun has no public call
    for leaving; where its private one is missing the round waits for the heartbeats.) With
    `--schedulearn-listen-fd=N` first, the rendezvous store it hosts listens on that socket."""
    import torch.distributed.elastic.rendezvous.registry as registry
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException

    if argv and argv[0].startswith(LISTEN_FD_FLAG + "="):
        _host_on(int(argv[0].split("=", 1)[1]))
        argv = argv[1:]
    _pick_store_ports_outside_ephemeral()
    handlers = []
    get = registry.get_rendezvous_handler

    def get_rendezvous_handler(params):
        handler = get(params)
        handlers.append(handler)
        return handler

    registry.get_rendezvous_handler = get_rendezvous_handler
    _quicken_rendezvous(handlers)
    _leave_first(handlers)
    try:
        run.main(argv)
    except SignalException:
        for handler in handlers:
            _leave(handler)
        raise SystemExit(128 + signal.SIGTERM) from None


def _host_on(fd: int) -> None:
    """The rendezvous store this agent hosts takes over the listening socket `fd` (TCPStore's
    `master_listen_fd`) instead of binding its port anew: the port stays held from the
    supervisor's bind on, so no other socket can take it while this agent imports torch."""
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    store = backend.TCPStore

    def tcp_store(host, port, *args, is_master=False, **kwargs):
        if is_master:
            kwargs.setdefault("master_listen_fd", fd)
        return store(host, port, *args, is_master=is_master, **kwargs)

    backend.TCPStore = tcp_store


def store_ports(ephemeral: tuple[int, int]) -> range | None:
    """Where the workers' store port is picked: the ports above the ephemeral range `ephemeral`
    (low, high), or else the up to 10,000 below it (not under 10,000), whichever first has
    `MIN_STORE_PORTS`; None where neither has."""
    low, high = ephemeral
    for ports in (range(high + 1, 65536), range(max(10_000, low - 10_000), low)):
        if len(ports) >= MIN_STORE_PORTS:
            return ports
    return None


def _ephemeral() -> tuple[int, int] | None:
    try:
        with open(EPHEMERAL) as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return None


def _reserved() -> set[int]:
    """`ip_local_reserved_ports` (`8000-8010,9000`): ports an administrator keeps for services."""
    try:
        with open(RESERVED) as f:
            text = f.read().strip()
    except OSError:
        return set()
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        try:
            out.update(range(int(a), int(b or a) + 1))
        except ValueError:
            continue
    return out


def _free(port: int) -> bool:
    """Whether `port` can be bound on every address now (as rank 0's store will bind it)."""
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def store_port(tries: int = 64) -> int | None:
    """A free port for the workers' store outside the ephemeral range, or None.

    The agents' rounds need `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`, so each round's rank-0 agent
    picks the port of its workers' store, and rank 0's *worker* binds it seconds later (once it
    has started and imported torch). torch picks it by binding port 0 and closing the socket: an
    ephemeral port, which any socket of the host — another job's store pick, any outgoing
    connection — can take in those seconds (rank 0 failing with EADDRINUSE, or a rank reaching
    another job's store and hanging: docs/benchmarks.md). Outside the ephemeral range no
    outgoing connection and no port-0 bind lands, so only another pick from the same thousands
    of ports could, and each pick is checked free first."""
    eph = _ephemeral()
    ports = store_ports(eph) if eph else None
    if ports is None:
        return None
    reserved = _reserved()
    for _ in range(tries):
        port = random.choice(ports)
        if port not in reserved and _free(port):
            return port
    return None


def _pick_store_ports_outside_ephemeral() -> None:
    """This agent's rounds pick their workers' store port with `store_port` (torch's own pick
    where it finds none)."""
    from torch.distributed.elastic.rendezvous import api

    torch_pick = api.get_free_port

    def get_free_port():
        return store_port() or torch_pick()

    api.get_free_port = get_free_port


def _leave_first(handlers: list) -> None:
    """On a signal (a shrink's SIGTERM), leave the rendezvous *before* the worker is stopped:
    the survivors' next round waits for every node of the last one to leave, and would
    otherwise wait for this worker's stop (the step's end, the save, the interpreter's exit) a
    second time. Leaving a complete round changes nothing for the nodes still in it (a round
    ends when its last node leaves). Only on the agent's signal path (its `_shutdown` while a
    `SignalException` is handled), never when it stops its workers for a new round."""
    try:
        from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
        from torch.distributed.elastic.multiprocessing.api import SignalException

        shutdown = LocalElasticAgent._shutdown
    except (ImportError, AttributeError):
        return

    def _shutdown(self, *args, **kwargs):
        if isinstance(sys.exc_info()[1], SignalException):
            for handler in handlers:
                _leave(handler)
        return shutdown(self, *args, **kwargs)

    LocalElasticAgent._shutdown = _shutdown


def _quicken_rendezvous(handlers: list) -> None:
    """Poll the rendezvous state every `RDZV_POLL` s (without torch's 1 s cache of it), skew
    the joins of round 0 by at most `RDZV_POLL` (torch: up to 0.3 s, against the load of many
    nodes on a remote store; a resize's first round is round 0 until every node of the first
    has left), complete each round once the job's GPUs have joined (`_expect_nodes`), and,
    where their count is unknown, give each round after an agent's first a last call of
    `LATER_LAST_CALL` s (torch's private names: where they are missing, torch's own timing
    stays, a round of 1-2 s)."""
    from datetime import timedelta

    try:
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

        delay = dr._delay

        def _delay(seconds):  # 1: its poll; (0, 0.3): the random skew of a round-0 join
            if seconds == 1:
                seconds = RDZV_POLL
            elif isinstance(seconds, tuple):
                seconds = (seconds[0], min(seconds[1], RDZV_POLL))
            delay(seconds)

        dr._delay = _delay
        next_rendezvous = dr.DynamicRendezvousHandler.next_rendezvous
    except (ImportError, AttributeError):
        return

    def quick_next_rendezvous(self):
        try:  # what it polls is read afresh (torch keeps a copy for 1 s)
            self._state_holder._cache_duration = 0
        except AttributeError:
            pass
        counted = _expect_nodes(self._settings)
        info = next_rendezvous(self)
        if self in handlers and not counted:
            try:
                self._settings.timeout._last_call = timedelta(seconds=LATER_LAST_CALL)
            except AttributeError:
                pass
        return info

    dr.DynamicRendezvousHandler.next_rendezvous = quick_next_rendezvous


_max_nodes: dict[int, int] = {}  # id(settings) -> the rendezvous' own --nnodes maximum


def _expect_nodes(settings) -> bool:
    """Complete the next round as soon as the job's GPUs (its `gpus` file: one agent each) have
    joined, instead of after the last call that a round of fewer than `--nnodes` MAX waits for:
    the round's `max_nodes` becomes the number of GPUs the job has now (within MIN..MAX). Every
    agent reads the same file (a resize in place is not made while the last one's round forms,
    see `resizable`); where the file is missing, or the count is off, the round keeps torch's
    rule (complete at MAX, or at MIN and more once the last call has passed). Returns whether
    the count was known."""
    top = _max_nodes.setdefault(id(settings), settings.max_nodes)
    job_dir = os.environ.get("SCHEDULEARN_JOB_DIR")
    gpus = _read_gpus(job_dir) if job_dir else None
    want = min(max(len(gpus), settings.min_nodes), top) if gpus else top
    object.__setattr__(settings, "max_nodes", want)  # a frozen dataclass, shared by the handler's parts
    return bool(gpus)


def _leave(handler) -> None:
    try:
        from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

        handler._stop_heartbeats()
        handler._op_executor.run(dr._RendezvousExitOp(), time.monotonic() + 5.0)
    except Exception as e:  # noqa: BLE001 - the round then waits for the heartbeats to expire
        print(f"schedulearn: torchrun agent could not leave the rendezvous: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)


# -- the supervisor -------------------------------------------------------------------------------
def _listener() -> socket.socket:
    """A socket listening on a free port of 127.0.0.1, for the rendezvous store: handed to the
    slot-0 agent and kept open until then (a port picked by binding and closing a socket could be
    taken by another socket before the store binds it: EADDRINUSE, the job failing at start)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(socket.SOMAXCONN)
    return s


def _read_gpus(job_dir: str) -> list[str] | None:
    try:
        with open(os.path.join(job_dir, GPUS_FILE)) as f:
            text = f.read().strip()
    except OSError:
        return None
    return [g for g in text.split(",") if g] or None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _say(text: str) -> None:
    print(f"schedulearn: {text}", flush=True)


class Supervisor:
    def __init__(self, job_dir: str, nnodes: str, command: list[str]):
        self.job_dir, self.nnodes, self.command = job_dir, nnodes, command
        self.listener: socket.socket | None = _listener()  # until the slot-0 agent has it
        self.port = self.listener.getsockname()[1]
        self.run_id = (f"schedulearn-{os.environ.get('SCHEDULEARN_JOB_ID', '0')}-"
                       f"{os.environ.get('SCHEDULEARN_RESTART_COUNT', '0')}")
        self.agents: dict[int, subprocess.Popen] = {}  # slot -> its agent
        self.gpus: list[str] = []  # the GPU of each slot, as the agents were started
        self.resizes: dict[int, int] = {}  # slot -> resizes it went through (failures it is allowed)
        self.leaving: list[subprocess.Popen] = []  # agents a shrink removed, until they are gone
        self.stopping = False
        self.finished: float | None = None  # when the first agent ended well (the training is over)

    def start(self, slot: int, gpu: str) -> None:
        env = dict(os.environ, **AGENT_ENV, CUDA_VISIBLE_DEVICES=gpu, SCHEDULEARN_SLOT=str(slot))
        for name in (str(slot), f"{slot}.restarts"):
            try:
                os.unlink(os.path.join(self.job_dir, WORKERS_DIR, name))
            except OSError:
                pass
        fd = self.listener.fileno() if slot == 0 and self.listener is not None else None
        argv = agent_argv(sys.executable, slot, self.nnodes, self.port, self.run_id, self.command, fd)
        self.agents[slot] = subprocess.Popen(argv, env=env, pass_fds=() if fd is None else (fd,))
        if fd is not None:  # the agent's copy is the store's now
            self.listener.close()
            self.listener = None
        self.resizes[slot] = 0

    def apply(self, gpus: list[str]) -> None:
        """Move to `gpus` (slot order): stop the agents of removed slots, start new ones."""
        was = self.gpus
        if gpus[:min(len(was), len(gpus))] != was[:min(len(was), len(gpus))]:
            _say(f"the GPUs of running slots changed ({','.join(was)} -> {','.join(gpus)}): not resizable "
                 "in place; stopping")
            raise SystemExit(1)
        for slot in range(len(gpus), len(was)):  # a shrink: the highest slots leave
            agent = self.agents.pop(slot)
            self.resizes.pop(slot, None)
            try:
                agent.send_signal(signal.SIGTERM)
            except OSError:
                pass
            self.leaving.append(agent)
        for slot in self.agents:  # its worker may stop as if it failed (see the module's doc)
            self.resizes[slot] += 1
        for slot in range(len(was), len(gpus)):  # a grow: new slots join
            self.start(slot, gpus[slot])
        self.gpus = list(gpus)

    def failed_slot(self) -> int | None:
        """A slot whose worker was restarted for a failure more often than it was resized."""
        for slot, allowed in self.resizes.items():
            n = _read_int(os.path.join(self.job_dir, WORKERS_DIR, f"{slot}.restarts"))
            if n is not None and n > allowed:
                return slot
        return None

    def stop_all(self, sig: int = signal.SIGTERM) -> None:
        for agent in [*self.agents.values(), *self.leaving]:
            try:
                agent.send_signal(sig)
            except OSError:
                pass

    def wait_all(self) -> None:
        for agent in [*self.agents.values(), *self.leaving]:
            agent.wait()

    def start_prewarm(self) -> None:
        """The run's fork server of pre-warmed workers: it imports torch while the first round
        trains; the workers of later rounds are forked from it (it exits with the supervisor)."""
        argv = [sys.executable, "-u", PREWARM, "serve", self.job_dir, PRELOAD]
        subprocess.Popen(argv, env=dict(os.environ, **AGENT_ENV), stdin=subprocess.DEVNULL)

    def run(self) -> int:
        gpus = _read_gpus(self.job_dir)
        if gpus is None:
            _say(f"no GPUs in {os.path.join(self.job_dir, GPUS_FILE)}")
            return 1
        self.start_prewarm()
        self.apply(gpus)
        while True:
            if self.stopping:  # the executor signalled the whole process group: agents too
                self.wait_all()
                return 128 + signal.SIGTERM
            self.leaving = [a for a in self.leaving if a.poll() is None]
            for slot, agent in list(self.agents.items()):
                code = agent.poll()
                if code is None:
                    continue
                del self.agents[slot]
                if code != 0 and self.finished is None:
                    _say(f"the torchrun agent of slot {slot} (GPU {self.gpus[slot]}) ended with status "
                         f"{code}; stopping the job")
                    self.stop_all()
                    self.wait_all()
                    return code
                if code == 0 and self.finished is None:
                    self.finished = time.monotonic()
            if not self.agents:
                self.wait_all()
                return 0
            if self.finished is not None:  # the training is over; an agent that has not ended by
                if time.monotonic() - self.finished > FINISH_WAIT:  # now joined too late: it goes
                    self.stop_all()
                    self.wait_all()
                    return 0
                time.sleep(POLL)
                continue
            slot = self.failed_slot()
            if slot is not None:
                _say(f"a worker failed (slot {slot}, GPU {self.gpus[slot]}: torchrun restarted it outside a "
                     "resize); stopping the job")
                self.stop_all()
                self.wait_all()
                return 1
            gpus = _read_gpus(self.job_dir)
            if gpus is not None and gpus != self.gpus:
                self.apply(gpus)
            time.sleep(POLL)


def supervise(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="torchrun_elastic.py supervise")
    ap.add_argument("--job-dir", required=True)
    ap.add_argument("--nnodes", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command")
    os.makedirs(os.path.join(args.job_dir, WORKERS_DIR), exist_ok=True)
    sup = Supervisor(args.job_dir, args.nnodes, command)

    def on_signal(signum, frame):
        sup.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return sup.run()
    except SystemExit as e:
        sup.stop_all()
        sup.wait_all()
        return int(e.code or 0)


def main(argv: list[str]) -> None:
    here = os.path.dirname(SCRIPT)  # run by path: this folder's modules must not shadow others
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if argv[:1] == ["agent"]:
        agent(argv[1:])
        return
    if argv[:1] == ["supervise"]:
        raise SystemExit(supervise(argv[1:]))
    raise SystemExit("usage: torchrun_elastic.py supervise --job-dir DIR --nnodes MIN:MAX -- COMMAND...")


if __name__ == "__main__":
    main(sys.argv[1:])
