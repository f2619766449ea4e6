"""Flags, environment variables and bad input: one clear line and exit status 2.

The bad-input cases run in-process through `main()`; a few run the real process to prove the
contract holds there too: the status reaches the shell and nothing else reaches stderr.
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from collections.abc import Iterator

import bcrypt
import pytest

from kube_gpu_exporter.exporter.config import HostLabel
from kube_gpu_exporter.exporter.dcgm_compat import PROFILES, DcgmVersion
from kube_gpu_exporter.exporter.durations import parse_duration
from kube_gpu_exporter.exporter.flags.model import env_name
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.password_hash import PasswordError, read_password
from kube_gpu_exporter.exporter.webconfig.parse import load_web_config
from tests.conftest import REPO


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kube_gpu_exporter", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


def assert_one_error_line(stderr: str, mentions: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kube-gpu-exporter: error: ")
    assert mentions in lines[0]


BAD_INPUT = [
    (["--collectors=/nonexistent/fields.csv"], {}, "collectors file /nonexistent/fields.csv"),
    (["--config.file=/nonexistent/flags.yaml"], {}, "--config.file"),
    (["--xid-count-window-size=0"], {}, "--xid-count-window-size"),
    (["--clock-events-count-window-size=soon"], {}, "--clock-events-count-window-size"),
    (["--collector.field-interval=DCGM_FI_NOPE=1s"], {}, "--collector.field-interval"),
    (["--collector.interval=5x"], {}, "--collector.interval"),
    (["--collector.interval=0"], {}, "--collector.interval"),
    (["--collector.interval=-1s"], {}, "--collector.interval"),
    (["--web.listen-address=nope"], {}, "--web.listen-address"),
    (["--web.listen-address=:99999"], {}, "--web.listen-address"),
    (["--web.telemetry-path=metrics"], {}, "--web.telemetry-path"),
    (["--web.telemetry-path=/healthz"], {}, "--web.telemetry-path"),
    (["--host-label=HOSTNAME"], {}, "--host-label"),
    (["--compat.dcgm-exporter=4.7"], {}, "--compat.dcgm-exporter"),
    (["--kubernetes.enable-pod-uid"], {}, "--kubernetes.enable-pod-uid needs --kubernetes"),
    (["--kubernetes.enable-pod-labels"], {}, "--kubernetes.enable-pod-labels needs --kubernetes"),
    (["--log.level=verbose"], {}, "--log.level"),
    (["--log.format=xml"], {}, "--log.format"),
    (["--driver-version-label=yes"], {}, "--driver-version-label"),
    (["--health.max-snapshot-age=0"], {}, "--health.max-snapshot-age"),
    (["--no-such-flag"], {}, "--no-such-flag"),
    (["--kubernetes"], {}, "NODE_NAME"),
    (["--kubernetes.pod-label-allowlist=("], {}, "--kubernetes.pod-label-allowlist"),
    (["--kubernetes.max-pod-labels=1000"], {}, "--kubernetes.max-pod-labels"),
    (["--attribution.shared-devices=all"], {}, "--attribution.shared-devices"),
    (["--web.config.file=/nonexistent/web.yml"], {}, "web config /nonexistent/web.yml"),
    (["--web.max-connections=0"], {}, "--web.max-connections"),
    (["--web.max-connections=many"], {}, "--web.max-connections"),
    (["--web.max-connections-per-address=0"], {}, "--web.max-connections-per-address"),
    (["--web.max-connections-per-address=many"], {}, "--web.max-connections-per-address"),
    (["--collector.interval=nan"], {}, "--collector.interval"),
    (["--collector.interval=1e400s"], {}, "--collector.interval"),
    (["--collector.device-timeout=0"], {}, "--collector.device-timeout"),
    (["--collector.pcie-interval=1d"], {}, "--collector.pcie-interval"),
    (["--collector.slow-fields-interval=-1s"], {}, "--collector.slow-fields-interval"),
    (["--collector.slow-fields-interval=2h"], {}, "--collector.slow-fields-interval"),
    (["--collector.energy-read-interval=-5s"], {}, "--collector.energy-read-interval"),
    (["--collector.energy-read-interval=soon"], {}, "--collector.energy-read-interval"),
    (["--collector.mig-refresh-interval=-5s"], {}, "--collector.mig-refresh-interval"),
    (["--collector.pcie=maybe"], {}, "--collector.pcie"),
    (["--snapshot.stale-after=x"], {}, "--snapshot.stale-after"),
    (["--node-name=Bad_Node!"], {}, "--node-name"),
    ([], {"NODE_NAME": "UPPER_case"}, "environment variable NODE_NAME"),
    (["--podresources.socket="], {}, "--podresources.socket"),
    (["--podresources.socket=kubelet.sock"], {}, "--podresources.socket"),
    (["--processes.proc-root=proc"], {}, "--processes.proc-root"),
    (["--processes.log-root="], {}, "--processes.log-root"),
    (["--podresources.extra-resources=gpu mem"], {}, "--podresources.extra-resources"),
    (["--kubernetes.kubeconfig=/nonexistent"], {}, "--kubernetes.kubeconfig"),
    (["--kubernetes.max-pod-labels=-1"], {}, "--kubernetes.max-pod-labels"),
    (["--simulate=/nonexistent/fleet.yaml"], {}, "fleet file /nonexistent/fleet.yaml"),
    (
        [],
        {"KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL": "soon"},
        "KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL",
    ),
    ([], {"KUBE_GPU_EXPORTER_COLLECTOR_PCIE": "maybe"}, "KUBE_GPU_EXPORTER_COLLECTOR_PCIE"),
    ([], {"KUBE_GPU_EXPORTER_HOST_LABEL": "x"}, "KUBE_GPU_EXPORTER_HOST_LABEL"),
    (
        [],
        {"KUBE_GPU_EXPORTER_COMPAT_DCGM_EXPORTER": "5.0"},
        "KUBE_GPU_EXPORTER_COMPAT_DCGM_EXPORTER",
    ),
]


@pytest.mark.parametrize(("args", "env", "mentions"), BAD_INPUT)
def test_bad_flags_exit_2_with_one_line(cli, args, env, mentions):
    code, out, err = cli(*args, env=env)
    assert (code, out) == (2, "")
    assert_one_error_line(err, mentions)


# One flag, one environment variable, one failure past parsing (the fleet file is read at start).
PROCESS_CASES = [
    (["--collector.interval=5x"], {}, "--collector.interval"),
    ([], {"KUBE_GPU_EXPORTER_COLLECTOR_PCIE": "maybe"}, "KUBE_GPU_EXPORTER_COLLECTOR_PCIE"),
    (["--simulate=/nonexistent/fleet.yaml"], {}, "fleet file /nonexistent/fleet.yaml"),
]


def test_process_cases_are_bad_input_cases():
    assert all(case in BAD_INPUT for case in PROCESS_CASES)


def test_every_flag_that_takes_a_value_has_a_bad_value_case():
    """Adding a flag without a bad-value case above fails here."""
    from kube_gpu_exporter.exporter.flags.parser import build_parser

    tested = {word.split("=")[0] for args, _, _ in BAD_INPUT for word in args}
    takes_value = {
        action.option_strings[0]
        for action in build_parser()._actions
        if action.option_strings and action.nargs != 0 and action.dest not in ("help", "version")
    }
    assert takes_value - tested == set()


def test_malformed_fleet_file_exits_2_naming_the_field(cli, tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("gpus:\n  - model: H100-80GB-HBM3\n    mig: [1g.10gb, 9g.99gb]\n")
    code, _, err = cli("--simulate", str(fleet), "--web.listen-address=127.0.0.1:1")
    assert code == 2
    assert_one_error_line(err, "gpus[0].mig[1]")
    assert "9g.99gb" in err


def test_version_and_help(cli):
    assert cli("--version") == (0, "kube-gpu-exporter 0.1.0\n", "")
    code, help_text, _ = cli("--help")
    assert code == 0
    for flag in (
        "--web.listen-address",
        "--web.telemetry-path",
        "--collector.interval",
        "--host-label",
        "--compat.dcgm-exporter",
        "--log.level",
        "--log.format",
        "--simulate",
    ):
        assert flag in help_text


def test_defaults():
    config = parse_config([], environ={})
    assert config.web.listen_address == ":9455"
    assert config.web.telemetry_path == "/metrics"
    assert config.collection.interval_seconds == 5.0
    assert config.web.stale_after_seconds == 15.0
    # dcgm-exporter 4.8.3, what the current GPU Operator ships.
    assert config.labels.dcgm == PROFILES[DcgmVersion.V4_8_3]
    assert config.labels.host_label is HostLabel.LOWER
    assert config.labels.driver_version_label == "DCGM_FI_DRIVER_VERSION"
    assert not config.simulate


@pytest.mark.parametrize(
    ("version", "host", "driver"),
    [
        ("4.8.2", HostLabel.CLASSIC, "DCGM_FI_DRIVER_VERSION"),
        ("4.8.3", HostLabel.LOWER, "DCGM_FI_DRIVER_VERSION"),
        ("4.9", HostLabel.LOWER, "DCGM_FI_SYSTEM_DRIVER_VERSION"),
    ],
)
def test_the_profile_sets_host_and_driver_labels(version, host, driver):
    labels = parse_config([f"--compat.dcgm-exporter={version}"], environ={}).labels
    assert labels.dcgm == PROFILES[DcgmVersion(version)]
    assert (labels.host_label, labels.driver_version_label) == (host, driver)


def test_host_and_driver_label_flags_override_the_profile():
    labels = parse_config(
        ["--compat.dcgm-exporter=4.9", "--host-label=Hostname", "--driver-version-label=none"],
        environ={},
    ).labels
    assert labels.dcgm.base_units
    assert (labels.host_label, labels.driver_version_label) == (HostLabel.CLASSIC, "")
    labels = parse_config(
        ["--compat.dcgm-exporter=4.8.2", "--driver-version-label=DCGM_FI_SYSTEM_DRIVER_VERSION"],
        environ={"KUBE_GPU_EXPORTER_HOST_LABEL": "none"},
    ).labels
    assert (labels.host_label, labels.driver_version_label) == (
        HostLabel.NONE,
        "DCGM_FI_SYSTEM_DRIVER_VERSION",
    )
    assert not labels.dcgm.base_units
    env = {"KUBE_GPU_EXPORTER_COMPAT_DCGM_EXPORTER": "4.8.2"}
    assert parse_config([], environ=env).labels.host_label is HostLabel.CLASSIC


def test_environment_variables_and_flag_precedence():
    env = {
        "KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL": "2s",
        "KUBE_GPU_EXPORTER_HOST_LABEL": "hostname",
        "KUBE_GPU_EXPORTER_COLLECTOR_PCIE": "false",
        "KUBE_GPU_EXPORTER_WEB_LISTEN_ADDRESS": "127.0.0.1:9999",
        "NODE_NAME": "gpu-node-7",
    }
    config = parse_config([], environ=env)
    assert config.collection.interval_seconds == 2.0
    assert config.labels.host_label is HostLabel.LOWER
    assert config.collection.pcie_enabled is False
    assert config.web.listen_address == "127.0.0.1:9999"
    assert config.labels.node_name == "gpu-node-7"
    # The command line wins over the environment.
    config = parse_config(["--collector.interval=750ms", "--collector.pcie"], environ=env)
    assert config.collection.interval_seconds == 0.75
    assert config.collection.pcie_enabled is True


def test_simulate_flag_forms(tmp_path):
    assert parse_config(["--simulate"], environ={}).simulate
    assert parse_config(["--simulate"], environ={}).fleet_file is None
    config = parse_config(["--simulate", "node.yaml"], environ={})
    assert config.fleet_file == "node.yaml"
    assert parse_config([], environ={"KUBE_GPU_EXPORTER_SIMULATE": "true"}).simulate
    assert parse_config([], environ={"KUBE_GPU_EXPORTER_SIMULATE": "x.yaml"}).fleet_file == "x.yaml"
    assert not parse_config([], environ={"KUBE_GPU_EXPORTER_SIMULATE": "false"}).simulate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5), ("250ms", 0.25), ("1m30s", 90), ("2", 2), ("1.5", 1.5), ("1h", 3600)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_env_names():
    assert env_name("--web.listen-address") == "KUBE_GPU_EXPORTER_WEB_LISTEN_ADDRESS"
    assert env_name("--collector.mig-refresh-interval") == (
        "KUBE_GPU_EXPORTER_COLLECTOR_MIG_REFRESH_INTERVAL"
    )


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another socket is listening on."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        yield taken.getsockname()[1]


def test_a_port_in_use_is_one_line_before_anything_starts(cli, busy_port):
    address = f"127.0.0.1:{busy_port}"
    code, out, err = cli("--simulate", f"--web.listen-address={address}")
    assert (code, out) == (2, "")
    assert_one_error_line(err, f"--web.listen-address {address}: address already in use")


@pytest.fixture
def stdin(monkeypatch: pytest.MonkeyPatch):
    """Replaces standard input with text that is not a terminal."""

    def feed(text: str) -> None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))

    return feed


def test_hash_password_prints_a_hash_the_web_config_accepts(cli, stdin, tmp_path):
    stdin("s3cret pass\nignored second line\n")
    code, out, err = cli("hash-password", "--cost=4")
    assert (code, err) == (0, "")
    hashed = out.strip()
    assert out == hashed + "\n" and hashed.startswith("$2b$04$")
    assert bcrypt.checkpw(b"s3cret pass", hashed.encode())
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    assert load_web_config(web).basic_auth_users == {"prometheus": hashed.encode()}


def test_hash_password_uses_cost_10_by_default(cli, stdin):
    stdin("pw")  # no newline, as printf %s sends it
    code, out, _ = cli("hash-password")
    assert code == 0 and out.startswith("$2b$10$")
    assert bcrypt.checkpw(b"pw", out.strip().encode())


@pytest.mark.parametrize(
    ("args", "text", "mentions"),
    [
        ([], "\n", "hash-password: the password is empty"),
        ([], "", "hash-password: the password is empty"),
        ([], "x" * 73 + "\n", "the password is 73 bytes; bcrypt uses at most 72"),
        ([], "x" * 100_000, "bcrypt uses at most 72"),
        (["--cost=3"], "pw\n", "hash-password: argument --cost: 3 is out of range (4 to 16)"),
        (["--cost=ten"], "pw\n", "argument --cost: ten is not a whole number from 4 to 16"),
        (["--salt=x"], "pw\n", "hash-password: unrecognized arguments: --salt=x"),
    ],
)
def test_hash_password_bad_input_is_one_line(cli, stdin, args, text, mentions):
    stdin(text)
    code, out, err = cli("hash-password", *args)
    assert (code, out) == (2, "")
    assert_one_error_line(err, mentions)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_password_is_asked_twice():
    answers = iter(["twice", "twice"])
    prompts: list[str] = []

    def prompt(text: str) -> str:
        prompts.append(text)
        return next(answers)

    assert read_password(_Terminal(), prompt) == "twice"
    assert len(prompts) == 2
    answers = iter(["one", "other"])
    with pytest.raises(PasswordError, match="the two passwords differ"):
        read_password(_Terminal(), prompt)


def test_hash_password_help_names_the_cost(cli):
    code, out, _ = cli("hash-password", "--help")
    assert code == 0 and "--cost" in out and "basic_auth_users" in out
    assert "hash-password" in cli("--help")[1]


def test_kubernetes_without_its_client_is_one_clear_error(cli, monkeypatch):
    """An image built with WITH_KUBERNETES=false has no kubernetes package."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "kubernetes" else real(name, *a),
    )
    code, _, err = cli("--kubernetes", "--node-name=node-a")
    assert code == 2
    assert_one_error_line(err, "--kubernetes needs the kubernetes client")
