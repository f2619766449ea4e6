"""The real-GPU harness's comparison, without a GPU: nvidia-smi's XML against a fixture written in
its schema, and our own pynvml reads and the exporter's exposition against the simulator."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from benchmarks.real_gpu import MIB, GpuFacts, bus_id_key
from benchmarks.real_gpu.compare import MISSING, RULES, Check, compare
from benchmarks.real_gpu.independent import nvml_facts
from benchmarks.real_gpu.smi_xml import SmiXmlError, smi_facts
from exporter.config import CollectionConfig
from exporter.poller import Poller
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.fleet import default_fleet
from tests.conftest import quiet, render

FIXTURE = Path(__file__).parent / "fixtures" / "nvidia-smi-h200.xml"
LOADED = "00000000:18:00.0"
PARTITIONED = "00000000:2a:00.0"
H200_MEMORY = 143771 * MIB


@pytest.fixture
def xml() -> str:
    return FIXTURE.read_text()


# ---- nvidia-smi's XML ----


def test_every_fact_of_both_gpus_is_read(xml: str) -> None:
    facts = smi_facts(xml)
    assert facts == {
        LOADED: GpuFacts(
            name="NVIDIA H200",
            pci_device_id=0x233510DE,
            memory_total_bytes=H200_MEMORY,
            memory_used_bytes=81920 * MIB,
            temperature_c=34.0,
            power_w=118.42,
            power_limit_w=700.0,
            sm_clock_mhz=1980.0,
            mem_clock_mhz=3201.0,
            gpu_util_pct=97.0,
            mem_util_pct=61.0,
            ecc_enabled=True,
            mig_enabled=False,
        ),
        PARTITIONED: GpuFacts(
            name="NVIDIA H200",
            pci_device_id=0x233510DE,
            memory_total_bytes=H200_MEMORY,
            memory_used_bytes=1024 * MIB,
            temperature_c=29.0,
            power_w=92.10,
            power_limit_w=700.0,
            sm_clock_mhz=345.0,
            mem_clock_mhz=3201.0,
            # A MIG-enabled GPU has no whole-GPU utilization: nvidia-smi prints N/A.
            gpu_util_pct=None,
            mem_util_pct=None,
            ecc_enabled=True,
            mig_enabled=True,
        ),
    }


@pytest.mark.parametrize("marker", ["N/A", "[N/A]", "[Not Supported]", "[Unknown Error]"])
def test_every_no_value_spelling_reads_as_none(xml: str, marker: str) -> None:
    edited = (
        xml.replace("<gpu_temp>34 C</gpu_temp>", f"<gpu_temp>{marker}</gpu_temp>")
        .replace("<sm_clock>1980 MHz</sm_clock>", f"<sm_clock>{marker}</sm_clock>", 1)
        .replace(
            "<pci_device_id>233510DE</pci_device_id>", f"<pci_device_id>{marker}</pci_device_id>", 1
        )
        .replace("<current_ecc>Enabled</current_ecc>", f"<current_ecc>{marker}</current_ecc>", 1)
    )
    loaded = smi_facts(edited)[LOADED]
    assert loaded.temperature_c is None
    assert loaded.sm_clock_mhz is None
    assert loaded.pci_device_id is None
    assert loaded.ecc_enabled is None
    assert loaded.mem_clock_mhz == 3201.0


def _gpu_power_section(xml: str) -> re.Match[str]:
    match = re.search(r"<gpu_power_readings>.*?</gpu_power_readings>", xml, re.S)
    assert match is not None
    return match


def test_older_drivers_power_readings_give_the_same_facts(xml: str) -> None:
    """Before 535: <power_readings> with <power_draw> and <power_limit>, no average/instant."""

    def older(section: re.Match[str]) -> str:
        text = re.sub(r"\s*<instant_power_draw>.*?</instant_power_draw>", "", section.group(0))
        for new, old in (
            ("gpu_power_readings", "power_readings"),
            ("average_power_draw", "power_draw"),
            ("current_power_limit", "power_limit"),
        ):
            text = text.replace(f"<{new}>", f"<{old}>").replace(f"</{new}>", f"</{old}>")
        return text

    edited = re.sub(r"<gpu_power_readings>.*?</gpu_power_readings>", older, xml, flags=re.S)
    assert "<gpu_power_readings>" not in edited and "<power_draw>" in edited
    assert smi_facts(edited) == smi_facts(xml)


def test_a_driver_with_only_the_instant_reading_reports_it(xml: str) -> None:
    edited = xml.replace("<average_power_draw>118.42 W</average_power_draw>", "")
    assert smi_facts(edited)[LOADED].power_w == 121.87


def test_the_average_power_wins_over_the_instant_one(xml: str) -> None:
    section = _gpu_power_section(xml).group(0)
    assert section.index("average_power_draw") < section.index("instant_power_draw")
    assert smi_facts(xml)[LOADED].power_w == 118.42


def test_a_prefixed_device_id_and_a_short_domain_are_accepted(xml: str) -> None:
    edited = xml.replace(
        "<pci_device_id>233510DE</pci_device_id>", "<pci_device_id>0x233510DE</pci_device_id>"
    ).replace('<gpu id="00000000:18:00.0">', '<gpu id="0000:18:00.0">')
    assert smi_facts(edited)[LOADED].pci_device_id == 0x233510DE


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("<nvidia_smi_log><gpu", "does not parse"),
        ("<log/>", "root element is <log>"),
        ("<nvidia_smi_log><gpu><product_name>X</product_name></gpu></nvidia_smi_log>", "neither"),
        ('<nvidia_smi_log><gpu id="GPU 0"/></nvidia_smi_log>', "not a PCI bus id"),
    ],
)
def test_what_is_not_an_nvidia_smi_log_is_named(text: str, words: str) -> None:
    with pytest.raises(SmiXmlError, match=words):
        smi_facts(text)


def test_a_reading_in_an_unexpected_unit_is_an_error_not_a_none(xml: str) -> None:
    edited = xml.replace("<total>143771 MiB</total>", "<total>140 GiB</total>", 1)
    with pytest.raises(SmiXmlError, match=r"fb_memory_usage/total.*'140 GiB'.*MiB"):
        smi_facts(edited)


def test_bus_ids_are_keyed_in_one_spelling() -> None:
    assert bus_id_key("0000:2A:00.0") == bus_id_key("00000000:2a:00.0") == PARTITIONED
    with pytest.raises(ValueError, match="not a PCI bus id"):
        bus_id_key("2A:00.0")


# ---- pynvml and the exposition, on the simulator ----


@pytest.fixture
def frozen_sim() -> Iterator[FakeNvml]:
    """The default simulated node with its clock stopped, so the exporter's sweep and our own
    reads see the same instant and any difference is a reading, not time passing."""
    sim = FakeNvml(quiet(default_fleet()), clock=lambda: 0.0).install()
    pynvml.nvmlInit()
    try:
        yield sim
    finally:
        pynvml.nvmlShutdown()
        sim.uninstall()


@pytest.fixture
def exposition(frozen_sim: FakeNvml) -> str:
    poller = Poller(
        CollectionConfig(xid_enabled=False, pcie_enabled=False),
        lambda snapshot: None,
        workers=4,
        helper_threads=False,
    )
    try:
        return render(poller.sweep())
    finally:
        poller.stop(timeout=2.0)


def test_nvml_facts_agree_with_the_simulator(frozen_sim: FakeNvml) -> None:
    support: dict[str, str] = {}
    facts = nvml_facts(support)
    t = frozen_sim.now()
    assert len(facts) == len(frozen_sim.gpus)
    for gpu in frozen_sim.gpus:
        total, reserved, used, _free = gpu.memory(t)
        mig = gpu.mig_enabled
        assert facts[bus_id_key(gpu.pci_bus_id)] == GpuFacts(
            name=gpu.model.name,
            pci_device_id=gpu.model.pci_device_id,
            memory_total_bytes=total,
            memory_used_bytes=used,
            temperature_c=float(gpu.temperature_c(t)),
            power_w=gpu.power_average_mw(t) / 1000,
            power_limit_w=gpu.power_limit_mw() / 1000,
            sm_clock_mhz=float(gpu.sm_clock_mhz(t)),
            mem_clock_mhz=float(gpu.mem_clock_mhz(t)),
            gpu_util_pct=None if mig else float(round(gpu.utilization(t) * 100)),
            mem_util_pct=None if mig else float(round(gpu.memory_copy_utilization(t) * 100)),
            ecc_enabled=gpu.ecc_enabled,
            mig_enabled=mig,
        ), gpu.index
        assert reserved > 0  # so used-without-reservation is really tested
    # Utilization answers on the whole GPUs, so MIG's refusals do not mark it unsupported.
    assert support["nvmlDeviceGetUtilizationRates"] == "ok"
    assert support["nvmlDeviceGetMemoryInfo"] == "ok"


def test_nvml_facts_name_what_the_driver_refuses(frozen_sim: FakeNvml) -> None:
    frozen_sim.faults.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    support: dict[str, str] = {}
    facts = nvml_facts(support)
    assert support["nvmlDeviceGetPowerUsage"] == "NOT_SUPPORTED"
    assert all(f.power_w is None for f in facts.values())


def _failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]


def test_the_exporter_agrees_with_our_own_nvml_reads(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts()
    checks = compare(exposition, reference, "nvml")
    assert _failed(checks) == []
    whole = [g for g in frozen_sim.gpus if not g.mig_enabled]
    partitioned = [g for g in frozen_sim.gpus if g.mig_enabled]
    assert whole and partitioned
    # Each whole GPU: identity (2), every rule, ECC; a MIG-enabled one: identity only.
    assert len(checks) == len(whole) * (2 + len(RULES) + 1) + len(partitioned) * 2
    compared = {c.family for c in checks if c.reference is not None and c.tolerance is not None}
    assert {rule.family for rule in RULES} <= compared


def _with_temperature(exposition: str, bus_id: str, delta: float) -> str:
    def shift(match: re.Match[str]) -> str:
        return f"{match.group(1)} {float(match.group(2)) + delta:g}"

    pattern = rf'^(DCGM_FI_DEV_GPU_TEMP\{{[^}}]*pci_bus_id="{re.escape(bus_id)}"[^}}]*\}}) (\S+)$'
    edited, count = re.subn(pattern, shift, exposition, flags=re.M | re.I)
    assert count == 1
    return edited


def test_a_temperature_20_degrees_off_fails_that_check_only(
    frozen_sim: FakeNvml, exposition: str
) -> None:
    target = frozen_sim.gpus[0].pci_bus_id
    checks = compare(_with_temperature(exposition, target, 20), nvml_facts(), "nvml")
    [failed] = _failed(checks)
    assert (failed.family, failed.gpu, failed.tolerance) == (
        "DCGM_FI_DEV_GPU_TEMP",
        bus_id_key(target),
        3.0,
    )
    assert failed.exported == failed.reference + 20


def test_a_temperature_within_three_degrees_passes(frozen_sim: FakeNvml, exposition: str) -> None:
    edited = _with_temperature(exposition, frozen_sim.gpus[0].pci_bus_id, 3)
    assert _failed(compare(edited, nvml_facts(), "nvml")) == []


def test_a_family_the_exporter_drops_fails_as_missing(
    frozen_sim: FakeNvml, exposition: str
) -> None:
    edited = "\n".join(
        line for line in exposition.splitlines() if "DCGM_FI_DEV_POWER_USAGE" not in line
    )
    failed = _failed(compare(edited + "\n", nvml_facts(), "nvml"))
    whole = [g for g in frozen_sim.gpus if not g.mig_enabled]
    assert len(failed) == len(whole)
    assert {(c.family, c.note, c.exported) for c in failed} == {
        ("DCGM_FI_DEV_POWER_USAGE", MISSING, None)
    }


def test_a_wrong_model_name_fails_identity(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts()
    key = bus_id_key(frozen_sim.gpus[0].pci_bus_id)
    reference[key] = replace(reference[key], name="NVIDIA H200")
    [failed] = _failed(compare(exposition, reference, "nvml"))
    assert (failed.family, failed.gpu, failed.exported) == (
        "modelName",
        key,
        "NVIDIA H100 80GB HBM3",
    )


def test_a_reference_na_is_noted_not_failed(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts()
    key = bus_id_key(frozen_sim.gpus[0].pci_bus_id)
    reference[key] = replace(reference[key], sm_clock_mhz=None)
    checks = compare(exposition, reference, "nvidia-smi")
    assert _failed(checks) == []
    [noted] = [c for c in checks if c.gpu == key and c.family == "DCGM_FI_DEV_SM_CLOCK"]
    assert noted.note == "N/A in nvidia-smi, exported anyway"
    assert noted.exported is not None and noted.reference is None


def test_gpus_on_one_side_only_fail(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts()
    dropped = bus_id_key(frozen_sim.gpus[0].pci_bus_id)
    del reference[dropped]
    reference["00000000:ff:00.0"] = GpuFacts(name="NVIDIA H200", temperature_c=40.0)
    failed = {(c.family, c.gpu, c.note) for c in _failed(compare(exposition, reference, "nvml"))}
    assert ("pci_bus_id", dropped, "not in nvml") in failed
    assert ("modelName", "00000000:ff:00.0", MISSING) in failed
    assert ("DCGM_FI_DEV_GPU_TEMP", "00000000:ff:00.0", MISSING) in failed


def test_ecc_on_without_its_counters_fails(frozen_sim: FakeNvml, exposition: str) -> None:
    edited = "".join(
        line for line in exposition.splitlines(keepends=True) if "ECC_DBE_VOL_TOTAL" not in line
    )
    failed = _failed(compare(edited, nvml_facts(), "nvml"))
    ecc_on = [g for g in frozen_sim.gpus if g.ecc_enabled and not g.mig_enabled]
    assert ecc_on
    assert sorted(c.gpu for c in failed) == sorted(bus_id_key(g.pci_bus_id) for g in ecc_on)
    assert {(c.family, c.note) for c in failed} == {("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", MISSING)}
