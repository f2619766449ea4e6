"""Fleet files: every mistake is one line that names the offending field."""

from __future__ import annotations

import pytest

from kube_gpu_exporter.exporter.simulator.fleet import (
    FleetError,
    default_fleet,
    load_fleet,
    parse_fleet,
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("gpus: [", "not valid YAML at line"),
        ("- just\n- a list\n", "(top level): expected a mapping, got a list"),
        ("gpus: []", "gpus: is empty; a node needs at least one GPU"),
        ("gpus: 8", "gpus: expected a list of GPUs, got int"),
        ("node_name: n1", "gpus: expected a list of GPUs, got nothing"),
        ("gpus: [{model: H200}]", "gpus[0].model: unknown GPU model 'H200'"),
        ("gpus: [{model: T4, count: 0}]", "gpus[0].count: 0 is out of range"),
        ("gpus: [{model: T4, count: 1.5}]", "gpus[0].count: expected a whole number"),
        ("gpus: [{model: T4, count: 1e300}]", "gpus[0].count"),
        ("gpus: [{model: T4, count: 99999999999999999999}]", "gpus[0].count"),
        (
            "gpus: [{model: T4, count: 40}, {model: L4, count: 40}]",
            "gpus[1].count: the node would exceed 64 GPUs",
        ),
        ("gpus: [{model: T4, workload: mining}]", "gpus[0].workload: unknown workload 'mining'"),
        ("gpus: [{model: T4, ecc: maybe}]", "gpus[0].ecc: expected true or false"),
        ("gpus: [{model: T4, mig: [1g.5gb]}]", "gpus[0].mig: Tesla T4 does not support MIG"),
        ("gpus: [{model: A100-SXM4-40GB, mig: 1g.5gb}]", "gpus[0].mig: expected a list"),
        ("gpus: [{model: T4, colour: green}]", "gpus[0].colour: unknown field"),
        ("gpu: [{model: T4}]", "gpu: unknown field"),
        ("driver_version: 550\ngpus: [{model: T4}]", "driver_version: 550 is not a driver version"),
        (
            'driver_version: "470.1"\ngpus: [{model: H100-80GB-HBM3, mig: []}]',
            "gpus[0].mig: MIG on NVIDIA H100 80GB HBM3 needs driver R525",
        ),
        ("node_name: Bad_Name\ngpus: [{model: T4}]", "node_name: 'Bad_Name' is not a valid"),
        ("seed: -1\ngpus: [{model: T4}]", "seed: -1 is out of range"),
        ("latency: {call_us: 1e12}\ngpus: [{model: T4}]", "latency.call_us"),
        ("latency: fast\ngpus: [{model: T4}]", "latency: expected a mapping, got a string"),
        ("seed: 1.7\ngpus: [{model: T4}]", "seed: expected a whole number, got 1.7"),
        ("seed: 7.0\ngpus: [{model: T4}]", "seed: expected a whole number, got 7.0"),
        ("seed: 1\ngpus: [{model: T4}]\nseed: 2\n", "duplicate key 'seed' at line 3 (first at"),
        ("gpus: [{model: T4, count: 2, count: 3}]", "duplicate key 'count' at line 1"),
        ("gpus:\n- model: T4\n  ecc: true\n  ecc: false\n", "duplicate key 'ecc' at line 4"),
        (
            "allocation: plugin\ngpus: [{model: T4}]",
            "allocation: 'plugin' is not one of device-plugin, dra",
        ),
        ("allocation: null\ngpus: [{model: T4}]", "allocation: None is not one of"),
        (
            "gpus: [{model: T4, allocation: DRA}]",
            "gpus[0].allocation: 'DRA' is not one of device-plugin, dra",
        ),
        ("gpus: [{model: T4, allocation: [dra]}]", "gpus[0].allocation: ['dra'] is not one of"),
        (
            "nvml_privileged: yes please\ngpus: [{model: T4}]",
            "nvml_privileged: expected true or false, got a string",
        ),
        ("nvml_privileged: 1\ngpus: [{model: T4}]", "nvml_privileged: expected true or false"),
        ("gpus: [{model: T4, nvml_privileged: true}]", "gpus[0].nvml_privileged: unknown field"),
    ],
)
def test_bad_fleet_files_name_the_field(text, message):
    with pytest.raises(FleetError) as info:
        parse_fleet(text, "fleet file f.yaml")
    text_of_error = str(info.value)
    assert message in text_of_error
    assert text_of_error.startswith("fleet file f.yaml")
    assert "\n" not in text_of_error


