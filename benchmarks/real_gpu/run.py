"""One validation run: the production exporter as a child process, half the time idle and half
under a matrix-multiply load, its expositions held against pynvml and nvidia-smi read at the same
moments; then NVML call timings on GPU 0, the report and the device record.

    python -m benchmarks.real_gpu [--minutes 4] [--out benchmarks/results] [--simulate]

Under --simulate the exporter runs its simulated node and the harness reads an in-process
simulator of the same fleet, so the whole pipeline runs on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import pynvml

from benchmarks.processes import REPO, ProcSample, proc_sample
from benchmarks.real_gpu.latency import ProcessUsage, sweep_estimate, time_nvml_calls
from benchmarks.real_gpu.load import LoadGenerator, Scrape, board_values, describe, load_response
from benchmarks.real_gpu.report import (
    ErrorGrowth,
    RunReport,
    device_record,
    exported_families,
    nvml_errors,
    unsupported_handling,
    write_outputs,
)
from exporter.nvml.binding import NVMLError, error_name

PROG = "python -m benchmarks.real_gpu"
DURATION_FAMILY = "kube_gpu_exporter_collection_duration_seconds"
READY_TIMEOUT_S = 90.0


class UsageError(Exception):
    """A start-up mistake; str() is the one line the user sees (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text[:40]!r}") from None
    if not 0.05 <= value <= 120:
        raise argparse.ArgumentTypeError(f"{value:g} is outside 0.05..120 minutes")
    return value


@dataclass(frozen=True, slots=True)
class Options:
    minutes: float
    out: Path
    simulate: bool
    repeats: int


def parse_args(argv: Sequence[str]) -> Options:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=_minutes, default=4.0, help="whole run (default 4)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--simulate", action="store_true", help="run on the simulated node")
    parser.add_argument(
        "--repeats", type=int, default=300, help="timed calls per NVML function (default 300)"
    )
    args = parser.parse_args(list(argv))
    if not 10 <= args.repeats <= 100_000:
        raise UsageError(f"argument --repeats: {args.repeats} is outside 10..100000")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"argument --out: {args.out} is not a directory")
    return Options(args.minutes, args.out, args.simulate, args.repeats)


# NVML in this process


@contextlib.contextmanager
def nvml_session(simulate: bool) -> Iterator[None]:
    fake = None
    if simulate:
        from exporter.simulator.fake_nvml import FakeNvml
        from exporter.simulator.fleet import default_fleet

        fake = FakeNvml(default_fleet()).install()
    try:
        try:
            pynvml.nvmlInit()
        except NVMLError as exc:
            raise UsageError(
                f"NVML did not initialise ({error_name(exc)}): no NVIDIA driver here? "
                "--simulate runs on the simulator"
            ) from None
        try:
            yield
        finally:
            pynvml.nvmlShutdown()
    finally:
        if fake is not None:
            fake.uninstall()


# The exporter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exporter_argv(port: int, simulate: bool) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "exporter",
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.interval=1s",
        "--no-podresources",
    ]
    return [*argv, "--simulate"] if simulate else argv


def get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


