"""NVML GPM profiling metrics through a poller, checked by promtool: the cases that start a
process or need a system package's binary; the others are in tests/unit/test_gpm.py."""

from __future__ import annotations

import time
from dataclasses import replace

from tests.conftest import FAST, render, unexpected_lint_findings


def test_poller_exports_profiling_metrics_for_whole_gpus_and_mig_instances(sim, make_poller):
    poller = make_poller(sim, replace(FAST, interval_seconds=0.1))
    poller.sweep()  # initialises NVML and starts the GPM thread
    deadline = time.monotonic() + 10
    while True:
        snapshot = poller.sweep()
        if all(g.profiling or g.instance_profiling for g in snapshot.gpus):
            break
        assert time.monotonic() < deadline, "no GPM readings after 10 s"
        time.sleep(0.1)
    text = render(snapshot)
    assert 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",' in text
    assert 'DCGM_FI_PROF_SM_ACTIVE{gpu="6",' in text and 'GPU_I_ID="7"' in text
    assert 'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",' in text
    assert 'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="6",' not in text  # board-level only
    assert 'kube_gpu_exporter_collector_success{collector="gpm"} 1' in text
    assert unexpected_lint_findings(text) == []
