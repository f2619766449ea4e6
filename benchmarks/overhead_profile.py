"""Where the exporter's own CPU and memory go, on the precomputed simulated NVML.

    python -m benchmarks.overhead_profile [--fleet default] [--poll 1] [--seconds 30]

Three views of one running exporter (the command line's own steps, handed the simulated NVML
replaying precomputed answers: benchmarks/simulated.py, run_exporter; a fake kubelet in a process
of its own):

- CPU by thread (the poller, each helper, the event loop), read from each thread's own CPU
  clock with nothing else running in the process, so the figures are the exporter's own.
- CPU by module and by function, over every thread. cProfile sees only the thread that enabled
  it, and the exporter's work happens on a dozen, so this uses yappi's CPU clock, which hooks
  each thread the same way. Profiling slows Python calls several times, so the shares are what
  count, not the absolute milliseconds.
- Resident memory each top-level package brought in when it was first imported (RSS before and
  after the import statement that loaded it; packages it imported count for it).
- The Python heap at steady state by the package that allocated it (tracemalloc), code objects
  of imported modules included.
"""

from __future__ import annotations

import argparse
import builtins
import collections
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.processes import REPO, fake_kubelet, free_port

if TYPE_CHECKING:
    # Only for annotations: the imports view measures what the child process imports.
    from kube_gpu_exporter.exporter.nvml.source import NvmlSource

MB = 1_000_000
VIEWS = ("threads", "cpu", "imports", "heap")
SCRAPE_INTERVAL_SECONDS = 15.0
_PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
)
_SITE = ("site-packages/", "lib/python3")


def _rss_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) * 1024


def _package_of(path: str) -> str:
    """A source file as the package a reader knows: `kube_gpu_exporter.exporter.nvml`, `aiohttp`,
    `asyncio`; the benchmarks' own modules (the precomputed answers' replay) as `benchmarks`."""
    # kube_gpu_exporter down to the exporter's subpackages; benchmarks down to its own.
    for ours, depth in (("kube_gpu_exporter", 2), ("benchmarks", 1)):
        if f"/{ours}/" in path and "site-packages" not in path:
            folders = path.split(f"/{ours}/", 1)[1].split("/")[:-1]
            return ".".join([ours, *folders[:depth]])
    for marker in _SITE:
        if marker in path:
            rest = path.split(marker, 1)[1]
            if marker == "lib/python3":
                rest = rest.split("/", 1)[1] if "/" in rest else rest
            return rest.split("/", 1)[0].removesuffix(".py") or path
    return path.rsplit("/", 1)[-1] or path


class _ImportCosts:
    """RSS each top-level package added by its own modules' first imports: the RSS an import
    statement added, less what the imports it made in turn added (those count for their own
    packages)."""

    def __init__(self) -> None:
        self.by_package: collections.Counter[str] = collections.Counter()
        self._stack = threading.local()
        self._original = builtins.__import__

    def install(self) -> None:
        builtins.__import__ = self._import

    def uninstall(self) -> None:
        builtins.__import__ = self._original

    def _import(self, name: str, *args: Any, **kwargs: Any) -> Any:
        level = args[3] if len(args) > 3 else kwargs.get("level", 0)
        if level or not name or name in sys.modules:
            return self._original(name, *args, **kwargs)
        stack = getattr(self._stack, "frames", None)
        if stack is None:
            stack = self._stack.frames = []
        frame = [_rss_bytes(), 0]
        stack.append(frame)
        try:
            return self._original(name, *args, **kwargs)
        finally:
            stack.pop()
            added = _rss_bytes() - frame[0]
            self.by_package[name.split(".")[0]] += added - frame[1]
            if stack:
                stack[-1][1] += added


def _run_exporter(
    nvml: NvmlSource, argv: list[str], seconds: float, at_end: Callable[[], None]
) -> None:
    """The exporter on `nvml`, on this thread until `seconds` pass, then `at_end()` and
    SIGTERM."""

    def later() -> None:
        time.sleep(seconds)
        try:
            at_end()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=later, name="profile-timer", daemon=True).start()
    from benchmarks.simulated import run_exporter

    run_exporter(nvml, argv)


