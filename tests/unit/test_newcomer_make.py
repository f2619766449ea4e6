"""The newcomer's two commands: `make run` installs the exporter alone and says which URL to open:
the cases that run inside this process; the others are in tests/process/test_newcomer_make.py."""

from __future__ import annotations

from kube_gpu_exporter.exporter.server import local_url


def test_the_url_names_a_host_a_browser_opens():
    assert local_url("::", 9455, False, "/metrics") == "http://localhost:9455/metrics"
    assert local_url("0.0.0.0", 9455, True, "/m") == "https://localhost:9455/m"
    assert local_url("::1", 9000, False, "/metrics") == "http://[::1]:9000/metrics"
    assert local_url("10.1.2.3", 9000, False, "/metrics") == "http://10.1.2.3:9000/metrics"
