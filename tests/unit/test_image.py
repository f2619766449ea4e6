"""The container image, built by podman and run as users run it: the cases that run inside this
process; the others are in tests/process/test_image.py."""

from __future__ import annotations

import io
import json
import logging
import tarfile
from pathlib import Path

import pytest

from deploy.image import debian_base, emulation, engines, manifest, measure, platforms
from deploy.image.__main__ import default_tags
from deploy.image.__main__ import main as image_main
from kube_gpu_exporter.bundle.localstack.processes import free_port
from kube_gpu_exporter.exporter.cli import main
from kube_gpu_exporter.exporter.errors import ConfigurationError
from kube_gpu_exporter.exporter.simulator import node as simulated
from tests.process.test_image import DEB822, _layer


def test_scratch_directory_falls_back_to_dev_shm(monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "no-tmp"))
    (tmp_path / "shm").mkdir()
    monkeypatch.setattr(
        simulated, "SCRATCH_FALLBACKS", (str(tmp_path / "missing"), str(tmp_path / "shm"))
    )
    with simulated.scratch_directory() as scratch:
        assert Path(scratch).parent == tmp_path / "shm"
    assert not Path(scratch).exists()


def test_no_scratch_directory_is_one_line_and_status_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "no-tmp"))
    monkeypatch.setattr(simulated, "SCRATCH_FALLBACKS", (str(tmp_path / "no-shm"),))
    with pytest.raises(ConfigurationError, match="mount an emptyDir or a tmpfs at /tmp"):
        simulated.scratch_directory()
    capsys.readouterr()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        address = f"127.0.0.1:{free_port('127.0.0.1')}"
        code = main(["--simulate", f"--web.listen-address={address}"], environ={})
    finally:
        # main() configures logging for the process it thinks it owns.
        root.handlers[:], root.level = handlers, level
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kube-gpu-exporter: error: --simulate needs")


def test_mirror_comes_from_apts_sources(tmp_path):
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "debian.sources").write_text(DEB822)
    assert debian_base.mirror([tmp_path / "sources.list", sources]) == (
        "http://mirror.example/debian"
    )
    one_line = tmp_path / "sources.list"
    one_line.write_text(
        "deb http://mirror.example/security bookworm-security main\n"
        "deb [signed-by=/k.gpg] http://mirror.example/one bookworm main contrib\n"
    )
    assert debian_base.mirror([one_line, sources]) == "http://mirror.example/one"
    (sources / "disabled.sources").write_text(DEB822.replace("Types: deb", "Types: deb-src"))
    with pytest.raises(debian_base.ImageError, match="--mirror"):
        debian_base.mirror([sources / "disabled.sources"])


def test_base_tag_follows_the_recipe(monkeypatch):
    first = debian_base.tag()
    assert first == debian_base.tag() and first.startswith(f"{debian_base.NAME}:bookworm-")
    monkeypatch.setattr(debian_base, "PACKAGES", (*debian_base.PACKAGES, "curl"))
    assert debian_base.tag() != first
    assert debian_base.tag("arm64").startswith(f"{debian_base.NAME}:bookworm-arm64-")
    assert debian_base.tag("arm64") != debian_base.tag("amd64")


def test_engine_is_the_first_that_works(monkeypatch):
    installed = {"docker", "podman", "buildah"}
    monkeypatch.setattr(engines.shutil, "which", lambda name: name if name in installed else None)
    # A Docker client whose daemon does not answer is skipped, as on machines with only the CLI.
    monkeypatch.setattr(engines, "succeeds", lambda command, timeout=0: False)
    assert engines.find_engine() == engines.Engine("podman")
    monkeypatch.setattr(engines, "succeeds", lambda command, timeout=0: True)
    assert engines.find_engine() == engines.Engine("docker")
    assert engines.find_engine("buildah") == engines.Engine("buildah")
    installed.clear()
    with pytest.raises(engines.ImageError, match=r"no container engine.*make system-deps"):
        engines.find_engine()


def test_measure_reads_a_docker_archive(tmp_path):
    site = "opt/kube-gpu-exporter/lib/python3.11/site-packages"
    layers = {
        "base.tar": _layer({"usr/bin/python3": b"\0" * 1000}),
        "venv.tar": _layer(
            {
                f"{site}/grpc/__init__.py": b"x" * 300,
                f"{site}/grpc/_cython/cygrpc.so": b"y" * 700,
                f"{site}/grpc-1.0.dist-info/METADATA": b"z" * 50,
                f"{site}/pynvml.py": b"n" * 20,
            }
        ),
    }
    config = {
        "history": [
            {"created_by": "ADD rootfs.tar /"},
            {"created_by": "LABEL a=b", "empty_layer": True},
            {"created_by": "COPY /opt/kube-gpu-exporter"},
        ]
    }
    files = {
        "manifest.json": json.dumps([{"Config": "c.json", "Layers": list(layers)}]).encode(),
        "c.json": json.dumps(config).encode(),
        **layers,
    }
    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as out:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            out.addfile(info, io.BytesIO(content))

    measured = measure.read_archive(archive)
    assert [(layer.created_by, layer.size) for layer in measured.layers] == [
        ("ADD rootfs.tar /", 1000),
        ("COPY /opt/kube-gpu-exporter", 1070),
    ]
    assert measured.on_disk == 2070
    assert measured.packages == {"grpc": 1000, "*.dist-info": 50, "pynvml.py": 20}
    # A run of one byte compresses to almost nothing; what a registry stores is far smaller.
    assert 0 < measured.compressed < 600
    assert measure.read_archive(archive, on_disk=4096).on_disk == 4096
    assert "grpc" in measure.report("x:1", measured)


