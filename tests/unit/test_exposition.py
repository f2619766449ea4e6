"""The exposition: dcgm-exporter names and labels, exact values, and Prometheus' own checks; and
input from outside must not take /metrics down: a pod label that cannot be encoded, one entity
whose value cannot be rendered, a join that fails, a renderer that raises. Each costs its own part
of the body at most, counted in kube_gpu_exporter_render_errors_total, and the poller goes on
sweeping."""

from __future__ import annotations

import gzip
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.config import HostLabel, LabelConfig
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.store import ExpositionStore, build_exposition
from kube_gpu_exporter.exporter.exposition.text_format import (
    escape_label_value,
    format_value,
    label_body,
)
from kube_gpu_exporter.exporter.podresources.allocations import PodResourcesSnapshot
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import GpuReadings
from tests.conftest import (
    FAST,
    LABELS,
    joined_with,
    render,
    start_xid_watch,
    wait_for,
)

MIB = 2**20
DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]


def _same(value: Any) -> object:
    return value


# The test's own statement of dcgm-exporter's classic units
# (docs/dcgm-exporter-compatibility.md, 'Classic units'),
# written independently of kube_gpu_exporter/exporter/exposition/dcgm_families.py. Each takes the
# row's value in GpuReadings (NVML's unit), as Any: an oracle runs only for a series that was
# written, so the value is set.
EXPECTED: dict[str, Callable[[Any], object]] = {
    "DCGM_FI_DEV_SM_CLOCK": _same,
    "DCGM_FI_DEV_MEM_CLOCK": _same,
    "DCGM_FI_DEV_MEMORY_TEMP": _same,
    "DCGM_FI_DEV_GPU_TEMP": _same,
    "DCGM_FI_DEV_POWER_USAGE": lambda v: v / 1000,
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": lambda v: v / 1000,
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": lambda v: v / 1000,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": _same,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": _same,
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": _same,
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": _same,
    "DCGM_FI_DEV_GPU_UTIL": _same,
    "DCGM_FI_DEV_MEM_COPY_UTIL": _same,
    "DCGM_FI_DEV_ENC_UTIL": _same,
    "DCGM_FI_DEV_DEC_UTIL": _same,
    "DCGM_FI_DEV_FB_FREE": lambda v: v // MIB,
    "DCGM_FI_DEV_FB_USED": lambda v: v // MIB,
    "DCGM_FI_DEV_FB_RESERVED": lambda v: v // MIB,
    "DCGM_FI_DEV_FB_TOTAL": lambda v: v // MIB,
    # A rate: DCGM divides KiB/s by 1000 and stores an INT64 (truncated).
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": lambda v: int(v / 1000),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": _same,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": _same,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": _same,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": _same,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": _same,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": _same,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": _same,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": _same,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": _same,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": _same,
}
COUNTERS = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_EXP_XID_ERRORS_TOTAL",
}


def samples(text: str) -> dict[str, list]:
    """Samples by the name on the wire. prometheus_client's parser reports counter samples with a
    `_total` it appends itself; undo that so DCGM names can be looked up as written."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if (
                family.type == "counter"
                and name == family.name + "_total"
                and (f"\n{family.name}{{" in text or f"\n{family.name} " in text)
            ):
                name = family.name
            out.setdefault(name, []).append(sample)
    return out


def render_once(poller: Poller, ready: Callable[[str], bool], timeout: float = 5.0) -> str:
    """Sweep and render until `ready(text)`, and return that text: an XID reaches the sweeps
    from the watcher's thread, once the simulated NVML has delivered the event to it."""
    rendered: list[str] = []

    def swept() -> bool:
        rendered.append(render(poller.sweep()))
        return ready(rendered[-1])

    assert wait_for(swept, timeout), f"not in the exposition within {timeout}s"
    return rendered[-1]


