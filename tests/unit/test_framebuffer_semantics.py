"""FB_USED, FB_FREE and FB_RESERVED as DCGM and nvidia-smi show them, from a real H200's answers.

The NVML answers below are what `nvmlDeviceGetMemoryInfo` returned on an NVIDIA H200 (driver
580.159.04), idle and under a 10 GiB torch load, beside what `nvidia-smi` printed at the same
moment (docs/nvml.md, 'Framebuffer memory'). The probe printed MiB to one decimal; the byte counts
are those MiB figures times 2^20, rounded. They go through the production poller and renderer, so
a reader that subtracts the reservation a second time (the bug this guards against: 616 MiB too
low on every H200) fails here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pynvml
import pytest

from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from tests.conftest import fleet_from_yaml, render

MIB = 2**20


@dataclass(frozen=True)
class Capture:
    # nvmlMemory_v2 as NVML filled it, MiB to one decimal
    total: float
    reserved: float
    used: float
    free: float
    # nvidia-smi --query-gpu=memory.total,memory.reserved,memory.used,memory.free, MiB
    smi: tuple[int, int, int, int]
    # the process list's memory on the board, MiB (nvmlDeviceGetComputeRunningProcesses)
    processes_mib: float = 0.0


IDLE = Capture(143771.0, 615.1, 0.0, 143155.9, (143771, 616, 0, 143156))
LOADED = Capture(143771.0, 615.1, 11122.8, 132033.1, (143771, 616, 11123, 132034), 11114.0)


def _bytes(mib: float) -> int:
    return round(mib * MIB)


@pytest.fixture
def h200_answering(make_sim: Callable[..., FakeNvml]) -> Iterator[Callable[[Capture], FakeNvml]]:
    """Sets the capture the simulated H200 answers with, and gives the simulator back."""
    sim = make_sim(
        fleet_from_yaml('driver_version: "580.159.04"\ngpus:\n  - {model: H200-141GB-HBM3e}\n')
    )
    simulated = sim.api.nvmlDeviceGetMemoryInfo
    answer: list[Capture] = []

    def memory_info(handle: Any, version: int | None = None) -> Any:
        simulated(handle, version=version)  # counts the call, checks the handle
        c = answer[0]
        total, reserved, used = _bytes(c.total), _bytes(c.reserved), _bytes(c.used)
        free = total - reserved - used
        if version:
            return pynvml.c_nvmlMemory_v2_t(
                version=version, total=total, reserved=reserved, used=used, free=free
            )
        # v1: the reservation counted as used (the same board's v1 answer)
        return pynvml.c_nvmlMemory_t(total=total, free=free, used=used + reserved)

    sim.api.nvmlDeviceGetMemoryInfo = memory_info

    def answering(capture: Capture) -> FakeNvml:
        answer.insert(0, capture)
        return sim

    yield answering


def _exported(text: str, name: str) -> float:
    lines = [line for line in text.splitlines() if line.startswith(name + "{")]
    assert len(lines) == 1, f"{name}: {lines}"
    return float(lines[0].rsplit(" ", 1)[1])


@pytest.mark.parametrize("capture", [IDLE, LOADED], ids=["idle", "loaded"])
def test_the_exporter_shows_what_nvidia_smi_shows(
    capture: Capture, h200_answering: Callable[[Capture], FakeNvml], make_poller: Callable[..., Any]
) -> None:
    sim = h200_answering(capture)
    text = render(make_poller(sim).sweep())
    smi_total, smi_reserved, smi_used, smi_free = capture.smi
    exported = {
        name: _exported(text, f"DCGM_FI_DEV_FB_{name}")
        for name in ("TOTAL", "RESERVED", "USED", "FREE")
    }
    # DCGM converts bytes to MiB by truncating; nvidia-smi rounds: at most 1 MiB apart.
    assert exported["TOTAL"] == smi_total
    for name, smi in (("RESERVED", smi_reserved), ("USED", smi_used), ("FREE", smi_free)):
        assert abs(exported[name] - smi) <= 1, (name, exported[name], smi)
    assert exported["USED"] >= capture.processes_mib  # never less than what the processes hold
    assert exported["USED"] + exported["FREE"] + exported["RESERVED"] >= smi_total - 2


def test_a_v1_only_driver_counts_the_reservation_as_used(
    h200_answering: Callable[[Capture], FakeNvml], make_poller: Callable[..., Any]
) -> None:
    """Before R510 there is no reservation field: v1's used is all the driver can tell."""
    sim = h200_answering(LOADED)
    v2 = sim.api.nvmlDeviceGetMemoryInfo

    def v1_only(handle: Any, version: int | None = None) -> Any:
        if version:
            raise pynvml.NVMLError_FunctionNotFound()
        return v2(handle)

    sim.api.nvmlDeviceGetMemoryInfo = v1_only
    text = render(make_poller(sim).sweep())
    assert _exported(text, "DCGM_FI_DEV_FB_USED") == (_bytes(11122.8) + _bytes(615.1)) // MIB
    assert "DCGM_FI_DEV_FB_RESERVED{" not in text
