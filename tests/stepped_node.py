"""The default simulated node wired as `kube-gpu-exporter --simulate` wires it (the store of
exporter/app.py, its join and its ledger), on a clock the test steps: each step moves simulated
time, runs one helper round and one sweep, and renders the exposition, so a simulated minute
takes a second or two and every sample lands at an instant the test chose."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from exporter.app import attribution_sources, exposition_store, with_node_name
from exporter.cli import parse_config
from exporter.exposition.store import ExpositionStore
from exporter.poller import Poller
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.fleet import default_fleet
from exporter.simulator.node import simulated_node
from exporter.simulator.stepped_time import SteppedHelpers
from tests.conftest import quiet, wait_for

# name{labels} value; a full parser costs seconds a simulated minute.
_LINE = re.compile(r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')

Labels = dict[str, str]


def samples(body: str, families: tuple[str, ...]) -> dict[str, list[tuple[Labels, float]]]:
    """The samples of `families` in an exposition, by family name."""
    found: dict[str, list[tuple[Labels, float]]] = {name: [] for name in families}
    for line in body.splitlines():
        if not line.startswith(families):
            continue
        match = _LINE.fullmatch(line)
        assert match is not None, line
        if match["name"] in found:
            found[match["name"]].append(
                (dict(_LABEL.findall(match["labels"])), float(match["value"]))
            )
    return found


@dataclass
class SteppedNode:
    nvml: FakeNvml
    clock: list[float]
    poller: Poller
    helpers: SteppedHelpers
    store: ExpositionStore

    def step(self, seconds: float = 1.0) -> str:
        """Move simulated time on, run a helper round and a sweep; the exposition after it."""
        self.clock[0] += seconds
        self.helpers.run_once()
        self.store.publish(self.poller.sweep())
        exposition = self.store.render_latest()
        assert exposition is not None
        return exposition.body.decode()


@contextlib.contextmanager
def stepped_default_node(*flags: str) -> Iterator[SteppedNode]:
    """The default 8-GPU node with pods, on a stepped clock; `flags` are the exporter's."""
    clock = [5000.0]
    config = parse_config(["--simulate", *flags], environ={})
    with contextlib.ExitStack() as stack:
        fleet = quiet(default_fleet())  # no simulated call costs: a minute in a few seconds
        node = stack.enter_context(simulated_node(config, fleet, clock=lambda: clock[0]))
        config = with_node_name(node.config, node.nvml.fleet.node_name)
        pods, kube = attribution_sources(config)
        assert pods is not None and kube is None
        store = exposition_store(config, pods, kube)
        helpers = SteppedHelpers()
        poller = Poller(
            config.collection,
            store.publish,
            node.backend.nvml,
            runner=helpers,
            clock=lambda: clock[0],
        )
        stack.callback(poller.stop)
        pods.start()
        stack.callback(pods.stop, 3.0)
        assert wait_for(lambda: pods.latest is not None, timeout=10.0), "the kubelet answered"
        # GPM needs two rounds and the process windows one before the first scrape has them.
        poller.sweep()
        helpers.run_once()
        yield SteppedNode(node.nvml, clock, poller, helpers, store)