def child(view: str, fleet: str, warmup: float, seconds: float, argv: list[str]) -> None:
    """In the child process: one view, printed as JSON on stdout's last line."""
    result: dict[str, Any] = {}
    if view == "threads":
        from benchmarks.precomputed_answers import SimulatorCpu, precomputed_api
        from benchmarks.simulated import fleet_spec
        from kube_gpu_exporter.exporter.nvml.source import NvmlSource
        from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml

        # The simulator's models' CPU, by thread, is taken out of each thread's, as the overhead
        # run takes it out of the process's.
        simulator = SimulatorCpu()
        nvml = NvmlSource(precomputed_api(FakeNvml(fleet_spec(fleet)), simulator))
        at_start: dict[str, float] = {}

        def own_cpu() -> dict[str, float]:
            models = simulator.seconds_by_thread()
            return {name: cpu - models.get(name, 0.0) for name, cpu in _thread_cpu().items()}

        def threads_at_start() -> None:
            time.sleep(warmup)
            at_start.update(own_cpu())

        def threads_at_end() -> None:
            spent = {name: cpu - at_start.get(name, 0.0) for name, cpu in own_cpu().items()}
            result["threads"] = sorted(spent.items(), key=lambda kv: -kv[1])
            result["seconds"] = seconds

        threading.Thread(target=threads_at_start, daemon=True).start()
        _run_exporter(nvml, argv, warmup + seconds, threads_at_end)
    elif view == "cpu":
        import yappi

        from benchmarks.simulated import fleet_spec, simulated_nvml

        nvml = simulated_nvml(fleet_spec(fleet))
        yappi.set_clock_type("cpu")
        yappi.start(profile_threads=True)

        def cpu_at_end() -> None:
            yappi.stop()
            stats = yappi.get_func_stats()
            modules: collections.Counter[str] = collections.Counter()
            functions = []
            for s in stats:
                modules[_package_of(s.module)] += s.tsub
                where = f"{_package_of(s.module)}:{s.name}"
                functions.append((s.tsub, s.ttot, s.ncall, where))
            result["total"] = sum(modules.values())
            result["modules"] = modules.most_common(20)
            result["functions"] = sorted(functions, reverse=True)[:25]

        def steady_state() -> None:
            time.sleep(warmup)
            yappi.clear_stats()  # start-up and the replay's learning are not steady state

        threading.Thread(target=steady_state, daemon=True).start()
        _run_exporter(nvml, argv, warmup + seconds, cpu_at_end)
    elif view == "imports":
        imports = _ImportCosts()
        result["bare_python_rss"] = _rss_bytes()
        imports.install()
        from benchmarks.simulated import fleet_spec, simulated_nvml

        nvml = simulated_nvml(fleet_spec(fleet))
        result["simulator_rss"] = _rss_bytes()

        def imports_at_end() -> None:
            imports.uninstall()
            result["imports"] = imports.by_package.most_common(25)
            result["rss"] = _rss_bytes()

        _run_exporter(nvml, argv, warmup + seconds, imports_at_end)
    else:
        import tracemalloc

        # Its own bookkeeping inflates RSS, so the heap is a run of its own.
        tracemalloc.start()
        from benchmarks.simulated import fleet_spec, simulated_nvml

        nvml = simulated_nvml(fleet_spec(fleet))

        def heap_at_end() -> None:
            snapshot = tracemalloc.take_snapshot()
            heap: collections.Counter[str] = collections.Counter()
            for stat in snapshot.statistics("filename"):
                heap[_package_of(stat.traceback[0].filename)] += stat.size
            result["heap"] = heap.most_common(20)
            result["heap_total"] = sum(heap.values())

        _run_exporter(nvml, argv, warmup + seconds, heap_at_end)
    print(json.dumps(result), flush=True)


def _thread_cpu() -> dict[str, float]:
    """CPU seconds by thread name, numbered names (a pool's workers) summed under their stem."""
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)
    for thread in threading.enumerate():
        if thread.ident is None or thread.name in ("profile-timer",):
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            seconds = time.clock_gettime(clock)
        except (OSError, ProcessLookupError):
            continue  # the thread ended between the listing and the read
        spent[thread.name.rstrip("0123456789").rstrip("-_") or thread.name] += seconds
    return dict(spent)


