"""GPU inventory: real NVML where a driver is present, declared virtual GPUs where it is not.

This machine has no NVIDIA driver: the first tests check the fallback with the real
`nvidia-ml-py` (its `nvmlInit` fails with `NVMLError_LibraryNotFound`). The NVML reading code
(MIG included) is exercised against a small stand-in of the pynvml API; on a GPU machine
`test_real_nvml_lists_real_gpus` checks the real thing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest
from schedulearn.engine import Engine
from schedulearn.inventory import HostInventory, discover, keep_fresh
from schedulearn.model import Node
from schedulearn.sim.executor import SimExecutor

from tests.conftest import require

try:
    import pynvml
except ImportError:  # a dependency of the project: missing means a broken install
    pynvml = None


@pytest.fixture(autouse=True)
def _needs_pynvml():
    require(pynvml is not None, "nvidia-ml-py is not installed (pip install -e .)")


def _nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_without_nvml_declared_gpus_are_virtual():
    if _nvml_works():
        pytest.skip("this machine has a working NVML: the fallback does not apply")
    inv = HostInventory(virtual_gpus=3, host="here")
    nodes = inv.refresh()
    assert [n.name for n in nodes] == ["here"]
    (node,) = nodes
    assert node.virtual is True and inv.virtual
    assert [g.index for g in node.gpus] == [0, 1, 2]
    assert all(g.virtual for g in node.gpus)
    assert all(g.to_dict()["virtual"] is True for g in node.gpus)
    assert "NVML Shared Library Not Found" in inv.nvml_error
    assert inv.refresh()[0].gpus[2].uuid == node.gpus[2].uuid  # stable across refreshes
    assert discover(virtual_gpus=0)[0].gpus == []


def test_bad_virtual_gpu_count_is_one_line():
    with pytest.raises(ValueError, match=r"^virtual_gpus: expected an integer >= 0, got -1$"):
        HostInventory(virtual_gpus=-1)


def test_real_nvml_lists_real_gpus():
    if not _nvml_works():
        pytest.skip("no NVIDIA driver here; run on a GPU machine")
    (node,) = HostInventory(virtual_gpus=2).refresh()
    assert node.virtual is False and node.gpus
    for g in node.gpus:
        assert not g.virtual and g.uuid.startswith(("GPU-", "MIG-")) and g.memory_total_mb > 0


class FakeNvml:
    """The part of the pynvml API the inventory uses: GPU 0 plain, GPU 1 in MIG mode with two
    instances (slots 0 and 2), counters that change between reads."""

    class NVMLError(Exception):
        pass

    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self):
        self.used = 100
        self.inits = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h[1]}" if h[0] == "gpu" else f"MIG-{h[1]}-{h[2]}"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA A100-SXM4-40GB" if h[0] == "gpu" else "NVIDIA A100 MIG 3g.20gb"

    def nvmlDeviceGetMemoryInfo(self, h):
        total = 40960 if h[0] == "gpu" else 20096
        return SimpleNamespace(total=total * 1024 * 1024, used=self.used * 1024 * 1024)

    def nvmlDeviceGetUtilizationRates(self, h):
        if h[0] == "mig":
            raise self.NVMLError("Not Supported")
        return SimpleNamespace(gpu=37, memory=5)

    def nvmlDeviceGetMigMode(self, h):
        if h[1] == 0:
            raise self.NVMLError("Not Supported")
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 3

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):
        if slot == 1:
            raise self.NVMLError("Not Found")
        return ("mig", h[1], slot)


def test_nvml_reading_lists_gpus_and_mig_devices_separately():
    nv = FakeNvml()
    inv = HostInventory(virtual_gpus=8, host="gpu-box", nvml=nv)
    (node,) = inv.refresh()
    assert isinstance(node, Node) and node.virtual is False and not inv.virtual
    plain, mig_a, mig_b = node.gpus
    assert (plain.index, plain.uuid, plain.name) == (0, "GPU-0", "NVIDIA A100-SXM4-40GB")
    assert (plain.memory_total_mb, plain.memory_used_mb, plain.utilization) == (40960, 100, 37.0)
    assert plain.mig_parent is None and not plain.virtual
    # GPU 1 is in MIG mode: not schedulable whole; its instances are, numbered after the GPUs
    assert [(m.index, m.uuid, m.mig_parent) for m in (mig_a, mig_b)] == [(2, "MIG-1-0", "GPU-1"),
                                                                        (3, "MIG-1-2", "GPU-1")]
    assert mig_a.memory_total_mb == 20096 and mig_a.utilization == 0.0
    nv.used = 5000
    assert inv.refresh()[0].gpus[0].memory_used_mb == 5000  # refresh re-reads
    assert nv.inits == 1


def test_only_the_gpus_named_are_scheduled_and_a_missing_one_is_said_once(caplog):
    """`local_gpus`: a workstation keeps a GPU out of the scheduler's hands (its display, or
    interactive work). By index, by UUID, a MIG device by its GPU's UUID; indices kept as NVML
    numbers them (what `CUDA_VISIBLE_DEVICES` gets)."""
    nv = FakeNvml()
    assert [g.uuid for g in HostInventory(host="h", nvml=nv, only=["0"]).refresh()[0].gpus] == ["GPU-0"]
    assert [g.uuid for g in HostInventory(host="h", nvml=nv, only=["GPU-1"]).refresh()[0].gpus] == [
        "MIG-1-0", "MIG-1-2"]
    assert [g.index for g in HostInventory(host="h", nvml=nv, only=["3,MIG-1-0"]).refresh()[0].gpus] == [2, 3]
    virtual = HostInventory(virtual_gpus=4, host="h", only=["1,3"])
    with caplog.at_level(logging.WARNING, logger="schedulearn.inventory"):
        assert [g.index for g in virtual.refresh()[0].gpus] == [1, 3] and not caplog.records
        partly = HostInventory(virtual_gpus=4, host="h", only=["2", "9"])
        for _ in range(3):
            assert [g.index for g in partly.refresh()[0].gpus] == [2]
    assert [r.getMessage() for r in caplog.records] == [
        "local_gpus: 9 not found on this machine (it has 0, 1, 2, 3); left out"]
    for bad in ("x", "1 2", "-1", "gpu0"):
        with pytest.raises(ValueError, match=rf"^local_gpus: expected GPU indices or UUIDs.*got '{bad}'$"):
            HostInventory(virtual_gpus=4, only=[bad])


def test_nvml_failing_after_init_falls_back_to_virtual(caplog):
    nv = FakeNvml()
    working = nv.nvmlDeviceGetCount

    def broken():
        raise nv.NVMLError("Driver Not Loaded")

    nv.nvmlDeviceGetCount = broken
    inv = HostInventory(virtual_gpus=2, host="h", nvml=nv)
    with caplog.at_level(logging.INFO, logger="schedulearn.inventory"):
        (node,) = inv.refresh()
        assert node.virtual and len(node.gpus) == 2
        assert inv.nvml_error == "NVML unavailable: Driver Not Loaded"
        for _ in range(3):  # the server refreshes every 30 s: the log said it each time
            inv.refresh()
        said = [r.getMessage() for r in caplog.records]
        assert said == ["NVML unavailable: Driver Not Loaded; using 2 declared virtual GPUs"], said
        nv.nvmlDeviceGetCount = working  # back, then gone again: said again
        assert not inv.refresh()[0].virtual and inv.nvml_error is None
        nv.nvmlDeviceGetCount = broken
        inv.refresh()
        assert len(caplog.records) == 2


def test_keep_fresh_updates_figures_in_place_and_replaces_a_changed_set():
    nv = FakeNvml()
    inv = HostInventory(host="gpu-box", nvml=nv)
    eng = Engine(inv.refresh(), "fifo", SimExecutor())
    assert eng.total_gpus == 3

    async def main():
        task = asyncio.create_task(keep_fresh(inv, eng, interval=0.02))
        try:
            nodes_before = eng.nodes
            nv.used = 7000
            deadline = time.monotonic() + 5
            while eng.nodes[0].gpus[0].memory_used_mb != 7000:
                assert time.monotonic() < deadline, "memory figure never refreshed"
                await asyncio.sleep(0.01)
            assert eng.nodes is nodes_before  # same GPUs: no new inventory, no extra round
            nv.nvmlDeviceGetCount = lambda: 1  # GPU 1 (and its MIG devices) went away
            while eng.total_gpus != 1:
                assert time.monotonic() < deadline, "a changed GPU set never reached the engine"
                await asyncio.sleep(0.01)
            assert [g.uuid for g in eng.nodes[0].gpus] == ["GPU-0"]
        finally:
            eng.close()
            await asyncio.wait_for(task, 2)

    asyncio.run(main())
