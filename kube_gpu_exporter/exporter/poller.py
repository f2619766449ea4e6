"""The background sweep: NVML in, one immutable NodeSnapshot out per interval.

The GPUs are read on daemon worker threads, in turn, with a deadline
(kube_gpu_exporter.exporter.nvml.device_reads: a read that hangs hands the GPUs after it to workers
of their own). A device whose read does not return in time keeps its previous values, marked stale,
and is not asked again until the hung call returns, so one wedged GPU neither stalls the sweep nor
piles up threads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.background import BackgroundThread
from kube_gpu_exporter.exporter.backoff import Backoff
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.nvml.binding import GPU_GONE, NVMLError, error_name
from kube_gpu_exporter.exporter.nvml.clock_event_counts import ClockEventCounts
from kube_gpu_exporter.exporter.nvml.device_reader import DeviceReader
from kube_gpu_exporter.exporter.nvml.device_reads import DaemonWorkers, TurnTakingReads
from kube_gpu_exporter.exporter.nvml.energy_estimate import MAX_GAP_SECONDS, EnergyEstimates
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import HelperRunner, LiveGpu, ThreadedHelpers
from kube_gpu_exporter.exporter.nvml.helper_registry import (
    HelperFactory,
    HelperInputs,
    build_helpers,
)
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.nvml.process_sampler import ProcessSampler
from kube_gpu_exporter.exporter.nvml.rejected_readings import RejectedReadings
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.processes.owner import PidOwners
from kube_gpu_exporter.exporter.scrape_cadence import NextScrapeIn, ScrapeCadence, nobody_scrapes
from kube_gpu_exporter.exporter.snapshot import (
    CollectorStatus,
    GpuIdentity,
    GpuSnapshot,
    HelperParts,
    NodeSnapshot,
)

log = logging.getLogger(__name__)

# Errors that mean the library as a whole is gone (driver unloaded or reloaded): re-initialise.
_NVML_GONE = (
    pynvml.NVMLError_Uninitialized,
    pynvml.NVMLError_DriverNotLoaded,
    pynvml.NVMLError_LibRmVersionMismatch,
    pynvml.NVMLError_LibraryNotFound,
)
_MAX_INIT_BACKOFF = 300.0
# What to do about the ways nvmlInit fails on a machine that is not (yet) a working GPU node, in
# the words a user acts on; the init error line and /readyz both say it.
_INIT_ADVICE: tuple[tuple[type[BaseException], str], ...] = (
    (
        pynvml.NVMLError_LibraryNotFound,
        "NVML's library (libnvidia-ml.so.1) is not on this machine: install the NVIDIA driver, "
        "run on a GPU node (in a container, under the NVIDIA container runtime, which mounts the "
        "library), or use --simulate to try the exporter without a GPU",
    ),
    (
        pynvml.NVMLError_DriverNotLoaded,
        "the NVIDIA kernel driver is not loaded: load it (nvidia-smi fails the same way until "
        "then), run on a GPU node, or use --simulate to try the exporter without a GPU",
    ),
    (
        pynvml.NVMLError_LibRmVersionMismatch,
        "the NVML library and the loaded kernel driver are different versions (a driver upgraded "
        "but not reloaded): reload the driver or reboot the node",
    ),
    (
        pynvml.NVMLError_NoPermission,
        "NVML may not open the GPU devices: run the container under the NVIDIA container runtime "
        "with NVIDIA_VISIBLE_DEVICES=all",
    ),
)
# A GPU read takes milliseconds; one that has not finished after this is hung or nearly so.
_MAX_STALL_SECONDS = 0.25


def _placeholder(index: int) -> GpuIdentity:
    return GpuIdentity(index=index, uuid="", name="", pci_bus_id="")


class Poller(BackgroundThread):
    thread_name = "nvml-poller"

    def __init__(
        self,
        config: CollectionConfig,
        publish: Callable[[NodeSnapshot], None],
        nvml: NvmlSource,
        *,
        workers: int = 16,
        helpers: HelperFactory = build_helpers,
        runner: HelperRunner | None = None,
        pid_owners: PidOwners | None = None,
        next_scrape_in: NextScrapeIn | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`clock` times what is integrated, due or retried over time (the energy estimate, the
        slow fields' cadences, the identity and MIG topology refresh, the clock-event and XID
        count windows, nvmlInit's backoff, the wait between sweeps, the helpers' rounds): the
        system's, or a ManualClock a test steps. A sweep's own duration and its snapshot's time
        are the system's: they say how long NVML took."""
        super().__init__(clock)
        self._config = config
        self._publish = publish
        self._api = nvml.api
        self._tally = ErrorTally()
        self._nvml = GuardedNvml(self._tally, nvml.api)
        self._rejected = RejectedReadings()
        # `next_scrape_in`: when the exposition expects the next scrape (scrape_schedule.py).
        # The slow fields are read just before one (with nobody scraping, every interval of
        # theirs), within the sweep itself, so the sweep just before a scrape is early enough.
        # GPM samples just before one only when it is given (else every sweep interval).
        slow_fields = (
            ScrapeCadence(
                config.slow_fields_interval_seconds,
                config.interval_seconds,
                next_scrape_in or nobody_scrapes,
                clock.monotonic,
            )
            if config.slow_fields_interval_seconds > 0
            else None
        )
        energy = (
            EnergyEstimates(
                config.energy_read_interval_seconds,
                clock.monotonic,
                # Two missing samples in a row are bridged at any poll interval.
                max_gap_seconds=max(MAX_GAP_SECONDS, 3 * config.interval_seconds),
            )
            if config.energy_read_interval_seconds > 0
            else None
        )
        # A field with its own interval (--collector.field-interval) is due on that interval,
        # before a learnt scrape like the slow fields; 0 reads it every sweep.
        field_cadences = {
            name: ScrapeCadence(
                seconds, config.interval_seconds, next_scrape_in or nobody_scrapes, clock.monotonic
            )
            if seconds > 0
            else None
            for name, seconds in config.field_intervals
        }
        self._reader = DeviceReader(
            self._nvml,
            threading.Lock(),
            slow_fields,
            energy,
            extra_fields=config.extra_fields,
            field_cadences=field_cadences,
            rejected=self._rejected,
        )
        self._mig = MigReader(
            self._nvml, config.mig_refresh_seconds, nvml.expected_refusal, clock.monotonic
        )
        self._clock_events = ClockEventCounts(config.clock_events_count_window_ms, clock.monotonic)
        self._helpers = tuple(
            helpers(
                HelperInputs(
                    config,
                    nvml,
                    self._nvml,
                    self._tally,
                    self._mig_changed,
                    mig=self._mig,
                    pid_owners=pid_owners,
                    next_scrape_in=next_scrape_in,
                    rejected=self._rejected,
                    clock=clock,
                )
            )
        )
        # Threads in production; whoever steps simulated time runs the rounds itself.
        self._runner = runner or ThreadedHelpers()
        self._runner.attach(self._helpers)
        # The one helper with node-level data besides its status: PollerHelper carries only
        # per-GPU data (contribution), so the sweep asks process accounting for its count itself.
        self._processes = next((h for h in self._helpers if isinstance(h, ProcessSampler)), None)
        self._workers = DaemonWorkers(workers, "nvml-device")
        # A read that starts nothing new for this long is taken to be stuck (device_reads.py);
        # two such windows must fit well inside the deadline.
        self._reads = TurnTakingReads(
            self._workers, min(_MAX_STALL_SECONDS, config.device_timeout_seconds / 8)
        )
        self._sweep_lock = threading.Lock()

        self._initialized = False
        self._next_init_at = 0.0  # monotonic time of the next nvmlInit attempt
        self._init_backoff = Backoff(1.0, _MAX_INIT_BACKOFF, jitter=0.0)
        self._last_init_error: str | None = None
        # Why the latest sweep found NVML not answering, for /readyz; None once it answers.
        self._nvml_down: str | None = "no NVML sweep has finished yet"
        self._init_failure: str | None = None  # the last nvmlInit failure, for _nvml_down
        self._driver_version: str | None = None
        self._handles: dict[int, Any] = {}
        self._identities: dict[int, tuple[GpuIdentity, float]] = {}
        self._in_flight: dict[int, Future[GpuSnapshot]] = {}
        self._previous: dict[int, GpuSnapshot] = {}
        self._sequence = 0
        self._last_success_at: float | None = None
        self._published: NodeSnapshot | None = None

    # Lifecycle

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the sweeps and every helper, all within `timeout`."""
        deadline = time.monotonic() + timeout
        super().stop(timeout)
        for helper in self._helpers:
            helper.stop(max(0.0, deadline - time.monotonic()))
        self._workers.shutdown()
        if self._initialized and not self._in_flight:
            try:
                self._api.nvmlShutdown()
            except NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)

    def _run(self) -> None:
        # A sweep or publish that raises ends this loop; BackgroundThread's supervisor logs it
        # once, calls _on_crash and re-enters after a backoff, and gives up (failing /healthz)
        # if the sweeps keep failing.
        clock = self._clock
        while not self._stop.is_set():
            started = clock.monotonic()
            snapshot = self.sweep()
            self._publish(snapshot)
            self._published = snapshot
            self._progressed()
            elapsed = clock.monotonic() - started
            clock.wait(self._stop, self._config.interval_seconds - elapsed)

    def _on_crash(self) -> None:
        # The exposition keeps showing the last published snapshot, whose statuses would claim
        # success for data nobody refreshes now: republish it with every collector failed. It
        # keeps its time, so its age (and /healthz's limit on it) grows as before.
        last = self._published
        if last is None:
            return
        failed = tuple(replace(c, success=False) for c in last.collectors)
        try:
            self._publish(replace(last, collectors=failed))
        except Exception as exc:  # the publish path may be what is broken; the age still shows
            log.warning("could not mark the last snapshot's collectors failed: %s", exc)

    def nvml_problem(self) -> str | None:
        """Why the latest sweep could not use NVML, with what to do about it; None when it could.
        Set by the sweep thread, read by /readyz: one reference, swapped whole."""
        return self._nvml_down

    def problem(self) -> str | None:
        """Why the poller or one of its helper threads can no longer refresh; None if all can."""
        return super().problem() or next(
            (why for helper in self._helpers if (why := helper.problem()) is not None), None
        )

    # One sweep

    def sweep(self) -> NodeSnapshot:
        # One sweep at a time: the per-device bookkeeping below is not meant to be shared.
        with self._sweep_lock:
            return self._sweep()

    def _sweep(self) -> NodeSnapshot:
        started = time.monotonic()
        if not self._initialized and self._clock.monotonic() >= self._next_init_at:
            self._initialize()
        gpus: tuple[GpuSnapshot, ...] = ()
        nvml_ok = self._initialized
        if self._initialized:
            try:
                count = self._api.nvmlDeviceGetCount()
            except NVMLError as exc:
                self._tally.record("nvmlDeviceGetCount", error_name(exc))
                if isinstance(exc, _NVML_GONE):
                    self._lose_nvml(exc)
                else:
                    log.warning("nvmlDeviceGetCount failed: %s", exc)
                nvml_ok = False
                what = "went away" if isinstance(exc, _NVML_GONE) else "failed"
                self._nvml_down = f"nvmlDeviceGetCount {what} ({error_name(exc)})"
            else:
                # Helpers whose round belongs to the sweep (the XID drain) run first, so that
                # what they took is in this sweep's snapshot.
                for helper in self._helpers:
                    if helper.on_sweep:
                        helper.run_once()
                gpus = self._read_devices(count, started)
                self._forget_vanished(gpus)
                self._track_helpers(gpus)
        finished = time.monotonic()
        duration = finished - started
        now = time.time()
        if nvml_ok:
            self._last_success_at = now
            self._nvml_down = None
        elif not self._initialized and self._init_failure:
            self._nvml_down = self._init_failure
        self._sequence += 1
        collectors = (
            CollectorStatus("nvml", nvml_ok and all(g.up for g in gpus), duration),
            *(helper.status() for helper in self._helpers),
        )
        return NodeSnapshot(
            taken_at=now,
            monotonic_at=finished,
            sweep_duration_seconds=duration,
            nvml_up=nvml_ok,
            driver_version=self._driver_version,
            gpus=gpus,
            collectors=collectors,
            nvml_errors=self._tally.snapshot(),
            readings_rejected=self._rejected.snapshot(),
            last_success_at=self._last_success_at,
            sequence=self._sequence,
            process_log_name_conflicts=(
                None if self._processes is None else self._processes.log_name_conflicts
            ),
        )

    def _read_devices(self, count: int, started: float) -> tuple[GpuSnapshot, ...]:
        # A device still hung in an earlier call is not asked again: no reads stack up on it.
        indexes = [
            index
            for index in range(count)
            if (pending := self._in_flight.get(index)) is None or pending.done()
        ]
        submitted = self._reads.run(
            indexes, self._read_device, started + self._config.device_timeout_seconds
        )
        self._in_flight.update(submitted)

        gpus = []
        for index in range(count):
            future = submitted.get(index)
            if future is not None and future.done():
                del self._in_flight[index]
                # Cancelled: not started by the deadline, behind a hung read; next sweep asks.
                done = not future.cancelled()
                gpu = self._count_clock_events(future.result()) if done else self._stale(index)
            else:
                gpu = self._stale(index)
            gpus.append(gpu)
        self._previous = {g.identity.index: g for g in gpus}
        for index in [i for i in self._in_flight if i >= count]:
            del self._in_flight[index]
        return tuple(gpus)

    def _count_clock_events(self, gpu: GpuSnapshot) -> GpuSnapshot:
        """Counted here, on the sweep thread, so that one sweep adds at most one per reason."""
        uuid = gpu.identity.uuid
        if not uuid:
            return gpu
        if gpu.up and gpu.readings is not None:
            counts = self._clock_events.record(uuid, gpu.readings.clock_event_reasons)
        else:
            counts = self._clock_events.counts(uuid)
        return replace(
            gpu,
            clock_event_counts=counts,
            clock_event_window_counts=self._clock_events.window_counts(uuid),
        )

    def _forget_vanished(self, gpus: tuple[GpuSnapshot, ...]) -> None:
        """Per-GPU state of GPUs NVML no longer enumerates goes; a GPU that is down stays."""
        present = [g.identity.uuid for g in gpus]
        if not all(present):
            return  # a slot we could not identify may hold any of them: decide next sweep
        self._clock_events.retain(present)
        self._reader.retain(present)

    def _stale(self, index: int) -> GpuSnapshot:
        previous = self._previous.get(index)
        if previous is not None:
            return replace(previous, stale=True)
        identity = self._identities.get(index, (_placeholder(index), 0.0))[0]
        return GpuSnapshot(
            identity, up=False, readings=None, stale=True, error="NVML call timed out"
        )

    def _read_device(self, index: int) -> GpuSnapshot:
        """Runs on a worker thread. Never raises: every failure becomes a down device."""
        identity = self._identities.get(index, (None, 0.0))[0]
        try:
            handle = self._handles.get(index)
            if handle is None:
                handle = self._nvml.raw("nvmlDeviceGetHandleByIndex", index)
                self._handles[index] = handle
            identity = self._identity(index, handle)
            readings = self._reader.read_board(identity, handle)
            instances = self._mig.read(identity, handle) if identity.mig_enabled else ()
        except GPU_GONE as exc:
            self._handles.pop(index, None)
            if identity is not None:
                self._mig.invalidate(identity.uuid)
                self._reader.lost(identity.uuid)
            log.error("GPU %d is lost: %s", index, exc)
            return GpuSnapshot(
                identity or _placeholder(index), up=False, readings=None, error=str(exc)
            )
        except NVMLError as exc:
            self._handles.pop(index, None)
            log.warning("GPU %d could not be read: %s", index, exc)
            return GpuSnapshot(
                identity or _placeholder(index), up=False, readings=None, error=str(exc)
            )
        except Exception as exc:
            log.exception("GPU %d: unexpected error", index)
            return GpuSnapshot(
                identity or _placeholder(index),
                up=False,
                readings=None,
                error=f"{type(exc).__name__}: {exc}",
            )
        parts: HelperParts = {"readings": readings}
        for helper in self._helpers:
            parts.update(helper.contribution(identity.uuid, readings))
        return GpuSnapshot(identity, up=True, mig_instances=instances, **parts)

    def _identity(self, index: int, handle: Any) -> GpuIdentity:
        cached = self._identities.get(index)
        now = self._clock.monotonic()
        if cached is not None and now - cached[1] < self._config.mig_refresh_seconds:
            return cached[0]
        identity = self._reader.read_identity(index, handle)
        if cached is not None and (
            cached[0].uuid != identity.uuid or cached[0].mig_enabled != identity.mig_enabled
        ):
            # A MIG mode change (after a GPU reset) or a different board in this slot: whatever
            # was learned about the old configuration is wrong now.
            for uuid in {cached[0].uuid, identity.uuid}:
                self._nvml.forget(uuid)
                self._reader.forget(uuid)
                self._mig.invalidate(uuid)
        self._identities[index] = (identity, now)
        return identity

    def retry_init_now(self) -> None:
        """Skip the remaining init backoff: the next sweep tries nvmlInit again."""
        self._next_init_at = 0.0

    def _mig_changed(self, uuid: str) -> None:
        log.info("%s: MIG configuration changed; re-reading its instances", uuid)
        self._mig.invalidate(uuid)
        for index, (identity, _) in list(self._identities.items()):
            if identity.uuid == uuid:
                self._identities.pop(index, None)

    def _track_helpers(self, gpus: tuple[GpuSnapshot, ...]) -> None:
        live = tuple(LiveGpu.of(g) for g in gpus if g.up)
        for helper in self._helpers:
            helper.track(live)

    # NVML library state

    def _initialize(self) -> None:
        try:
            self._api.nvmlInit()
            self._driver_version = str(self._api.nvmlSystemGetDriverVersion())
        except NVMLError as exc:
            self._tally.record("nvmlInit", error_name(exc))
            advice = next((a for kind, a in _INIT_ADVICE if isinstance(exc, kind)), None)
            message = f"{exc} ({error_name(exc)})" + (f": {advice}" if advice else "")
            if message != self._last_init_error:
                log.error("NVML initialisation failed: %s; retrying with backoff", message)
                self._last_init_error = message
            self._init_failure = f"nvmlInit failed with {error_name(exc)}: {advice or exc}"
            self._next_init_at = self._clock.monotonic() + self._init_backoff.failed()
            return
        self._initialized = True
        self._init_backoff.succeeded()
        self._last_init_error = None
        self._init_failure = None
        log.info("NVML initialised, driver %s", self._driver_version)
        self._runner.start()

    def _lose_nvml(self, exc: NVMLError) -> None:
        log.error("NVML became unavailable (%s); re-initialising", exc)
        self._initialized = False
        self._handles.clear()
        self._identities.clear()
        self._mig.invalidate()
        self._reader.invalidate()
        for helper in self._helpers:
            helper.invalidate()
        with contextlib.suppress(NVMLError):
            self._api.nvmlShutdown()
