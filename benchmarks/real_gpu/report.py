"""The harness's outputs: a markdown report of one run (its summary, call timings and exporter
figures are laid out in sections.py), the device record (YAML) of the GPU model it ran on, read
with pynvml, and the cost table written beside them (costs.py). None carries serial numbers,
UUIDs or host names."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pynvml
import yaml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.real_gpu import sections
from benchmarks.real_gpu.accounting import ProcessCheck
from benchmarks.real_gpu.latency import CallTiming, FieldTiming
from benchmarks.real_gpu.load import Response
from benchmarks.real_gpu.markdown import fmt, table, verdict
from benchmarks.real_gpu.usage import ProcessUsage
from kube_gpu_exporter.exporter.nvml.binding import NVMLError, error_name
from kube_gpu_exporter.exporter.nvml.mig_profile import profile_from_attributes

MIB = 1 << 20
RECORD_KEYS = (
    "model_name",
    "pci_device_id",
    "memory_total_mib",
    "power_limit_default_w",
    "power_limit_min_w",
    "power_limit_max_w",
    "max_clocks_mhz",
    "driver_version",
    "gpm_supported",
    "mig_capable",
    "mig_profiles",
    "nvml_support",
    "source",
    "captured",
)
# What must never reach a committed file: GPU and MIG UUIDs, and serial-number-like fields.
IDENTIFIER = re.compile(
    r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-|\bserial\b|\bboard_part_number\b", re.I
)

# The families each NVML function feeds, for "did the exporter handle NOT_SUPPORTED".
FUNCTION_FAMILIES: dict[str, tuple[str, ...]] = {
    "nvmlDeviceGetTemperature": ("DCGM_FI_DEV_GPU_TEMP",),
    "nvmlDeviceGetUtilizationRates": ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"),
    "nvmlDeviceGetEncoderUtilization": ("DCGM_FI_DEV_ENC_UTIL",),
    "nvmlDeviceGetDecoderUtilization": ("DCGM_FI_DEV_DEC_UTIL",),
    "nvmlDeviceGetMemoryInfo": ("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_USED"),
    "nvmlDeviceGetPowerManagementLimit": ("DCGM_FI_DEV_POWER_MGMT_LIMIT",),
    "nvmlDeviceGetEnforcedPowerLimit": ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT",),
    "nvmlDeviceGetClockInfo": ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK"),
    "nvmlDeviceGetCurrentClocksEventReasons": ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",),
    "nvmlDeviceGetPcieThroughput": (
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    ),
    "nvmlDeviceGetGridLicensableFeatures_v4": ("DCGM_FI_DEV_VGPU_LICENSE_STATUS",),
    "nvmlGpmQueryDeviceSupport": ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    "nvmlDeviceGetGpuFabricInfoV": (
        "kube_gpu_exporter_nvlink_domain_info",
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS",
    ),
}


def model_slug(name: str) -> str:
    """ "NVIDIA H200" -> "nvidia-h200": a file-name part that sorts with its model."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown-gpu"


def refuse_identifiers(text: str, what: str) -> None:
    match = IDENTIFIER.search(text)
    if match is not None:
        raise ValueError(f"{what} would carry an identifier ({match.group(0)!r}); not written")


# The device record


def _try(support: dict[str, str], key: str, call: Callable[[], Any]) -> Any:
    """Call, note the outcome under `key` ("ok" or NVML's error name), None on an error. A
    function that answered once stays "ok" whatever a later argument makes it say."""
    try:
        result = call()
    except NVMLError as exc:
        support.setdefault(key, error_name(exc))
        return None
    support[key] = "ok"
    return result


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _watts(milliwatts: Any) -> float | None:
    if milliwatts is None:
        return None
    watts = milliwatts / 1000
    return int(watts) if watts == int(watts) else round(watts, 3)


