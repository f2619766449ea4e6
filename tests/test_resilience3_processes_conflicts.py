"""The count of conflicting kubelet log names is exported (resilience round 3, follow-up to item C).

A second /var/log/containers name for one container ID is a leftover or a forgery; the index
counted such conflicts but nothing exported the count, so an operator could not see that a pod
had planted names. The files here are real: the simulated node's host tree (proc root and log
root) with one extra symlink, read by the exporter's own resolver through a real Poller, and the
snapshot rendered as a scrape renders it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.config import CollectionConfig
from exporter.poller import Poller
from exporter.simulator.fake_kubelet import FakeKubelet
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.host_tree import HostTree
from exporter.simulator.processes import ProcessTable
from exporter.simulator.sim_process import SimContainer
from exporter.simulator.stepped_time import SteppedHelpers
from exporter.snapshot import NodeSnapshot
from tests import test_pid_owners as owners_tests
from tests import test_resilience3_processes_log_names as log_names
from tests.conftest import FAST, fast_source, render

FAMILY = "kube_gpu_exporter_process_log_name_conflicts"


@pytest.fixture
def tree(sim: FakeNvml, tmp_path: Path) -> Iterator[HostTree]:
    table = ProcessTable(sim, FakeKubelet(sim, tmp_path / "kubelet.sock"))
    sim.processes = table
    yield HostTree(table, tmp_path / "host").refresh()


def _config(tree: HostTree, processes: bool = True) -> CollectionConfig:
    return replace(
        FAST,
        xid_enabled=False,
        gpm_enabled=False,
        processes_enabled=processes,
        proc_root=str(tree.proc_root),
        log_root=str(tree.log_root),
    )


def _scraped(sim: FakeNvml, config: CollectionConfig) -> NodeSnapshot:
    """A snapshot after one process-accounting round, as the exporter wires it (its own
    HostPidOwners over the configured roots); the round runs on this thread, so that the sweep
    after it reports it."""
    stepped = SteppedHelpers()
    poller = Poller(config, lambda s: None, fast_source(sim), workers=8, runner=stepped)
    try:
        poller.sweep()
        stepped.run_once()
        return poller.sweep()
    finally:
        poller.stop(timeout=2.0)


def _busy_container(tree: HostTree) -> SimContainer:
    return next(p.container for p in tree.table.processes() if p.container is not None)


def test_two_log_names_for_one_container_id_are_counted_and_exported(
    sim: FakeNvml, tree: HostTree
) -> None:
    real = _busy_container(tree)
    # A pod that mounts the host's /var/log writable plants a second name for the same ID.
    owners_tests.add_container_log(tree.log_root, "billing-0", "prod", real.name, real.container_id)
    assert len(list((tree.log_root / "containers").glob(f"*-{real.container_id}.log"))) == 2

    snapshot = _scraped(sim, _config(tree))
    assert snapshot.process_log_name_conflicts == 1
    text = render(snapshot)
    assert f"# HELP {FAMILY} Container IDs or pod UIDs" in text
    assert f"# TYPE {FAMILY} gauge\n{FAMILY} 1\n" in text
    # The reason such a conflict may leave on a device's unattributed row is documented with
    # the others.
    [unattributed_help] = [
        line
        for line in text.splitlines()
        if line.startswith("# HELP kube_gpu_exporter_gpu_processes_unattributed ")
    ]
    assert "exited, unknown_container, ambiguous_container (the kubelet's log names" in (
        unattributed_help
    )
    # The conflict is settled by the pod UID's single /var/log/pods directory, so the process is
    # still its real pod's: counted, not misnamed.
    named = {
        (p.owner.namespace, p.owner.pod)
        for g in snapshot.gpus
        for p in g.processes or ()
        if p.owner is not None and p.owner.container_id == real.container_id
    }
    assert named == {(real.namespace, real.pod)}


def test_no_conflict_reads_zero_and_no_process_accounting_no_family(
    sim: FakeNvml, tree: HostTree
) -> None:
    snapshot = _scraped(sim, _config(tree))
    assert snapshot.process_log_name_conflicts == 0
    assert f"\n{FAMILY} 0\n" in render(snapshot)

    # Off: nothing looked, so no 0 that would read as "looked, found none".
    off = _scraped(sim, _config(tree, processes=False))
    assert off.process_log_name_conflicts is None
    assert FAMILY not in render(off)


def test_the_api_servers_word_on_the_pod_uid_outranks_its_log_directory(tmp_path: Path) -> None:
    """A pod that can write the host's /var/log can rename the UID's /var/log/pods directory as
    easily as it adds a symlink. The API server is not writable from there, so with --kubernetes
    its name for the cgroup's pod UID decides, and the directory only where it says nothing."""
    real, forged = log_names.REAL, log_names.FORGED
    both = log_names._held_by(real, forged)
    # The only directory for the UID now names the forged pod; the API names the real one.
    assert log_names._rows(
        tmp_path / "a", both, log_names._kube_naming(real), pod_dirs=(forged[:2],)
    ) == ({real}, {})
    # Without the API the directory is all there is, as before.
    assert log_names._rows(tmp_path / "b", both, pod_dirs=(forged[:2],)) == ({forged}, {})