def test_yaml_bombs_are_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    bomb += "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\ngpus: [{model: T4}]\n"
    with pytest.raises(FleetError, match="aliases"):
        parse_fleet(bomb, "bomb")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: " + "[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
        ("{" * 5000, "nested deeper than 32 levels"),
        ("seed: 9" + "9" * 5000 + "\ngpus: [{model: T4}]", "a value cannot be read"),
        ("gpus: [{model: T4, count: .nan}]", "gpus[0].count: nan is out of range"),
        ("gpus: [{model: T4, count: -.inf}]", "gpus[0].count: -inf is out of range"),
        ("gpus: [{model: " + "x" * 1_000_000 + "}]", "unknown GPU model 'xxxx"),
        ("gpus: [{model: T4, " + "k" * 500 + ": 1}]", "gpus[0].kkkk"),
        (
            "gpus: [{model: H100-80GB-HBM3, mig: [" + "x" * 200_000 + "]}]",
            "gpus[0].mig[0]: unknown MIG profile 'xxxx",
        ),
        ('gpus: [{model: T4, "two\\nlines": 1}]', "gpus[0].two\\nlines: unknown field"),
        ("allocation: " + "d" * 100_000 + "\ngpus: [{model: T4}]", "allocation: 'dddd"),
        ("gpus: [{model: T4}", "not valid YAML"),  # truncated
    ],
)
def test_hostile_fleet_files_get_one_short_line(text, message):
    """Deep nesting would be a RecursionError, a 5,000-digit number a ValueError, and a huge
    value would be echoed whole: each must instead be a short line naming what is wrong."""
    with pytest.raises(FleetError) as info:
        parse_fleet(text, "fleet file f.yaml")
    error = str(info.value)
    assert message in error and "\n" not in error
    assert len(error) < 250, error


def test_python_tags_are_not_executed():
    with pytest.raises(FleetError, match="not valid YAML"):
        parse_fleet("gpus: !!python/object/apply:os.system ['true']", "hostile")


def test_oversized_and_unreadable_files(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(FleetError, match="over the"):
        load_fleet(big)
    with pytest.raises(FleetError, match="cannot read"):
        load_fleet(tmp_path / "missing.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(FleetError, match="not UTF-8"):
        load_fleet(binary)


def test_default_fleet_is_an_8_gpu_h100_node_with_mixed_mig():
    fleet = default_fleet()
    assert len(fleet.gpus) == 8
    assert {g.model.name for g in fleet.gpus} == {"NVIDIA H100 80GB HBM3"}
    mig = [g.mig for g in fleet.gpus if g.mig is not None]
    assert len(mig) == 2
    assert all(len({p.profile.name for p in placed}) > 1 for placed in mig)  # mixed profiles


def test_a_valid_mixed_fleet(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text(
        "node_name: mixed-1\ndriver_version: '535.161.08'\n"
        "gpus:\n  - {model: A100-SXM4-40GB, mig: [3g.20gb, 2g.10gb, 1g.5gb, 1g.5gb]}\n"
        "  - {model: 'NVIDIA L4', count: 2, workload: inference}\n"
    )
    fleet = load_fleet(path)
    assert fleet.node_name == "mixed-1" and len(fleet.gpus) == 3
    # 1g instances may not start on slice 7, so the 3g lands on slices 4-7 (GI 2), the 2g on
    # 0-1 (GI 3) and the 1g instances on 2 and 3 (GI 9, 10): "all-balanced" as the driver does it.
    placed = fleet.gpus[0].mig
    assert placed is not None
    assert [p.gpu_instance_id for p in placed] == [2, 3, 9, 10]


def test_allocation_is_a_node_default_with_per_gpu_overrides():
    fleet = parse_fleet(
        "allocation: dra\nnvml_privileged: true\ngpus:\n"
        "  - {model: H100-80GB-HBM3, count: 2}\n"
        "  - {model: H100-80GB-HBM3, allocation: device-plugin, mig: [3g.40gb]}\n",
        "fleet file f.yaml",
    )
    assert [g.allocation for g in fleet.gpus] == ["dra", "dra", "device-plugin"]
    assert fleet.nvml_privileged is True
    plain = parse_fleet("gpus: [{model: T4}, {model: T4, allocation: dra}]", "f")
    assert [g.allocation for g in plain.gpus] == ["device-plugin", "dra"]
    assert plain.nvml_privileged is False
