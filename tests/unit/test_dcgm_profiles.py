"""Each row of issue 23 under each `--compat.dcgm-exporter` profile, on hand-built snapshots:
names, TYPE lines, units and value formats, the host and driver labels, NVLink as a rate, the vGPU
licence, clock event counters, the HMMA tensor pipe, promtool's lints, and the docs' rename table.

The expected values are written out here from the readings below, not computed through
kube_gpu_exporter/exporter/dcgm_compat.py, so a wrong entry in its conversion table fails a test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.dcgm_compat import PROFILES, RENAMES_4_9, DcgmVersion
from kube_gpu_exporter.exporter.fields.table import DCGM_4_7_DOCS, DCGM_ALIAS, GO_DCGM_FIELD
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.snapshot import (
    GpuIdentity,
    GpuReadings,
    GpuSnapshot,
    MigInstance,
    NodeSnapshot,
    ProfilingReadings,
    XidRecord,
)
from tests.conftest import render
from tests.golden.node_scrape import samples

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[2]
V482, V483, V484, V49 = (
    DcgmVersion.V4_8_2,
    DcgmVersion.V4_8_3,
    DcgmVersion.V4_8_4,
    DcgmVersion.V4_9,
)
CLASSIC = (V482, V483, V484)

READINGS = GpuReadings.of(
    DCGM_FI_DEV_GPU_TEMP=45,
    DCGM_FI_DEV_MEMORY_TEMP=52,
    DCGM_FI_DEV_GPU_UTIL=37,
    DCGM_FI_DEV_MEM_COPY_UTIL=12,
    DCGM_FI_DEV_ENC_UTIL=3,
    DCGM_FI_DEV_DEC_UTIL=4,
    DCGM_FI_DEV_FB_TOTAL=81559 * MIB,
    DCGM_FI_DEV_FB_USED=40000 * MIB,
    DCGM_FI_DEV_FB_FREE=41000 * MIB,
    DCGM_FI_DEV_FB_RESERVED=559 * MIB,
    DCGM_FI_DEV_POWER_USAGE=302206,
    DCGM_FI_DEV_POWER_MGMT_LIMIT=700000,
    DCGM_FI_DEV_ENFORCED_POWER_LIMIT=650000,
    DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=123456789,
    DCGM_FI_DEV_SM_CLOCK=1410,
    DCGM_FI_DEV_MEM_CLOCK=2619,
    DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x5,
    DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=0,
    DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=0,
    DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS=1,
    DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS=2,
    DCGM_FI_DEV_ROW_REMAP_PENDING=0,
    DCGM_FI_DEV_ROW_REMAP_FAILURE=0,
    DCGM_FI_DEV_PCIE_REPLAY_COUNTER=7,
    DCGM_FI_DEV_PCIE_TX_THROUGHPUT=1000,
    DCGM_FI_DEV_PCIE_RX_THROUGHPUT=2000,
    nvlink_tx_kib=1000,
    nvlink_rx_kib=3000,
    DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL=123456.7,
    DCGM_FI_DEV_VGPU_LICENSE_STATUS=0,
)
PROFILING = ProfilingReadings.of(
    DCGM_FI_PROF_GR_ENGINE_ACTIVE=0.5,
    DCGM_FI_PROF_SM_ACTIVE=0.4,
    DCGM_FI_PROF_SM_OCCUPANCY=0.3,
    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE=0.75,
    DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE=0.25,
    DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE=0.125,
    DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE=0.0625,
    DCGM_FI_PROF_PIPE_FP64_ACTIVE=0.01,
    DCGM_FI_PROF_PIPE_FP32_ACTIVE=0.02,
    DCGM_FI_PROF_PIPE_FP16_ACTIVE=0.03,
    DCGM_FI_PROF_DRAM_ACTIVE=0.2,
    DCGM_FI_PROF_PCIE_TX_BYTES=1500000.0,
    DCGM_FI_PROF_PCIE_RX_BYTES=2500000.0,
)
INSTANCE_PROFILING = ProfilingReadings.of(
    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE=0.5, DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE=0.375
)
WHOLE = GpuSnapshot(
    identity=GpuIdentity(
        0, "GPU-0000", "NVIDIA H100 80GB HBM3", "00000000:18:00.0", mig_enabled=False
    ),
    up=True,
    readings=READINGS,
    xid=XidRecord(79, 1, ((79, 1),)),
    profiling=PROFILING,
    clock_event_counts=(("gpu_idle", 3), ("power_cap", 1)),
)
MIG = GpuSnapshot(
    identity=GpuIdentity(
        1, "GPU-1111", "NVIDIA H100 80GB HBM3", "00000000:2A:00.0", mig_enabled=True
    ),
    up=True,
    readings=READINGS,
    mig_instances=(
        MigInstance(
            "MIG-2222",
            2,
            0,
            "3g.40gb",
            fb_total_bytes=40448 * MIB,
            fb_used_bytes=1000 * MIB,
            fb_free_bytes=39448 * MIB,
            fb_reserved_bytes=0,
        ),
    ),
    instance_profiling=((2, INSTANCE_PROFILING),),
    clock_event_counts=(("sw_thermal", 2),),
)
SNAPSHOT = NodeSnapshot(
    taken_at=1.7e9,
    monotonic_at=1.0,
    sweep_duration_seconds=0.01,
    nvml_up=True,
    driver_version="550.54.15",
    gpus=(WHOLE, MIG),
    last_success_at=1.7e9,
)


def labels_for(version: DcgmVersion, *flags: str) -> LabelConfig:
    """The label configuration the command line builds for a profile."""
    argv = [f"--compat.dcgm-exporter={version.value}", "--node-name=node-a", *flags]
    return parse_config(argv, environ={}).labels


def exposition(version: DcgmVersion, *flags: str) -> str:
    return render(SNAPSHOT, labels_for(version, *flags))


Series = dict[str, list[tuple[dict[str, str], str]]]


def series(text: str) -> Series:
    """Samples by name: (labels, value exactly as written)."""
    values = [line.rsplit(" ", 1)[1] for line in text.splitlines() if not line.startswith("#")]
    out: Series = {}
    for (name, labels), value in zip(samples(text), values, strict=True):
        out.setdefault(name, []).append((dict(labels), value))
    return out


def headers(text: str, keyword: str) -> dict[str, str]:
    return dict(re.findall(rf"^# {keyword} (\S+) (.*)$", text, re.M))


def of_gpu(found: Series, name: str, gpu: str = "0") -> str:
    (value,) = [v for labels, v in found[name] if labels["gpu"] == gpu]
    return value


# (classic name, its value, 4.9 name, its value) for the whole GPU above.
SPELLINGS = [
    ("DCGM_FI_DEV_SM_CLOCK", "1410", "DCGM_FI_DEV_SM_CLOCK_HERTZ", "1410000000"),
    ("DCGM_FI_DEV_MEM_CLOCK", "2619", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "2619000000"),
    ("DCGM_FI_DEV_GPU_UTIL", "37", "DCGM_FI_DEV_GPU_UTIL_RATIO", "0.370000"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "12", "DCGM_FI_DEV_MEMORY_UTIL_RATIO", "0.120000"),
    ("DCGM_FI_DEV_ENC_UTIL", "3", "DCGM_FI_DEV_ENC_UTIL_RATIO", "0.030000"),
    ("DCGM_FI_DEV_DEC_UTIL", "4", "DCGM_FI_DEV_DEC_UTIL_RATIO", "0.040000"),
    ("DCGM_FI_DEV_FB_TOTAL", "81559", "DCGM_FI_DEV_FB_CAPACITY_BYTES", str(81559 * MIB)),
    ("DCGM_FI_DEV_FB_USED", "40000", "DCGM_FI_DEV_FB_USED_BYTES", str(40000 * MIB)),
    ("DCGM_FI_DEV_FB_FREE", "41000", "DCGM_FI_DEV_FB_FREE_BYTES", str(41000 * MIB)),
    ("DCGM_FI_DEV_FB_RESERVED", "559", "DCGM_FI_DEV_FB_RESERVED_BYTES", str(559 * MIB)),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "123456789",
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        "123456",
    ),
    ("DCGM_FI_DEV_POWER_USAGE", "302.206000", "DCGM_FI_DEV_BOARD_POWER_WATTS", "302.206000"),
    (
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "650.000000",
        "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
        "650.000000",
    ),
    # 123456.7 KiB/s: / 1000 for DCGM's "MB/s", x 1024 for B/s, both INT64 (truncated).
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "123",
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
        "126419660",
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "45", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "45"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "52", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "52"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "7", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "7"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "5", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "5"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "2",
        "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
        "2",
    ),
    ("DCGM_FI_DEV_XID_ERRORS", "79", "DCGM_FI_DEV_XID_ERROR", "79"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0.500000", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "0.500000"),
    # GPM's any-tensor figure (0.75), as DCGM fills field 1004 from GPM; HMMA alone is 1014.
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0.750000", "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "0.750000"),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
        "0.250000",
        "DCGM_FI_PROF_HMMA_UTIL_RATIO",
        "0.250000",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
        "0.125000",
        "DCGM_FI_PROF_IMMA_UTIL_RATIO",
        "0.125000",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
        "0.062500",
        "DCGM_FI_PROF_DFMA_UTIL_RATIO",
        "0.062500",
    ),
    # Unchanged in 4.9: same name, same value.
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "0", "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "0"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0"),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "1000", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "1000"),
    # An INT64 field in DCGM, so an integer although GPM gives a float.
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "1500000", "DCGM_FI_PROF_PCIE_TX_BYTES", "1500000"),
]


@pytest.fixture(scope="module")
def scraped() -> dict[DcgmVersion, str]:
    return {version: exposition(version) for version in DcgmVersion}


@pytest.mark.parametrize(("classic", "classic_value", "renamed", "renamed_value"), SPELLINGS)
def test_each_profile_spells_and_converts_the_family(
    scraped: dict[DcgmVersion, str],
    classic: str,
    classic_value: str,
    renamed: str,
    renamed_value: str,
) -> None:
    for version in CLASSIC:
        found = series(scraped[version])
        assert of_gpu(found, classic) == classic_value, (version, classic)
        if renamed != classic:
            assert renamed not in found, (version, renamed)
    found = series(scraped[V49])
    assert of_gpu(found, renamed) == renamed_value, renamed
    if renamed != classic:
        assert classic not in found, classic


def test_the_4_9_profile_writes_no_classic_name_it_renames(
    scraped: dict[DcgmVersion, str],
) -> None:
    written = set(series(scraped[V49]))
    assert written & set(RENAMES_4_9) == set()
    classic = set(series(scraped[V483]))
    # The H100 node remaps rows, so it has no retired-page series in either profile.
    served = {name for name in RENAMES_4_9 if name in classic}
    assert set(RENAMES_4_9) - served == NOT_ON_THE_DEFAULT_NODE
    assert {RENAMES_4_9[name].name for name in served} <= written
    assert {s.name for s in RENAMES_4_9.values()} & classic == set()


NOT_ON_THE_DEFAULT_NODE = {
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
}


def test_the_4_8_4_profile_serves_the_4_8_3_scrape(scraped: dict[DcgmVersion, str]) -> None:
    # What 4.8.4 added is opt-in (docs/dcgm-exporter-compatibility.md, 'Release generations'):
    # with the default fields, not one DCGM line differs (the exporter's own families carry the
    # time of each render).
    def dcgm_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.lstrip("# HELPTY").startswith("DCGM_")]

    assert dcgm_lines(scraped[V484]) == dcgm_lines(scraped[V483])
    assert len(dcgm_lines(scraped[V483])) > 50
    assert "DCGM_FI_DEV_FABRIC_HEALTH_MASK" not in scraped[V484]


def test_mig_instances_get_their_own_framebuffer_in_each_unit(
    scraped: dict[DcgmVersion, str],
) -> None:
    def instance_value(version: DcgmVersion, name: str) -> str:
        (value,) = [v for labels, v in series(scraped[version])[name] if labels["gpu"] == "1"]
        return value

    assert instance_value(V483, "DCGM_FI_DEV_FB_TOTAL") == "40448"
    assert instance_value(V49, "DCGM_FI_DEV_FB_CAPACITY_BYTES") == str(40448 * MIB)
    # Utilization does not exist on MIG, under either name.
    assert "1" not in {
        labels["gpu"] for labels, _ in series(scraped[V49])["DCGM_FI_DEV_GPU_UTIL_RATIO"]
    }


def test_nvlink_bandwidth_is_a_rate_typed_as_each_release_types_it(
    scraped: dict[DcgmVersion, str],
) -> None:
    types = {version: headers(text, "TYPE") for version, text in scraped.items()}
    helps = {version: headers(text, "HELP") for version, text in scraped.items()}
    assert types[V482]["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"
    assert types[V483]["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "gauge"
    assert types[V49]["DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND"] == "gauge"
    for version in CLASSIC:
        assert "(in MB/s)" in helps[version]["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
    assert "(in B/s)" in helps[V49]["DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND"]


def test_no_nvlink_series_without_a_rate() -> None:
    first_sweep = GpuSnapshot(
        identity=WHOLE.identity, up=True, readings=GpuReadings.of(nvlink_tx_kib=5, nvlink_rx_kib=6)
    )
    snapshot = NodeSnapshot(1.7e9, 1.0, 0.01, True, "550.54.15", (first_sweep,))
    found = series(render(snapshot, labels_for(V483)))
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in found
    # The cumulative counters are there from the first sweep.
    assert len(found["kube_gpu_exporter_nvlink_data_bytes_total"]) == 2


def test_counter_and_gauge_types_per_profile(scraped: dict[DcgmVersion, str]) -> None:
    for version, text in scraped.items():
        profile = PROFILES[version]
        types = headers(text, "TYPE")
        assert types[profile.name("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")] == "counter"
        assert types[profile.name("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")] == "counter"
        assert types[profile.name("DCGM_FI_DEV_XID_ERRORS")] == "gauge"
        assert types["DCGM_EXP_CLOCK_EVENTS_TOTAL"] == "counter"
        assert types["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] == "gauge"
        assert types[profile.name("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")] == "gauge"
    assert "(in Hz)" in headers(scraped[V49], "HELP")["DCGM_FI_DEV_SM_CLOCK_HERTZ"]
    assert "(in MHz)" in headers(scraped[V483], "HELP")["DCGM_FI_DEV_SM_CLOCK"]
    helps = headers(scraped[V483], "HELP")
    assert "any tensor" in helps["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]
    assert "HMMA" in helps["DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE"]


@pytest.mark.parametrize(
    ("version", "host", "driver"),
    [
        (V482, "Hostname", "DCGM_FI_DRIVER_VERSION"),
        (V483, "hostname", "DCGM_FI_DRIVER_VERSION"),
        (V484, "hostname", "DCGM_FI_DRIVER_VERSION"),
        (V49, "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION"),
    ],
)
def test_host_and_driver_labels_follow_the_profile(
    scraped: dict[DcgmVersion, str], version: DcgmVersion, host: str, driver: str
) -> None:
    found = series(scraped[version])
    temperature = PROFILES[version].name("DCGM_FI_DEV_GPU_TEMP")
    by_gpu = {labels["gpu"]: labels for labels, _ in found[temperature]}
    base = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
    assert list(by_gpu["0"]) == [*base, host, driver]
    assert list(by_gpu["1"]) == [*base, "GPU_I_PROFILE", "GPU_I_ID", host, driver]
    assert by_gpu["0"][host] == "node-a" and by_gpu["0"][driver] == "550.54.15"
    # The exporter's own families carry the same host label, and never the driver label.
    for own in ("kube_gpu_exporter_build_info", "kube_gpu_exporter_device_up"):
        for labels, _ in found[own]:
            assert labels[host] == "node-a" and driver not in labels, own


def test_host_and_driver_label_flags_override_the_profile() -> None:
    found = series(
        exposition(V49, "--host-label=Hostname", "--driver-version-label=DCGM_FI_DRIVER_VERSION")
    )
    (labels, _) = found["DCGM_FI_DEV_GPU_TEMP_CELSIUS"][0]
    assert labels["Hostname"] == "node-a" and labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
    found = series(exposition(V482, "--host-label=none", "--driver-version-label=none"))
    (labels, _) = found["DCGM_FI_DEV_GPU_TEMP"][0]
    assert list(labels) == ["gpu", "UUID", "pci_bus_id", "device", "modelName"]


def test_clock_event_counters_ride_on_the_dcgm_label_sets(
    scraped: dict[DcgmVersion, str],
) -> None:
    for version, text in scraped.items():
        found = series(text)
        entities = {
            tuple(labels.items())
            for labels, _ in found[PROFILES[version].name("DCGM_FI_DEV_GPU_TEMP")]
        }
        counts: dict[tuple[str, str], str] = {}
        for labels, value in found["DCGM_EXP_CLOCK_EVENTS_TOTAL"]:
            assert list(labels)[-1] == "clock_event"
            event = labels.pop("clock_event")
            assert tuple(labels.items()) in entities, (version, labels)
            counts[(labels["gpu"], event)] = value
        # The MIG instance repeats its board's counts, as dcgm-exporter repeats board values.
        assert counts == {("0", "gpu_idle"): "3", ("0", "power_cap"): "1", ("1", "sw_thermal"): "2"}
        # The 0/1 state per reason stays beside the counter.
        active = {
            (labels["gpu"], labels["clock_event"]): value
            for labels, value in found["kube_gpu_exporter_clock_event_active"]
        }
        assert active[("0", "gpu_idle")] == "1" and active[("0", "power_cap")] == "1"
        assert active[("0", "hw_slowdown")] == "0"


def test_tensor_pipes_per_gpu_and_instance(scraped: dict[DcgmVersion, str]) -> None:
    for version, text in scraped.items():
        found = series(text)
        tensor = PROFILES[version].name("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
        hmma = PROFILES[version].name("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE")
        assert of_gpu(found, tensor, "0") == "0.750000"
        assert of_gpu(found, tensor, "1") == "0.500000"
        assert of_gpu(found, hmma, "1") == "0.375000"


def test_nvlink_cumulative_bytes_are_our_own_counter(scraped: dict[DcgmVersion, str]) -> None:
    for version, text in scraped.items():
        found = series(text)
        whole = {
            labels["direction"]: value
            for labels, value in found["kube_gpu_exporter_nvlink_data_bytes_total"]
            if labels["gpu"] == "0"
        }
        assert whole == {"tx": str(1000 * 1024), "rx": str(3000 * 1024)}
        names = [list(labels) for labels, _ in found["kube_gpu_exporter_nvlink_data_bytes_total"]]
        host = PROFILES[version].host_label
        assert names[0] == ["gpu", "UUID", "pci_bus_id", "device", host, "direction"]
        assert headers(text, "TYPE")["kube_gpu_exporter_nvlink_data_bytes_total"] == "counter"


# promtool's findings that dcgm-exporter's names force, per profile; everything else is clean.
CAMEL = "label names should be written in 'snake_case' not 'camelCase'"
NO_TOTAL = 'counter metrics should have "_total" suffix'
TYPE_IN_NAME = "metric name should not include type 'counter'"
FORCED_LINTS = {
    V482: {CAMEL, NO_TOTAL, TYPE_IN_NAME},
    V483: {CAMEL, NO_TOTAL, TYPE_IN_NAME},
    V484: {CAMEL, NO_TOTAL, TYPE_IN_NAME},
    # DCGM_FI_DEV_PCIE_REPLAY_COUNTER is DCGM_FI_DEV_PCIE_REPLAY_TOTAL in 4.9.
    V49: {CAMEL, NO_TOTAL},
}


# ---- docs/dcgm-exporter-compatibility.md, 'Version profiles' ----

DOCS = REPO / "docs" / "dcgm-exporter-compatibility.md"
SOURCE_WORDS = {
    DCGM_ALIAS: "DCGM alias",
    GO_DCGM_FIELD: "go-dcgm field",
    DCGM_4_7_DOCS: "DCGM 4.7 docs, unconfirmed",
}


def docs_table(heading: str) -> list[list[str]]:
    """The cells of the first table under `heading`, header and rule rows left out."""
    text = DOCS.read_text()
    section = text.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def unquote(cell: str) -> str:
    return cell.strip("`")


def test_the_docs_rename_table_lists_exactly_renames_4_9() -> None:
    rows = docs_table("### The 4.9 renames")
    documented = {
        unquote(classic): (unquote(renamed), unit.split("→")[-1].strip(), source)
        for classic, renamed, unit, _, source in rows
    }
    assert len(rows) == len(documented)
    assert documented == {
        classic: (spelling.name, spelling.unit, SOURCE_WORDS[spelling.source])
        for classic, spelling in RENAMES_4_9.items()
    }


def test_the_docs_profile_table_matches_the_profiles() -> None:
    rows = docs_table("### What each profile sets")
    documented = {
        unquote(version.split()[0]): (unquote(host), unquote(driver), kind.split()[0])
        for version, host, driver, _, kind in rows
    }
    assert documented == {
        version.value: (p.host_label, p.driver_label, p.nvlink_bandwidth_kind)
        for version, p in PROFILES.items()
    }
