"""pyproject.toml's metadata: the forms the build backend accepts without a deprecation warning."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_license_is_an_spdx_expression_not_the_deprecated_table():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_the_build_requires_a_setuptools_that_reads_spdx_licenses():
    (setuptools,) = [
        Requirement(r)
        for r in PYPROJECT["build-system"]["requires"]
        if Requirement(r).name == "setuptools"
    ]
    # PEP 639's string form arrived in setuptools 77; an older one must not be allowed to build.
    assert not setuptools.specifier.contains(Version("76.1"))
    assert setuptools.specifier.contains(Version("77.0.3"))


SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def test_every_code_folder_of_the_one_top_level_package_is_listed():
    # The list is by hand (two of its packages are mapped folders), so a new subpackage that is
    # not added would be missing from the wheel while the checkout still imports it.
    code = {
        ".".join(folder.relative_to(REPO).parts)
        for folder in [REPO / "kube_gpu_exporter", *(REPO / "kube_gpu_exporter").rglob("*")]
        if folder.is_dir() and any(folder.glob("*.py"))
    }
    listed = set(SETUPTOOLS["packages"])
    assert code <= listed, sorted(code - listed)
    assert {p.split(".")[0] for p in listed} == {"kube_gpu_exporter"}
    mapped = set(SETUPTOOLS["package-dir"])
    assert listed - code == mapped


def test_the_mapped_sources_are_the_folders_the_bundle_reads():
    for package, folder in SETUPTOOLS["package-dir"].items():
        assert package.startswith("kube_gpu_exporter.bundle.sources.")
        # Shipped at the relative path a checkout has them (bundle/source_root.py).
        assert package.removeprefix("kube_gpu_exporter.bundle.sources.").replace(".", "/") == folder
        assert (REPO / folder).is_dir()
        assert SETUPTOOLS["package-data"][package]
