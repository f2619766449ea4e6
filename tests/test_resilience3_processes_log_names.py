"""Two /var/log/containers names for one container ID (resilience round 3, item C).

The kubelet writes one symlink per container, so a second name for the same ID is a leftover or a
forgery (any pod that mounts the host's /var/log writable can add one). The index used to keep
whichever name the directory listed last. Now the process is named from the pods the kubelet says
hold the device (and from the Kubernetes view of its pod UID), an unresolvable conflict is
unattributed as `ambiguous_container`, and every conflict is counted and logged once."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from exporter.kubernetes.pod_metadata import EMPTY_VIEW, KubernetesView, PodMetadata
from exporter.podresources.allocations import Allocation, PodResourcesSnapshot
from exporter.podresources.attribution import attribute
from exporter.podresources.device_ids import parse_device_id
from exporter.processes.host_pids import HostPidOwners
from exporter.processes.kubelet_logs import ContainerNames, KubeletLogIndex
from exporter.processes.pod_usage import NOT_HOLDER, UNATTRIBUTED, pod_usage
from exporter.snapshot import GpuIdentity, GpuProcess, GpuSnapshot, NodeSnapshot, ProcessOwner
from tests import test_pid_owners as owners_tests

UID = owners_tests.UID
CID = owners_tests.CID
GPU = "GPU-00000000-0000-0000-0000-000000000001"
GIB = 1 << 30
REAL = ("ml", "trainer-0", "main")
FORGED = ("prod", "billing-0", "main")
AMBIGUOUS = "ambiguous_container"


def _logs(root: Path, *names: tuple[str, str, str]) -> Path:
    for namespace, pod, container in names:
        owners_tests.add_container_log(root, pod, namespace, container, CID)
    return root


def test_every_name_of_a_container_id_is_kept_and_the_conflict_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="exporter.processes")
    clock = owners_tests.Clock()
    index = KubeletLogIndex(_logs(tmp_path, FORGED, REAL), clock, rescan_interval_s=0.0)
    assert index.containers(CID) == (ContainerNames(*REAL), ContainerNames(*FORGED))
    assert index.container(CID) is None, "no single name to give"
    assert index.conflicts == 1
    index.rescan()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert CID in said[0] and "trainer-0" in said[0] and "billing-0" in said[0]


def _node(owner: ProcessOwner | str) -> NodeSnapshot:
    found = owner if isinstance(owner, ProcessOwner) else None
    process = GpuProcess(4242, None, 3 * GIB, 40, found, "" if found else str(owner))
    gpu = GpuSnapshot(
        GpuIdentity(0, GPU, "", "", mig_enabled=False), True, None, processes=(process,)
    )
    return NodeSnapshot(1.7e9, 1.0, 0.01, True, "580.65.06", (gpu,))


def _held_by(*holders: tuple[str, str, str]) -> PodResourcesSnapshot:
    return PodResourcesSnapshot(
        allocations=tuple(
            Allocation(ns, pod, container, "nvidia.com/gpu", parse_device_id(GPU))
            for ns, pod, container in holders
        ),
        allocatable=None,
        allocated=(),
        taken_at=1.7e9,
    )


def _rows(
    root: Path,
    pods: PodResourcesSnapshot,
    kube: KubernetesView | None = None,
    pod_dirs: tuple[tuple[str, str], ...] = (),
) -> tuple[set[tuple[str, str, str]], dict[str, int]]:
    """The containers GPU 0's process is counted for, and its unattributed reasons, with the two
    conflicting names in the log root. Which of them a directory lists last is the file system's
    business (by hash on ext4), so callers try each name as the right one."""
    logs = _logs(root / "log", REAL, FORGED)
    for namespace, pod in pod_dirs:
        owners_tests.add_pod_log_dir(logs, namespace, pod, UID)
    proc = owners_tests.host_proc(root)
    owners_tests.add_process(proc, 4242, 9000, owners_tests.POD_CGROUP)
    owner = HostPidOwners(proc, logs, owners_tests.Clock()).owner(4242)
    node = _node(owner)
    [device] = pod_usage(node, attribute(node, pods), kube).values()
    rows = {key for key, usage in device.by_container.items() if usage.processes}
    return rows - {UNATTRIBUTED}, dict(device.unattributed)


def test_the_pod_that_holds_the_device_names_the_process(tmp_path: Path) -> None:
    other = ("other", "pod-9", "main")
    assert _rows(tmp_path / "a", _held_by(REAL, other)) == ({REAL}, {})
    assert _rows(tmp_path / "b", _held_by(FORGED, other)) == ({FORGED}, {})
    assert _rows(tmp_path / "c", _held_by(other)) == (set(), {NOT_HOLDER: 1})


def test_when_both_hold_the_device_the_process_is_ambiguous(tmp_path: Path) -> None:
    assert _rows(tmp_path, _held_by(REAL, FORGED)) == (set(), {AMBIGUOUS: 1})


def _kube_naming(pod: tuple[str, str, str]) -> KubernetesView:
    meta = PodMetadata(pod[0], pod[1], UID, "", "", ())
    return replace(EMPTY_VIEW, pods=MappingProxyType({pod[:2]: meta}), pods_synced=True)


def test_the_kubernetes_view_of_the_pod_uid_decides(tmp_path: Path) -> None:
    both = _held_by(REAL, FORGED)
    assert _rows(tmp_path / "a", both, _kube_naming(REAL)) == ({REAL}, {})
    assert _rows(tmp_path / "b", both, _kube_naming(FORGED)) == ({FORGED}, {})


def test_the_pods_log_directory_of_the_cgroups_uid_decides(tmp_path: Path) -> None:
    both = _held_by(REAL, FORGED)
    assert _rows(tmp_path / "a", both, pod_dirs=(REAL[:2],)) == ({REAL}, {})
    assert _rows(tmp_path / "b", both, pod_dirs=(FORGED[:2],)) == ({FORGED}, {})
    # Two directories for the one UID decide nothing.
    assert _rows(tmp_path / "c", both, pod_dirs=(REAL[:2], FORGED[:2])) == (set(), {AMBIGUOUS: 1})
