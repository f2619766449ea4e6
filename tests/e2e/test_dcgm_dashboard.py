"""NVIDIA's official dcgm-exporter dashboard (grafana.com 12239) keeps working on our metrics:
its queries, run through its own variables against the real Prometheus, return data for every
whole GPU. A query that leaves some GPUs out says why, and the test holds that reason true."""

from __future__ import annotations

import pytest

from dashboards.grafana_queries import resolve_variables, substitute
from tests.e2e.conftest import wait_until

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
# Per-GPU queries that leave out MIG-enabled GPUs, and why.
WHOLE_GPUS_ONLY = {
    "GPU Utilization": (
        "NVML answers NOT_SUPPORTED for utilization on a MIG-enabled GPU and on its instances, "
        "like dcgm-exporter (#598, #341); DCGM_FI_PROF_GR_ENGINE_ACTIVE from GPM covers them"
    ),
}


@pytest.fixture(scope="module")
def resolved(stack):
    # Right after an exporter restart GPM needs two samples before its series appear.
    wait_until(
        lambda: stack.api.query("count(count by (gpu) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)) == 8"),
        30,
        "GPM series for all 8 GPUs",
    )
    return resolve_variables(DASHBOARD_12239, stack.api)


@pytest.fixture(scope="module")
def gpus(stack):
    whole = {str(g["index"]) for g in stack.gpus() if not g["mig_enabled"]}
    mig = {str(g["index"]) for g in stack.gpus() if g["mig_enabled"]}
    assert whole and mig, "the default simulated node has whole and MIG-partitioned GPUs"
    return whole, mig


def test_variables_list_the_exporter_and_every_gpu(stack, resolved):
    assert resolved["instance"] == stack.addresses["exporter"].replace(".", "\\\\.")
    assert resolved["gpu"] == "(" + "|".join(str(i) for i in range(8)) + ")"


@pytest.mark.parametrize("title", sorted(PER_GPU))
def test_per_gpu_panels_show_every_whole_gpu(stack, resolved, gpus, title):
    whole, mig = gpus
    series = stack.api.query(substitute(PER_GPU[title], resolved))
    shown = {s["metric"]["gpu"] for s in series}
    assert whole <= shown, f"{title}: whole GPUs without data: {sorted(whole - shown)}"
    assert all(float(s["value"][1]) >= 0 for s in series)
    if title in WHOLE_GPUS_ONLY:
        assert not shown & mig, f"{title}: documented as whole GPUs only, but MIG GPUs have data"
    else:
        assert mig <= shown, f"{title}: MIG-enabled GPUs without data: {sorted(mig - shown)}"


@pytest.mark.parametrize("title", sorted(AGGREGATE))
def test_gauge_panels_have_a_value(stack, resolved, title):
    [series] = stack.api.query(substitute(AGGREGATE[title], resolved))
    assert float(series["value"][1]) > 0
