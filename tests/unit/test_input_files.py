"""Files named on the command line that are not regular files: one line and exit status 2, at
once. A size cap that trusts `st_size` lets /dev/zero (size 0, endless) be read until memory runs
out, and opening a FIFO waits for a writer forever, so both are refused by what the open file is,
and no more than the cap is ever read."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter import small_yaml
from tests.conftest import REPO
from tests.unit.test_cli import assert_one_error_line

FLAGS = {"--simulate": "fleet file", "--web.config.file": "web config"}
# Enough for the exporter to start and fail cleanly; an unbounded read of /dev/zero hits it
# within a second or two instead of taking the machine's memory.
MEMORY_LIMIT = 1 << 30
DEADLINE_S = 30


def special_files(tmp_path: Path) -> list[tuple[Path, str]]:
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "sock"))
    listening.close()
    # No FIFO here: were the check to regress, opening one would hang this process; the process
    # test below has it, under a deadline.
    return [
        (Path("/dev/null"), "a character device"),
        (tmp_path, "a directory"),
        (tmp_path / "sock", "a socket"),
    ]


@pytest.mark.parametrize("flag", FLAGS)
def test_special_files_are_refused_in_one_line(cli, tmp_path, flag):
    # A fleet file that always fails: were the check to regress, main() must still return at
    # once rather than run the exporter in this process.
    bad_fleet = tmp_path / "bad-fleet.yaml"
    bad_fleet.write_text("gpus: []\n")
    for path, kind in special_files(tmp_path):
        fleet = [] if flag == "--simulate" else ["--simulate", str(bad_fleet)]
        code, out, err = cli(flag, str(path), *fleet, "--web.listen-address=127.0.0.1:1")
        assert (code, out) == (2, ""), err
        assert_one_error_line(err, f"{FLAGS[flag]} {path}: not a regular file but {kind}")


def run_limited(*args: str) -> subprocess.CompletedProcess:
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run(
        [sys.executable, "-m", "kube_gpu_exporter", *args, "--web.listen-address=127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,  # a FIFO opened for reading would block here until killed
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
        preexec_fn=limit_memory,
    )


def test_the_cap_counts_bytes_read_not_the_size_the_file_claims():
    # Files in /proc say they are 0 bytes long whatever they hold.
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    with pytest.raises(small_yaml.YamlRefused, match="more than 64 bytes: over the 64-byte"):
        small_yaml.read_text(status, 64)
    assert "Name:" in small_yaml.read_text(status, 1 << 20)


def test_a_regular_file_behind_a_symlink_is_still_read(tmp_path):
    target = tmp_path / "fleet.yaml"
    target.write_text("gpus: [{model: T4}]\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)  # how Kubernetes mounts ConfigMaps
    assert small_yaml.read_text(link, 1 << 20) == "gpus: [{model: T4}]\n"
    # /dev/null rather than /dev/zero: a regression must fail this test, not fill the memory.
    (tmp_path / "to-null").symlink_to("/dev/null")
    with pytest.raises(small_yaml.YamlRefused, match="not a regular file but a character device"):
        small_yaml.read_text(tmp_path / "to-null", 1 << 20)


def test_duplicate_keys_are_refused_in_the_web_config_too(cli, tmp_path):
    # YAML keeps the last of two keys silently: a second, forgotten `basic_auth_users` would
    # replace the first list of users.
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  alice: $2y$04$x\nbasic_auth_users:\n  mallory: $2y$04$y\n")
    bad_fleet = tmp_path / "bad-fleet.yaml"
    bad_fleet.write_text("gpus: []\n")  # so that a regression cannot start the exporter here
    code, out, err = cli(
        "--web.config.file", str(web), "--simulate", str(bad_fleet), "--web.listen-address=:1"
    )
    assert (code, out) == (2, "")
    assert_one_error_line(
        err, f"web config {web}: duplicate key 'basic_auth_users' at line 3 (first at line 1)"
    )


def test_a_certificate_file_that_is_a_fifo_is_refused_in_one_line(cli, tmp_path):
    # The TLS files are read by the web config's own checks, bounded and regular files only; a
    # FIFO used to be reported as missing, and a huge file was read whole.
    fifo = tmp_path / "tls.crt"
    os.mkfifo(fifo)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {fifo}\n  key_file: {fifo}\n")
    bad_fleet = tmp_path / "bad-fleet.yaml"
    bad_fleet.write_text("gpus: []\n")
    code, out, err = cli(
        "--web.config.file", str(web), "--simulate", str(bad_fleet), "--web.listen-address=:1"
    )
    assert (code, out) == (2, "")
    assert_one_error_line(err, f"{fifo}: not a regular file but a FIFO")


# A file name may hold any byte but "/" and NUL; printed raw in an error, these would end the line
# (\n, \r), recolour or clear the terminal (\x1b) or hide where the name ends (").
HOSTILE_NAME = 'a\nb\rc\x1b[31md"e'
# The same name as every error must show it: in double quotes, each of them escaped.
ESCAPED_NAME = 'a\\nb\\rc\\x1b[31md\\"e'


def assert_escaped_one_line(err: str, mentions: str) -> None:
    assert_one_error_line(err, mentions)
    assert err.rstrip("\n").isprintable(), err


@pytest.mark.parametrize(
    ("flag", "content", "message"),
    [
        ("--collectors", "NOT_A_FIELD, gauge, x\n", "{}:1: NOT_A_FIELD is not a DCGM field"),
        ("--collectors", None, "{}: cannot read: No such file or directory"),
        ("--web.config.file", "nope: 1\n", "{}: nope: unknown key"),
        ("--web.config.file", None, "{}: cannot read: No such file or directory"),
        ("--simulate", "gpus: []\n", "{}: gpus: is empty"),
        ("--simulate", None, "{}: cannot read: No such file or directory"),
    ],
)
def test_a_hostile_file_name_is_escaped_on_one_line(cli, tmp_path, flag, content, message):
    kind = {"--collectors": "collectors file", "--web.config.file": "web config"}
    path = tmp_path / f"{HOSTILE_NAME}.yaml"
    if content is not None:
        path.write_text(content)
    bad_fleet = tmp_path / "bad-fleet.yaml"
    bad_fleet.write_text("gpus: []\n")  # so that a regression cannot start the exporter here
    fleet = [] if flag == "--simulate" else ["--simulate", str(bad_fleet)]
    code, out, err = cli(flag, str(path), *fleet, "--web.listen-address=127.0.0.1:1")
    assert (code, out) == (2, "")
    shown = f'"{tmp_path}/{ESCAPED_NAME}.yaml"'
    assert_escaped_one_line(err, f"{kind.get(flag, 'fleet file')} {message.format(shown)}")


def test_hostile_keys_and_file_names_inside_the_web_config_are_escaped(cli, tmp_path):
    bad_fleet = tmp_path / "bad-fleet.yaml"
    bad_fleet.write_text("gpus: []\n")
    web = tmp_path / "web.yml"
    for text, mentions in (
        ('tls_server_config:\n  "a\\nb": 1\n', 'tls_server_config."a\\nb": unknown key'),
        ('"x\\ry": 1\n', '"x\\ry": unknown key'),
        (
            'basic_auth_users:\n  "al\\nice": plain\n',
            'basic_auth_users."al\\nice": is not a bcrypt hash',
        ),
        (
            'tls_server_config:\n  cert_file: "c\\n.crt"\n  key_file: k.key\n',
            f'tls_server_config.cert_file: "{tmp_path}/c\\n.crt" does not exist',
        ),
    ):
        web.write_text(text)
        code, _, err = cli(
            "--web.config.file", str(web), "--simulate", str(bad_fleet), "--web.listen-address=:1"
        )
        assert code == 2
        assert_escaped_one_line(err, f"web config {web}: {mentions}")