def expected_readings(snapshot, labels: dict[str, str]) -> GpuReadings:
    gpu = next(g for g in snapshot.gpus if g.identity.uuid == labels["UUID"])
    if "GPU_I_ID" not in labels:
        return gpu.readings
    inst = next(m for m in gpu.mig_instances if str(m.gpu_instance_id) == labels["GPU_I_ID"])
    r = gpu.readings
    return GpuReadings.of(
        {
            **r.values,
            "DCGM_FI_DEV_FB_TOTAL": inst.fb_total_bytes,
            "DCGM_FI_DEV_FB_USED": inst.fb_used_bytes,
            "DCGM_FI_DEV_FB_FREE": inst.fb_free_bytes,
            "DCGM_FI_DEV_FB_RESERVED": inst.fb_reserved_bytes,
        }
    )


def test_round_trip_every_value_equals_the_snapshot(sim):
    # The PCIe sampler's rounds on demand rather than on its thread's timer: the first sweep
    # gives it its GPUs, one round samples them, and the next sweep reports them.
    helpers = SteppedHelpers()
    config = replace(FAST, pcie_enabled=True, pcie_interval_seconds=1.0)
    poller = Poller(config, lambda s: None, sim.source(), workers=8, runner=helpers)
    try:
        poller.sweep()
        sim.inject_ecc_error(0, double_bit=True)
        helpers.run_once()
        snapshot = poller.sweep()
    finally:
        poller.stop(timeout=2.0)
    assert all(g.readings.pcie_tx_kbps is not None for g in snapshot.gpus if g.readings)
    parsed = samples(render(snapshot))
    checked: Counter[str] = Counter()
    for name, oracle in EXPECTED.items():
        for sample in parsed.get(name, []):
            expected = oracle(expected_readings(snapshot, sample.labels).values[name])
            assert sample.value == expected, (name, sample.labels)
            checked[name] += 1
    assert set(checked) == set(EXPECTED)
    assert sum(checked.values()) > 300
    assert parsed["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"][0].value == 1


def test_whole_gpus_and_mig_instances_carry_the_dcgm_label_set(sim, make_poller):
    snapshot = make_poller(sim).sweep()
    parsed = samples(render(snapshot))
    temps = parsed["DCGM_FI_DEV_GPU_TEMP"]
    whole = [s for s in temps if "GPU_I_ID" not in s.labels]
    mig = [s for s in temps if "GPU_I_ID" in s.labels]
    assert len(whole) == 6 and len(mig) == 7
    # The default profile (dcgm-exporter 4.8.3): `hostname`, then the driver-version label.
    for s in whole:
        assert list(s.labels) == [*DCGM_LABELS, "hostname", "DCGM_FI_DRIVER_VERSION"]
        assert s.labels["device"] == f"nvidia{s.labels['gpu']}"
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:00\.0", s.labels["pci_bus_id"])
        assert s.labels["hostname"] == "node-a"
        assert s.labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
    for s in mig:
        assert list(s.labels) == [
            *DCGM_LABELS,
            "GPU_I_PROFILE",
            "GPU_I_ID",
            "hostname",
            "DCGM_FI_DRIVER_VERSION",
        ]
        assert s.labels["UUID"].startswith("GPU-")  # the parent's UUID, as dcgm-exporter does
    profiles = sorted((s.labels["gpu"], s.labels["GPU_I_PROFILE"]) for s in mig)
    assert profiles == sorted(
        [
            ("6", "1g.10gb"),
            ("6", "1g.10gb"),
            ("6", "2g.20gb"),
            ("6", "3g.40gb"),
            ("7", "1g.20gb"),
            ("7", "1g.20gb"),
            ("7", "3g.40gb"),
        ]
    )
    # Per-instance framebuffer, and no utilization on MIG.
    fb = {
        s.labels.get("GPU_I_ID"): s.value
        for s in parsed["DCGM_FI_DEV_FB_TOTAL"]
        if s.labels["gpu"] == "6"
    }
    assert fb == {"7": 9984, "8": 9984, "4": 20096, "2": 40448}
    assert all("GPU_I_ID" not in s.labels for s in parsed["DCGM_FI_DEV_GPU_UTIL"])


