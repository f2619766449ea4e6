"""Energy counters that a glitched reading cannot inflate or freeze (issue 42's High and Medium
findings), on the default simulated node on a stepped clock.

- A board that reports 0xFFFFFFFF mW (NVML's uint32 ceiling) for two sweeps once added 8.6 MJ to
  DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION and to one pod's joules, after which the counter stayed
  flat for hours while the GPU drew 620 W.
- GPM reading +Inf for a MIG instance turned pod energy series into NaN for good.
- A power row on a slower cadence of its own was integrated as if fresh: a 30 s-old 594 W for
  25 s after the GPU went idle.
"""

from __future__ import annotations

import itertools
import math

import pytest

from kube_gpu_exporter.exporter.fields.table import BY_NAME
from tests.support.stepped_node import samples, stepped_default_node

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ
POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
POD_ENERGY = "kube_gpu_exporter_pod_gpu_energy_joules_total"
REJECTED = "kube_gpu_exporter_readings_rejected_total"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
FAMILIES = (ENERGY, POWER, POD_ENERGY, REJECTED, SM_ACTIVE)
UINT32_MAX = 0xFFFFFFFF


def _gpu(found: list[tuple[dict[str, str], float]], gpu: str) -> list[tuple[dict, float]]:
    return [(labels, value) for labels, value in found if labels.get("gpu") == gpu]


def _board(found: list[tuple[dict[str, str], float]], gpu: str) -> float | None:
    values = [v for labels, v in _gpu(found, gpu) if "GPU_I_ID" not in labels]
    assert len(values) <= 1
    return values[0] if values else None


# Energy and power only: GPM's rounds are most of a step's cost and feed no figure checked there.
NO_GPM = "--no-collector.gpm"


def test_a_power_glitch_moves_energy_by_at_most_the_limit_for_its_duration() -> None:
    # Two sweeps at the 1 s poll read it, as in the finding. NVML's counter is read every 10 s
    # rather than the default minute, so that the 25 s after the glitch span the same three
    # counter reads (where the estimate meets the counter) as three minutes would.
    glitch_seconds = 2.5
    with stepped_default_node(NO_GPM, "--collector.field-interval=energy-counter=10s") as node:
        gpu = node.nvml.gpus[0]
        ceiling_w = (gpu.model.power_limit_max_mw or gpu.model.tdp_mw) / 1000
        for _ in range(5):
            node.step()
        start = samples(node.step(), FAMILIES)
        true_start = gpu.energy_mj(node.nvml.now())
        node.nvml.glitch_power(0, UINT32_MAX, glitch_seconds)
        seen = [samples(node.step(), FAMILIES) for _ in range(25)]
        true_end = gpu.energy_mj(node.nvml.now())

    exported = [_board(s[ENERGY], "0") for s in [start, *seen]]
    assert all(value is not None for value in exported)
    exported_increase_mj = exported[-1] - exported[0]  # type: ignore[operator]
    true_increase_mj = true_end - true_start
    # Over 400 W on average for the 25 s: the GPU drew power throughout, something to check.
    assert true_increase_mj > 10_000_000, "the GPU drew power throughout: something to check"
    # What the glitch can add at most: the board's limit for the glitch's duration (issue 42's
    # bar). The estimate between counter reads adds its own drift, a few percent at most.
    allowed_mj = ceiling_w * 1000 * glitch_seconds
    assert exported_increase_mj <= true_increase_mj * 1.03 + allowed_mj
    assert exported_increase_mj >= true_increase_mj * 0.97 - allowed_mj

    # The pod holding GPU 0 is charged what the GPU used, not the glitch.
    pod_joules = [sum(v for _l, v in _gpu(s[POD_ENERGY], "0")) for s in [start, *seen]]
    assert pod_joules[-1] - pod_joules[0] == pytest.approx(exported_increase_mj / 1000, rel=1e-6)

    # No counter ever falls, nor stays flat while the GPU draws power for longer than the
    # glitch: the trapezoid across the missing samples moves it on at the next good one.
    for earlier, later in itertools.pairwise(exported):
        assert later >= earlier  # type: ignore[operator]
    for window in zip(exported, exported[3:], strict=False):
        assert window[1] > window[0]  # type: ignore[operator]

    # The glitched readings are missing samples: never shown, counted once per sweep.
    shown = [_board(s[POWER], "0") for s in seen]
    assert all(w is None or w <= ceiling_w for w in shown)
    assert shown.count(None) == 2, "the two glitched sweeps have no power sample"
    rejected = {
        (labels["field"], labels["reason"]): value
        for labels, value in seen[-1][REJECTED]
        if labels["UUID"] == gpu.uuid
    }
    assert rejected == {(POWER, "above_limit"): 2.0}


@pytest.mark.parametrize("value", [math.inf, math.nan, -math.inf])
def test_a_gpm_reading_that_is_not_finite_is_left_out_and_pod_energy_stays_finite(
    value: float,
) -> None:
    with stepped_default_node() as node:
        mig_gpu = next(g for g in node.nvml.gpus if g.mig_enabled)
        index = str(mig_gpu.index)
        # Two GPM samples, so two sweeps with the instances' readings, before the glitch.
        for _ in range(2):
            node.step()
        for instance in mig_gpu.live_instances():
            node.nvml.glitch_gpm(mig_gpu.index, value, 3.0, instance.gpu_instance_id)
        during = [samples(node.step(), FAMILIES) for _ in range(3)]
        after = [samples(node.step(), FAMILIES) for _ in range(5)]

    for scrape in [*during, *after]:
        rows = _gpu(scrape[POD_ENERGY], index)
        assert len(rows) > 3, "the MIG GPU's pod rows are there to check"
        assert all(math.isfinite(v) for _l, v in rows)
        assert all(math.isfinite(v) for _l, v in _gpu(scrape[SM_ACTIVE], index))
    # After the glitch, GPM answers again and the instances' rows move on.
    assert _gpu(after[-1][SM_ACTIVE], index), "SM activity is back"
    first = sum(v for _labels, v in _gpu(after[0][POD_ENERGY], index))
    last = sum(v for _labels, v in _gpu(after[-1][POD_ENERGY], index))
    assert last > first
    rejected = [
        (labels["field"], labels["reason"])
        for labels, count in after[-1][REJECTED]
        if labels["UUID"] == mig_gpu.uuid and count > 0
    ]
    gpm_fields = {row.name for row in BY_NAME.values() if row.profiling}
    assert rejected and all(f in gpm_fields and r == "not_finite" for f, r in rejected)


def test_power_on_a_slower_cadence_never_carries_the_counter_past_nvml() -> None:
    """With board power read every 30 s, the counter moves on NVML's own reads only: it can then
    never run ahead of NVML's counter, as integrating a 30 s-old 594 W after the GPU went idle
    at 69 W did."""
    # Power is read at 0 s and 30 s; the GPU goes idle at 35 s, and the next power read, at 60 s,
    # is the first to see it: 25 s in which a stale 594 W would carry the counter on.
    with stepped_default_node(NO_GPM, "--collector.field-interval", f"{POWER}=30s") as node:
        gpu = node.nvml.gpus[0]
        for _ in range(35):
            node.step()
        node.nvml.set_workload(0, "idle")
        for _ in range(25):
            exported = _board(samples(node.step(), FAMILIES)[ENERGY], "0")
            assert exported is not None
            assert exported <= gpu.energy_mj(node.nvml.now())
