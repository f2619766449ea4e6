"""PCIe TX/RX throughput, sampled in its own thread.

`nvmlDeviceGetPcieThroughput` blocks for a 20 ms sample window per direction (about 320 ms for an
8-GPU node), so it never runs in the main sweep; the sweep picks up the latest readings instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pynvml

from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.nvml.binding import GPU_GONE, NVMLError
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu, PeriodicHelper
from kube_gpu_exporter.exporter.snapshot import (
    PCIE_RX_THROUGHPUT,
    PCIE_TX_THROUGHPUT,
    GpuReadings,
    HelperParts,
)

log = logging.getLogger(__name__)

PcieReading = tuple[int | None, int | None]  # (tx KB/s, rx KB/s)


class PcieSampler(PeriodicHelper):
    thread_name = "pcie-sampler"
    collector = "pcie"

    def __init__(
        self, nvml: GuardedNvml, interval_seconds: float, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(interval_seconds, clock)
        self._nvml = nvml
        self._lock = threading.Lock()
        self._targets: tuple[tuple[int, str], ...] = ()
        self._latest: dict[str, PcieReading] = {}

    def sample(self, targets: Sequence[tuple[int, str]]) -> None:
        """Set the (index, uuid) pairs to sample."""
        with self._lock:
            self._targets = tuple(targets)

    def latest(self, uuid: str) -> PcieReading | None:
        return self._latest.get(uuid)

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        self.sample([(gpu.index, gpu.uuid) for gpu in gpus])
        super().track(gpus)

    def invalidate(self) -> None:
        """Readings from before a driver reload describe a library that is gone."""
        self._latest = {}
        super().invalidate()

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        reading = self.latest(uuid)
        if reading is None or readings is None:
            return {}
        tx, rx = reading
        return {"readings": readings.with_values({PCIE_TX_THROUGHPUT: tx, PCIE_RX_THROUGHPUT: rx})}

    def sample_once(self) -> None:
        with self._lock:
            targets = self._targets
        latest: dict[str, PcieReading] = {}
        ok = True
        for index, uuid in targets:
            try:
                handle = self._nvml.api.nvmlDeviceGetHandleByIndex(index)
                tx = self._nvml.call(
                    uuid,
                    "pcie_tx",
                    "nvmlDeviceGetPcieThroughput",
                    handle,
                    pynvml.NVML_PCIE_UTIL_TX_BYTES,
                )
                rx = self._nvml.call(
                    uuid,
                    "pcie_rx",
                    "nvmlDeviceGetPcieThroughput",
                    handle,
                    pynvml.NVML_PCIE_UTIL_RX_BYTES,
                )
            except GPU_GONE:
                ok = False
                continue
            except NVMLError as exc:
                log.debug("PCIe sampling of GPU %d failed: %s", index, exc)
                ok = False
                continue
            if tx is not None or rx is not None:
                latest[uuid] = (tx, rx)
        # Swap, never mutate: the sweep thread reads this dict without a lock.
        self._latest = latest
        self.last_success = ok
