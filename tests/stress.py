"""The whole suite, several times in a row, beside processes that keep every core busy.

`make stress-test` runs it. Timing assumptions that hold on an idle machine break here: a test
that waits a fixed time and then counts, or a deadline sized for an idle CPU. It stops at the
first failing test (pytest's -x) and prints that run's end; each run's result line is printed
as it finishes. The CPU burners run at normal priority and are always killed, however the script
ends.

    python -m tests.stress [--runs 3] [--burners 2] [-- pytest arguments]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BURN = "while True: pass"


@contextmanager
def cpu_burners(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()


def result_line(output: str) -> str:
    """pytest's last line, `== 448 passed in 412.3s ==`, without its rule."""
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "(no output)"


def run_suite(pytest_args: Sequence[str], log: Path) -> tuple[int, str]:
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return proc.returncode, log.read_text(errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.stress", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument(
        "pytest_args", nargs="*", default=["-x"], help="passed to pytest, after -- (default -x)"
    )
    args = parser.parse_args(argv)
    # Killed by `make` or a CI timeout, the burners must still go: turn SIGTERM into an exit.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    logs = Path(tempfile.mkdtemp(prefix="stress-test-"))
    with cpu_burners(args.burners) as burners:
        print(f"{args.burners} CPU burners: pids {[b.pid for b in burners]}; logs in {logs}")
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            code, output = run_suite(args.pytest_args, logs / f"run{run}.log")
            seconds = time.monotonic() - started
            print(f"run {run}/{args.runs}: {result_line(output)} ({seconds:.0f}s wall)", flush=True)
            if dead := [b.pid for b in burners if b.poll() is not None]:
                print(f"CPU burners {dead} died during run {run}: it was not under contention")
                return 1
            if code != 0:
                print("\n".join(output.splitlines()[-80:]))
                print(f"run {run} failed (exit {code}); its whole output: {logs / f'run{run}.log'}")
                return code
    print(f"{args.runs} runs passed in a row beside {args.burners} CPU burners")
    return 0


if __name__ == "__main__":
    os.chdir(REPO)
    raise SystemExit(main())