def _mig_profiles(
    nvml: Any, handle: Any, total_bytes: int | None, support: dict[str, str]
) -> list[dict]:
    profiles: list[dict] = []
    for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _try(
            support,
            "nvmlDeviceGetGpuInstanceProfileInfo",
            partial(nvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, profile),
        )
        if info is None or not info.instanceCount:
            continue
        name = _text(getattr(info, "name", b"")).removeprefix("MIG ").strip()
        if not name and total_bytes:
            name = (
                profile_from_attributes(
                    info.sliceCount, info.sliceCount, int(info.memorySizeMB), total_bytes
                )
                or ""
            )
        profiles.append(
            {
                "name": name or None,
                "gi_profile_id": int(info.id),
                "max_count": int(info.instanceCount),
                "memory_mib": int(info.memorySizeMB),
                "multiprocessors": int(info.multiprocessorCount),
            }
        )
    return profiles


def _profiles_handle(nvml: Any, handle: Any, name: str, support: dict[str, str]) -> Any:
    """A GPU of the same model that answers profile queries: some drivers only do with MIG on."""
    candidates = [handle]
    for index in range(nvml.nvmlDeviceGetCount()):
        other = nvml.nvmlDeviceGetHandleByIndex(index)
        mode = _try(support, "nvmlDeviceGetMigMode", partial(nvml.nvmlDeviceGetMigMode, other))
        if mode and mode[0] and _text(nvml.nvmlDeviceGetName(other)) == name:
            candidates.append(other)
    return candidates


def device_record(
    nvml: Any,
    source: str,
    support_seen: dict[str, str] | None = None,
    today: datetime.date | None = None,
) -> dict[str, Any]:
    """The schema's record of GPU 0's model; `nvml` (the `pynvml` module or the simulator's api
    object) must be initialised. `support_seen` adds outcomes the caller observed elsewhere (the
    harness's own fact reads, the timings)."""
    support: dict[str, str] = {}
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    name = _text(_try(support, "nvmlDeviceGetName", lambda: nvml.nvmlDeviceGetName(handle)))
    pci = _try(support, "nvmlDeviceGetPciInfo", lambda: nvml.nvmlDeviceGetPciInfo(handle))
    memory = _try(support, "nvmlDeviceGetMemoryInfo", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    total = None if memory is None else int(memory.total)
    default_limit = _try(
        support,
        "nvmlDeviceGetPowerManagementDefaultLimit",
        lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle),
    )
    constraints = _try(
        support,
        "nvmlDeviceGetPowerManagementLimitConstraints",
        lambda: nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle),
    )
    max_sm = _try(
        support,
        "nvmlDeviceGetMaxClockInfo",
        lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
    )
    max_mem = _try(
        support,
        "nvmlDeviceGetMaxClockInfo",
        lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
    )
    driver = _try(support, "nvmlSystemGetDriverVersion", nvml.nvmlSystemGetDriverVersion)
    gpm = _try(support, "nvmlGpmQueryDeviceSupport", lambda: nvml.nvmlGpmQueryDeviceSupport(handle))
    mig_mode = _try(support, "nvmlDeviceGetMigMode", lambda: nvml.nvmlDeviceGetMigMode(handle))
    profiles: list[dict] = []
    for candidate in _profiles_handle(nvml, handle, name, support):
        profiles = _mig_profiles(nvml, candidate, total, support)
        if profiles:
            break
    for key, outcome in (support_seen or {}).items():
        if outcome == "ok":
            support[key] = "ok"
        else:
            support.setdefault(key, outcome)
    return {
        "model_name": name,
        "pci_device_id": None if pci is None else f"0x{int(pci.pciDeviceId):08X}",
        "memory_total_mib": None if total is None else total // MIB,
        "power_limit_default_w": _watts(default_limit),
        "power_limit_min_w": None if constraints is None else _watts(constraints[0]),
        "power_limit_max_w": None if constraints is None else _watts(constraints[1]),
        "max_clocks_mhz": {"sm": max_sm, "memory": max_mem},
        "driver_version": None if driver is None else _text(driver),
        "gpm_supported": bool(gpm is not None and gpm.isSupportedDevice),
        # A MIG-capable GPU answers the mode query whether MIG is on or off.
        "mig_capable": mig_mode is not None,
        "mig_profiles": profiles,
        "nvml_support": dict(sorted(support.items())),
        "source": source,
        "captured": (today or datetime.date.today()).isoformat(),
    }


