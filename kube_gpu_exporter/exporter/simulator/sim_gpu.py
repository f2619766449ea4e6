"""State of one simulated GPU (and its MIG instances) and the physical signals derived from it.

All values are in NVML's own units: mW, mJ, bytes, MHz, KB/s, KiB, degrees C.
"""

from __future__ import annotations

import math
import threading
import uuid as uuidlib
from dataclasses import dataclass, field

from kube_gpu_exporter.exporter.simulator.fleet import GpuSpec
from kube_gpu_exporter.exporter.simulator.nvlink_health import FabricState, NvlinkHealth
from kube_gpu_exporter.exporter.simulator.violations import (
    CLOCK_CUT,
    GPU_IDLE,
    HW_THERMAL_SLOWDOWN,
    POLICIES,
    SW_POWER_CAP,
    SW_THERMAL_SLOWDOWN,
    active_policies,
)
from kube_gpu_exporter.exporter.simulator.workload import (
    SHAPES,
    WorkloadShape,
    smooth_noise,
    utilization,
)

# The clock-event reason bits (nvmlClocksEventReason*) are named in violations.py; tests take
# the ones the board's own state sets (GPU_IDLE, SW_POWER_CAP...) from here.
MIB = 1 << 20
AMBIENT_C = 28.0
THERMAL_LAG_S = 20.0
# The NVLink load model, all-reduce traffic of a busy GPU: KiB/s over all links at full load in
# the transmit direction; receive is a touch lower.
NVLINK_FULL_LOAD_KIB_PER_S = 300e6
NVLINK_RX_SHARE = 0.98
# Traffic the link counters already hold at start: about a day at a third of full load, so that
# a counter reset shows as a drop, as on a node that has been up a while.
NVLINK_HISTORY_S = 0.33 * 86400
_INTEGRATION_PIECE_S = 60.0
_MAX_INTEGRATED_S = 3600.0
# DGX H100 PCI bus numbers of its eight GPUs.
_DGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def stable_uuid(seed: int, *parts: object) -> str:
    return str(
        uuidlib.uuid5(
            uuidlib.NAMESPACE_OID, f"kube-gpu-exporter/{seed}/" + "/".join(map(str, parts))
        )
    )


def _fabric(spec: GpuSpec) -> FabricState | None:
    if spec.fabric is None:
        return None
    return FabricState(uuidlib.UUID(spec.fabric.cluster_uuid).bytes, spec.fabric.clique_id)


@dataclass
class SimMigInstance:
    slot: int
    profile_name: str
    profile_id: int
    gpu_instance_id: int
    compute_instance_id: int
    memory_mib: int
    multiprocessors: int
    compute_slices: int
    uuid: str
    key: int
    # Where the instance sits on the eight memory slices, as nvmlGpuInstanceGetInfo reports it.
    placement_start: int
    placement_size: int


@dataclass
class Counters:
    """Monotonic counters, advanced lazily whenever they are read."""

    energy_mj: float = 0.0
    nvlink_tx_kib: list[float] = field(default_factory=list)
    nvlink_rx_kib: list[float] = field(default_factory=list)
    # Performance policy (violations.POLICIES) -> ns its reasons held the clocks back.
    violation_ns: dict[str, float] = field(default_factory=lambda: dict.fromkeys(POLICIES, 0.0))
    advanced_to: float | None = None


