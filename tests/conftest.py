"""Shared fixtures: a simulated NVML, and pollers/renderers handed it."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kube_gpu_exporter.exporter.attribution.context import NO_CONTEXT, AttributionContext
from kube_gpu_exporter.exporter.attribution.join import join
from kube_gpu_exporter.exporter.config import CollectionConfig, LabelConfig
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.store import (
    Attributed,
    ExpositionStore,
    build_exposition,
)
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec, default_fleet, parse_fleet
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot

if TYPE_CHECKING:
    from tests.support.fake_kube_api import FakeKubeApi

FAST = CollectionConfig(
    interval_seconds=0.2,
    # A real thread's deadline: a loaded 2-core VM once took over 1 s for a first sweep's reads
    # (tests/unit/test_web_config.py saw no GPU series). Tests of a hanging read set their own.
    device_timeout_seconds=5.0,
    pcie_enabled=False,
    xid_enabled=True,
    mig_refresh_seconds=60.0,
    # Every sweep: tests that inject an ECC error or step the energy counter read it back at once;
    # the cadence itself has its own tests (test_scrape_cadence.py).
    slow_fields_interval_seconds=0.0,
    energy_read_interval_seconds=0.0,
)
LABELS = LabelConfig(node_name="node-a")


def fleet_from_yaml(text: str) -> FleetSpec:
    return parse_fleet(textwrap.dedent(text), "test fleet")


def quiet(fleet: FleetSpec) -> FleetSpec:
    """The same fleet without simulated call latency, so tests run fast."""
    from dataclasses import replace

    return replace(fleet, call_costs="flat", call_latency_us=0.0, pcie_window_ms=0.0)


@pytest.fixture
def make_sim() -> Iterator[Callable[[FleetSpec | None], FakeNvml]]:
    sims: list[FakeNvml] = []

    def make(fleet: FleetSpec | None = None) -> FakeNvml:
        sim = FakeNvml(quiet(fleet or default_fleet()))
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        sim.close()


@pytest.fixture
def frozen_sim() -> Iterator[FakeNvml]:
    """The default simulated node with its clock stopped, initialised: the exporter's sweep and a
    test's own reads see the same instant, so any difference is a reading, not time passing."""
    sim = FakeNvml(quiet(default_fleet()), clock=lambda: 0.0)
    sim.api.nvmlInit()
    try:
        yield sim
    finally:
        sim.api.nvmlShutdown()
        sim.close()


@pytest.fixture
def sim(make_sim: Callable[[FleetSpec | None], FakeNvml]) -> FakeNvml:
    return make_sim(None)


@pytest.fixture
def make_poller() -> Iterator[Callable[..., Poller]]:
    pollers: list[Poller] = []

    def make(
        sim: FakeNvml,
        config: CollectionConfig = FAST,
        publish: Callable[[NodeSnapshot], None] | None = None,
    ) -> Poller:
        poller = Poller(config, publish or (lambda s: None), sim.source(), workers=8)
        pollers.append(poller)
        return poller

    yield make
    for poller in pollers:
        poller.stop(timeout=2.0)


def joined_with(
    context: AttributionContext = NO_CONTEXT, labels: LabelConfig = LABELS
) -> Attributed:
    """The join kube_gpu_exporter/exporter/app.py hands the store, over a context fixed by the test
    (without the store's energy ledger: tests/unit/test_pod_energy.py adds one where it is the
    subject)."""
    return lambda snapshot: join(snapshot, context, labels)


def render(
    snapshot: NodeSnapshot, labels: LabelConfig = LABELS, context: AttributionContext = NO_CONTEXT
) -> str:
    """The whole response for `snapshot` joined with `context`, as a scrape gets it."""
    exposition = build_exposition(snapshot, Renderer(labels), joined_with(context, labels))
    return exposition.plain(exposition.tail(15.0)).decode()


def render_body(
    snapshot: NodeSnapshot, labels: LabelConfig = LABELS, context: AttributionContext = NO_CONTEXT
) -> str:
    """The body alone: `snapshot` joined with `context`, then rendered."""
    return Renderer(labels).render_body(join(snapshot, context, labels))


def store_for(labels: LabelConfig = LABELS) -> ExpositionStore:
    return ExpositionStore(Renderer(labels), joined_with(labels=labels))


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: `make test` installs Debian's prometheus package"
    return path


def promtool_check_metrics(text: str) -> tuple[int, str]:
    proc = subprocess.run(
        [promtool(), "check", "metrics"], input=text.encode(), capture_output=True, timeout=60
    )
    return proc.returncode, (proc.stdout + proc.stderr).decode()


# The only promtool lint findings dcgm-exporter compatibility forces on the DCGM_* families.
_ALLOWED_LINT = re.compile(
    r"^DCGM_\S+ (label names should be written in 'snake_case' not 'camelCase'"
    r"|counter metrics should have \"_total\" suffix)$"
    # dcgm-exporter's own name contains its type; renaming it would break dashboards.
    r"|^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'$"
)


def unexpected_lint_findings(text: str) -> list[str]:
    """promtool's findings on an exposition, minus the ones compatibility forces."""
    _, output = promtool_check_metrics(text)
    return [line for line in output.splitlines() if line.strip() and not _ALLOWED_LINT.match(line)]


REPO = Path(__file__).resolve().parent.parent


def wait_for(predicate: Callable[[], object], timeout: float = 5.0, step: float = 0.02) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def open_fds(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int | str = "self") -> int:
    """Threads as the kernel counts them: gRPC's C-core threads are invisible to `threading`."""
    return len(os.listdir(f"/proc/{pid}/task"))


def start_xid_watch(sim: FakeNvml, poller: Poller) -> None:
    """Sweep once, at whose end the XID watcher registers for every GPU the sweep found."""
    poller.sweep()
    assert sim.registered_gpus() == set(range(len(sim.gpus)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.support.tiers import assign_tiers

    assign_tiers(items)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    from tests.support.tiers import refuse_processes_in_unit_tests

    yield from refuse_processes_in_unit_tests(request)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Iterator:
    """`main()` in this process with its own environment: (exit status, stdout, stderr)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    from kube_gpu_exporter.exporter.cli import main

    def call(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args), environ=dict(env or {}))
        out, err = capsys.readouterr()
        return code, out, err

    yield call
    # main() configures logging for the process it thinks it owns.
    root.handlers[:], root.level = handlers, level


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    """A clock the test moves by hand, for the threads it hands one to."""
    yield ManualClock()


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    """The HTTP fake of the Kubernetes API, serving node `NODE` (tests/support/kubernetes.py),
    started, with nothing in it."""
    from tests.support.fake_kube_api import FakeKubeApi
    from tests.support.kubernetes import NODE

    fake = FakeKubeApi(NODE).start()
    yield fake
    fake.stop()
