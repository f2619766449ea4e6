"""Each row of issue 23 under each `--compat.dcgm-exporter` profile, on hand-built snapshots:: the
cases that start a process or need a system package's binary; the others are in
tests/unit/test_dcgm_profiles.py."""

from __future__ import annotations

import pytest

from kube_gpu_exporter.exporter.dcgm_compat import DcgmVersion
from tests.conftest import promtool_check_metrics
from tests.unit import test_dcgm_profiles
from tests.unit.test_dcgm_profiles import (
    CAMEL,
    FORCED_LINTS,
    NO_TOTAL,
    TYPE_IN_NAME,
    V49,
    V482,
    headers,
)

# The unit half's fixture, which the tests below ask for by name.
scraped = test_dcgm_profiles.scraped


@pytest.mark.parametrize("version", list(DcgmVersion))
def test_promtool_finds_only_what_compatibility_forces(
    scraped: dict[DcgmVersion, str], version: DcgmVersion
) -> None:
    text = scraped[version]
    _, output = promtool_check_metrics(text)
    families_by_message: dict[str, set[str]] = {}
    for line in output.splitlines():
        name, message = line.split(" ", 1)
        families_by_message.setdefault(message, set()).add(name)
    assert set(families_by_message) == FORCED_LINTS[version]
    # modelName is on every DCGM series and on none of ours.
    dcgm = {name for name in headers(text, "TYPE") if name.startswith("DCGM_")}
    assert families_by_message[CAMEL] == dcgm
    # Every DCGM counter, and none of ours: upstream's names end in _TOTAL or nothing.
    counters = {name for name, kind in headers(text, "TYPE").items() if kind == "counter"}
    assert families_by_message[NO_TOTAL] == counters & dcgm
    assert ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" in counters) == (version is V482)
    if version is not V49:
        assert families_by_message[TYPE_IN_NAME] == {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER"}
