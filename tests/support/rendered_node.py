"""A simulated node polled and rendered in-process as the exporter's command line and app build
it, with a --collectors file where a test gives one, on a clock that moves 61 s a step: the
harness of the tests that read what /metrics would serve for a fleet or a CSV."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kube_gpu_exporter.exporter.app import renderer_for
from kube_gpu_exporter.exporter.attribution.context import NO_CONTEXT
from kube_gpu_exporter.exporter.attribution.join import join
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec, default_fleet
from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from tests.conftest import quiet

# Apart enough that every cadence group is due at each step (GPM and the NVLink rate need two
# reads; a listed family is judged unserved two minutes after the first render).
STEP_SECONDS = 61.0


class RenderedNode:
    def __init__(
        self, tmp_path: Path, csv: str | None = None, fleet: FleetSpec | None = None
    ) -> None:
        argv = ["--no-podresources", "--node-name", "node-a"]
        if csv is not None:
            (tmp_path / "fields.csv").write_text(csv)
            argv += ["--collectors", str(tmp_path / "fields.csv")]
        self.config = parse_config(argv, {})
        self.clock = [-STEP_SECONDS]
        self.sim = FakeNvml(quiet(fleet or default_fleet()), clock=lambda: self.clock[0])
        self.stepped = SteppedHelpers()
        # The slow fields every sweep: the poller's cadence runs on the real clock.
        collection = replace(
            self.config.collection, pcie_enabled=False, slow_fields_interval_seconds=0.0
        )
        self.poller = Poller(collection, lambda s: None, self.sim.source(), runner=self.stepped)
        self.renderer = renderer_for(self.config, clock=lambda: self.clock[0])

    def _render(self, snapshot: NodeSnapshot) -> str:
        return self.renderer.render_body(join(snapshot, NO_CONTEXT, self.config.labels))

    def step(self) -> str:
        """Time on by a step (the first step at 0), a sweep, a helper round; that sweep's body."""
        self.clock[0] += STEP_SECONDS
        snapshot = self.poller.sweep()
        self.stepped.run_once()
        return self._render(snapshot)

    def body(self) -> str:
        """As step, then a second sweep that carries the helper round's work, and its body."""
        self.step()
        return self._render(self.poller.sweep())

    def close(self) -> None:
        self.poller.stop(timeout=2.0)
        self.sim.close()
