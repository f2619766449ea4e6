"""The real-GPU harness's comparison, without a GPU: nvidia-smi's XML against a real capture (an
H200, driver 580, identifiers zeroed) and a MIG variant derived from it, and our own pynvml reads
and the exporter's exposition against the simulator."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from benchmarks.real_gpu import MIB, GpuFacts, bus_id_key
from benchmarks.real_gpu.compare import MISSING, RULES, Check, compare
from benchmarks.real_gpu.independent import nvml_facts
from benchmarks.real_gpu.smi_xml import SmiXmlError, smi_facts
from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
from tests.conftest import quiet, render

# `nvidia-smi -q -x` of an idle NVIDIA H200 (driver 580.159.04), as captured.
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi-h200.xml"
CAPTURED = "00000000:00:06.0"
# Not captured: a second GPU the tests derive from the captured one, with MIG on.
DERIVED_MIG = "00000000:00:07.0"
H200_MEMORY = 143771 * MIB
INDEPENDENT = Path(__file__).resolve().parents[2] / "benchmarks" / "real_gpu" / "independent.py"


@pytest.fixture
def xml() -> str:
    return FIXTURE.read_text()


def _edit(text: str, old: str, new: str, count: int = 1) -> str:
    """text with `old` replaced; an edit that matches nothing would test nothing."""
    assert old in text, old
    return text.replace(old, new, count)


# ---- nvidia-smi's XML ----


def test_the_captured_board_reads_as_nvidia_smi_printed_it(xml: str) -> None:
    assert smi_facts(xml) == {
        CAPTURED: GpuFacts(
            name="NVIDIA H200",
            pci_device_id=0x233510DE,
            memory_total_bytes=H200_MEMORY,
            # "Used 0 MiB" beside "Reserved 616 MiB": used is taken as printed, without the
            # reservation, as DCGM's FB_USED is.
            memory_used_bytes=0,
            temperature_c=36.0,
            # <gpu_power_readings>'s average, not the memory's (43.56 W) nor the instant draw.
            power_w=82.36,
            power_limit_w=700.0,
            sm_clock_mhz=345.0,
            mem_clock_mhz=3201.0,
            gpu_util_pct=0.0,
            mem_util_pct=0.0,
            ecc_enabled=True,
            mig_enabled=False,
        )
    }


def _with_derived_mig_gpu(xml: str) -> str:
    """DERIVED, not captured: the log with a second GPU copied from the first, MIG enabled. With
    MIG on, nvidia-smi prints the whole GPU's utilization as N/A (the instances have their own),
    which is what the copy changes besides the mode and the bus id."""
    match = re.search(r"\t<gpu id=.*?\n\t</gpu>\n", xml, re.S)
    assert match is not None
    twin = _edit(match.group(0), f'<gpu id="{CAPTURED}">', f'<gpu id="{DERIVED_MIG}">')
    twin = _edit(twin, f"<pci_bus_id>{CAPTURED}</", f"<pci_bus_id>{DERIVED_MIG}</")
    twin = _edit(twin, "<current_mig>Disabled</", "<current_mig>Enabled</")
    twin = _edit(twin, "<gpu_util>0 %</", "<gpu_util>N/A</")
    twin = _edit(twin, "<memory_util>0 %</", "<memory_util>N/A</")
    edited = _edit(xml, "<attached_gpus>1</", "<attached_gpus>2</")
    return _edit(edited, match.group(0), match.group(0) + twin)


def test_a_mig_enabled_gpu_has_no_whole_gpu_utilization(xml: str) -> None:
    facts = smi_facts(_with_derived_mig_gpu(xml))
    assert set(facts) == {CAPTURED, DERIVED_MIG}
    assert facts[CAPTURED] == smi_facts(xml)[CAPTURED]
    assert facts[DERIVED_MIG] == replace(
        facts[CAPTURED], mig_enabled=True, gpu_util_pct=None, mem_util_pct=None
    )


@pytest.mark.parametrize("marker", ["N/A", "[N/A]", "[Not Supported]", "[Unknown Error]"])
def test_every_no_value_spelling_reads_as_none(xml: str, marker: str) -> None:
    edited = _edit(xml, "<gpu_temp>36 C</", f"<gpu_temp>{marker}</")
    # The first <sm_clock> is the current one (<clocks>); <max_clocks> has its own.
    edited = _edit(edited, "<sm_clock>345 MHz</", f"<sm_clock>{marker}</")
    edited = _edit(edited, "<pci_device_id>233510DE</", f"<pci_device_id>{marker}</")
    edited = _edit(edited, "<current_ecc>Enabled</", f"<current_ecc>{marker}</")
    facts = smi_facts(edited)[CAPTURED]
    assert facts.temperature_c is None
    assert facts.sm_clock_mhz is None
    assert facts.pci_device_id is None
    assert facts.ecc_enabled is None
    assert facts.mem_clock_mhz == 3201.0


def test_the_capture_has_the_drivers_wordy_no_value_phrases(xml: str) -> None:
    """Driver 580 writes phrases of its own where it has no value; they read as nothing, not
    as an error."""
    assert "<display_mode>Requested functionality has been deprecated</display_mode>" in xml
    edited = _edit(
        xml, "<gpu_temp>36 C</", "<gpu_temp>Requested functionality has been deprecated</"
    )
    assert smi_facts(edited)[CAPTURED].temperature_c is None


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
    edited = _edit(xml, "<average_power_draw>82.36 W</average_power_draw>", "")
    assert smi_facts(edited)[CAPTURED].power_w == 83.25


def test_the_average_power_wins_over_the_instant_one(xml: str) -> None:
    section = _gpu_power_section(xml).group(0)
    assert section.index("average_power_draw") < section.index("instant_power_draw")
    assert smi_facts(xml)[CAPTURED].power_w == 82.36


def test_a_prefixed_device_id_and_a_short_domain_are_accepted(xml: str) -> None:
    edited = _edit(xml, "<pci_device_id>233510DE</", "<pci_device_id>0x233510DE</")
    edited = _edit(edited, f'<gpu id="{CAPTURED}">', '<gpu id="0000:00:06.0">')
    assert smi_facts(edited)[CAPTURED].pci_device_id == 0x233510DE


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
    edited = _edit(xml, "<total>143771 MiB</total>", "<total>140 GiB</total>")
    with pytest.raises(SmiXmlError, match=r"fb_memory_usage/total.*'140 GiB'.*MiB"):
        smi_facts(edited)


def test_bus_ids_are_keyed_in_one_spelling() -> None:
    assert bus_id_key("0000:2A:00.0") == bus_id_key("00000000:2a:00.0") == "00000000:2a:00.0"
    with pytest.raises(ValueError, match="not a PCI bus id"):
        bus_id_key("2A:00.0")


# ---- pynvml and the exposition, on the simulator ----


@pytest.fixture
def exposition(frozen_sim: FakeNvml) -> str:
    poller = Poller(
        CollectionConfig(xid_enabled=False, pcie_enabled=False),
        lambda snapshot: None,
        frozen_sim.source(),
        workers=4,
        runner=SteppedHelpers(),
    )
    try:
        return render(poller.sweep())
    finally:
        poller.stop(timeout=2.0)


def test_nvml_facts_agree_with_the_simulator(frozen_sim: FakeNvml) -> None:
    support: dict[str, str] = {}
    facts = nvml_facts(frozen_sim.api, support)
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
        # So a formula that took the reservation off (or added it) would fail.
        assert reserved > 0
    # Utilization answers on the whole GPUs, so MIG's refusals do not mark it unsupported.
    assert support["nvmlDeviceGetUtilizationRates"] == "ok"
    assert support["nvmlDeviceGetMemoryInfo"] == "ok"


def test_memory_used_is_the_structs_field_as_is(
    frozen_sim: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v2 splits the board into used + free + reserved; nvidia-smi and DCGM show its `used`
    unchanged, so the reference must too: no reservation taken off or added."""
    board = pynvml.c_nvmlMemory_v2_t(
        version=pynvml.nvmlMemory_v2,
        total=143771 * MIB,
        reserved=616 * MIB,
        free=132033 * MIB,
        used=11122 * MIB,
    )
    monkeypatch.setattr(
        frozen_sim.api, "nvmlDeviceGetMemoryInfo", lambda handle, version=None: board
    )
    facts = nvml_facts(frozen_sim.api)
    assert {f.memory_used_bytes for f in facts.values()} == {11122 * MIB}
    assert {f.memory_total_bytes for f in facts.values()} == {143771 * MIB}