class SimGpu:
    def __init__(self, index: int, spec: GpuSpec, seed: int, clock_start: float) -> None:
        self.index = index
        self.spec = spec
        self.model = spec.model
        self.seed = seed
        self.key = index * 1009 + 7
        self.uuid = f"GPU-{stable_uuid(seed, 'gpu', index)}"
        bus = _DGX_BUSES[index] if index < len(_DGX_BUSES) else 0x10 + index
        self.pci_bus = bus
        self.pci_bus_id = f"00000000:{bus:02X}:00.0"
        self.serial = f"16523{seed % 1000:03d}{index:05d}"
        self.lock = threading.RLock()
        self.mig_enabled = spec.mig is not None
        self.mig_slots: list[SimMigInstance | None] = []
        for slot, placed in enumerate(spec.mig or ()):
            self.mig_slots.append(
                SimMigInstance(
                    slot=slot,
                    profile_name=placed.profile.name,
                    profile_id=placed.profile.profile_id,
                    gpu_instance_id=placed.gpu_instance_id,
                    compute_instance_id=0,
                    memory_mib=placed.profile.memory_mib,
                    multiprocessors=placed.profile.multiprocessors,
                    compute_slices=placed.profile.compute_slices,
                    uuid=f"MIG-{stable_uuid(seed, 'mig', index, placed.gpu_instance_id)}",
                    key=self.key * 31 + placed.gpu_instance_id,
                    placement_start=placed.start,
                    placement_size=placed.profile.placement_size,
                )
            )
        self.workload = spec.workload
        self.shape: WorkloadShape = SHAPES[spec.workload]
        # Faults and slow-moving state.
        self.lost = False
        self.temperature_offset_c = 0.0
        # (mW, from, until): board power as NVML reports it reads this in [from, until) of
        # simulated time, while the board draws, and its energy counter counts, what it really
        # does (a glitched sensor read, as a real board has given 0xFFFFFFFF mW).
        self.power_glitch: tuple[int, float, float] | None = None
        # GPU instance (None: the whole board) -> (value, from, until): every GPM metric of that
        # entity whose later sample falls in [from, until) reads this (+Inf, NaN...).
        self.gpm_glitches: dict[int | None, tuple[float, float, float]] = {}
        self.ecc_enabled = spec.ecc
        self.ecc_sbe_volatile = 0
        self.ecc_dbe_volatile = 0
        # Aggregate counters survive driver reloads; start with a plausible history.
        self.ecc_sbe_history = 3 * (index % 3)
        self.ecc_dbe_history = 0
        self.remapped_correctable = index % 2
        self.remapped_uncorrectable = 0
        self.remapped_pending = 0
        self.remapped_failure = 0
        self.pcie_replays = 0
        # Pre-Ampere boards retire pages instead of remapping rows: cause ("sbe", "dbe") -> the
        # retired pages' addresses, pending ones included; and whether any awaits a reset.
        self.retired_pages: dict[str, list[int]] = {"sbe": [], "dbe": []}
        self.retired_pending = 0
        # Clock-event reason bits forced on (a thermal brake, a power cap), ORed into what the
        # board's state gives; None: none forced. Set through set_clock_event_override.
        self.clock_event_override: int | None = None
        # None: a bare-metal GPU without vGPU licensing. "licensed"/"unlicensed": a vGPU guest.
        self.vgpu_license = spec.vgpu_license
        links = self.model.nvlink_links
        history_kib = (
            NVLINK_FULL_LOAD_KIB_PER_S * NVLINK_HISTORY_S * (1 + index / 10) / max(1, links)
        )
        self.nvlink_health = NvlinkHealth(links=links, fabric=_fabric(spec))
        self.counters = Counters(
            energy_mj=1.0e9 + index * 3.3e7,
            nvlink_tx_kib=[history_kib] * links,
            nvlink_rx_kib=[history_kib * NVLINK_RX_SHARE] * links,
            advanced_to=clock_start,
        )

    # Activity

    def live_instances(self) -> list[SimMigInstance]:
        return [m for m in self.mig_slots if m is not None]

    def instance_utilization(self, instance: SimMigInstance, t: float) -> float:
        return utilization(self.shape, self.seed, instance.key, t)

    def utilization(self, t: float) -> float:
        """Busy fraction of the whole board; a MIG board is busy in proportion to its instances."""
        if self.mig_enabled:
            instances = self.live_instances()
            return sum(self.instance_utilization(m, t) * m.compute_slices for m in instances) / 7
        return utilization(self.shape, self.seed, self.key, t)

    def memory_copy_utilization(self, t: float) -> float:
        return min(
            1.0, 0.55 * self.utilization(t) + 0.03 * abs(smooth_noise(self.seed, self.key + 1, t))
        )

    def decoder_utilization(self, t: float) -> float:
        if self.shape.decoder == 0.0:
            return 0.0
        return min(1.0, self.shape.decoder * (1 + smooth_noise(self.seed, self.key + 2, t)))

    # Power, temperature, clocks

    def power_limit_mw(self) -> int:
        return self.model.tdp_mw

    def power_average_mw(self, t: float) -> int:
        """The draw averaged over the last second, as the boards that keep an average report."""
        return int(sum(self.power_mw(t - k / 4) for k in range(5)) / 5)

    def reported_power_mw(self, t: float, averaged: bool) -> int:
        """Board power as NVML answers it: the 1 s average or the instantaneous draw, unless a
        glitch is injected for this moment."""
        glitch = self.power_glitch
        if glitch is not None and glitch[1] <= t < glitch[2]:
            return glitch[0]
        return self.power_average_mw(t) if averaged else self.power_mw(t)

    def power_mw(self, t: float) -> int:
        u = self.utilization(t)
        dynamic = (self.model.tdp_mw * 0.97 - self.model.idle_power_mw) * u**1.2
        jitter = 0.01 * self.model.tdp_mw * smooth_noise(self.seed, self.key + 3, t * 4)
        return int(
            min(
                self.power_limit_mw(),
                max(self.model.idle_power_mw * 0.9, self.model.idle_power_mw + dynamic + jitter),
            )
        )

    def temperature_c(self, t: float) -> int:
        # Temperature follows power with a lag: the heat sink takes time to warm up.
        past = self.power_mw(t - THERMAL_LAG_S) / self.model.tdp_mw
        return round(AMBIENT_C + 6 + 48 * past + self.temperature_offset_c)

    def memory_temperature_c(self, t: float) -> int:
        return self.temperature_c(t) + 4

    def clock_event_reasons(self, t: float) -> int:
        reasons = 0
        if self.utilization(t) < 0.01:
            reasons |= GPU_IDLE
        if self.power_mw(t) >= 0.97 * self.power_limit_mw():
            reasons |= SW_POWER_CAP
        temperature = self.temperature_c(t)
        if temperature >= self.model.slowdown_temp_c:
            reasons |= SW_THERMAL_SLOWDOWN
        if temperature >= self.model.shutdown_temp_c - 2:
            reasons |= HW_THERMAL_SLOWDOWN
        override = self.clock_event_override
        return reasons | override if override is not None else reasons

    def set_clock_event_override(self, t: float, bits: int | None) -> None:
        """From simulated time t on, force the clock-event reason `bits` on (ORed into the ones
        the board's own state gives); None clears them. The violation counters integrate up to
        t first, so time before the change counts under the old reasons."""
        with self.lock:
            self.advance(t)
            self.clock_event_override = bits

    def sm_clock_mhz(self, t: float) -> int:
        u = self.utilization(t)
        if u < 0.01:
            return self.model.idle_sm_clock_mhz
        clock = self.model.max_sm_clock_mhz * (0.7 + 0.3 * min(1.0, u * 1.4))
        if self.clock_event_reasons(t) & CLOCK_CUT:
            clock *= 0.6
        return int(clock) // 15 * 15  # clocks move in 15 MHz steps

    def mem_clock_mhz(self, t: float) -> int:
        return self.model.mem_clock_mhz

    # Memory

    def memory(self, t: float) -> tuple[int, int, int, int]:
        """(total, reserved, used excluding reserved, free) in bytes for the whole board."""
        total = self.model.memory_mib * MIB
        reserved = self.model.reserved_mib * MIB
        if self.mig_enabled:
            used = sum(self.instance_memory(m, t)[1] for m in self.live_instances())
        else:
            fraction = self.shape.memory_fraction
            used = int(fraction * (total - reserved)) + (2 * MIB if fraction else 0)
            used = used // MIB * MIB
        return total, reserved, used, total - reserved - used

    def instance_memory(self, instance: SimMigInstance, t: float) -> tuple[int, int, int]:
        """(total, used, free) bytes of one MIG instance."""
        total = instance.memory_mib * MIB
        fraction = self.shape.memory_fraction
        # Instances hold their allocation; a touch of drift keeps it from looking frozen.
        drift = 0.02 * smooth_noise(self.seed, instance.key + 5, t / 30)
        used = int(max(0.0, min(0.98, fraction + drift if fraction else 0.0)) * total) // MIB * MIB
        return total, used, total - used

    # Counters

    def advance(self, t: float) -> None:
        """Integrate energy, NVLink traffic and the violation counters up to time t."""
        with self.lock:
            last = self.counters.advanced_to
            if last is None or t <= last:
                return
            # Midpoint rule in pieces of at most a minute, good enough at sweep granularity; a
            # gap longer than the cap (a test jumping the clock by hours) counts its last part.
            span = min(t - last, _MAX_INTEGRATED_S)
            pieces = math.ceil(span / _INTEGRATION_PIECE_S)
            width = span / pieces
            links = self.model.nvlink_links
            for k in range(pieces):
                mid = t - span + width * (k + 0.5)
                self.counters.energy_mj += self.power_mw(mid) * width
                for policy in active_policies(self.clock_event_reasons(mid)):
                    self.counters.violation_ns[policy] += width * 1e9
                if links:
                    per_link_kib = self.nvlink_kib_per_s(mid, transmit=True) * width / links
                    for i in range(links):
                        self.counters.nvlink_tx_kib[i] += per_link_kib
                        self.counters.nvlink_rx_kib[i] += per_link_kib * NVLINK_RX_SHARE
            self.counters.advanced_to = t

    def energy_mj(self, t: float) -> int:
        self.advance(t)
        return int(self.counters.energy_mj)

    def violation_ns(self, policy: str, t: float) -> int:
        """Nanoseconds the policy's reasons held the clocks back (violations.py), up to t."""
        self.advance(t)
        return int(self.counters.violation_ns[policy])

    def nvlink_kib_per_s(self, t: float, transmit: bool) -> float:
        """NVLink traffic at time t over all links, one direction; 0 without NVLink."""
        if not self.model.nvlink_links:
            return 0.0
        share = 1.0 if transmit else NVLINK_RX_SHARE
        return self.utilization(t) * NVLINK_FULL_LOAD_KIB_PER_S * share

    def reset_nvlink_counters(self, t: float) -> None:
        """The link counters start over from zero, as after a GPU reset."""
        with self.lock:
            self.advance(t)
            links = self.model.nvlink_links
            self.counters.nvlink_tx_kib = [0.0] * links
            self.counters.nvlink_rx_kib = [0.0] * links

    def nvlink_kib(self, t: float, link: int, transmit: bool) -> int:
        self.advance(t)
        series = self.counters.nvlink_tx_kib if transmit else self.counters.nvlink_rx_kib
        return int(series[link])

    def pcie_kbps(self, t: float, transmit: bool) -> int:
        # Host<->device traffic: input pipelines and checkpoints, a few GB/s at most.
        u = self.utilization(t)
        base = 2.2e6 if transmit else 4.0e6
        return int(
            max(
                0.0,
                base
                * u
                * (1 + 0.2 * smooth_noise(self.seed, self.key + (7 if transmit else 9), t)),
            )
        )

    def ecc_totals(self) -> dict[str, int]:
        return {
            "sbe_volatile": self.ecc_sbe_volatile,
            "dbe_volatile": self.ecc_dbe_volatile,
            "sbe_aggregate": self.ecc_sbe_history + self.ecc_sbe_volatile,
            "dbe_aggregate": self.ecc_dbe_history + self.ecc_dbe_volatile,
        }
