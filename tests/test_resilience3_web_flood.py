"""A sustained flood of new connections from one address against the real exporter process,
while a scraper on another loopback address keeps one connection alive between scrapes, as
Prometheus does. benchmarks/connection_flood.py measures the same at full scale."""

from __future__ import annotations

import re
import time

from benchmarks.connection_flood import (
    EVICTED,
    SCRAPER_ADDRESS,
    exporter,
    flood,
    scrape_from,
    timed_scrapes,
)
from exporter.connection_guard import raise_open_file_limit

# A quarter of this is what one address may hold.
CAP = 64
PER_ADDRESS = CAP // 4


def figure(body: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", body, re.M)
    assert found, f"{name} missing"
    return float(found.group(1))


def test_a_flood_from_one_address_cannot_evict_another_addresss_scraper():
    raise_open_file_limit()
    # 300 attackers churning a shared cap of 64: before the per-address cap, each new one pushed
    # the oldest idle connection out, and between two scrapes that was the scraper's.
    with exporter(f"--web.max-connections={CAP}") as port, flood(port, 300) as running:
        time.sleep(1.5)
        scrapes = timed_scrapes(port, 10, timeout=5.0, keep_alive=True)
        body = scrape_from(SCRAPER_ADDRESS, port)
    assert scrapes.ok >= 9, scrapes.failures
    # The flood really was churning, and only through its own address's share.
    assert running.connections > 1000, running.connections
    assert figure(body, EVICTED) > 1000
    assert figure(body, "kube_gpu_exporter_http_connections") <= PER_ADDRESS + 2
