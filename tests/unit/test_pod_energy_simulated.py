"""Energy per pod on the default simulated node, wired as `kube-gpu-exporter --simulate` wires
it (the store of kube_gpu_exporter/exporter/app.py, its join and its ledger), over one simulated
minute on a stepped clock: every GPU's rows add up to the GPU's own energy counter, and the three
pods time-slicing GPU 3 get distinct shares, each its SM share over the minute."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.stepped_node import stepped_default_node

ENERGY = "kube_gpu_exporter_pod_gpu_energy_joules_total"
SM = "kube_gpu_exporter_pod_gpu_sm_utilization_ratio"
DEVICE_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ, the GPU's own counter
TIME_SLICED_GPU = "3"  # the default node's GPU shared by three chat-api pods
MINUTE = 60
# Simulated seconds per sweep. Each sweep reads NVML's own energy counter, so a longer step loses
# nothing the sums are checked against, and a minute in 30 sweeps costs half of one in 60.
STEP = 2.0


@dataclass(frozen=True, slots=True)
class Scrape:
    # {(gpu, GPU_I_ID, namespace, pod, container): joules}
    pod_energy: dict[tuple[str, str, str, str, str], float]
    # {gpu: mJ}
    device_energy: dict[str, float]
    # {(gpu, pod): SM share 0-1}, the unattributed row as pod ""
    sm: dict[tuple[str, str], float]


# name{labels} value, for the three families read here (a full parser costs seconds a minute).
_LINE = re.compile(r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')


def _parse(body: str) -> Scrape:
    pod_energy, device_energy, sm = {}, {}, {}
    for line in body.splitlines():
        if not line.startswith((ENERGY, DEVICE_ENERGY, SM)):
            continue
        match = _LINE.fullmatch(line)
        assert match is not None, line
        labels = dict(_LABEL.findall(match["labels"]))
        value = float(match["value"])
        if match["name"] == ENERGY:
            key = (
                labels["gpu"],
                labels.get("GPU_I_ID", ""),
                labels["namespace"],
                labels["pod"],
                labels["container"],
            )
            pod_energy[key] = value
        elif match["name"] == DEVICE_ENERGY:
            device_energy[labels["gpu"]] = value  # MIG instances repeat their board's
        elif match["name"] == SM:
            sm[(labels["gpu"], labels["pod"])] = value
    return Scrape(pod_energy, device_energy, sm)


@pytest.fixture(scope="module")
def minute() -> Iterator[list[Scrape]]:
    """One scrape per sweep, one sweep every STEP simulated seconds, for a simulated minute."""
    # NVML's energy counter itself every sweep, so that DCGM's figure is the counter.
    with stepped_default_node(
        "--collector.field-interval=energy-counter=0s", "--collector.field-interval=slow-fields=0s"
    ) as node:
        yield [_parse(node.step(STEP)) for _ in range(int(MINUTE / STEP) + 1)]


def _increases(first: Scrape, last: Scrape) -> dict[tuple[str, ...], float]:
    return {key: last.pod_energy[key] - first.pod_energy.get(key, 0.0) for key in last.pod_energy}


def test_every_gpus_rows_add_up_to_its_own_energy_over_the_minute(minute: list[Scrape]) -> None:
    first, last = minute[0], minute[-1]
    by_gpu: dict[str, float] = defaultdict(float)
    for key, joules in _increases(first, last).items():
        by_gpu[key[0]] += joules
    assert set(by_gpu) == set(last.device_energy) == {str(i) for i in range(8)}
    for gpu, joules in sorted(by_gpu.items()):
        device_mj = last.device_energy[gpu] - first.device_energy[gpu]
        assert device_mj > 30_000, f"GPU {gpu} used next to nothing: nothing was checked"
        # The bound is 5 %; the ledger splits the counter's own increase, so only float
        # rounding separates the two.
        assert joules * 1000 == pytest.approx(device_mj, rel=0.05)
        assert joules * 1000 == pytest.approx(device_mj, rel=1e-9)


def test_the_counters_never_decrease(minute: list[Scrape]) -> None:
    for earlier, later in itertools.pairwise(minute):
        assert all(later.pod_energy[k] >= j for k, j in earlier.pod_energy.items())


def test_the_time_sliced_pods_get_distinct_shares_that_follow_their_sm_use(
    minute: list[Scrape],
) -> None:
    first, last = minute[0], minute[-1]
    increases = _increases(first, last)
    gpu_joules = sum(j for key, j in increases.items() if key[0] == TIME_SLICED_GPU)
    pods = sorted({key[3] for key in increases if key[0] == TIME_SLICED_GPU and key[3]})
    assert len(pods) == 3
    energy_share = {
        pod: sum(j for key, j in increases.items() if key[0] == TIME_SLICED_GPU and key[3] == pod)
        / gpu_joules
        for pod in pods
    }
    # Each sweep's SM share of each pod (its SM ratio over the GPU's rows), and each sweep's
    # energy increase, from the scrapes themselves.
    sm_shares: dict[str, list[float]] = {pod: [] for pod in pods}
    weights: list[float] = []
    for earlier, scrape in itertools.pairwise(minute):
        row = {pod: v for (gpu, pod), v in scrape.sm.items() if gpu == TIME_SLICED_GPU}
        for pod in pods:
            sm_shares[pod].append(row[pod] / sum(row.values()))
        gpu_energy = scrape.device_energy[TIME_SLICED_GPU]
        weights.append(gpu_energy - earlier.device_energy[TIME_SLICED_GPU])
    ordered = sorted(energy_share.values())
    assert ordered[0] > 0.1 and ordered[1] - ordered[0] > 0.05 and ordered[2] - ordered[1] > 0.05
    for pod in pods:
        shares = sm_shares[pod]
        # The minute's energy share is each sweep's SM share weighted by that sweep's energy: it
        # lies between the pod's smallest and largest SM share of the minute (a weighted mean
        # always does), the whole tolerance there is, justified by nothing but arithmetic...
        assert min(shares) <= energy_share[pod] <= max(shares)
        # ...and it is that weighted mean, up to float rounding.
        expected = sum(s * w for s, w in zip(shares, weights, strict=True)) / sum(weights)
        assert energy_share[pod] == pytest.approx(expected, rel=1e-6)
    # The shares move with the workload over the minute (processes.py's swing): the split is not
    # a constant.
    assert any(max(s) - min(s) > 0.005 for s in sm_shares.values())
