"""DCGM_EXP_P2P_STATUS's readings: nvmlDeviceGetP2PStatus over NVLink for every ordered pair of
GPUs, in a helper of its own, only when a --collectors file lists the family.

P2P status is topology: it changes with a reset, a driver reload or a GPU coming or going,
not from sweep to sweep. So it is read once when the helper first tracks the GPUs (a GPU new to
it wakes a round at once), again after a driver reload (invalidate), and otherwise every
P2P_INTERVAL_SECONDS. N GPUs cost N*(N-1) calls, 56 on an 8-GPU node, which the interval keeps
out of the sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pynvml

from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.nvml.binding import GPU_GONE, NVMLError
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu, PeriodicHelper
from kube_gpu_exporter.exporter.snapshot import GpuReadings, HelperParts

log = logging.getLogger(__name__)

P2P_INTERVAL_SECONDS = 300.0

# (peer GPU index, NVML's nvmlGpuP2PStatus_t), sorted by peer.
PeerStatuses = tuple[tuple[int, int], ...]


class P2pStatusReader(PeriodicHelper):
    thread_name = "p2p-status"
    collector = "p2p"

    def __init__(
        self,
        nvml: GuardedNvml,
        interval_seconds: float = P2P_INTERVAL_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(interval_seconds, clock)
        self._nvml = nvml
        self._targets: tuple[tuple[int, str], ...] = ()
        self._latest: dict[str, PeerStatuses] = {}

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        self._targets = tuple(sorted((gpu.index, gpu.uuid) for gpu in gpus))
        super().track(gpus)

    def invalidate(self) -> None:
        # Answers from before a driver reload describe a library that is gone.
        self._latest = {}
        super().invalidate()

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        peers = self._latest.get(uuid)
        return {} if peers is None else {"p2p_nvlink": peers}

    def sample_once(self) -> None:
        targets = self._targets
        latest: dict[str, PeerStatuses] = {}
        ok = True
        try:
            handles = {i: self._nvml.api.nvmlDeviceGetHandleByIndex(i) for i, _ in targets}
        except NVMLError as exc:
            log.debug("P2P status: a GPU handle failed: %s", exc)
            self._latest, self.last_success = {}, False
            return
        for index, uuid in targets:
            peers: list[tuple[int, int]] = []
            for peer, _ in targets:
                if peer == index:
                    continue
                try:
                    status = self._nvml.call(
                        uuid,
                        f"p2p_{peer}",
                        "nvmlDeviceGetP2PStatus",
                        handles[index],
                        handles[peer],
                        pynvml.NVML_P2P_CAPS_INDEX_NVLINK,
                    )
                except GPU_GONE:
                    # A lost GPU, or a lost peer: that pair has no series, as DCGM lists none.
                    ok = False
                    continue
                except NVMLError as exc:
                    log.debug("P2P status of GPU %d to %d failed: %s", index, peer, exc)
                    ok = False
                    continue
                if status is not None:
                    peers.append((peer, int(status)))
            if peers:
                latest[uuid] = tuple(peers)
        # Swap, never mutate: the sweep thread reads this dict without a lock.
        self._latest = latest
        self.last_success = ok
