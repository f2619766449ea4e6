"""The real-GPU harness's process-accounting check and its /proc readings, without a GPU: the
exporter's unattributed rows against NVML's process list and nvidia-smi's compute apps, built
here as a real H200 answered them, and the harness's own process list read off the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.processes import CLOCK_TICKS, ProcSample, proc_sample
from benchmarks.real_gpu import MIB, bus_id_key
from benchmarks.real_gpu.accounting import (
    Observation,
    ProcessCheck,
    check_load,
    check_simulated,
    merge,
    parse_compute_apps,
    unattributed_rows,
)
from benchmarks.real_gpu.independent import GpuProcesses, nvml_processes
from benchmarks.real_gpu.usage import usage_between
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.processes import ProcessTable

GPU_A, GPU_B = "00000000:00:06.0", "00000000:00:07.0"
UUID_A, UUID_B = "GPU-a", "GPU-b"
LOAD = 449
# What the real H200 said of its load: NVML 11114 MiB for the PID, nvidia-smi the same.
LOAD_MIB = 11114


def _row(uuid: str, memory: float, processes: int = 1, pod: str = "", instance: str = "") -> str:
    """One row of both families, labelled as the exporter labels them."""
    gi = f',GPU_I_ID="{instance}"' if instance else ""
    namespace = "team-a" if pod else ""
    labels = (
        f'gpu="0",UUID="{uuid}"{gi},hostname="vm",'
        f'namespace="{namespace}",pod="{pod}",container="{"main" if pod else ""}"'
    )
    return (
        f"kube_gpu_exporter_pod_gpu_memory_used_bytes{{{labels}}} {memory:.0f}\n"
        f"kube_gpu_exporter_pod_gpu_processes{{{labels}}} {processes}\n"
    )


def _exposition(*rows: str) -> str:
    return (
        "# TYPE kube_gpu_exporter_pod_gpu_memory_used_bytes gauge\n"
        + "".join(line for row in rows for line in row.splitlines(True) if "memory_used" in line)
        + "# TYPE kube_gpu_exporter_pod_gpu_processes gauge\n"
        + "".join(line for row in rows for line in row.splitlines(True) if "_processes{" in line)
    )


def _observation(
    exported_mib: float | None = LOAD_MIB,
    listed: dict[int, int | None] | None = None,
    smi: dict[tuple[str, int], float | None] | None = None,
) -> Observation:
    rows = [] if exported_mib is None else [_row(UUID_A, exported_mib * MIB)]
    memory: dict[int, int | None] = {LOAD: LOAD_MIB * MIB} if listed is None else listed
    apps = {(GPU_A, LOAD): float(LOAD_MIB)} if smi is None else smi
    return Observation(_exposition(*rows), {GPU_A: GpuProcesses(UUID_A, memory)}, apps)


VISIBLE = frozenset({LOAD})


# The exposition and nvidia-smi's CSV


def test_only_whole_gpu_unattributed_rows_are_read() -> None:
    text = _exposition(
        _row(UUID_A, 100 * MIB, 2),
        _row(UUID_A, 999 * MIB, 1, pod="trainer-0"),
        _row(UUID_B, 5 * MIB, 1, instance="3"),
    )
    rows = unattributed_rows(text)
    assert set(rows) == {UUID_A}
    assert (rows[UUID_A].memory_bytes, rows[UUID_A].processes) == (100 * MIB, 2)


def test_compute_apps_are_keyed_by_gpu_and_pid() -> None:
    text = "00000000:00:06.0, 449, 11114\n0000:00:07.0, 451, [N/A]\n\n"
    assert parse_compute_apps(text) == {(GPU_A, 449): 11114.0, (GPU_B, 451): None}
    assert parse_compute_apps("") == {}
    with pytest.raises(ValueError, match="unexpected row"):
        parse_compute_apps("No running processes found, really\n")


# Under load on a real GPU


def test_the_loads_memory_on_the_unattributed_row_passes() -> None:
    [check] = check_load(_observation(11558), LOAD, 1, VISIBLE)
    assert check == ProcessCheck(GPU_A, LOAD, True, 11558.0, LOAD_MIB, "nvidia-smi", True, "")


@pytest.mark.parametrize(
    ("exported_mib", "ok"),
    [
        (11669, True),  # 11114 MiB + 4.99 %
        (11671, False),  # + 5.01 %
        (10559, True),  # - 4.99 %
        (10557, False),  # - 5.01 %
        # The exporter's old reading of the H200: v2's used less the reservation, 616 MiB short.
        (LOAD_MIB - 616, False),
    ],
)
def test_the_row_must_be_within_five_percent(exported_mib: int, ok: bool) -> None:
    [check] = check_load(_observation(exported_mib), LOAD, 1, VISIBLE)
    assert (check.ok, check.listed) == (ok, True)


def test_no_unattributed_row_fails() -> None:
    [check] = check_load(_observation(None), LOAD, 1, VISIBLE)
    assert (check.ok, check.exported_mib, check.reference_mib) == (False, None, LOAD_MIB)
    assert "no unattributed row" in check.note


def test_the_load_missing_from_nvmls_list_fails() -> None:
    observation = _observation(listed={LOAD + 1: 500 * MIB, LOAD + 2: 600 * MIB})
    [check] = check_load(observation, LOAD, 1, frozenset({LOAD, LOAD + 1, LOAD + 2}))
    assert (check.ok, check.listed) == (False, False)
    assert check.note == f"load PID {LOAD} is not in NVML's list (2 other process(es))"


def test_another_process_on_the_gpu_leaves_the_memory_unjudged() -> None:
    observation = _observation(listed={LOAD: LOAD_MIB * MIB, 9000: 100 * MIB})
    [check] = check_load(observation, LOAD, 1, VISIBLE)
    assert (check.ok, check.listed, check.reference_mib) == (None, True, None)
    assert "1 other process(es) on the GPU" in check.note


def test_in_another_pid_namespace_the_one_listed_process_stands_for_the_load() -> None:
    host_pid = 731_000
    observation = _observation(
        listed={host_pid: LOAD_MIB * MIB}, smi={(GPU_A, host_pid): float(LOAD_MIB)}
    )
    [check] = check_load(observation, LOAD, 1, VISIBLE)
    assert (check.pid, check.listed, check.ok) == (host_pid, None, True)
    assert "which this PID namespace does not show" in check.note


def test_without_nvidia_smi_nvmls_own_figure_is_the_reference() -> None:
    observation = Observation(
        _exposition(_row(UUID_A, LOAD_MIB * MIB)),
        {GPU_A: GpuProcesses(UUID_A, {LOAD: LOAD_MIB * MIB})},
        None,
    )
    [check] = check_load(observation, LOAD, 1, VISIBLE)
    assert (check.ok, check.reference) == (True, "NVML (no nvidia-smi)")


def test_nvidia_smi_without_a_figure_leaves_it_unjudged() -> None:
    [check] = check_load(_observation(smi={(GPU_A, LOAD): None}), LOAD, 1, VISIBLE)
    assert (check.ok, check.reference) == (None, "nvidia-smi printed N/A")


def test_a_gpu_the_load_should_be_on_but_is_not_fails_once() -> None:
    observation = Observation(
        _exposition(_row(UUID_A, LOAD_MIB * MIB), _row(UUID_B, 0)),
        {GPU_A: GpuProcesses(UUID_A, {LOAD: LOAD_MIB * MIB}), GPU_B: GpuProcesses(UUID_B, {})},
        {(GPU_A, LOAD): float(LOAD_MIB)},
    )
    checks = check_load(observation, LOAD, 2, VISIBLE)
    assert [(c.gpu, c.ok) for c in checks] == [(GPU_A, True), ("-", False)]
    assert checks[1].note == "the load runs on 2 GPU(s); NVML lists it on 1"
    # With NVML refusing the second GPU's list, nothing can be said of it either way.
    refused = Observation(
        observation.exposition,
        {**observation.nvml, GPU_B: GpuProcesses(UUID_B, {}, "NO_PERMISSION")},
        observation.smi_apps,
    )
    checks = check_load(refused, LOAD, 2, VISIBLE)
    assert [(c.gpu, c.ok) for c in checks] == [(GPU_A, True), (GPU_B, None)]
    assert checks[1].note == "NVML refused the process list (NO_PERMISSION)"


def test_merged_rows_keep_the_first_failure_and_count_them() -> None:
    good = check_load(_observation(), LOAD, 1, VISIBLE)
    bad = check_load(_observation(LOAD_MIB / 2), LOAD, 1, VISIBLE)
    [merged] = merge([good, bad, good, bad])
    assert merged.ok is False and merged.exported_mib == LOAD_MIB / 2
    assert merged.note.endswith("failed in 2 of 4 snapshots")
    unjudged = check_load(_observation(smi={(GPU_A, LOAD): None}), LOAD, 1, VISIBLE)
    assert merge([good, unjudged]) == good  # the last judged row
    assert merge([unjudged]) == unjudged


# On the simulator


def test_the_simulated_check_counts_processes_and_sums_their_memory() -> None:
    listed = {GPU_A: GpuProcesses(UUID_A, {1001: 30 * MIB, 1002: 10 * MIB})}
    [ok] = check_simulated(Observation(_exposition(_row(UUID_A, 40 * MIB, 2)), listed, None))
    assert (ok.ok, ok.exported_mib, ok.reference_mib) == (True, 40.0, 40.0)
    assert ok.reference == "simulator, 2 process(es)"
    [miscounted] = check_simulated(
        Observation(_exposition(_row(UUID_A, 40 * MIB, 3)), listed, None)
    )
    assert miscounted.ok is False and miscounted.note == "the row counts 3 process(es)"
    [missing] = check_simulated(Observation(_exposition(), listed, None))
    assert missing.ok is False and "no unattributed row" in missing.note


@pytest.fixture
def sim_with_processes(frozen_sim: FakeNvml, tmp_path: Path) -> FakeNvml:
    frozen_sim.processes = ProcessTable(frozen_sim, FakeKubelet(frozen_sim, tmp_path / "k.sock"))
    return frozen_sim


def test_our_process_list_is_what_the_simulator_runs(sim_with_processes: FakeNvml) -> None:
    sim = sim_with_processes
    assert sim.processes is not None
    listed = nvml_processes(sim.api)
    assert set(listed) == {bus_id_key(g.pci_bus_id) for g in sim.gpus}
    t = sim.now()
    busy = 0
    for gpu in sim.gpus:
        mine = listed[bus_id_key(gpu.pci_bus_id)]
        assert mine.uuid == gpu.uuid
        if gpu.mig_enabled:
            # The parent's list is for privileged callers only.
            assert (mine.error, mine.memory_by_pid) == ("NO_PERMISSION", {})
            continue
        expected = {p.pid: used for p, used in sim.processes.memory(gpu, None, t)}
        assert mine.error is None and mine.memory_by_pid == expected
        busy += bool(expected)
    assert busy >= 2  # so the comparison had processes to compare


# /proc


def _fake_proc(root: Path, pid: int, utime: int, stime: int, rss_kib: int) -> None:
    folder = root / str(pid)
    folder.mkdir(parents=True)
    # A command name with a space and a ')' in it, as a process may choose.
    fields_3_to_13 = " ".join(["S"] + ["0"] * 10)
    (folder / "stat").write_text(f"{pid} (node check (v2)) {fields_3_to_13} {utime} {stime} 0 0\n")
    (folder / "status").write_text(
        f"Name:\tnode\nVmHWM:\t {rss_kib + 100} kB\nVmRSS:\t {rss_kib} kB\nThreads:\t3\n"
    )


def test_user_and_system_cpu_are_fields_14_and_15_of_stat(tmp_path: Path) -> None:
    _fake_proc(tmp_path, 77, utime=250, stime=750, rss_kib=75_000)
    reading = proc_sample(77, proc=tmp_path)
    assert reading == ProcSample(
        user_seconds=250 / CLOCK_TICKS,
        system_seconds=750 / CLOCK_TICKS,
        rss_bytes=75_000 * 1024,
        peak_rss_bytes=75_100 * 1024,
        threads=3,
        fds=0,
    )


def test_usage_is_the_difference_over_the_window() -> None:
    def sample(user: float, system: float, rss: int, peak: int) -> ProcSample:
        return ProcSample(rss, peak, threads=3, fds=10, user_seconds=user, system_seconds=system)

    first = sample(1.0, 2.0, 70 * 10**6, 71 * 10**6)
    middle = sample(1.2, 3.0, 90 * 10**6, 91 * 10**6)
    last = sample(1.5, 6.0, 75 * 10**6, 91 * 10**6)
    usage = usage_between([first, middle, last], wall_seconds=360.0)
    assert usage is not None
    assert (usage.user_seconds, usage.system_seconds) == pytest.approx((0.5, 4.0))
    assert (usage.user_seconds_per_hour, usage.system_seconds_per_hour) == pytest.approx((5, 40))
    assert usage.cpu_seconds_per_hour == pytest.approx(45.0)
    assert usage.steady_rss_mb == 75.0 and usage.peak_rss_bytes == 91 * 10**6
    assert usage_between([first], 10.0) is None


def test_this_process_reads_from_the_real_proc() -> None:
    import os

    reading = proc_sample(os.getpid())
    assert reading.rss_bytes > 0 and reading.peak_rss_bytes >= reading.rss_bytes
    assert reading.user_seconds + reading.system_seconds > 0
