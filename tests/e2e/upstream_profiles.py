"""What the end-to-end stack adds so that dcgm-exporter's own consumers can be run against every
classic profile: NVIDIA's dashboard 12239 and the GPU Operator's recording rules are written for
the classic names, so they must work under `--compat.dcgm-exporter=4.8.2` and `4.8.3` alike.

The stack's own exporter runs the bundle's default profile; each other classic profile gets a
companion exporter in the same stack, scraped under a job of its own (cheaper than a second
Prometheus, and invisible to the bundle's rules and dashboards, which select the bundle's job).
"""

from __future__ import annotations

import yaml

from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.localstack.stack import CompanionExporter, LocalStack
from kube_gpu_exporter.exporter.dcgm_compat import PROFILES, DcgmVersion

CLASSIC_PROFILES: tuple[str, ...] = tuple(
    version.value for version in DcgmVersion if not PROFILES[version].base_units
)

# The GPU Operator's PrometheusRule for dcgm-exporter (NVIDIA/gpu-operator v26.7.0,
# assets/state-dcgm-exporter/1000_prometheus_rule_openshift.yaml, group
# `dcgm.accelerator.metrics`; the operator applies it on OpenShift, skipping files named
# "openshift" elsewhere, controllers/resource_manager.go): record name -> the classic series it
# copies, each with `vendor="nvidia"` added. Several names do not describe the series (memory
# "bytes" recorded from a utilization percentage, clocks in MHz named hertz); only their
# presence is checked here.
GPU_OPERATOR_RULES: dict[str, str] = {
    "accelerator_gpu_utilization": "DCGM_FI_DEV_GPU_UTIL",
    "accelerator_memory_used_bytes": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "accelerator_memory_total_bytes": "DCGM_FI_DEV_FB_TOTAL",
    "accelerator_power_usage_watts": "DCGM_FI_DEV_POWER_USAGE",
    "accelerator_temperature_celsius": "DCGM_FI_DEV_GPU_TEMP",
    "accelerator_sm_clock_hertz": "DCGM_FI_DEV_SM_CLOCK",
    "accelerator_memory_clock_hertz": "DCGM_FI_DEV_MEM_CLOCK",
}
GPU_OPERATOR_RULES_FILE = "gpu-operator-rules.yaml"


def gpu_operator_rules_yaml() -> str:
    """The rules as a rule file. The operator's 30 s group interval is left to the stack's
    evaluation interval, like every other test-only speed-up."""
    group = {
        "name": "dcgm.accelerator.metrics",
        "rules": [
            {"record": record, "expr": expr, "labels": {"vendor": "nvidia"}}
            for record, expr in GPU_OPERATOR_RULES.items()
        ],
    }
    return yaml.safe_dump({"groups": [group]}, sort_keys=False)


def companion_job(version: str) -> str:
    return f"dcgm-exporter-{version}"


def companions() -> list[CompanionExporter]:
    """A companion exporter for every classic profile but the stack's own."""
    return [
        CompanionExporter(companion_job(version), (f"--compat.dcgm-exporter={version}",))
        for version in CLASSIC_PROFILES
        if version != DEFAULT.dcgm_version
    ]


def exporter_per_profile(stack: LocalStack) -> dict[str, str]:
    """Classic profile -> `host:port` of the exporter that runs it in `stack`."""
    own = stack.config.dcgm_version
    return {
        version: stack.addresses["exporter" if version == own else companion_job(version)]
        for version in CLASSIC_PROFILES
    }
