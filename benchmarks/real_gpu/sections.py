"""The report's sections beyond the comparisons: the summary at the top, process accounting, the
NVML call and field timings, and the exporter's own figures beside nvitop-exporter's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from benchmarks.real_gpu.accounting import TOLERANCE
from benchmarks.real_gpu.latency import (
    FIELD_BATCH_FUNCTION,
    README_FIGURES,
    SIM_PCIE_WINDOW_MS,
    SLOW_FIELD_US,
    FieldTiming,
    cost_model_description,
    summarise,
)
from benchmarks.real_gpu.markdown import fmt, table, user_system, verdict
from benchmarks.real_gpu.neighbour import POLL_SECONDS
from benchmarks.real_gpu.usage import ProcessUsage, ratio

if TYPE_CHECKING:
    from benchmarks.real_gpu.report import RunReport


def percentiles_ms(seconds: Sequence[float]) -> tuple[float, float] | None:
    if not seconds:
        return None
    median_us, p95_us = summarise("sample", seconds)
    return median_us / 1e3, p95_us / 1e3


def _cpu_line(usage: ProcessUsage) -> str:
    return (
        f"{usage.user_seconds_per_hour:.1f} s/h user + {usage.system_seconds_per_hour:.1f} s/h "
        f"system = {usage.cpu_seconds_per_hour:.1f} CPU-s/h; RSS {usage.steady_rss_mb:.1f} MB "
        "median"
    )


def _field_label(timing: FieldTiming) -> str:
    scope = "" if timing.scope is None else f" link {timing.scope}"
    return f"{timing.field_id}{scope} ({timing.name})"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def summary(report: RunReport, failures: Sequence[str]) -> list[str]:
    lines = ["## Summary", ""]
    if failures:
        lines += [f"{len(failures)} failed check(s):", ""]
        lines += [f"- **FAIL** {line}" for line in failures]
    else:
        lines.append("No check failed.")
    if report.simulate:
        lines += [
            "",
            "Simulated run: the two simulators drift apart, so value mismatches are expected "
            "and do not set the exit status.",
        ]
    return [*lines, "", "Headline figures:", "", *_headlines(report), ""]


def _headlines(report: RunReport) -> list[str]:
    lines = []
    sweep = percentiles_ms(report.sweep_seconds)
    if sweep:
        lines.append(f"- Sweep: {sweep[0]:.2f} ms median, {sweep[1]:.2f} ms p95")
    if report.usage is not None:
        lines.append(f"- Exporter: {_cpu_line(report.usage)}")
    if report.nvitop is not None and report.usage is not None:
        cpu = ratio(report.usage.cpu_seconds, report.nvitop.cpu_seconds)
        rss = ratio(report.usage.steady_rss_mb, report.nvitop.steady_rss_mb)
        lines.append(f"- {report.nvitop_note} beside it: {_cpu_line(report.nvitop)}")
        lines.append(f"- Ours / nvitop-exporter: CPU {_times(cpu)}, RSS {_times(rss)}")
    else:
        lines.append(f"- Beside nvitop-exporter: {report.nvitop_note or 'not run'}")
    slow = [t for t in report.fields if t.slow]
    if slow:
        shown = "; ".join(
            f"{_field_label(t)} {fmt(t.median_us, 0)} µs wall, {fmt(t.cpu_us, 0)} µs CPU"
            for t in slow
        )
        lines.append(f"- Fields above {SLOW_FIELD_US:g} µs read alone: {shown}")
    elif report.fields:
        lines.append(f"- No field costs above {SLOW_FIELD_US:g} µs read alone")
    lines.append(f"- Process accounting: {_process_headline(report)}")
    if report.run_seconds is not None:
        lines.append(f"- The run took {_duration(report.run_seconds)}.")
    return lines


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _process_headline(report: RunReport) -> str:
    if not report.processes:
        return f"could not run: {report.processes_note}"
    failed = sum(1 for c in report.processes if c.ok is False)
    judged = sum(1 for c in report.processes if c.ok is not None)
    text = f"{len(report.processes)} check(s), {judged} judged, {failed} failed"
    return f"{text} ({report.processes_note})" if report.processes_note else text


def processes(report: RunReport) -> list[str]:
    lines = ["## Process accounting (--collector.processes)", ""]
    lines.append(
        "The exporter runs with `--no-podresources`, so every process is on its GPU's "
        "unattributed row of `kube_gpu_exporter_pod_gpu_memory_used_bytes` (namespace, pod and "
        f"container empty). That row must be within {TOLERANCE:.0%} of the reference."
    )
    if report.simulate:
        lines.append(
            "Simulated: the reference is the harness simulator's process list on each whole "
            "GPU (their memory summed, and their number against the row's process count)."
        )
    else:
        lines.append(
            "Under load the load generator's PID must be in NVML's process list, and where it "
            "is the only process on the GPU the row is held against nvidia-smi's figure for "
            "that PID (`--query-compute-apps`)."
        )
    lines.append("")
    if not report.processes:
        return [*lines, f"Could not run: {report.processes_note}.", ""]
    if report.processes_note:
        lines += [report.processes_note, ""]
    rows = [
        (
            c.gpu,
            fmt(c.pid),
            fmt(c.listed),
            fmt(c.exported_mib, 1),
            fmt(c.reference_mib, 1),
            c.reference,
            verdict(c.ok),
            c.note,
        )
        for c in report.processes
    ]
    header = (
        "GPU",
        "PID",
        "in NVML's list",
        "exported MiB",
        "reference MiB",
        "reference",
        "verdict",
        "note",
    )
    return [*lines, *table(header, rows), ""]


def calls(report: RunReport) -> list[str]:
    lines = ["## Timings", "", "### NVML calls on GPU 0", ""]
    lines.append(
        "CPU is the calling thread's, mean per call: the total from its CPU clock, the split "
        "between user and system as the kernel's tick samples divide it ('-' where the loop "
        f"was shorter than a tick). Simulator: its cost model "
        f"({cost_model_description()}), and the PCIe sample window ({SIM_PCIE_WINDOW_MS:g} ms) "
        "per direction."
    )
    lines.append("")
    rows = [
        (
            t.label,
            "every sweep" if t.per_sweep else "not every sweep",
            str(t.calls),
            fmt(t.median_us, 1),
            fmt(t.p95_us, 1),
            fmt(t.cpu_us, 1),
            user_system(t.user_us, t.system_us),
            fmt(t.simulated_us, 1),
            "-" if t.ratio is None else f"{t.ratio:.2f}x",
            t.error or "",
        )
        for t in report.timings
    ]
    header = (
        "function",
        "when",
        "calls",
        "median µs",
        "p95 µs",
        "CPU µs",
        "user / system µs",
        "simulator µs",
        "real/sim",
        "error",
    )
    lines += [*table(header, rows), ""]
    real_us, sim_us = report.sweep_estimate_us
    lines.append(
        f"One GPU's calls of every sweep in a row: {real_us:,.0f} µs measured, "
        f"{sim_us:,.0f} µs in the simulator's model. Not every sweep: identity, helper threads, "
        "the slow fields where the exporter reads them only now and then, and calls timed for "
        "reference only."
    )
    return [*lines, ""]


def fields(report: RunReport) -> list[str]:
    lines = ["### Each field of the batch, read alone", ""]
    if not report.fields:
        return [*lines, "Not measured.", ""]
    lines.append(
        "`nvmlDeviceGetFieldValues(handle, [id])` on GPU 0 for each field the exporter asks "
        f"for, slowest first; above {SLOW_FIELD_US:g} µs (wall or CPU) is flagged. "
        "`return` is the field's own answer where it was not success."
    )
    lines.append("")
    rows = [
        (
            _field_label(t),
            str(t.calls),
            fmt(t.median_us, 1),
            fmt(t.p95_us, 1),
            fmt(t.cpu_us, 1),
            user_system(t.user_us, t.system_us),
            fmt(t.simulated_us, 1),
            t.nvml_return or "",
            "**slow**" if t.slow else "",
        )
        for t in report.fields
    ]
    header = (
        "field",
        "calls",
        "median µs",
        "p95 µs",
        "CPU µs",
        "user / system µs",
        "simulator µs",
        "return",
        "flag",
    )
    lines += [*table(header, rows), ""]
    alone = sum(t.median_us or 0.0 for t in report.fields)
    batches = [
        f"`{t.label}` {t.median_us:,.1f} µs"
        for t in report.timings
        if t.function == FIELD_BATCH_FUNCTION and t.median_us is not None
    ]
    if batches:
        lines += [
            f"Read alone, the fields add up to {alone:,.1f} µs; as the exporter batches them: "
            f"{'; '.join(batches)}.",
            "",
        ]
    return lines


def exporter(report: RunReport) -> list[str]:
    sweep = percentiles_ms(report.sweep_seconds)
    scrape = percentiles_ms(report.scrape_seconds)
    readme = README_FIGURES
    rows: list[tuple[str, str, str]] = []
    if sweep:
        rows.append(
            (
                "sweep duration (exporter gauge) median / p95 ms",
                f"{sweep[0]:.2f} / {sweep[1]:.2f}",
                "-",
            )
        )
    if scrape:
        rows.append(
            (
                "scrape latency (GET /metrics, 1 client) median / p95 ms",
                f"{scrape[0]:.2f} / {scrape[1]:.2f}",
                f"{readme['scrape_p50_ms']:.2f} / {readme['scrape_p99_ms']:.2f}"
                " (p50 / p99, 16 clients)",
            )
        )
    usage = report.usage
    if usage is not None:
        rows.append(
            (
                "exporter CPU s/h user / system (1 s interval here)",
                user_system(usage.user_seconds_per_hour, usage.system_seconds_per_hour),
                "-",
            )
        )
        rows.append(
            (
                "exporter CPU s/h (1 s interval here)",
                f"{usage.cpu_seconds_per_hour:.1f}",
                f"{readme['cpu_seconds_per_hour_at_5s']:g} (5 s interval)",
            )
        )
        rows.append(
            (
                "exporter RSS median / peak MB",
                f"{usage.steady_rss_mb:.1f} / {usage.peak_rss_bytes / 1e6:.1f}",
                f"{readme['steady_rss_mb']:g} steady",
            )
        )
    return [
        "### The exporter",
        "",
        "CPU from /proc/<pid>/stat (utime and stime, all threads) over the run.",
        "",
        *table(("figure", "this run", "docs/benchmarks.md (simulated one-GPU node)"), rows),
        "",
    ]


def beside_nvitop(report: RunReport) -> list[str]:
    lines = ["### Beside nvitop-exporter", ""]
    ours, theirs = report.usage, report.nvitop
    if ours is None or theirs is None:
        return [*lines, f"No comparison: {report.nvitop_note or 'not run'}.", ""]
    lines.append(
        f"{report.nvitop_note}, run at the same time as ours, both polling every "
        f"{POLL_SECONDS:g} s and both scraped at the same moments, over the same "
        f"{theirs.wall_seconds:.0f} s (idle and load). Ours runs with more on than "
        "nvitop-exporter does (GPM, XID events, PCIe throughput, process accounting)."
    )
    lines.append("")
    rows = [
        (
            "CPU s/h user / system",
            user_system(ours.user_seconds_per_hour, ours.system_seconds_per_hour),
            user_system(theirs.user_seconds_per_hour, theirs.system_seconds_per_hour),
            "-",
        ),
        (
            "CPU s/h",
            f"{ours.cpu_seconds_per_hour:.1f}",
            f"{theirs.cpu_seconds_per_hour:.1f}",
            _times(ratio(ours.cpu_seconds, theirs.cpu_seconds)),
        ),
        (
            "RSS median / peak MB",
            f"{ours.steady_rss_mb:.1f} / {ours.peak_rss_bytes / 1e6:.1f}",
            f"{theirs.steady_rss_mb:.1f} / {theirs.peak_rss_bytes / 1e6:.1f}",
            _times(ratio(ours.steady_rss_mb, theirs.steady_rss_mb)),
        ),
    ]
    header = ("figure", "kube-gpu-exporter", "nvitop-exporter", "ours / nvitop")
    return [*lines, *table(header, rows), ""]