def test_a_driver_without_v2_gives_v1s_used_with_the_reservation() -> None:
    """Before R510 there is only v1, whose `used` counts the reservation; nvidia-smi and DCGM
    show that figure on such a driver, and so does the reference."""
    fleet = replace(quiet(default_fleet()), driver_version="470.223.02")
    sim = FakeNvml(fleet, clock=lambda: 0.0)
    sim.api.nvmlInit()
    try:
        support: dict[str, str] = {}
        facts = nvml_facts(sim.api, support)
        t = sim.now()
        for gpu in sim.gpus:
            _total, reserved, used, _free = gpu.memory(t)
            assert reserved > 0
            assert facts[bus_id_key(gpu.pci_bus_id)].memory_used_bytes == used + reserved
        assert support["nvmlDeviceGetMemoryInfo"] == "ok"
    finally:
        sim.api.nvmlShutdown()
        sim.close()


def test_the_independent_reads_share_no_code_with_the_exporter() -> None:
    """A shared helper would carry a shared mistake: the memory formula once did."""
    tree = ast.parse(INDEPENDENT.read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "pynvml" in imported
    assert not {name for name in imported if name and name.split(".")[0] == "kube_gpu_exporter"}


def test_nvml_facts_name_what_the_driver_refuses(frozen_sim: FakeNvml) -> None:
    frozen_sim.faults.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    support: dict[str, str] = {}
    facts = nvml_facts(frozen_sim.api, support)
    assert support["nvmlDeviceGetPowerUsage"] == "NOT_SUPPORTED"
    assert all(f.power_w is None for f in facts.values())


def _failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]


