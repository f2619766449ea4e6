"""DCGM's VGPU_LICENSE_STATUS from nvmlDeviceGetGridLicensableFeatures: 0 on bare metal, the vGPU
feature's state on a vGPU guest, None when NVML fails, read with the identity rather than every
sweep."""

from __future__ import annotations

from dataclasses import replace

import pynvml
import pytest

from kube_gpu_exporter.exporter.simulator.fleet import FleetError
from tests.conftest import FAST, fleet_from_yaml

LICENSE = "DCGM_FI_DEV_VGPU_LICENSE_STATUS"
CALL = "nvmlDeviceGetGridLicensableFeatures_v4"
GUESTS = """
    gpus:
      - {model: H100-80GB-HBM3, vgpu_license: licensed}
      - {model: H100-80GB-HBM3, vgpu_license: unlicensed}
      - {model: L4}
"""
NO_HELPERS = replace(FAST, xid_enabled=False, gpm_enabled=False)


def test_the_simulator_answers_with_nvidia_ml_py_structs(make_sim):
    sim = make_sim(fleet_from_yaml(GUESTS))
    sim.api.nvmlInit()
    try:
        licensed, unlicensed, bare = (
            sim.api.nvmlDeviceGetGridLicensableFeatures(sim.api.nvmlDeviceGetHandleByIndex(i))
            for i in range(3)
        )
    finally:
        sim.api.nvmlShutdown()
    assert isinstance(bare, pynvml.c_nvmlGridLicensableFeatures_v4_t)
    assert bare.isGridLicenseSupported == 0 and bare.licensableFeaturesCount == 0
    for features, state in ((licensed, 1), (unlicensed, 0)):
        assert features.isGridLicenseSupported == 1 and features.licensableFeaturesCount == 1
        vgpu = features.gridLicensableFeatures[0]
        assert vgpu.featureCode == pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
        assert vgpu.featureState == state


def test_zero_on_every_gpu_of_the_default_node_read_once_per_identity(sim, make_poller):
    poller = make_poller(sim, NO_HELPERS)
    for _ in range(4):
        snap = poller.sweep()
    assert [g.readings.values.get(LICENSE) for g in snap.gpus] == [0] * 8
    # Once per GPU with the identity, not once per sweep.
    assert sim.calls[CALL] == len(sim.gpus)


def test_a_vgpu_guest_reports_its_licence_state(make_sim, make_poller):
    sim = make_sim(fleet_from_yaml(GUESTS))
    snap = make_poller(sim, NO_HELPERS).sweep()
    assert [g.readings.values.get(LICENSE) for g in snap.gpus] == [1, 0, 0]


def test_a_licence_change_shows_at_the_next_identity_refresh(make_sim, make_poller):
    sim = make_sim(fleet_from_yaml(GUESTS))
    slow = make_poller(sim, NO_HELPERS)  # identities kept for 60 s
    every_sweep = make_poller(sim, replace(NO_HELPERS, mig_refresh_seconds=0.0))
    slow.sweep()
    every_sweep.sweep()
    sim.gpus[0].vgpu_license = "unlicensed"  # the guest lost its licence
    assert slow.sweep().gpus[0].readings.values.get(LICENSE) == 1
    assert every_sweep.sweep().gpus[0].readings.values.get(LICENSE) == 0


@pytest.mark.parametrize(
    ("error", "asked_again"),
    [(pynvml.NVML_ERROR_UNKNOWN, True), (pynvml.NVML_ERROR_NOT_SUPPORTED, False)],
)
def test_an_nvml_error_gives_no_value(sim, make_poller, error, asked_again):
    sim.faults.fail(CALL, error, gpu=2, times=1)
    poller = make_poller(sim, replace(NO_HELPERS, mig_refresh_seconds=0.0))
    first = poller.sweep()
    assert first.gpus[2].readings.values.get(LICENSE) is None
    assert first.gpus[1].readings.values.get(LICENSE) == 0
    assert first.gpus[2].up  # the rest of the GPU's readings are unaffected
    calls = sim.calls[CALL]
    second = poller.sweep()
    # A transient error is retried at the next identity read; NOT_SUPPORTED is final.
    assert second.gpus[2].readings.values.get(LICENSE) == (0 if asked_again else None)
    assert sim.calls[CALL] - calls == len(sim.gpus) - (0 if asked_again else 1)


def test_the_fleet_file_names_a_bad_licence_state():
    with pytest.raises(FleetError, match=r"gpus\[0\]\.vgpu_license: 'yes' is not one of"):
        fleet_from_yaml("""
            gpus:
              - {model: T4, vgpu_license: "yes"}
        """)
