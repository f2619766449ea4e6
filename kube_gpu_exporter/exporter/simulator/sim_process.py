"""A simulated node's GPU processes as data: the container a process runs in, the process, and one
utilization sample of it. The process table (processes.py) makes them; the simulated NVML
(nvml/processes.py) reports them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SimContainer:
    namespace: str
    pod: str
    pod_uid: str
    name: str
    container_id: str
    qos: str  # guaranteed, burstable or besteffort (processes._QOS)


@dataclass(frozen=True, slots=True)
class SimProcess:
    pid: int
    comm: str
    start_ticks: int
    gpu_index: int
    # The GPU instance it runs in on a MIG-enabled GPU; None on a whole GPU.
    gpu_instance_id: int | None
    # None: a process started on the host, outside any pod.
    container: SimContainer | None
    sm_weight: float
    memory_weight: float
    # Where its activity wave starts, in radians.
    phase: float
    # False for a process on a device its pod does not hold: pod-resources names other holders
    # (or none), so attribution must report it unattributed.
    holds_device: bool = True

    @property
    def on_host(self) -> bool:
        return self.container is None


@dataclass(frozen=True, slots=True)
class ProcessUse:
    """One process's utilization sample, in percent of the sampling window."""

    process: SimProcess
    sm_pct: int
    memory_pct: int
    encoder_pct: int
    decoder_pct: int

    @property
    def busy(self) -> bool:
        return bool(self.sm_pct or self.memory_pct or self.encoder_pct or self.decoder_pct)
