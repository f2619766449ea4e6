"""The flag table (kube_gpu_exporter/exporter/flags/table.py) and what is made from it: the parser,
the environment, the config file and dcgm-exporter's variables, each checked against the rows so
that none can drift from them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.exporter.flags.model import Flag, Kind
from kube_gpu_exporter.exporter.flags.parser import UsageError, build_parser, help_text
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.flags.sources import keys_of
from kube_gpu_exporter.exporter.flags.table import BY_NAME, FLAGS
from kube_gpu_exporter.exporter.flags.upstream import UPSTREAM, UPSTREAM_ENV

CSV = "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\nDCGM_FI_DEV_POWER_USAGE, gauge, power\n"
KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
}


def _samples(tmp_path: Path) -> dict[str, Any]:
    """A value other than the default for every flag, as YAML would hold it."""
    csv = tmp_path / "fields.csv"
    csv.write_text(CSV)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    return {
        "--web.listen-address": "127.0.0.1:9500",
        "--web.config.file": None,  # its parsed form holds an SSL context, compared apart below
        "--web.telemetry-path": "/gpu-metrics",
        "--web.max-connections": 100,
        "--web.max-connections-per-address": 8,
        "--collector.interval": "2s",
        "--collector.device-timeout": 4,
        "--collector.pcie": False,
        "--collector.pcie-interval": "30s",
        "--collector.slow-fields-interval": "20s",
        "--collector.energy-read-interval": "2m",
        "--collector.field-interval": [
            "DCGM_FI_DEV_GPU_TEMP=30s",
            "DCGM_FI_DEV_POWER_MGMT_LIMIT=1m",
        ],
        "--collector.xid": False,
        "--collector.gpm": False,
        "--collector.processes": True,
        "--processes.proc-root": "/host/proc",
        "--processes.log-root": "/host/var/log",
        "--collector.mig-refresh-interval": "5m",
        "--snapshot.stale-after": "12s",
        "--health.max-snapshot-age": "90s",
        "--health.require-gpus": True,
        "--compat.dcgm-exporter": "4.8.2",
        "--collectors": str(csv),
        "--xid-count-window-size": 60000,
        "--clock-events-count-window-size": 120000,
        "--host-label": "none",
        "--node-name": "gpu-node-7",
        "--driver-version-label": "none",
        "--podresources": False,
        "--podresources.socket": "/run/kubelet/pod-resources/kubelet.sock",
        "--podresources.extra-resources": "example.com/gpu,example.com/vgpu",
        "--attribution.shared-devices": "per-pod",
        "--attribution.per-pod-usage": True,
        "--kubernetes": True,
        "--kubernetes.kubeconfig": str(kubeconfig),
        "--kubernetes.pod-label-allowlist": "^team$",
        "--kubernetes.resource-slices": False,
        "--kubernetes.enable-pod-uid": True,
        "--kubernetes.enable-pod-labels": True,
        "--kubernetes.max-pod-labels": 3,
        "--log.level": "debug",
        "--log.format": "json",
        "--simulate": "mixed",
    }


def _as_arguments(flag: Flag, value: Any) -> list[str]:
    if flag.kind is Kind.SWITCH:
        return [flag.name if value else flag.negated]
    values = value if isinstance(value, list) else [value]
    return [f"{flag.name}={item}" for item in values]


def _nested(key: str, value: Any) -> dict[str, Any]:
    head, _, rest = key.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _write(path: Path, document: Any) -> str:
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_every_row_is_one_parser_option_and_back():
    actions = {
        next(o for o in action.option_strings if o.startswith("--")): action
        for action in build_parser()._actions
        if action.dest not in ("help", "version")
    }
    assert set(actions) == {flag.name for flag in FLAGS}
    for flag in FLAGS:
        action = actions[flag.name]
        assert (action.dest, action.default) == (flag.dest, flag.default), flag.name
        assert isinstance(action, argparse.BooleanOptionalAction) == (flag.kind is Kind.SWITCH)
        assert (flag.short in action.option_strings) if flag.short else True
        # The default in --help is the row's, so it cannot say something else.
        assert action.help is not None
        assert action.help == help_text(flag).replace("%", "%%")
        assert ("Deprecated" in action.help) == bool(flag.deprecated)
    assert len({flag.env for flag in FLAGS}) == len(FLAGS)


def test_the_sample_values_cover_every_flag(tmp_path):
    assert set(_samples(tmp_path)) == {flag.name for flag in FLAGS} - {"--config.file"}


def test_a_config_file_with_every_flag_is_the_command_line_with_every_flag(tmp_path):
    samples = {name: value for name, value in _samples(tmp_path).items() if value is not None}
    argv: list[str] = []
    document: dict[str, Any] = {}
    for name, value in samples.items():
        flag = BY_NAME[name]
        argv += _as_arguments(flag, value)
        # The switches other flags' names continue are written `enabled`, the rest by name.
        _merge(document, _nested(keys_of(flag)[-1], value))
    from_file = parse_config(["--config.file", _write(tmp_path / "c.yaml", document)], environ={})
    from_argv = parse_config(argv, environ={})
    assert from_file == from_argv
    # And every sample moved its setting off the default, so an ignored key would show.
    default = parse_config([], environ={})
    assert from_file != default
    for name, value in samples.items():
        one = parse_config(
            ["--config.file", _write(tmp_path / "one.yaml", _nested(name[2:], value))]
            if name not in NEEDS
            else [],
            environ={},
        )
        assert name in NEEDS or one != default, f"{name} in the file changed nothing"


# Flags that take effect only beside another (checked by the settings), left out of the
# one-at-a-time check above.
NEEDS = {
    "--kubernetes.enable-pod-uid",
    "--kubernetes.enable-pod-labels",
    "--kubernetes",
    "--xid-count-window-size",
    "--clock-events-count-window-size",
    "--attribution.per-pod-usage",
    "--kubernetes.pod-label-allowlist",
    "--kubernetes.max-pod-labels",
    "--kubernetes.resource-slices",
    "--kubernetes.kubeconfig",
}


def test_the_web_config_file_from_the_file_is_read_as_from_the_flag(tmp_path):
    users = tmp_path / "web.yaml"
    from kube_gpu_exporter.exporter.password_hash import hash_password

    users.write_text(f"basic_auth_users:\n  prometheus: '{hash_password('secret', 4)}'\n")
    document = {"web": {"config": {"file": str(users)}}}
    from_file = parse_config(["--config.file", _write(tmp_path / "c.yaml", document)], environ={})
    assert from_file.web.security is not None
    assert from_file.web.security.source == users


def test_the_command_line_wins_then_the_environment_then_the_file(tmp_path):
    path = _write(tmp_path / "c.yaml", {"collector": {"interval": "7s", "device-timeout": "3s"}})
    env = {"KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL": "6s", "DCGM_EXPORTER_INTERVAL": "9000"}
    both = parse_config(["--config.file", path, "--collector.interval=2s"], environ=env)
    assert (both.collection.interval_seconds, both.collection.device_timeout_seconds) == (2, 3)
    assert parse_config(["--config.file", path], environ=env).collection.interval_seconds == 6
    del env["KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL"]
    assert parse_config(["--config.file", path], environ=env).collection.interval_seconds == 9
    assert parse_config(["--config.file", path], environ={}).collection.interval_seconds == 7
    named = parse_config([], environ={"KUBE_GPU_EXPORTER_CONFIG_FILE": path})
    assert named.collection.interval_seconds == 7


def test_a_repeatable_flag_takes_its_values_from_one_source_only(tmp_path):
    path = _write(
        tmp_path / "c.yaml", {"collector": {"field-interval": ["DCGM_FI_DEV_GPU_TEMP=30s"]}}
    )
    config = parse_config(
        ["--config.file", path, "--collector.field-interval=DCGM_FI_DEV_POWER_MGMT_LIMIT=1m"],
        environ={},
    )
    assert dict(config.collection.field_intervals) == {"DCGM_FI_DEV_POWER_MGMT_LIMIT": 60.0}


@pytest.mark.parametrize(
    ("document", "says"),
    [
        (
            {"collector": {"intervall": "5s"}},
            "collector.intervall is not a flag (did you mean collector.interval?)",
        ),
        ({"collector": {"interval": "5x"}}, "key collector.interval: invalid duration"),
        ({"collector": {"interval": "1h1s"}}, "key collector.interval:"),
        ({"collector": {"pcie": "maybe"}}, "key collector.pcie: invalid boolean"),
        ({"web": {"listen-address": True}}, "--web.listen-address takes a value, not True"),
        (
            {"collector.interval": "5s", "collector": {"interval": "6s"}},
            "collector.interval is set twice",
        ),
        ({"config": {"file": "/etc/other.yaml"}}, "config.file cannot name another file"),
        (["collector"], "the top level must be a mapping of flag names"),
        ({1: "x"}, "key 1 is not a flag name"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_and_the_key(cli, tmp_path, document, says):
    path = _write(tmp_path / "c.yaml", document)
    code, out, err = cli("--config.file", path)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and f"config file {path}" in err and says in err, err


def test_a_missing_or_huge_config_file_is_one_line(cli, tmp_path):
    code, _, err = cli("--config.file=/nonexistent/flags.yaml")
    assert code == 2 and err.startswith("kube-gpu-exporter: error: argument --config.file: ")
    code, _, err = cli(env={"KUBE_GPU_EXPORTER_CONFIG_FILE": "/dev/zero"})
    assert code == 2 and "environment variable KUBE_GPU_EXPORTER_CONFIG_FILE" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("variable", "value", "setting", "expected"),
    [
        ("DCGM_EXPORTER_INTERVAL", "30000", lambda c: c.collection.interval_seconds, 30.0),
        ("DCGM_EXPORTER_LISTEN", ":9400", lambda c: c.web.listen_address, ":9400"),
        ("DCGM_EXPORTER_KUBERNETES", "false", lambda c: c.attribution.podresources_enabled, False),
        ("DCGM_EXPORTER_NO_HOSTNAME", "true", lambda c: c.labels.host_label.value, "none"),
        ("DCGM_EXPORTER_NO_HOSTNAME", "false", lambda c: c.labels.host_label.value, "hostname"),
        ("DCGM_EXPORTER_LOG_FORMAT", "text", lambda c: c.log_format, "logfmt"),
        ("DCGM_EXPORTER_LOG_FORMAT", "json", lambda c: c.log_format, "json"),
        ("DCGM_EXPORTER_DEBUG", "true", lambda c: c.log_level, "debug"),
        ("KUBERNETES_VIRTUAL_GPUS", "true", lambda c: c.labels.shared_device_series, "per-pod"),
        (
            "NVIDIA_RESOURCE_NAMES",
            "nvidia.com/a100",
            lambda c: c.attribution.extra_resources,
            frozenset({"nvidia.com/a100"}),
        ),
        (
            "DCGM_POD_RESOURCES_KUBELET_SOCKET",
            "/run/k/kubelet.sock",
            lambda c: c.attribution.socket_path,
            "/run/k/kubelet.sock",
        ),
        ("DCGM_EXPORTER_HEALTH_REQUIRE_GPUS", "true", lambda c: c.web.health_require_gpus, True),
    ],
)
def test_the_gpu_operators_variables_keep_their_meaning(variable, value, setting, expected):
    assert setting(parse_config([], environ={variable: value})) == expected


def test_ours_win_over_dcgm_exporters_and_a_bad_value_names_its_variable(cli):
    both = {"DCGM_EXPORTER_INTERVAL": "30000", "KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL": "2s"}
    assert parse_config([], environ=both).collection.interval_seconds == 2.0
    code, _, err = cli(env={"DCGM_EXPORTER_INTERVAL": "soon"})
    assert code == 2 and "environment variable DCGM_EXPORTER_INTERVAL: invalid duration" in err


def test_a_variable_of_another_meaning_is_noticed_not_read():
    config = parse_config(
        [], environ={"DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX": "team,app"}
    )
    assert config.attribution.pod_label_allowlist is None
    (notice,) = config.notices
    assert notice.startswith("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX is set but not")


def test_the_notice_is_logged_once_at_start(cli, monkeypatch):
    import kube_gpu_exporter.exporter.app

    monkeypatch.setattr(kube_gpu_exporter.exporter.app, "run", lambda backend, address: 0)
    code, _, err = cli("--simulate", env={"DCGM_REMOTE_HOSTENGINE_INFO": "localhost:5555"})
    assert code == 0
    said = [line for line in err.splitlines() if "DCGM_REMOTE_HOSTENGINE_INFO" in line]
    assert len(said) == 1 and "no DCGM host engine" in said[0] and "level=warn" in said[0]


def test_every_upstream_row_that_is_read_names_a_flag_of_ours():
    for row in UPSTREAM:
        if row.translate is not None:
            assert row.flag in BY_NAME and row.env, row
        assert row.flags and all(f.startswith("-") for f in row.flags), row
    assert len({row.env for row in UPSTREAM_ENV}) == len(UPSTREAM_ENV)


def test_the_new_dcgm_exporter_flags_are_each_answered():
    answered = {flag for row in UPSTREAM for flag in row.flags}
    for flag in (
        "--config-file",
        "--web-read-timeout",
        "--web-write-timeout",
        "--max-concurrent-scrapes",
        "--enable-exporter-metrics",
        "--health-require-gpus",
        "--container-labels",
        "--container-runtime-socket",
    ):
        assert flag in answered


def test_a_flag_given_twice_in_the_file_and_on_the_line_is_the_lines(tmp_path):
    path = _write(tmp_path / "c.yaml", {"collector": {"xid": False}})
    assert parse_config(
        ["--config.file", path, "--collector.xid"], environ={}
    ).collection.xid_enabled
    with pytest.raises(UsageError, match="config file"):
        parse_config(["--config.file", _write(tmp_path / "d.yaml", {"nope": 1})], environ={})


@pytest.mark.parametrize(
    ("old", "new", "setting"),
    [
        ("--collector.slow-fields-interval=3s", "slow-fields=3s", "slow_fields_interval_seconds"),
        (
            "--collector.energy-read-interval=2m",
            "energy-counter=2m",
            "energy_read_interval_seconds",
        ),
        ("--collector.pcie-interval=30s", "pcie-sampler=30s", "pcie_interval_seconds"),
    ],
)
def test_a_class_interval_and_its_old_flag_set_the_same_and_the_old_one_is_noticed(
    old, new, setting
):
    by_class = parse_config([f"--collector.field-interval={new}"], environ={})
    by_old = parse_config([old], environ={})
    assert getattr(by_class.collection, setting) == getattr(by_old.collection, setting)
    assert getattr(by_class.collection, setting) != getattr(
        parse_config([], environ={}).collection, setting
    )
    assert by_class.notices == ()
    (notice,) = by_old.notices
    assert notice.startswith(f"{old.split('=')[0]} is deprecated") and new.split("=")[0] in notice
    # Both given: the class wins, and the old flag is still noticed.
    both = parse_config([old, "--collector.field-interval=" + new.replace("=", "=1")], environ={})
    assert getattr(both.collection, setting) != getattr(by_old.collection, setting)


def test_the_class_defaults_are_the_old_flags_defaults():
    collection = parse_config([], environ={}).collection
    assert (
        collection.slow_fields_interval_seconds,
        collection.energy_read_interval_seconds,
        collection.pcie_interval_seconds,
    ) == (10.0, 60.0, 15.0)
    assert dict(collection.field_intervals) == {}


def test_a_class_interval_has_its_own_bounds(cli):
    code, _, err = cli("--collector.field-interval=pcie-sampler=0s")
    assert code == 2 and "pcie-sampler: 0s is out of range (from 1s to 1h)" in err, err
    assert parse_config(["--collector.field-interval=slow-fields=0s"], environ={}).collection


@pytest.mark.parametrize(
    ("argv", "stale", "healthz"),
    [
        ([], 15.0, 60.0),
        (["--collector.interval=30s"], 90.0, 180.0),
        (["--snapshot.stale-after=45s"], 45.0, 90.0),
        (["--collector.interval=1s", "--snapshot.stale-after=2s"], 2.0, 60.0),
        (["--health.max-snapshot-age=5m"], 15.0, 300.0),
    ],
)
def test_one_bound_on_snapshot_age_drives_staleness_and_healthz(argv, stale, healthz):
    web = parse_config(argv, environ={}).web
    assert (web.stale_after_seconds, web.health_max_age_seconds) == (stale, healthz)


def test_a_dcgm_exporter_variable_that_needs_another_flag_names_itself(cli):
    code, _, err = cli(env={"DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true"})
    assert code == 2
    assert (
        "environment variable DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS needs --kubernetes" in err
    )
    config = parse_config(
        ["--kubernetes", "--node-name=n1"],
        environ={"DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true"},
    )
    assert config.labels.pod_labels_on_series