def test_platforms_are_amd64_and_arm64_and_tags_name_the_one_asked_for():
    assert platforms.arch_of("linux/arm64") == "arm64"
    for wrong in ("linux/riscv64", "windows/amd64", "arm64"):
        with pytest.raises(engines.ImageError, match=r"linux/amd64 or linux/arm64"):
            platforms.arch_of(wrong)
    version = default_tags(False, None)[0].split(":")[1]
    assert default_tags(False, None) == [f"kube-gpu-exporter:{version}", "kube-gpu-exporter:latest"]
    assert default_tags(True, "linux/arm64") == [
        f"kube-gpu-exporter:{version}-no-kubernetes-arm64",
        "kube-gpu-exporter:latest-no-kubernetes-arm64",
    ]
    command = engines.Engine("podman").build(Path("."), ["t"], {}, {}, "linux/arm64")
    assert command[:4] == ["podman", "build", "--platform", "linux/arm64"]
    assert "--platform" not in engines.Engine("buildah").build(Path("."), ["t"], {}, {})


def test_bad_platform_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exited:
        image_main(["--platform", "linux/s390x"])
    assert exited.value.code == 2
    assert "invalid choice: 'linux/s390x'" in capsys.readouterr().err.splitlines()[-1]


REGISTRATION = (
    ":qemu-aarch64:M::\\x7f\\x45:\\xff\\xff:/usr/libexec/qemu-binfmt/aarch64-binfmt-P:OPF"
)


def _binfmt(tmp_path: Path, entry: str | None) -> tuple[Path, Path]:
    binfmt, configs = tmp_path / "binfmt_misc", tmp_path / "binfmt.d"
    binfmt.mkdir()
    configs.mkdir()
    (configs / "qemu-aarch64.conf").write_text(f"# qemu-user-static\n{REGISTRATION}\n")
    if entry is not None:
        (binfmt / "qemu-aarch64").write_text(entry)
    return binfmt, configs


def test_emulation_keeps_a_registered_interpreter_and_refuses_a_broken_one(monkeypatch, tmp_path):
    monkeypatch.setattr(emulation, "host_arch", lambda: "amd64")
    ok = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\n"
    binfmt, configs = _binfmt(tmp_path, ok)
    emulation.ensure("arm64", binfmt, configs)
    assert not (binfmt / "register").exists()
    # This machine's own architecture needs nothing, even where nothing is registered.
    emulation.ensure("amd64", tmp_path / "nowhere", tmp_path / "nowhere")
    (binfmt / "qemu-aarch64").write_text(ok.replace("POF", "PO"))
    with pytest.raises(engines.ImageError, match=r"without the F flag.*echo -1 >"):
        emulation.ensure("arm64", binfmt, configs)
    (binfmt / "qemu-aarch64").write_text(ok.replace("enabled", "disabled"))
    with pytest.raises(engines.ImageError, match=r"is disabled: `echo 1 >"):
        emulation.ensure("arm64", binfmt, configs)


def test_emulation_registers_qemus_line_or_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(emulation, "host_arch", lambda: "amd64")
    monkeypatch.setattr(emulation.os, "geteuid", lambda: 0)
    binfmt, configs = _binfmt(tmp_path, None)
    # binfmt_misc is mounted (its register file is there), but the kernel is a plain folder.
    (binfmt / "register").write_text("")
    with pytest.raises(engines.ImageError, match="yet the kernel lists no"):
        emulation.ensure("arm64", binfmt, configs)
    assert (binfmt / "register").read_text() == REGISTRATION + "\n"
    monkeypatch.setattr(emulation.os, "geteuid", lambda: 1000)
    with pytest.raises(engines.ImageError, match=r"needs root once.*register yourself"):
        emulation.ensure("arm64", binfmt, configs)
    (configs / "qemu-aarch64.conf").unlink()
    with pytest.raises(engines.ImageError, match=r"install qemu-user-static.*make system-deps"):
        emulation.ensure("arm64", binfmt, configs)


def test_manifest_list_is_made_from_local_images_by_podman_or_buildah():
    images = ["a:1-amd64", "registry.example/a:1-arm64", "localhost:5000/a:1"]
    assert manifest.commands(engines.Engine("buildah"), "list:1", images) == [
        ["buildah", "manifest", "create", "list:1"],
        ["buildah", "manifest", "add", "list:1", "containers-storage:localhost/a:1-amd64"],
        ["buildah", "manifest", "add", "list:1", "containers-storage:registry.example/a:1-arm64"],
        ["buildah", "manifest", "add", "list:1", "containers-storage:localhost:5000/a:1"],
    ]
    with pytest.raises(engines.ImageError, match=r"podman or buildah.*buildx"):
        manifest.commands(engines.Engine("docker"), "list:1", [])