def wait_ready(process: subprocess.Popen[bytes], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the exporter exited with status {process.returncode}")
        with contextlib.suppress(OSError):
            if get(f"http://127.0.0.1:{port}/readyz", timeout=2)[0] == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the exporter was not ready within {timeout:g} s")


def stop(process: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# Sampling


@dataclass
class Snapshot:
    phase: str
    exposition: str
    scrape_seconds: float
    nvml: dict[str, Any]
    smi: dict[str, Any] | None
    proc: ProcSample | None


@dataclass
class Sampler:
    port: int
    pid: int
    smi_path: str | None
    support: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def take(self, phase: str) -> Snapshot:
        from benchmarks.real_gpu.independent import nvml_facts

        start = time.perf_counter()
        status, body = get(f"http://127.0.0.1:{self.port}/metrics")
        elapsed = time.perf_counter() - start
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        nvml = nvml_facts(self.support)
        smi = self._smi()
        proc = None
        with contextlib.suppress(OSError, RuntimeError):
            proc = proc_sample(self.pid)
        return Snapshot(phase, body, elapsed, nvml, smi, proc)

    def _smi(self) -> dict[str, Any] | None:
        if self.smi_path is None:
            return None
        from benchmarks.real_gpu.smi_xml import SmiXmlError, smi_facts

        try:
            done = subprocess.run(
                [self.smi_path, "-q", "-x"], capture_output=True, text=True, timeout=60, check=True
            )
            return smi_facts(done.stdout)
        except (subprocess.SubprocessError, OSError, SmiXmlError) as exc:
            note = f"nvidia-smi -q -x failed: {type(exc).__name__}"
            if note not in self.notes:
                self.notes.append(note)
            return None

    def phase(self, name: str, seconds: float, every: float) -> list[Snapshot]:
        """Snapshots every `every` seconds for `seconds`, at least one."""
        snapshots: list[Snapshot] = []
        end = time.monotonic() + seconds
        due = time.monotonic()
        while True:
            snapshots.append(self.take(name))
            due += every
            if due >= end:
                return snapshots
            time.sleep(max(0.0, due - time.monotonic()))


def scrape_interval(phase_seconds: float) -> float:
    """Every 5 s on a run of minutes; often enough for five snapshots a phase on a short one."""
    return min(5.0, max(1.0, phase_seconds / 5))


def sweep_seconds(expositions: Sequence[str]) -> list[float]:
    values = []
    for text in expositions:
        for line in text.splitlines():
            if line.startswith(DURATION_FAMILY + " "):
                values.append(float(line.split()[1]))
    return values


def merge_checks(rounds: Sequence[Sequence[Any]]) -> list[Any]:
    """One row per (family, GPU) over all snapshots: the first failure if any failed (noting
    in how many), else the last snapshot's row."""
    grouped: dict[tuple[str, str], list[Any]] = {}
    for checks in rounds:
        for check in checks:
            grouped.setdefault((check.family, check.gpu), []).append(check)
    merged = []
    for rows in grouped.values():
        failed = [c for c in rows if c.ok is False]
        if failed:
            note = f"failed in {len(failed)} of {len(rows)} snapshots"
            first = failed[0]
            merged.append(replace(first, note=f"{first.note}; {note}" if first.note else note))
        else:
            merged.append(rows[-1])
    return merged


def _start_load(simulate: bool, seconds: float) -> LoadGenerator:
    if simulate:
        # A real GPU loaded under a simulated exporter would prove nothing.
        return LoadGenerator(None, "none", 0, "simulated node, whose own workloads run instead")
    from benchmarks.real_gpu.load import start_load

    return start_load(seconds)


def _usage(snapshots: Sequence[Snapshot], wall_seconds: float) -> ProcessUsage | None:
    samples = [s.proc for s in snapshots if s.proc is not None]
    if len(samples) < 2:
        return None
    return ProcessUsage(
        cpu_seconds=samples[-1].cpu_seconds - samples[0].cpu_seconds,
        wall_seconds=wall_seconds,
        rss_bytes=[p.rss_bytes for p in samples],
        peak_rss_bytes=max(p.peak_rss_bytes for p in samples),
    )


def run(options: Options) -> int:
    phase_seconds = options.minutes * 60 / 2
    every = scrape_interval(phase_seconds)
    smi_path = None if options.simulate else shutil.which("nvidia-smi")
    with nvml_session(options.simulate), tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        log_path = Path(scratch) / "exporter.log"
        with log_path.open("wb") as log:
            exporter = subprocess.Popen(
                exporter_argv(port, options.simulate), cwd=REPO, stdout=log, stderr=log
            )
        try:
            try:
                wait_ready(exporter, port, READY_TIMEOUT_S)
            except RuntimeError as exc:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                print(f"{PROG}: {exc}", *tail, sep="\n", file=sys.stderr)
                return 1
            sampler = Sampler(port, exporter.pid, smi_path)
            started = time.monotonic()
            try:
                idle = sampler.phase("idle", phase_seconds, every)
                settle = 0.0 if options.simulate else min(15.0, phase_seconds / 5)
                generator = _start_load(options.simulate, phase_seconds + settle + 60)
                try:
                    time.sleep(settle if generator.running else 0.0)
                    loaded = sampler.phase("load", phase_seconds - settle, every)
                    if generator.process is not None and not generator.running:
                        sampler.notes.append("the load generator exited before the phase ended")
                finally:
                    generator.stop()
            except (OSError, RuntimeError) as exc:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                print(
                    f"{PROG}: scraping the exporter failed: {exc}", *tail, sep="\n", file=sys.stderr
                )
                return 1
            wall = time.monotonic() - started
        finally:
            stop(exporter)
        snapshots = [*idle, *loaded]
        timings = time_nvml_calls(options.repeats)
        support_seen = dict(sampler.support)
        for timing in timings:
            function = timing.label.split("(", 1)[0]
            if timing.error is None:
                support_seen[function] = "ok"
            else:
                support_seen.setdefault(function, timing.error)
        source = "simulated" if options.simulate else "real"
        record = device_record(source, support_seen)
        driver = record["driver_version"]
        gpus = pynvml.nvmlDeviceGetCount()

    report = build_report(options, record, gpus, generator, snapshots, sampler.notes)
    report.timings = timings
    report.sweep_estimate_us = sweep_estimate(timings)
    report.usage = _usage(snapshots, wall)
    report.driver_version = driver
    header = record_header(source, record["captured"])
    markdown, record_path = write_outputs(options.out, report, record, header)
    failures = _failures(report)
    print(f"{PROG}: wrote {markdown} and {record_path}; {failures} failed check(s)")
    if options.simulate:
        return 0  # the two simulators drift apart: only the pipeline is judged
    return 1 if failures else 0


def build_report(
    options: Options,
    record: dict[str, Any],
    gpus: int,
    generator: LoadGenerator,
    snapshots: Sequence[Snapshot],
    notes: list[str],
) -> RunReport:
    from benchmarks.real_gpu.compare import compare

    checks: dict[str, list[Any]] = {}
    checks["pynvml"] = merge_checks([compare(s.exposition, s.nvml, "pynvml") for s in snapshots])
    with_smi = [s for s in snapshots if s.smi is not None]
    if with_smi:
        rounds = [compare(s.exposition, s.smi or {}, "nvidia-smi") for s in with_smi]
        checks["nvidia-smi"] = merge_checks(rounds)
    elif not options.simulate:
        notes.append("nvidia-smi not found: no XML comparison")
    idle: list[Scrape] = [board_values(s.exposition) for s in snapshots if s.phase == "idle"]
    loaded: list[Scrape] = [board_values(s.exposition) for s in snapshots if s.phase == "load"]
    errors = ErrorGrowth(
        nvml_errors(snapshots[0].exposition), nvml_errors(snapshots[-1].exposition)
    )
    return RunReport(
        model_name=record["model_name"] or "unknown GPU",
        simulate=options.simulate,
        minutes=options.minutes,
        driver_version=record["driver_version"],
        gpus=gpus,
        load_description=describe(generator),
        checks=checks,
        responses=load_response(idle, loaded, load_ran=generator.backend != "none"),
        unsupported=unsupported_handling(
            record["nvml_support"], exported_families(snapshots[-1].exposition), errors
        ),
        sweep_seconds=sweep_seconds([s.exposition for s in snapshots]),
        scrape_seconds=[s.scrape_seconds for s in snapshots],
        notes=notes,
    )


def record_header(source: str, captured: str) -> str:
    if source == "real":
        return (
            f"Device record captured on a real GPU by `{PROG}` on {captured}.\n"
            "Schema: benchmarks/real_gpu/report.py, RECORD_KEYS."
        )
    return (
        f"Device record of a SIMULATED GPU, written by `{PROG} --simulate` on {captured}.\n"
        "It checks the harness's pipeline only; do not commit it as a model's record."
    )


def _failures(report: RunReport) -> int:
    checks = sum(1 for rows in report.checks.values() for c in rows if c.ok is False)
    responses = sum(1 for r in report.responses if r.ok is False)
    unhandled = sum(1 for u in report.unsupported if not u.handled)
    return checks + responses + unhandled


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        return run(options)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