def record_yaml(record: dict[str, Any], header: str) -> str:
    body = yaml.safe_dump(record, sort_keys=False, default_flow_style=False, allow_unicode=True)
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    text = comments + body
    refuse_identifiers(text, "the device record")
    return text


# The markdown report


@dataclass(frozen=True, slots=True)
class ErrorGrowth:
    """nvml_errors_total per (function, error) at the first and the last scrape."""

    first: dict[tuple[str, str], float]
    last: dict[tuple[str, str], float]

    def grown(self, function: str) -> float:
        return sum(
            value - self.first.get(key, 0.0)
            for key, value in self.last.items()
            if key[0] == function
        )


def nvml_errors(exposition: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(exposition):
        if family.name != "kube_gpu_exporter_nvml_errors":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                key = (sample.labels.get("function", ""), sample.labels.get("error", ""))
                out[key] = float(sample.value)
    return out


def exported_families(exposition: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(exposition) if family.samples}


@dataclass(frozen=True, slots=True)
class Unsupported:
    function: str
    error: str
    families: tuple[str, ...]
    families_absent: bool
    errors_grew: float

    @property
    def handled(self) -> bool:
        return self.families_absent and self.errors_grew == 0


def unsupported_handling(
    support: dict[str, str], exported: set[str], errors: ErrorGrowth
) -> list[Unsupported]:
    """Each call the GPU refuses for good, and whether the exporter kept quiet about it: no
    series of its families, and no error count growing sweep after sweep."""
    out = []
    for function, outcome in sorted(support.items()):
        if outcome not in ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND"):
            continue
        families = FUNCTION_FAMILIES.get(function, ())
        absent = not (set(families) & exported)
        out.append(Unsupported(function, outcome, families, absent, errors.grown(function)))
    return out


@dataclass
class RunReport:
    """Everything one run measured; `checks` are R1's comparison rows (duck-typed Check)."""

    model_name: str
    simulate: bool
    minutes: float
    driver_version: str | None
    gpus: int
    load_description: str
    checks: dict[str, Sequence[Any]] = field(default_factory=dict)  # source -> Check rows
    responses: Sequence[Response] = ()
    unsupported: Sequence[Unsupported] = ()
    processes: Sequence[ProcessCheck] = ()
    # Why the process check could not run (no rows), or what to know about its rows.
    processes_note: str = ""
    timings: Sequence[CallTiming] = ()
    fields: Sequence[FieldTiming] = ()
    sweep_seconds: Sequence[float] = ()
    sweep_estimate_us: tuple[float, float] = (0.0, 0.0)
    scrape_seconds: Sequence[float] = ()
    usage: ProcessUsage | None = None
    # nvitop-exporter over the same window as `usage`; None says why in nvitop_note.
    nvitop: ProcessUsage | None = None
    nvitop_note: str = ""
    run_seconds: float | None = None
    notes: list[str] = field(default_factory=list)


def failures(report: RunReport) -> list[str]:
    """One line per failed check of any kind: the summary's list, and the exit status's count."""
    lines = []
    for source, checks in report.checks.items():
        for c in checks:
            if c.ok is False:
                lines.append(
                    f"{c.family} on {c.gpu} against {source}: exported {fmt(c.exported, 3)}, "
                    f"reference {fmt(c.reference, 3)}, tolerance {fmt(c.tolerance, 3)}"
                    + (f" ({c.note})" if c.note else "")
                )
    for r in report.responses:
        if r.ok is False:
            lines.append(
                f"load response of {r.family} on {r.gpu}: idle {fmt(r.idle_mean)}, "
                f"load {fmt(r.load_mean)}, rule {r.rule}" + (f" ({r.note})" if r.note else "")
            )
    for u in report.unsupported:
        if not u.handled:
            shown = "its families are exported" if not u.families_absent else ""
            grew = f"errors grew by {u.errors_grew:g}" if u.errors_grew else ""
            why = "; ".join(part for part in (shown, grew) if part)
            lines.append(f"{u.function} answers {u.error} and the exporter did not cope: {why}")
    for p in report.processes:
        if p.ok is False:
            lines.append(
                f"process accounting on {p.gpu}: exported {fmt(p.exported_mib, 1)} MiB, "
                f"reference {fmt(p.reference_mib, 1)} MiB ({p.reference})"
                + (f"; {p.note}" if p.note else "")
            )
    return lines


def _check_section(source: str, checks: Sequence[Any]) -> list[str]:
    failed = sum(1 for c in checks if c.ok is False)
    lines = [f"### Against {source}", "", f"{len(checks)} checks, {failed} failed.", ""]
    rows = [
        (
            c.family,
            c.gpu,
            fmt(c.exported, 3),
            fmt(c.reference, 3),
            fmt(c.tolerance, 3),
            verdict(c.ok),
            c.note or "",
        )
        for c in checks
    ]
    header = ("family", "GPU", "exported", "reference", "tolerance", "verdict", "note")
    return [*lines, *table(header, rows), ""]


def render(report: RunReport) -> str:
    mode = "simulated node (--simulate)" if report.simulate else "real GPU"
    lines = [
        f"# Real-GPU validation: {report.model_name}",
        "",
        f"- Mode: {mode}; {report.gpus} GPU(s); driver {report.driver_version or 'unknown'}",
        f"- Run: {report.minutes:g} minutes, half idle, half under load",
        f"- Load: {report.load_description}",
    ]
    if report.simulate:
        lines.append(
            "- **Simulated run.** The exporter and this harness each run their own simulator; "
            "their values drift apart in time, so value mismatches below are expected. Only "
            "the shapes (families, GPUs, identity) and the pipeline are checked."
        )
    lines += [f"- {note}" for note in report.notes]
    lines += ["", *sections.summary(report, failures(report))]
    lines += ["## Exported families against independent reads", ""]
    if not report.checks:
        lines += ["No reference source was read.", ""]
    for source, checks in report.checks.items():
        lines += _check_section(source, checks)

    lines += ["## NOT_SUPPORTED on this GPU", ""]
    if report.unsupported:
        rows: list[tuple[str, ...]] = [
            (
                u.function,
                u.error,
                ", ".join(u.families) or "-",
                "absent" if u.families_absent else "**exported**",
                fmt(u.errors_grew, 0),
                "yes" if u.handled else "**no**",
            )
            for u in report.unsupported
        ]
        header: tuple[str, ...] = (
            "function",
            "answer",
            "families",
            "series",
            "error growth",
            "handled",
        )
        lines += [*table(header, rows), ""]
    else:
        lines += ["Every call answered.", ""]

    lines += ["## Load response", ""]
    rows = [
        (
            r.family,
            r.gpu,
            fmt(r.idle_mean),
            fmt(r.load_mean),
            r.rule or "-",
            verdict(r.ok),
            r.note,
        )
        for r in report.responses
    ]
    header = ("family", "GPU", "idle mean", "load mean", "rule", "verdict", "note")
    lines += [*table(header, rows), ""]

    lines += sections.processes(report)
    lines += sections.calls(report)
    lines += sections.fields(report)
    lines += sections.exporter(report)
    lines += sections.beside_nvitop(report)
    text = "\n".join(lines).rstrip() + "\n"
    refuse_identifiers(text, "the report")
    return text


@dataclass(frozen=True, slots=True)
class Written:
    report: Path
    record: Path
    costs: Path


def write_outputs(
    out: Path,
    report: RunReport,
    record: dict[str, Any],
    record_header: str,
    costs_text: str,
) -> Written:
    """The report, the device record and the cost table, under names that share the model's
    slug; every text is checked for identifiers before any file is written."""
    out.mkdir(parents=True, exist_ok=True)
    slug = model_slug(report.model_name)
    written = Written(
        out / f"real-gpu-{slug}.md",
        out / f"device-record-{slug}.yaml",
        out / f"nvml-costs-{slug}.yaml",
    )
    texts = {
        written.report: render(report),
        written.record: record_yaml(record, record_header),
        written.costs: costs_text,
    }
    refuse_identifiers(costs_text, "the cost table")
    for path, text in texts.items():
        path.write_text(text)
    return written
