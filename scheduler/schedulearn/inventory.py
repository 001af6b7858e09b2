"""Where the engine's nodes come from: the `Inventory` interface, and this host's GPUs
(`HostInventory`: NVML through `nvidia-ml-py`, or declared virtual GPUs where NVML is missing).

An inventory answers `refresh()` with the nodes as they are now; the server reads it at start
and again every `inventory_interval` seconds (`keep_fresh` does the same beside a bare engine).
Executors that run jobs elsewhere read their own nodes (`DockerExecutor.nodes`: the Docker hosts).

`HostInventory(virtual_gpus=4).refresh()` returns `[Node]` for this host. With NVML: one `Gpu` per
physical GPU (NVML index, UUID, name, memory total/used in MiB, utilisation %); a GPU in MIG mode
is not schedulable whole, so its MIG devices are listed instead, each as its own `Gpu` with
`mig_parent` = the parent's UUID, its MIG UUID (what `CUDA_VISIBLE_DEVICES` takes) and an index
numbered after the physical GPUs. Without NVML (`NVMLError_LibraryNotFound`, no driver, no GPU)
the node has `virtual_gpus` GPUs marked `virtual=True` (and so does the node).

With NVML, `processes` also holds what runs on each GPU (`nvmlDeviceGetComputeRunningProcesses`):
{GPU UUID: [(pid, MiB of its memory or None)]}, a GPU left out where NVML cannot say (no
permission, not supported). Whose processes they are is the executor's question
(`schedulearn.busygpus`): the inventory only reads.

`only` keeps the scheduler to some of them (`local_gpus`: a workstation's display GPU, or one kept
for interactive work, is left alone): GPU indices or UUIDs, a MIG device by its own UUID or its
GPU's. A GPU named there but not found is left out of the inventory, said once in the log.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from .model import Gpu, Node

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("schedulearn.inventory")
_MIB = 1024 * 1024
#: how `only` names a GPU: its index, or a UUID as NVML gives it (`GPU-…`, `MIG-…`, or a virtual GPU's)
_GPU_ID = re.compile(r"\d+|(?:GPU|MIG|virtual)-[\w.:/-]+")


def _load_nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Inventory(Protocol):
    """A source of nodes: `refresh()` reads them now (it may block: NVML, a daemon, a command);
    `close()` releases what reading them holds."""

    def refresh(self) -> list[Node]: ...
    def close(self) -> None: ...


class HostInventory:
    """GPUs of one host. `refresh()` re-reads them (memory, utilisation, MIG changes)."""

    def __init__(self, virtual_gpus: int = 0, host: str | None = None, nvml: Any = None,
                 only: Iterable[str] = ()):
        if not isinstance(virtual_gpus, int) or virtual_gpus < 0:
            raise ValueError(f"virtual_gpus: expected an integer >= 0, got {virtual_gpus!r}")
        self.host = host or socket.gethostname()
        self.virtual_gpus = virtual_gpus
        self.only = tuple(x.strip() for item in only for x in str(item).split(",") if x.strip())
        for name in self.only:
            if not _GPU_ID.fullmatch(name):
                raise ValueError(f"local_gpus: expected GPU indices or UUIDs, comma-separated (1,2,3 or "
                                 f"GPU-8f3e…), got {name!r}")
        self.not_found: tuple[str, ...] = ()  # GPUs of `only` the last read did not find
        self.found: list[Gpu] = []  # every GPU the last read found, those left out included
        #: the compute processes on each GPU at the last read: UUID -> [(pid, MiB or None)]
        self.processes: dict[str, list[tuple[int, int | None]]] = {}
        self._nvml = nvml if nvml is not None else _load_nvml()
        self._initialised = False
        self.nvml_error: str | None = None  # why NVML is not used, when it is not
        self.nodes: list[Node] = []

    @property
    def virtual(self) -> bool:
        return not self.nodes or all(n.virtual for n in self.nodes)

    def refresh(self) -> list[Node]:
        gpus = self._read_nvml()
        if gpus:
            node = Node(name=self.host, gpus=gpus, virtual=False, address="localhost")
        else:
            node = Node.virtual_node(self.host, self.virtual_gpus)
            node.address = "localhost"
        self.found = list(node.gpus)
        if self.only:
            node.gpus = self._selected(node.gpus)
        self.nodes = [node]
        return self.nodes

    def _selected(self, gpus: list[Gpu]) -> list[Gpu]:
        """The GPUs `only` names (a MIG device also by its GPU's UUID); says once which are missing."""
        names = set(self.only)
        kept = [g for g in gpus if names & {str(g.index), g.uuid, g.mig_parent or ""}]
        missing = tuple(n for n in self.only
                        if not any(n in (str(g.index), g.uuid, g.mig_parent) for g in gpus))
        if missing and missing != self.not_found:
            log.warning("local_gpus: %s not found on this machine (it has %s); left out", ", ".join(missing),
                        gpu_names(gpus))
        self.not_found = missing
        return kept

    def close(self) -> None:
        if self._initialised:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down is best effort
                pass
            self._initialised = False

    # -- NVML ------------------------------------------------------------------------------------
    def _read_nvml(self) -> list[Gpu]:
        nv = self._nvml
        if nv is None:
            self.nvml_error = "nvidia-ml-py is not installed"
            return []
        try:
            if not self._initialised:
                nv.nvmlInit()
                self._initialised = True
            count = nv.nvmlDeviceGetCount()
            physical = [self._device(nv, i) for i in range(count)]
        except nv.NVMLError as e:
            error = f"NVML unavailable: {e}"
            if self._initialised:
                self.close()
            if self.virtual_gpus and error != self.nvml_error:  # once, not at every refresh (30 s)
                log.info("%s; using %d declared virtual GPUs", error, self.virtual_gpus)
            self.nvml_error = error
            return []
        self.nvml_error = None
        self.processes = {}
        gpus: list[Gpu] = []
        migs: list[Gpu] = []
        for gpu, handle in physical:
            children = self._mig_devices(nv, handle, gpu)
            if children:
                migs.extend(children)
            else:
                gpus.append(gpu)
                self._read_processes(nv, handle, gpu.uuid)
        nxt = max((g.index for g, _ in physical), default=-1) + 1
        for m in migs:
            m.index = nxt
            nxt += 1
        return gpus + migs

    @staticmethod
    def _info(nv: Any, handle: Any) -> tuple[str, str, int, int, float]:
        uuid = _text(nv.nvmlDeviceGetUUID(handle))
        name = _text(nv.nvmlDeviceGetName(handle))
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        try:
            util = float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        except nv.NVMLError:  # not supported (MIG devices, some boards)
            util = 0.0
        return uuid, name, int(mem.total // _MIB), int(mem.used // _MIB), util

    def _read_processes(self, nv: Any, handle: Any, uuid: str) -> None:
        """`processes[uuid]`: the compute processes on one GPU (or MIG device), where NVML says."""
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
        except (nv.NVMLError, AttributeError):  # not supported, no permission, an old library
            return
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append((int(p.pid), None if used is None else int(used // _MIB)))
        self.processes[uuid] = out

    def _device(self, nv: Any, i: int) -> tuple[Gpu, Any]:
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        uuid, name, total, used, util = self._info(nv, handle)
        return Gpu(index=i, uuid=uuid, name=name, memory_total_mb=total, memory_used_mb=used,
                   utilization=util, virtual=False), handle

    def _mig_devices(self, nv: Any, handle: Any, parent: Gpu) -> list[Gpu]:
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError:  # no MIG on this GPU
            return []
        if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        out = []
        for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError:  # empty slot
                continue
            uuid, name, total, used, util = self._info(nv, mh)
            self._read_processes(nv, mh, uuid)
            out.append(Gpu(index=-1, uuid=uuid, name=name, memory_total_mb=total, memory_used_mb=used,
                           utilization=util, virtual=False, mig_parent=parent.uuid))
        return out


def gpu_names(gpus: list[Gpu]) -> str:
    """`0, 1, 2, 3` (`none` when there are none): what a message about `only` lists."""
    return ", ".join(str(g.index) if not g.mig_parent else g.uuid for g in gpus) or "none"


def _shape(nodes: list[Node]) -> list[tuple[str, bool, tuple[tuple[int, str], ...]]]:
    return [(n.name, n.healthy, tuple((g.index, g.uuid) for g in n.gpus)) for n in nodes]


def apply(engine: Engine, nodes: list[Node]) -> bool:
    """Bring the engine's inventory up to date with `nodes`: a changed set of GPUs replaces it
    (`engine.set_nodes`, a new round); new memory and utilisation figures are copied into the
    engine's `Gpu` objects in place. Returns whether the set changed."""
    if _shape(nodes) != _shape(engine.nodes):
        engine.set_nodes(nodes)
        return True
    for old, new in zip(engine.nodes, nodes, strict=True):
        for g, h in zip(old.gpus, new.gpus, strict=True):
            g.memory_used_mb, g.memory_total_mb = h.memory_used_mb, h.memory_total_mb
            g.utilization = h.utilization
    return False


async def keep_fresh(inventory: Inventory, engine: Engine, interval: float = 30.0) -> None:
    """Re-read the inventory every `interval` seconds (in a thread: NVML calls block) until the
    engine closes; run it as a task beside `engine.run`."""
    if interval <= 0:
        raise ValueError(f"interval: expected seconds > 0, got {interval}")
    while not engine.closed:
        await asyncio.sleep(interval)
        if engine.closed:
            return
        try:
            nodes = await asyncio.to_thread(inventory.refresh)
        except Exception:  # noqa: BLE001 - a failed read keeps the last inventory
            log.exception("inventory refresh failed")
            continue
        apply(engine, nodes)


def discover(virtual_gpus: int = 0, host: str | None = None) -> list[Node]:
    """This host's GPUs once (see `HostInventory`)."""
    inv = HostInventory(virtual_gpus, host)
    try:
        return inv.refresh()
    finally:
        inv.close()
