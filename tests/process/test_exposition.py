"""The exposition: dcgm-exporter names and labels, exact values, and Prometheus' own checks, and
one part of /metrics failing to render costing only itself: the cases that start a process or
need a system package's binary; the others are in tests/unit/test_exposition.py."""

from __future__ import annotations

import http.client
import re
import time
import urllib.request
from collections import Counter
from dataclasses import replace

from tests.conftest import (
    promtool_check_metrics,
    render,
    start_xid_watch,
    unexpected_lint_findings,
)
from tests.support.exporter_process import scrape_until, start_exporter
from tests.support.fake_kube_api import FakeKubeApi, write_kubeconfig
from tests.unit.test_exposition import LONE_SURROGATES, render_once, uuid_of


def test_no_duplicate_series_and_promtool_accepts_the_output(sim, make_poller):
    poller = make_poller(sim)
    start_xid_watch(sim, poller)
    sim.inject_xid(1, 79)
    text = render_once(poller, lambda text: "DCGM_EXP_XID_ERRORS_TOTAL{" in text)
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")]
    assert not [s for s, n in Counter(series).items() if n > 1]
    assert unexpected_lint_findings(text) == []
    # Our own metrics are lint-clean.
    own = "".join(
        block
        for block in re.split(r"(?=^# HELP )", text, flags=re.M)
        if block.startswith("# HELP kube_gpu_exporter_")
    )
    code, output = promtool_check_metrics(own)
    assert code == 0 and output.strip() == "", output


# ---- One part failing to render costs only itself ----


def test_one_gpu_whose_value_cannot_render_costs_only_its_own_series(make_poller, sim) -> None:
    snapshot = make_poller(sim).sweep()
    broken = snapshot.gpus[3]
    assert broken.readings is not None
    gpus = list(snapshot.gpus)
    # A value no formatter knows, in one GPU's readings only.
    hot = broken.readings.with_values({"DCGM_FI_DEV_GPU_TEMP": "hot"})
    gpus[3] = replace(broken, readings=hot)
    text = render(replace(snapshot, gpus=tuple(gpus)))
    temps = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    uuids = {uuid_of(line) for line in temps}
    healthy = {g.identity.uuid for g in snapshot.gpus if g.identity and g.readings} - {
        broken.identity.uuid
    }
    assert healthy <= uuids and broken.identity.uuid not in uuids
    assert 'kube_gpu_exporter_render_errors_total{part="DCGM_FI_DEV_GPU_TEMP"} 1' in text
    assert "DCGM_FI_DEV_POWER_USAGE{" in text
    assert unexpected_lint_findings(text) == []


def test_an_api_pod_label_of_lone_surrogates_leaves_metrics_and_health_up(tmp_path) -> None:
    """The hostile-input report: one such label made every /metrics 500, and the poller thread
    crashed five times and gave up, so /healthz went 503."""
    node = "sim-gpu-node-0"
    api = FakeKubeApi(node)
    api.put_pod(
        api.pod(
            "ml-training",
            "llm-pretrain-worker-0",
            labels={"team": LONE_SURROGATES, "app.kubernetes.io/name": "llm"},
        )
    )
    api.start()
    proc, base = start_exporter(
        "--kubernetes",
        f"--kubernetes.kubeconfig={write_kubeconfig(tmp_path / 'kubeconfig', api.host)}",
        "--kubernetes.enable-pod-labels",
        "--kubernetes.pod-label-allowlist=.*",
    )
    try:
        text = scrape_until(
            base,
            lambda t: 'app_kubernetes_io_name="llm"' in t,
            what="the pod's labels on its series",
            proc=proc,
        )
        assert LONE_SURROGATES not in text and "\ufffd" not in text
        # Left out at the source and counted: no `team` on the series or the allocation rows.
        assert 'team="' not in text and 'label_team="' not in text
        assert 'kube_gpu_exporter_pod_series_labels_dropped_total{reason="not_text"} 1' in text
        assert "kube_gpu_exporter_pod_labels_dropped_total 1" in text
        assert unexpected_lint_findings(text) == []
        # Several sweeps and scrapes later the exporter is still healthy and serving.
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
                assert response.status == 200
                response.read().decode("utf-8")
            time.sleep(1)
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            assert response.status == 200
    except http.client.HTTPException as exc:  # pragma: no cover - named in the failure
        raise AssertionError(f"/metrics failed: {exc}") from exc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        api.stop()
