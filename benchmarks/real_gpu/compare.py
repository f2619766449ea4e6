"""The exporter's exposition against a reference (nvidia-smi's XML or our own pynvml calls).

One `Check` per (family, GPU): the exported value, the reference's, the allowance between them
and the verdict. Families are read in dcgm-exporter's classic 4.8 spellings and units, which
the harness runs the exporter with (the default `--compat.dcgm-exporter` profile). GPUs are
joined on the series' `pci_bus_id` label. A MIG-enabled GPU's DCGM series are per instance
(GPU_I_ID set), which no whole-GPU reference can be held against: such a GPU is checked for
identity only.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.real_gpu import MIB, GpuFacts, bus_id_key

Value = float | str | None
MISSING = "missing"

# nvidia-smi prints watts with two decimals; "exact" may not fail on its rounding.
_PRINT_ROUNDING = 0.005


@dataclass(frozen=True, slots=True)
class Check:
    family: str
    gpu: str
    exported: Value
    reference: Value
    # The largest difference allowed, in the family's unit: 0 for an exact match, None where
    # nothing was compared (a reference N/A, ECC counters present or not).
    tolerance: float | None
    ok: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class Rule:
    """A DCGM family, the fact it must agree with (in the family's unit), and the allowance."""

    family: str
    fact: Callable[[GpuFacts], float | None]
    allowance: Callable[[float], float]


def _exact(reference: float) -> float:
    return 0.0


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def _whole_mib(value: int | None) -> float | None:
    """Whole MiB, rounded down as the exporter (and DCGM) round the capacity."""
    return None if value is None else float(value // MIB)


RULES: tuple[Rule, ...] = (
    Rule("DCGM_FI_DEV_FB_TOTAL", lambda f: _whole_mib(f.memory_total_bytes), _exact),
    Rule(
        "DCGM_FI_DEV_FB_USED",
        lambda f: _mib(f.memory_used_bytes),
        lambda r: max(64.0, 0.05 * r),
    ),
    Rule("DCGM_FI_DEV_GPU_TEMP", lambda f: f.temperature_c, lambda r: 3.0),
    # Power moves between two reads even when idle; under load by tens of watts.
    Rule("DCGM_FI_DEV_POWER_USAGE", lambda f: f.power_w, lambda r: max(15.0, 0.10 * r)),
    Rule("DCGM_FI_DEV_POWER_MGMT_LIMIT", lambda f: f.power_limit_w, _exact),
    Rule("DCGM_FI_DEV_SM_CLOCK", lambda f: f.sm_clock_mhz, lambda r: max(50.0, 0.10 * r)),
    Rule("DCGM_FI_DEV_MEM_CLOCK", lambda f: f.mem_clock_mhz, lambda r: max(50.0, 0.10 * r)),
    Rule("DCGM_FI_DEV_GPU_UTIL", lambda f: f.gpu_util_pct, lambda r: 15.0),
    Rule("DCGM_FI_DEV_MEM_COPY_UTIL", lambda f: f.mem_util_pct, lambda r: 15.0),
)

# Identity is read from labels: the model on every DCGM series, MIG mode on the exporter's own.
MODEL_LABEL = "modelName"
DEVICE_INFO = "kube_gpu_exporter_device_info"
# Counted only where ECC is on: NVML answers NOT_SUPPORTED for the counters with it off.
ECC_FAMILY = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


@dataclass(slots=True)
class _Series:
    """One GPU's samples of one family."""

    # (labels, value) of the series without GPU_I_ID: the whole GPU's.
    whole: list[tuple[dict[str, str], float]] = field(default_factory=list)
    # Labels of any series, per MIG instance ones included: enough for identity.
    labels: dict[str, str] | None = None


Index = dict[str, dict[str, _Series]]


def compare(exposition_text: str, reference: dict[str, GpuFacts], source: str) -> list[Check]:
    """Checks of every compared family on every GPU of `reference` (keyed by `bus_id_key`),
    plus a failed check for each GPU the exporter shows and the reference does not."""
    index = _index(exposition_text)
    checks: list[Check] = []
    for gpu in sorted(reference):
        facts = reference[gpu]
        checks += _identity(index, gpu, facts, source)
        per_instance_only = all(_whole(index, r.family, gpu) is None for r in RULES)
        if facts.mig_enabled and per_instance_only:
            continue
        checks += [_check(rule, index, gpu, facts, source) for rule in RULES]
        checks.append(_ecc(index, gpu, facts, source))
    exported_gpus = {gpu for per_gpu in index.values() for gpu in per_gpu}
    for gpu in sorted(exported_gpus - set(reference)):
        checks.append(Check("pci_bus_id", gpu, gpu, None, None, False, f"not in {source}"))
    return checks


def _index(text: str) -> Index:
    """family -> bus id key -> its series. Per-pod copies are left out: their FB_USED and
    GPU_UTIL are the pod's own share, not the device's."""
    index: Index = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        bare = _written_bare(text, family.name, family.type)
        for sample in family.samples:
            bus_id = sample.labels.get("pci_bus_id")
            if not bus_id or sample.labels.get("pod"):
                continue
            name = family.name if bare and sample.name == f"{family.name}_total" else sample.name
            series = index[name].setdefault(bus_id_key(bus_id), _Series())
            if series.labels is None:
                series.labels = sample.labels
            if not sample.labels.get("GPU_I_ID"):
                series.whole.append((sample.labels, float(sample.value)))
    return index


def _written_bare(text: str, family: str, kind: str) -> bool:
    """Whether a counter's samples are written under the family's own name: prometheus_client's
    parser appends `_total` to every counter sample, but dcgm-exporter's end in `_TOTAL`."""
    return kind == "counter" and re.search(rf"^{re.escape(family)}[{{ ]", text, re.M) is not None


def _whole(index: Index, family: str, gpu: str) -> float | None:
    series = index.get(family, {}).get(gpu)
    return series.whole[0][1] if series is not None and series.whole else None


def _check(rule: Rule, index: Index, gpu: str, facts: GpuFacts, source: str) -> Check:
    expected = rule.fact(facts)
    exported = _whole(index, rule.family, gpu)
    if expected is None:
        shown = "exported anyway" if exported is not None else "not exported"
        return Check(rule.family, gpu, exported, None, None, True, f"N/A in {source}, {shown}")
    tolerance = rule.allowance(expected)
    if exported is None:
        return Check(rule.family, gpu, None, expected, tolerance, False, MISSING)
    ok = abs(exported - expected) <= tolerance + _PRINT_ROUNDING
    return Check(rule.family, gpu, exported, expected, tolerance, ok)


def _identity(index: Index, gpu: str, facts: GpuFacts, source: str) -> list[Check]:
    model = next(
        (
            labels.get(MODEL_LABEL)
            for name, per_gpu in index.items()
            if name.startswith("DCGM_") and gpu in per_gpu and (labels := per_gpu[gpu].labels)
        ),
        None,
    )
    info = index.get(DEVICE_INFO, {}).get(gpu)
    mig_mode = info.labels.get("mig_mode") if info is not None and info.labels else None
    expected_mode = {None: "unsupported", True: "enabled", False: "disabled"}[facts.mig_enabled]
    return [
        _label_check(MODEL_LABEL, gpu, model, facts.name, source),
        _label_check(f"{DEVICE_INFO}{{mig_mode}}", gpu, mig_mode, expected_mode, source),
    ]


def _label_check(
    family: str, gpu: str, exported: str | None, expected: str | None, source: str
) -> Check:
    if expected is None:
        return Check(family, gpu, exported, None, None, True, f"N/A in {source}")
    if exported is None:
        return Check(family, gpu, None, expected, 0.0, False, MISSING)
    return Check(family, gpu, exported, expected, 0.0, exported == expected)


def _ecc(index: Index, gpu: str, facts: GpuFacts, source: str) -> Check:
    """ECC on: the exporter must export the error counters; off: it may or may not."""
    series = index.get(ECC_FAMILY, {}).get(gpu)
    exported = "exported" if series is not None else None
    if facts.ecc_enabled is None:
        return Check(ECC_FAMILY, gpu, exported, None, None, True, f"ECC mode N/A in {source}")
    if not facts.ecc_enabled:
        return Check(ECC_FAMILY, gpu, exported, "ECC disabled", None, True)
    if exported is None:
        return Check(ECC_FAMILY, gpu, None, "ECC enabled", None, False, MISSING)
    return Check(ECC_FAMILY, gpu, exported, "ECC enabled", None, True)
