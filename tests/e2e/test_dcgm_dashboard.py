"""dcgm-exporter's own consumers keep working on our metrics under every classic profile
(`--compat.dcgm-exporter=4.8.2` and `4.8.3`): NVIDIA's official dashboard (grafana.com 12239),
its queries run through its own variables against the real Prometheus, and the GPU Operator's
recording rules, evaluated by it. Each returns data for every whole GPU of each profile's
exporter; one that leaves MIG-enabled GPUs out says why, and the test holds that reason true."""

from __future__ import annotations

import pytest

from kube_gpu_exporter.bundle.localstack.grafana_queries import resolve_variables, substitute
from kube_gpu_exporter.exporter.dcgm_compat import profile
from tests.e2e.conftest import wait_until
from tests.e2e.upstream_profiles import (
    CLASSIC_PROFILES,
    GPU_OPERATOR_RULES,
    exporter_per_profile,
)

# From docs/dcgm-exporter-compatibility.md, 'Dashboard 12239' (title: query).
SEL = '{instance=~"$instance", gpu=~"$gpu"}'
DASHBOARD_12239 = {
    "templating": {
        "list": [
            {"name": "datasource", "type": "datasource"},
            {
                "name": "instance",
                "type": "query",
                "query": "label_values(DCGM_FI_DEV_GPU_TEMP, instance)",
                "multi": True,
                "includeAll": True,
            },
            {
                "name": "gpu",
                "type": "query",
                "query": "label_values(DCGM_FI_DEV_GPU_TEMP, gpu)",
                "multi": True,
                "includeAll": True,
            },
        ]
    }
}
PER_GPU = {
    "GPU Temperature": f"DCGM_FI_DEV_GPU_TEMP{SEL}",
    "GPU Power Usage": f"DCGM_FI_DEV_POWER_USAGE{SEL}",
    "GPU SM Clocks": f"DCGM_FI_DEV_SM_CLOCK{SEL} * 1000000",
    "GPU Utilization": f"DCGM_FI_DEV_GPU_UTIL{SEL}",
    "GPU Framebuffer Mem Used": f"DCGM_FI_DEV_FB_USED{SEL}",
    # A DCGM profiling field, filled from NVML GPM on Hopper, MIG instances included.
    "Tensor Core Utilization": f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{SEL}",
}
AGGREGATE = {
    "GPU Avg. Temp": f"avg(DCGM_FI_DEV_GPU_TEMP{SEL})",
    "GPU Power Total": f"sum(DCGM_FI_DEV_POWER_USAGE{SEL})",
}
# NVML answers NOT_SUPPORTED for utilization on a MIG-enabled GPU and on its instances, like
# dcgm-exporter (#598, #341); DCGM_FI_PROF_GR_ENGINE_ACTIVE from GPM covers them.
NO_UTILIZATION_ON_MIG = "NVML has no utilization on MIG (dcgm-exporter #598, #341)"
# Per-GPU dashboard queries that leave out MIG-enabled GPUs, and why.
WHOLE_GPUS_ONLY = {"GPU Utilization": NO_UTILIZATION_ON_MIG}
# GPU Operator records that leave out MIG-enabled GPUs, and why.
RECORDED_FOR_WHOLE_GPUS_ONLY = {
    "accelerator_gpu_utilization": NO_UTILIZATION_ON_MIG,
    "accelerator_memory_used_bytes": NO_UTILIZATION_ON_MIG,
}
GPU_COUNT = 8


@pytest.fixture(scope="module")
def exporters(stack) -> dict[str, str]:
    """Classic profile -> its exporter's address, once GPM has samples on every one of them."""
    per_profile = exporter_per_profile(stack)
    # Right after an exporter (re)start GPM needs two samples before its series appear.
    wait_until(
        lambda: stack.api.query(
            "count(count by (instance, gpu) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)) "
            f"== {GPU_COUNT * len(per_profile)}"
        ),
        30,
        f"GPM series for all {GPU_COUNT} GPUs of every profile's exporter",
    )
    return per_profile


@pytest.fixture(scope="module")
def resolved(stack, exporters) -> dict[str, str]:
    return resolve_variables(DASHBOARD_12239, stack.api)


def picked(resolved: dict[str, str], address: str) -> dict[str, str]:
    """The dashboard with one exporter picked in its `instance` variable."""
    return {**resolved, "instance": _escaped(address)}


def _escaped(address: str) -> str:
    return address.replace(".", "\\\\.")


@pytest.fixture(scope="module")
def gpus(stack):
    whole = {str(g["index"]) for g in stack.gpus() if not g["mig_enabled"]}
    mig = {str(g["index"]) for g in stack.gpus() if g["mig_enabled"]}
    assert whole and mig, "the default simulated node has whole and MIG-partitioned GPUs"
    return whole, mig


def assert_gpus_shown(what: str, series: list[dict], gpus, whole_gpus_only: bool) -> None:
    whole, mig = gpus
    shown = {s["metric"]["gpu"] for s in series}
    assert whole <= shown, f"{what}: whole GPUs without data: {sorted(whole - shown)}"
    assert all(float(s["value"][1]) >= 0 for s in series), what
    if whole_gpus_only:
        assert not shown & mig, f"{what}: documented as whole GPUs only, but MIG GPUs have data"
    else:
        assert mig <= shown, f"{what}: MIG-enabled GPUs without data: {sorted(mig - shown)}"


def test_variables_list_every_profiles_exporter_and_every_gpu(exporters, resolved):
    instances = sorted(exporters.values())
    assert resolved["instance"] == "(" + "|".join(map(_escaped, instances)) + ")"
    assert resolved["gpu"] == "(" + "|".join(str(i) for i in range(GPU_COUNT)) + ")"


@pytest.mark.parametrize("version", CLASSIC_PROFILES)
@pytest.mark.parametrize("title", sorted(PER_GPU))
def test_per_gpu_panels_show_every_whole_gpu(stack, exporters, resolved, gpus, title, version):
    query = substitute(PER_GPU[title], picked(resolved, exporters[version]))
    series = stack.api.query(query)
    assert {s["metric"]["instance"] for s in series} == {exporters[version]}
    assert_gpus_shown(f"{version} {title}", series, gpus, title in WHOLE_GPUS_ONLY)


@pytest.mark.parametrize("version", CLASSIC_PROFILES)
@pytest.mark.parametrize("title", sorted(AGGREGATE))
def test_gauge_panels_have_a_value(stack, exporters, resolved, title, version):
    query = substitute(AGGREGATE[title], picked(resolved, exporters[version]))
    [series] = stack.api.query(query)
    assert float(series["value"][1]) > 0


@pytest.mark.parametrize("version", CLASSIC_PROFILES)
@pytest.mark.parametrize("record", sorted(GPU_OPERATOR_RULES))
def test_gpu_operator_rules_record_every_whole_gpu(stack, exporters, gpus, record, version):
    host_label = profile(version).host_label
    selector = f'{record}{{vendor="nvidia", instance="{exporters[version]}"}}'
    series = wait_until(
        lambda: stack.api.query(selector), 30, f"a recorded {selector} (rules evaluated)"
    )
    assert_gpus_shown(f"{version} {record}", series, gpus, record in RECORDED_FOR_WHOLE_GPUS_ONLY)
    # Each profile's own host label, carried through the recording.
    assert {s["metric"].get(host_label) for s in series} == {stack.node_name}, host_label
    others = {profile(v).host_label for v in CLASSIC_PROFILES} - {host_label}
    assert not any(label in s["metric"] for s in series for label in others), others