def test_the_exporter_agrees_with_our_own_nvml_reads(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts(frozen_sim.api)
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
    checks = compare(_with_temperature(exposition, target, 20), nvml_facts(frozen_sim.api), "nvml")
    [failed] = _failed(checks)
    assert (failed.family, failed.gpu, failed.tolerance) == (
        "DCGM_FI_DEV_GPU_TEMP",
        bus_id_key(target),
        3.0,
    )
    assert isinstance(failed.reference, int | float)
    assert failed.exported == failed.reference + 20


def test_a_temperature_within_three_degrees_passes(frozen_sim: FakeNvml, exposition: str) -> None:
    edited = _with_temperature(exposition, frozen_sim.gpus[0].pci_bus_id, 3)
    assert _failed(compare(edited, nvml_facts(frozen_sim.api), "nvml")) == []


def test_a_family_the_exporter_drops_fails_as_missing(
    frozen_sim: FakeNvml, exposition: str
) -> None:
    edited = "\n".join(
        line for line in exposition.splitlines() if "DCGM_FI_DEV_POWER_USAGE" not in line
    )
    failed = _failed(compare(edited + "\n", nvml_facts(frozen_sim.api), "nvml"))
    whole = [g for g in frozen_sim.gpus if not g.mig_enabled]
    assert len(failed) == len(whole)
    assert {(c.family, c.note, c.exported) for c in failed} == {
        ("DCGM_FI_DEV_POWER_USAGE", MISSING, None)
    }


def test_a_wrong_model_name_fails_identity(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts(frozen_sim.api)
    key = bus_id_key(frozen_sim.gpus[0].pci_bus_id)
    reference[key] = replace(reference[key], name="NVIDIA H200")
    [failed] = _failed(compare(exposition, reference, "nvml"))
    assert (failed.family, failed.gpu, failed.exported) == (
        "modelName",
        key,
        "NVIDIA H100 80GB HBM3",
    )


def test_a_reference_na_is_noted_not_failed(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts(frozen_sim.api)
    key = bus_id_key(frozen_sim.gpus[0].pci_bus_id)
    reference[key] = replace(reference[key], sm_clock_mhz=None)
    checks = compare(exposition, reference, "nvidia-smi")
    assert _failed(checks) == []
    [noted] = [c for c in checks if c.gpu == key and c.family == "DCGM_FI_DEV_SM_CLOCK"]
    assert noted.note == "N/A in nvidia-smi, exported anyway"
    assert noted.exported is not None and noted.reference is None


def test_gpus_on_one_side_only_fail(frozen_sim: FakeNvml, exposition: str) -> None:
    reference = nvml_facts(frozen_sim.api)
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
    failed = _failed(compare(edited, nvml_facts(frozen_sim.api), "nvml"))
    ecc_on = [g for g in frozen_sim.gpus if g.ecc_enabled and not g.mig_enabled]
    assert ecc_on
    assert sorted(c.gpu for c in failed) == sorted(bus_id_key(g.pci_bus_id) for g in ecc_on)
    assert {(c.family, c.note) for c in failed} == {("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", MISSING)}
