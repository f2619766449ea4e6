"""The contract between the poller and its helpers: collectors that do their NVML work off the
sweep (a blocking event wait, a slow sampling window, buffers kept between rounds) and hand their
latest results to each sweep.

The poller knows helpers only through `PollerHelper`; which helpers exist, and in what order, is
decided in one place, `kube_gpu_exporter.exporter.nvml.helper_registry.build_helpers`. Every helper
thread is a `BackgroundThread`, supervised there (a crashed loop is restarted with backoff), and
every helper's health reaches the snapshot only through `status()`, which must read failure while
the thread is crashed (`thread_healthy`) or stuck in a round (`PeriodicSampler`'s overdue rule), so
the poller's single status loop never reports a dead or wedged helper's frozen data as a success.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from kube_gpu_exporter.exporter.background import PeriodicSampler
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.snapshot import (
    CollectorStatus,
    GpuReadings,
    GpuSnapshot,
    HelperParts,
)


@dataclass(frozen=True, slots=True)
class LiveGpu:
    """A GPU that answered this sweep, as a helper needs to address it."""

    index: int
    uuid: str
    # None: a whole GPU. A tuple: the GPU-instance ids of a MIG-enabled GPU.
    gpu_instance_ids: tuple[int, ...] | None = None

    @classmethod
    def of(cls, gpu: GpuSnapshot) -> LiveGpu:
        identity = gpu.identity
        instances = (
            tuple(m.gpu_instance_id for m in gpu.mig_instances) if identity.mig_enabled else None
        )
        return cls(identity.index, identity.uuid, instances)


@runtime_checkable
class PollerHelper(Protocol):
    # The `collector` label of exporter_collector_success and friends.
    collector: str
    # True for a helper whose round is short, never blocks, and belongs to every sweep (draining
    # NVML's queued XID events): the poller runs it on the sweep thread before reading the
    # devices, and it has no thread of its own.
    on_sweep: ClassVar[bool]

    def start(self) -> None:
        """Start the helper's thread. Called after every successful nvmlInit; idempotent."""

    def problem(self) -> str | None:
        """Why the helper's thread can no longer run (it gave up), for /healthz; else None."""

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, waiting at most `timeout` seconds, and release what NVML gave it."""

    def status(self) -> CollectorStatus:
        """Whether the last round succeeded and how long it took; never success while the
        helper's thread is crashed or has given up, or while its round is overdue (stuck)."""
        ...

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        """The GPUs that answered the latest sweep; the helper works on these from now on."""

    def invalidate(self) -> None:
        """NVML was shut down under the helper (driver unloaded or reloaded): every handle and
        buffer it holds is gone with the library and must be dropped, not freed. Runs on the
        sweep thread, so it must never wait for the helper's round: a round stuck in a call
        would stall every sweep after it, and /healthz with them."""

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        """This helper's latest data for the GPU `uuid`, whose readings this sweep are
        `readings`: the snapshot fields it fills in, nothing where it has no data for it. Runs
        on the sweep's workers; the poller builds the snapshot once from every helper's."""
        ...

    def run_once(self) -> None:
        """One round now, on the caller's thread, for callers that step time themselves."""


class PeriodicHelper(PeriodicSampler):
    """A helper that samples every interval; `run_once` is one sampling round.

    Its status reads failure while NVML is down: from start-up until the poller first tracks the
    GPUs, and from `invalidate` until it tracks them again. A round may not run in that time (it
    may be an interval away, or never, when NVML never came up), so the last round's outcome
    cannot say it. A GPU it has not tracked before gets a round at once rather than at the end
    of the interval, so its data appears one interval after it does, not two."""

    collector: str = ""
    on_sweep: ClassVar[bool] = False

    def __init__(self, interval_seconds: float, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(interval_seconds, clock)
        self._nvml_up = False
        self._tracked: frozenset[LiveGpu] = frozenset()

    def status(self) -> CollectorStatus:
        return CollectorStatus(
            self.collector, self._nvml_up and self.round_succeeded, self.reported_duration_seconds
        )

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        """Subclasses take the targets, then call this."""
        tracked = frozenset(gpus)
        new = tracked - self._tracked
        self._tracked = tracked
        self._nvml_up = True
        if new:
            self.wake()

    def invalidate(self) -> None:
        """Subclasses drop what they hold across rounds, then call this."""
        self._nvml_up = False
        self._tracked = frozenset()

    def run_once(self) -> None:
        self.sample_once()


class HelperRunner(Protocol):
    """How a poller sets its helpers going: ThreadedHelpers in production; a caller that steps
    simulated time hands one that runs their rounds when told (simulator/stepped_time.py)."""

    def attach(self, helpers: Sequence[PollerHelper]) -> None:
        """The poller's helpers, once, when it is built."""

    def start(self) -> None:
        """NVML came up, the first time or again after a reload; idempotent."""


class ThreadedHelpers:
    """Every helper on its own thread."""

    def __init__(self) -> None:
        self._helpers: tuple[PollerHelper, ...] = ()

    def attach(self, helpers: Sequence[PollerHelper]) -> None:
        self._helpers = tuple(helpers)

    def start(self) -> None:
        for helper in self._helpers:
            helper.start()
