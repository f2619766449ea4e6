"""PCIe TX/RX throughput, sampled in its own thread.

`nvmlDeviceGetPcieThroughput` blocks for a 20 ms sample window per direction (about 320 ms for an
8-GPU node), so it never runs in the main sweep; the sweep picks up the latest readings instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pynvml

from exporter.background import PeriodicSampler
from exporter.nvml.binding import GPU_GONE, NVMLError
from exporter.nvml.guarded_calls import GuardedNvml

log = logging.getLogger(__name__)

PcieReading = tuple[int | None, int | None]  # (tx KB/s, rx KB/s)


class PcieSampler(PeriodicSampler):
    thread_name = "pcie-sampler"

    def __init__(self, nvml: GuardedNvml, interval_seconds: float) -> None:
        super().__init__(interval_seconds)
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

    def sample_once(self) -> None:
        with self._lock:
            targets = self._targets
        latest: dict[str, PcieReading] = {}
        ok = True
        for index, uuid in targets:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
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