def test_host_label_modes_and_driver_label(sim, make_poller):
    snapshot = make_poller(sim).sweep()
    classic = samples(render(snapshot, LabelConfig(HostLabel.CLASSIC, "n1")))
    assert classic["DCGM_FI_DEV_GPU_TEMP"][0].labels["Hostname"] == "n1"
    lower = samples(render(snapshot, LabelConfig(HostLabel.LOWER, "n1")))
    assert lower["DCGM_FI_DEV_GPU_TEMP"][0].labels["hostname"] == "n1"
    none = samples(render(snapshot, LabelConfig(HostLabel.NONE, "n1")))
    labels = none["DCGM_FI_DEV_GPU_TEMP"][0].labels
    assert "Hostname" not in labels and "hostname" not in labels
    assert lower["DCGM_FI_DEV_GPU_TEMP"][0].labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
    off = samples(render(snapshot, LabelConfig(HostLabel.LOWER, "n1", driver_version_label="")))
    assert not [k for k in off["DCGM_FI_DEV_GPU_TEMP"][0].labels if "DRIVER" in k]


def test_dcgm_counter_names_are_exact_without_total_suffix(sim, make_poller):
    poller = make_poller(sim)
    start_xid_watch(sim, poller)
    sim.inject_xid(0, 13)
    text = render_once(poller, lambda text: "DCGM_EXP_XID_ERRORS_TOTAL{" in text)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for name in COUNTERS:
        assert types.get(name) == "counter", name
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text


def test_xid_gauge_and_counter(sim, make_poller):
    poller = make_poller(sim)
    start_xid_watch(sim, poller)
    for code in (79, 79, 31):
        sim.inject_xid(2, code)

    def xids_on_gpu_2(text: str) -> float:
        """A look at the lines, while waiting; what is asserted on is parsed in full, once."""
        lines = text.splitlines()
        counts = 'DCGM_EXP_XID_ERRORS_TOTAL{gpu="2",'
        return sum(float(line.rpartition(" ")[2]) for line in lines if line.startswith(counts))

    text = render_once(poller, lambda text: xids_on_gpu_2(text) == 3)
    parsed = samples(text)
    counts = [s for s in parsed["DCGM_EXP_XID_ERRORS_TOTAL"] if s.labels["gpu"] == "2"]
    gauge = {
        s.labels["gpu"]: s for s in parsed["DCGM_FI_DEV_XID_ERRORS"] if "GPU_I_ID" not in s.labels
    }
    assert gauge["2"].value == 31
    assert gauge["2"].labels["err_code"] == "31" and gauge["2"].labels["err_msg"] != "Unknown Error"
    assert gauge["0"].value == 0 and gauge["0"].labels["err_code"] == "0"
    assert {s.labels["xid"]: s.value for s in counts} == {"79": 2, "31": 1}


def test_escaping_of_hostile_label_values(sim, make_poller):
    snapshot = make_poller(sim).sweep()
    nasty = 'we"ird\\node\nname'
    parsed = samples(render(snapshot, LabelConfig(HostLabel.LOWER, nasty)))
    assert parsed["DCGM_FI_DEV_GPU_TEMP"][0].labels["hostname"] == nasty
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_gzip_body_decompresses_to_the_plain_body(sim, make_poller):
    exposition = build_exposition(make_poller(sim).sweep(), Renderer(LABELS), joined_with())
    tail = exposition.tail(15.0)
    plain = exposition.plain(tail)
    packed = exposition.gzipped(tail)
    assert gzip.decompress(packed) == plain
    assert len(packed) < len(plain) / 5
    # The tail is fresh per scrape while the compressed body is reused.
    assert b"kube_gpu_exporter_snapshot_age_seconds" in plain


