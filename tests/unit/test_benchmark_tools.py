"""The benchmarks' parsers and bookkeeping, on real output formats."""

import pytest

from benchmarks import wrk
from benchmarks.processes import proc_sample

WRK_OUTPUT = """Running 5s test @ http://127.0.0.1:9455/metrics
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.86ms  446.12us  12.31ms   84.91%
    Req/Sec    15.60k     1.04k   17.02k    78.00%
  Latency Distribution
     50%  748.00us
     75%    1.00ms
     90%    1.20ms
     99%    1.80s
  77620 requests in 5.00s, 389.50MB read
  Socket errors: connect 0, read 2, write 0, timeout 4
  Non-2xx or 3xx responses: 3
Requests/sec:  15523.87
Transfer/sec:     77.90MB
"""


def test_parse_wrk():
    result = wrk.parse(WRK_OUTPUT)
    assert result.p50_ms == 0.748
    assert result.p99_ms == 1800.0  # seconds converted
    assert result.rps == 15523.87
    assert result.requests == 77620
    assert result.errors == 3 + 2 + 4


def test_parse_wrk_refuses_output_without_latencies():
    with pytest.raises(ValueError, match="unexpected wrk output"):
        wrk.parse("unable to connect to 127.0.0.1:9455 Connection refused\n")


def test_proc_sample_reads_this_process():
    import os

    sample = proc_sample(os.getpid())
    assert sample.rss_bytes > 10_000_000
    assert sample.peak_rss_bytes >= sample.rss_bytes
    assert sample.threads >= 1 and sample.fds >= 3
    assert sample.cpu_seconds > 0
