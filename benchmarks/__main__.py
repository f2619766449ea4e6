"""`make bench`: the exporter side, its overhead beside nvitop-exporter, and the Prometheus side,
printed as one markdown report.

    python -m benchmarks [--part all|exporter|overhead|prometheus] [--output FILE] [--quick] ...

The full run takes about 75 minutes on a 2-core machine: roughly half for the exporter side (four
fleets x three exporters, each watched for a minute and driven by wrk), a quarter of an hour
for the overhead runs (benchmarks/overhead.py: the call-cost calibration on a node shaped like the
real H200 run, then both exporters at once at a 1 s and a 5 s poll with an HA pair of Prometheus
servers, on live and on precomputed simulated NVML, a burst of hand-made scrapes, the sweep's
floor (benchmarks/sweep_floor.py), a sweep's CPU after the poll interval's pause
(benchmarks/sweep_after_idle.py), the energy counter's drift between reads
(benchmarks/energy_drift.py), then the profile of where the exporter's own time and memory
go),
and the rest for the 1,000-node backfill and its queries. The exporter side ends with two
in-process figures: a process accounting round, and the per-sweep cost of splitting each GPU's
energy among its pods (benchmarks/pod_energy.py), then the peak memory of a 15.5 MiB pods LIST
(benchmarks/pod_list_memory.py). `--quick` runs the default fleet, short
overhead windows and a 50-node cluster for a smoke test.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import (
    energy_drift,
    exporter_report,
    exporter_side,
    overhead,
    overhead_profile,
    pod_energy,
    pod_list_memory,
    process_accounting,
    prometheus_report,
    prometheus_side,
    sweep_after_idle,
    sweep_floor,
)
from benchmarks.cluster.synthetic import CLUSTER, NodeGroup, Scale

QUICK_CLUSTER = tuple(NodeGroup(g.fleet, max(1, g.count // 20)) for g in CLUSTER)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = match.group(1).strip() if match else cpu
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        version = subprocess.run(
            ["prometheus", "--version"], capture_output=True, text=True, check=False
        ).stdout.splitlines()[0]
    except (OSError, IndexError):
        version = "prometheus not found"
    return (
        f"{os.cpu_count()} x {cpu}, {memory:.0f} GiB, {platform.system()} {platform.machine()}; "
        f"{platform.python_implementation()} {platform.python_version()}; {version}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--part", choices=("all", "exporter", "overhead", "prometheus"), default="all"
    )
    parser.add_argument("--output", help="also write the report to this file")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--fleets", help="comma-separated fleets for the exporter side")
    parser.add_argument("--runs", type=int, help="wrk runs per configuration (default 3)")
    parser.add_argument("--wrk-seconds", type=int, help="seconds per wrk run (default 4)")
    parser.add_argument("--cpu-window", type=float, help="seconds of CPU/RSS watch (default 60)")
    parser.add_argument("--workdir", help="where the backfill writes its files (default /tmp)")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sections = [f"## Benchmark run of {now}", "", f"Machine: {machine()}.", ""]
    if args.part in ("all", "exporter"):
        settings = exporter_side.Settings()
        if args.quick:
            settings = replace(
                settings,
                fleets=("default",),
                runs=1,
                wrk_seconds=2,
                warmup_seconds=8,
                cpu_window_seconds=15,
            )
        overrides = {
            "fleets": tuple(args.fleets.split(",")) if args.fleets else None,
            "runs": args.runs,
            "wrk_seconds": args.wrk_seconds,
            "cpu_window_seconds": args.cpu_window,
        }
        settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
        results = exporter_side.run(settings, progress)
        sections.append(exporter_report.render(results))
        progress("process accounting rounds")
        sections += ["", "### Process accounting", "", process_accounting.summary() + ".", ""]
        progress("energy per pod")
        sections += ["### Energy per pod", "", pod_energy.summary() + ".", ""]
        progress("a large pods LIST")
        sections += ["### A large pods LIST", "", pod_list_memory.summary() + ".", ""]
    if args.part in ("all", "overhead"):
        overhead_settings = overhead.Settings()
        if args.quick:
            overhead_settings = replace(overhead_settings, warmup_seconds=10.0, window_seconds=15.0)
        calibration = overhead.calibration_settings(
            overhead_settings.window_seconds, overhead_settings.warmup_seconds
        )
        sections += [
            "### Calibration: the simulated NVML's call costs against the real H200",
            "",
            overhead.render_calibration(overhead.run(calibration, progress)),
            "",
        ]
        rows = overhead.run(overhead_settings, progress)
        sections += ["### Overhead beside nvitop-exporter", "", overhead.render(rows), ""]
        sections += [
            "### A burst of hand-made scrapes",
            "",
            overhead.render_burst(overhead.burst(overhead_settings, progress=progress)),
            "",
        ]
        progress("the sweep's floor")
        sections += [
            "### The sweep's floor: its NVML calls against the exporter's own work",
            "",
            sweep_floor.render(
                sweep_floor.measure(fleet, 1.0, 0.5 if args.quick else 2.0)
                for fleet in sweep_floor.DEFAULT_FLEETS
            ),
            "",
        ]
        progress("a sweep after idle")
        sections += [
            "### A sweep back to back and after the poll interval's pause",
            "",
            sweep_after_idle.render(
                "default",
                sweep_after_idle.measure("default", 5 if args.quick else 20, (1.0, 3.0)),
            ),
            "",
        ]
        progress("the energy counter's drift")
        sections += [
            "### The energy counter between NVML's reads",
            "",
            energy_drift.render(
                (poll, fixed, energy_drift.measure(poll, 10.0 if args.quick else 60.0, fixed))
                for poll in (5.0, 1.0)
                for fixed in (True, False)
            ),
            "",
        ]
        progress("overhead profile")
        seconds = 10.0 if args.quick else 30.0
        sections += [
            "### Where the exporter's own time and memory go",
            "",
            overhead_profile.run(seconds=seconds),
            "",
        ]
    if args.part in ("all", "prometheus"):
        scale = Scale(cluster=QUICK_CLUSTER) if args.quick else Scale()
        result = prometheus_side.run(scale, progress, workdir_parent=args.workdir)
        sections.append(prometheus_report.render(result))
    report = "\n".join(sections)
    print(report)
    if args.output:
        Path(args.output).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
