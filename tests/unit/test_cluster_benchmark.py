"""The 1,000-node benchmark's machinery, on a five-node cluster: the synthetic history, promtool's:
the cases that run inside this process; the others are in tests/bench/test_cluster_benchmark.py."""

from __future__ import annotations

import re

from benchmarks.cluster.inline_rules import Inliner
from tests.bench.test_cluster_benchmark import RULES


def test_inlining_pushes_matchers_and_picks_variants():
    inline = Inliner(RULES, "30s")
    assert inline.inline('a:x:sum{node=~"n1"}') == (
        '(sum by (node) (x{job="kube-gpu-exporter", node=~"n1"}))'
    )
    only_two = inline.inline('b:x:sum{size="2"}')
    assert "/ 2" in only_two and "/ 1" not in only_two
    both = inline.inline("b:x:sum")
    assert both.count("label_replace(") == 2 and " or " in both
    assert re.search(r"\)\[2h:30s\]\)$", inline.inline("avg_over_time(a:x:sum[2h])"))
    # A group with an interval of its own keeps it.
    assert re.search(r"\)\[2h:5m\]\)$", inline.inline("avg_over_time(c:x:avg_over_window[2h])"))