def profile(view: str, fleet: str, poll: float, warmup: float, seconds: float) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="kge-profile-") as tmp,
        fake_kubelet(fleet, Path(tmp)) as socket_path,
    ):
        from benchmarks.simulated import fleet_spec

        port = free_port()
        argv = [
            f"--web.listen-address=127.0.0.1:{port}",
            f"--podresources.socket={socket_path}",
            f"--node-name={fleet_spec(fleet).node_name}",
            f"--collector.interval={poll:g}s",
            "--log.level=warn",
        ]
        child_argv = [sys.executable, "-m", "benchmarks.overhead_profile", "--child", view]
        child_argv += ["--fleet", fleet, "--warmup", str(warmup), "--seconds", str(seconds)]
        with subprocess.Popen(
            [*child_argv, "--", *argv],
            cwd=REPO,
            env={**os.environ, "BENCH_NVML_ANSWERS": "precomputed"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            # Scraped as an HA pair of Prometheus servers would, so the exposition is rendered
            # and the scrape schedule learnt as in production.
            for offset in (0.0, SCRAPE_INTERVAL_SECONDS / 2):
                threading.Thread(
                    target=_scrape_until_gone, args=(proc, port, offset), daemon=True
                ).start()
            stdout, stderr = proc.communicate(timeout=warmup + seconds + 120)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"profile {view} printed nothing: {stderr[-2000:]}")
    return json.loads(lines[-1])


def _scrape_until_gone(process: subprocess.Popen, port: int, offset_seconds: float) -> None:
    """From `offset_seconds` on, scrapes every SCRAPE_INTERVAL_SECONDS until `process` ends: one
    Prometheus server of an HA pair, on one kept-alive connection as Prometheus keeps it."""
    # As Prometheus sends them; the timeout header marks it a periodic scraper, which is what
    # the exporter learns its scrape schedule from (server.py).
    headers = {
        "Accept": _PROMETHEUS_ACCEPT,
        "Accept-Encoding": "gzip",
        "X-Prometheus-Scrape-Timeout-Seconds": "10",
    }
    time.sleep(offset_seconds)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while process.poll() is None:
        try:
            connection.request("GET", "/metrics", headers=headers)
            response = connection.getresponse()
            response.read()
            ok = response.status == 200
        except OSError:
            connection.close()
            ok = False
        time.sleep(SCRAPE_INTERVAL_SECONDS if ok else 0.2)
    connection.close()


def _thread_lines(threads: dict[str, Any]) -> list[str]:
    per_hour = 3600 / threads["seconds"]
    return [
        f"CPU by thread over {threads['seconds']:g} s (each thread's CPU clock less what the "
        "simulator's models spent on it, no profiler):",
        "",
        "| thread | CPU s / h |",
        "|---|---:|",
        *(
            f"| `{name}` | {spent * per_hour:.2f} |"
            for name, spent in threads["threads"]
            if spent * per_hour >= 0.01
        ),
        f"| all | {sum(spent for _, spent in threads['threads']) * per_hour:.2f} |",
        "",
    ]


def _cpu_lines(cpu: dict[str, Any], seconds: float) -> list[str]:
    total = cpu["total"] or 1e-9
    return [
        f"CPU by package over {seconds:g} s (yappi, all threads; shares of the profiled total):",
        "",
        "| package | share |",
        "|---|---:|",
        *(f"| `{name}` | {t / total:.1%} |" for name, t in cpu["modules"][:15]),
        "",
        "Functions by own time:",
        "",
        "| function | own share | with callees | calls |",
        "|---|---:|---:|---:|",
        *(
            f"| `{where}` | {own / total:.1%} | {tot / total:.1%} | {n:,} |"
            for own, tot, n, where in cpu["functions"][:15]
        ),
        "",
    ]


def _memory_lines(imports_view: dict[str, Any], heap_view: dict[str, Any]) -> list[str]:
    memory = {**imports_view, **heap_view}
    lines = [
        f"Memory: {memory['bare_python_rss'] / MB:.1f} MB RSS for the bare interpreter, "
        f"{memory['simulator_rss'] / MB:.1f} MB once the simulated NVML is in, "
        f"{memory['rss'] / MB:.1f} MB at the end; Python heap at the end "
        f"{memory['heap_total'] / MB:.1f} MB (its own run, under tracemalloc).",
        "",
        "| first imported | RSS added MB | | allocated by | Python heap MB |",
        "|---|---:|---|---|---:|",
    ]
    imports, heap = memory["imports"][:15], memory["heap"][:15]
    for i in range(max(len(imports), len(heap))):
        left = f"`{imports[i][0]}` | {imports[i][1] / MB:.1f}" if i < len(imports) else " | "
        right = f"`{heap[i][0]}` | {heap[i][1] / MB:.2f}" if i < len(heap) else " | "
        lines.append(f"| {left} | | {right} |")
    return lines


def render(views: dict[str, dict[str, Any]], seconds: float) -> str:
    """The views that were run, in VIEWS' order; memory needs both its views."""
    lines: list[str] = []
    if "threads" in views:
        lines += _thread_lines(views["threads"])
    if "cpu" in views:
        lines += _cpu_lines(views["cpu"], seconds)
    if "imports" in views and "heap" in views:
        lines += _memory_lines(views["imports"], views["heap"])
    return "\n".join(lines).rstrip("\n")


def run(
    fleet: str = "default",
    poll: float = 1.0,
    seconds: float = 30.0,
    views: tuple[str, ...] = VIEWS,
) -> str:
    # Two scrapes teach the exporter the scrape period (before that it renders every snapshot),
    # and five sweeps let the precomputed answers be learnt.
    warmup = max(2 * SCRAPE_INTERVAL_SECONDS, 5 * poll)
    return render({view: profile(view, fleet, poll, warmup, seconds) for view in views}, seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.overhead_profile", description=__doc__
    )
    parser.add_argument("--fleet", default="default")
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument(
        "--views",
        default=",".join(VIEWS),
        help="comma-separated, of " + ", ".join(VIEWS) + " (default: all)",
    )
    parser.add_argument("--child", choices=VIEWS, help=argparse.SUPPRESS)
    parser.add_argument("exporter_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.fleet, args.warmup, args.seconds, args.exporter_args)
        return 0
    views = tuple(view for view in args.views.split(",") if view)
    unknown = sorted(set(views) - set(VIEWS))
    if unknown:
        parser.error(f"--views: unknown {', '.join(unknown)}; the views are {', '.join(VIEWS)}")
    print(run(args.fleet, args.poll, args.seconds, views))
    return 0


if __name__ == "__main__":
    sys.exit(main())