def test_lost_gpu_drops_its_dcgm_series_and_reports_down(sim, make_poller):
    poller = make_poller(sim)
    poller.sweep()
    sim.lose_gpu(4)
    parsed = samples(render(poller.sweep()))
    assert "4" not in {s.labels["gpu"] for s in parsed["DCGM_FI_DEV_GPU_TEMP"]}
    up = {s.labels["gpu"]: s.value for s in parsed["kube_gpu_exporter_device_up"]}
    assert up["4"] == 0 and sum(up.values()) == 7
    info = {s.labels["gpu"]: s.labels for s in parsed["kube_gpu_exporter_device_info"]}
    assert info["4"]["UUID"] == sim.gpus[4].uuid


def test_self_metrics(sim, make_poller):
    parsed = samples(render(make_poller(sim).sweep()))
    assert parsed["kube_gpu_exporter_nvml_up"][0].value == 1
    assert parsed["kube_gpu_exporter_collection_duration_seconds"][0].value > 0
    assert parsed["kube_gpu_exporter_last_collection_success_timestamp_seconds"][0].value > 1.7e9
    collectors = {
        s.labels["collector"]: s.value for s in parsed["kube_gpu_exporter_collector_success"]
    }
    assert collectors["nvml"] == 1
    mig = parsed["kube_gpu_exporter_mig_instance_info"]
    assert len(mig) == 7 and all(s.labels["mig_uuid"].startswith("MIG-") for s in mig)
    events = [s for s in parsed["kube_gpu_exporter_clock_event_active"] if s.labels["gpu"] == "5"]
    assert {s.labels["clock_event"]: s.value for s in events}["gpu_idle"] == 1
    build = parsed["kube_gpu_exporter_build_info"][0].labels
    assert build["version"] and build["nvml_binding_version"] != "unknown"
    assert parsed["kube_gpu_exporter_snapshot_stale"][0].value == 0


def test_value_formatting():
    assert format_value(302.206, fixed=True) == "302.206000"
    assert format_value(7) == "7"
    assert format_value(True) == "1"
    assert format_value(0.1) == "0.1"
    assert format_value(float("nan")) == "NaN"
    assert format_value(float("inf")) == "+Inf"


# ---- One part failing to render costs only itself ----

LONE_SURROGATES = "\udcff\ud800"


def uuid_of(series: str) -> str:
    found = re.search(r'UUID="([^"]+)"', series)
    assert found is not None, series
    return found.group(1)


def test_a_lone_surrogate_in_a_label_value_becomes_the_replacement_character() -> None:
    escaped = escape_label_value(f'team "{LONE_SURROGATES}"\n')
    assert escaped == 'team \\"\ufffd\ufffd\\"\\n'
    escaped.encode()  # would raise UnicodeEncodeError with the surrogates left in
    assert label_body((("a", "ok"), ("b", "x\udcffy"))) == 'a="ok",b="x\ufffdy"'


def test_a_pod_join_that_fails_leaves_the_device_series_without_pods(make_poller, sim) -> None:
    snapshot = make_poller(sim).sweep()
    # An allocations list that is not one: the join fails as a whole.
    pods = PodResourcesSnapshot(None, None, (), 0.0)  # type: ignore[arg-type]
    text = render(snapshot, context=AttributionContext(pods=pods))
    plain = render(snapshot)
    assert text.count("DCGM_FI_DEV_GPU_TEMP{") == plain.count("DCGM_FI_DEV_GPU_TEMP{") > 0
    assert 'kube_gpu_exporter_render_errors_total{part="pod join"} 1' in text
    assert "kube_gpu_exporter_build_info{" in text


class _Exploding(Renderer):
    def render_body(self, node):
        raise RuntimeError("boom")


def test_a_renderer_that_raises_does_not_reach_the_poller(make_poller, sim, caplog) -> None:
    store = ExpositionStore(_Exploding(LABELS), joined_with())
    poller = make_poller(sim, publish=store.publish)
    for _ in range(3):
        store.publish(poller.sweep())  # raised into the poller's loop before
    assert store.latest is not None and store.current is None
    assert sum("rendering the exposition failed" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(RuntimeError):
        store.render_latest()  # a scrape still sees the failure and answers 500 itself
