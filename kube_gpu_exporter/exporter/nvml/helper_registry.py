"""Which helpers the poller drives, in the order their collectors appear after "nvml"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.fields.dcgm_catalogue import P2P_STATUS
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.gpm_sampler import GpmSampler
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import PollerHelper
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.nvml.p2p_status import P2pStatusReader
from kube_gpu_exporter.exporter.nvml.pcie_sampler import PcieSampler
from kube_gpu_exporter.exporter.nvml.process_sampler import ProcessSampler
from kube_gpu_exporter.exporter.nvml.rejected_readings import RejectedReadings
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.nvml.xid_watcher import XidWatcher
from kube_gpu_exporter.exporter.processes.host_pids import HostPidOwners
from kube_gpu_exporter.exporter.processes.owner import PidOwners
from kube_gpu_exporter.exporter.scrape_cadence import NextScrapeIn, helper_cadence


@dataclass(frozen=True, slots=True)
class HelperInputs:
    """What a poller hands the helpers it drives.

    `mig` is the poller's MIG reader, whose cached topology holds the MIG device handles (None:
    the helpers get one of their own); `pid_owners` maps process accounting's PIDs to containers
    (None: from the host's /proc and /var/log at the configured roots); `next_scrape_in`, when
    the exposition expects its next scrape, so that GPM samples just before one (None: every
    interval)."""

    config: CollectionConfig
    source: NvmlSource
    nvml: GuardedNvml
    tally: ErrorTally
    on_mig_change: Callable[[str], None]
    mig: MigReader | None = None
    pid_owners: PidOwners | None = None
    next_scrape_in: NextScrapeIn | None = None
    # Where helpers count readings they leave out as impossible (None: a tally of their own).
    rejected: RejectedReadings | None = None
    # What their rounds and retries wait on.
    clock: Clock = SYSTEM_CLOCK


# What a poller builds its helpers with: build_helpers, or (in tests) build_helpers and more.
HelperFactory = Callable[[HelperInputs], Sequence[PollerHelper]]


def build_helpers(inputs: HelperInputs) -> tuple[PollerHelper, ...]:
    """One line per helper: a new helper is its module plus a line here. The order is the order
    of the snapshot's `collectors`, which users see in the exposition."""
    config, nvml, next_scrape_in = inputs.config, inputs.nvml, inputs.next_scrape_in
    clock = inputs.clock
    gpm_cadence = (
        None
        if next_scrape_in is None
        else helper_cadence(config.interval_seconds, next_scrape_in, clock.monotonic)
    )
    helpers: list[PollerHelper | None] = [
        XidWatcher(
            inputs.source,
            inputs.tally,
            inputs.on_mig_change,
            window_ms=config.xid_count_window_ms,
            clock=clock,
        )
        if config.xid_enabled
        else None,
        PcieSampler(nvml, config.pcie_interval_seconds, clock) if config.pcie_enabled else None,
        GpmSampler(nvml, config.interval_seconds, gpm_cadence, inputs.rejected, clock)
        if config.gpm_enabled
        else None,
        ProcessSampler(
            nvml,
            inputs.mig
            or MigReader(
                nvml, config.mig_refresh_seconds, inputs.source.expected_refusal, clock.monotonic
            ),
            inputs.pid_owners or HostPidOwners(config.proc_root, config.log_root, clock.monotonic),
            config.interval_seconds,
            clock,
        )
        if config.processes_enabled
        else None,
        # Only for a --collectors file that lists DCGM_EXP_P2P_STATUS.
        P2pStatusReader(nvml, clock=clock) if P2P_STATUS in config.extra_fields else None,
    ]
    return tuple(helper for helper in helpers if helper is not None)
