"""The benchmark's wrk output parser, on wrk's real output format."""

from benchmarks.scrape_latency import parse_wrk

WRK_OUTPUT = """Running 5s test @ http://127.0.0.1:9455/metrics
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.86ms  446.12us  12.31ms   84.91%
    Req/Sec    15.60k     1.04k   17.02k    78.00%
  Latency Distribution
     50%  748.00us
     75%    1.00ms
     90%    1.20ms
     99%    1.80ms
  77620 requests in 5.00s, 389.50MB read
  Non-2xx or 3xx responses: 3
Requests/sec:  15523.87
Transfer/sec:     77.90MB
"""


def test_parse_wrk():
    result = parse_wrk(WRK_OUTPUT)
    assert result["p50_ms"] == 0.748
    assert result["p90_ms"] == 1.2
    assert result["p99_ms"] == 1.8
    assert result["rps"] == 15523.87
    assert result["errors"] == 3
