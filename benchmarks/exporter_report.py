"""The exporter side's results as markdown: one table of costs per fleet and participant, one of
scrape latency side by side, and the ratios the targets are judged by."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.exporter_side import FleetResult, LatencyRow, Measured

MB = 1_000_000
NAMES = {
    "ours": "kube-gpu-exporter",
    "baseline": "baseline (prometheus_client Gauges)",
    "nvitop": "nvitop-exporter",
}
# The done-when targets of the benchmark issue.
P99_TARGET_FLEET = "mig-56"
P99_TARGET_CLIENTS = 16
P99_TARGET_RATIO = 20.0
RSS_TARGET_FLEET = "default"
RSS_TARGET_BYTES = 60 * MB


def _fleet_title(result: FleetResult) -> str:
    mig = f", {result.mig_instances} MIG instances" if result.mig_instances else ""
    return f"`{result.fleet}` ({result.gpus} GPU{'s' if result.gpus > 1 else ''}{mig})"


def cost_table(results: Sequence[FleetResult]) -> list[str]:
    lines = [
        "| fleet | exporter | series | body KB | gzip KB | render ms / snapshot | NVML calls "
        "/ sweep | CPU s / h | steady RSS MB | peak RSS MB | threads | Prometheus scrape ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        for name, m in result.measured.items():
            figures = result.inprocess.get(name, {})
            render = figures.get("render_ms")
            calls = figures.get("nvml_calls_per_sweep")
            scrape = m.prometheus_scrape_seconds
            lines.append(
                f"| {_fleet_title(result)} | {NAMES[name]} | {m.series:,} | "
                f"{m.body_bytes / 1000:,.1f} | "
                f"{'-' if m.gzip_bytes is None else f'{m.gzip_bytes / 1000:,.1f}'} | "
                f"{'-' if render is None else f'{render:.2f}'} | "
                f"{'-' if calls is None else f'{calls:g}'} | "
                f"{m.cpu_seconds_per_hour:,.1f} | {m.steady_rss_bytes / MB:.1f} | "
                f"{m.peak_rss_bytes / MB:.1f} | {m.threads} | "
                f"{_scrape_cell(scrape, m.prometheus_scrape_failures)} |"
            )
    return lines


def _scrape_cell(seconds: float | None, failures: int) -> str:
    figure = "all failed" if seconds is None else f"{seconds * 1000:.1f}"
    return f"{figure} ({failures} failed)" if failures and seconds is not None else figure


def _row(measured: Measured, clients: int, use_gzip: bool) -> LatencyRow | None:
    return next((r for r in measured.latency if r.clients == clients and r.gzip == use_gzip), None)


def latency_table(results: Sequence[FleetResult]) -> list[str]:
    names = [n for n in NAMES if any(n in r.measured for r in results)]
    others = [n for n in names if n != "ours"]
    header = "| fleet | clients | gzip | " + " | ".join(
        f"{NAMES[n]} p50 / p99 ms (p99 min-max) | req/s" for n in names
    )
    header += " | " + " | ".join(f"p99 {n} / ours" for n in others) + " |"
    lines = [header, "|---|---:|:---:|" + "---:|---:|" * len(names) + "---:|" * len(others)]
    for result in results:
        ours = result.measured.get("ours")
        for row in ours.latency if ours else []:
            cells = []
            for name in names:
                measured = result.measured.get(name)
                other = _row(measured, row.clients, row.gzip) if measured else None
                cells.append(
                    "- | -"
                    if other is None
                    else f"{other.p50_ms:,.2f} / {other.p99_ms:,.2f} "
                    f"({other.p99_low:,.2f}-{other.p99_high:,.2f})"
                    f"{f' {other.errors} err' if other.errors else ''} | {other.rps:,.0f}"
                )
            ratios = []
            for name in others:
                measured = result.measured.get(name)
                other = _row(measured, row.clients, row.gzip) if measured else None
                ratios.append("-" if other is None else f"{other.p99_ms / row.p99_ms:,.1f}x")
            lines.append(
                f"| `{result.fleet}` | {row.clients} | {'yes' if row.gzip else 'no'} | "
                + " | ".join(cells)
                + " | "
                + " | ".join(ratios)
                + " |"
            )
    return lines


def nvml_calls(results: Sequence[FleetResult]) -> list[str]:
    lines = []
    for result in results:
        if result.fleet != RSS_TARGET_FLEET:
            continue
        ours = result.inprocess["ours"]
        baseline = result.inprocess.get("baseline")
        lines.append(
            f"- NVML calls per sweep on `{result.fleet}`: {ours['nvml_calls_per_sweep']:g} for the "
            "exporter, helpers included (GPM sampling each sweep, PCIe every third), against "
            + (
                f"{baseline['nvml_calls_per_sweep']:g} for the baseline's one call per field "
                f"({baseline['nvml_calls_per_sweep'] / ours['nvml_calls_per_sweep']:.1f}x)."
                if baseline
                else "no baseline."
            )
        )
        batched = ours["nvml_calls_by_function"].get("nvmlDeviceGetFieldValues", 0)
        lines.append(
            f"  The exporter's {batched:g} `nvmlDeviceGetFieldValues` calls per sweep carry "
            "every counter that has a field id (ECC, energy, PCIe replays, row remapping, memory "
            "temperature, NVLink per link, power), one batch per GPU."
        )
    return lines


def verdicts(results: Sequence[FleetResult]) -> list[str]:
    lines = []
    for result in results:
        ours, baseline = result.measured.get("ours"), result.measured.get("baseline")
        if result.fleet == P99_TARGET_FLEET and ours and baseline:
            for use_gzip in (False, True):
                mine = _row(ours, P99_TARGET_CLIENTS, use_gzip)
                theirs = _row(baseline, P99_TARGET_CLIENTS, use_gzip)
                if mine and theirs:
                    ratio = theirs.p99_ms / mine.p99_ms
                    lines.append(
                        f"- Target: p99 at {P99_TARGET_CLIENTS} clients on `{result.fleet}`, gzip "
                        f"{'on' if use_gzip else 'off'}, at least {P99_TARGET_RATIO:g}x better "
                        f"than the baseline: {ratio:,.1f}x "
                        f"({mine.p99_ms:.2f} ms against {theirs.p99_ms:,.2f} ms): "
                        f"{'met' if ratio >= P99_TARGET_RATIO else 'MISSED'}."
                    )
        if result.fleet == RSS_TARGET_FLEET and ours:
            steady = ours.steady_rss_bytes
            lines.append(
                f"- Target: steady RSS under {RSS_TARGET_BYTES / MB:g} MB on `{result.fleet}`: "
                f"{steady / MB:.1f} MB (peak {ours.peak_rss_bytes / MB:.1f} MB under 64 "
                f"concurrent scrapers): {'met' if steady < RSS_TARGET_BYTES else 'MISSED'}."
            )
    return lines


def render(results: Sequence[FleetResult]) -> str:
    lines = [
        "### Exporter side",
        "",
        *cost_table(results),
        "",
        *latency_table(results),
        "",
        *nvml_calls(results),
        *verdicts(results),
    ]
    return "\n".join(lines) + "\n"
