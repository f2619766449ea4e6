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
