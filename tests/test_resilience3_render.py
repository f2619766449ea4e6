"""Input from outside must not take /metrics down: a pod label that cannot be encoded, one
entity whose value cannot be rendered, a join that fails, a renderer that raises. Each costs its
own part of the body at most, counted in kube_gpu_exporter_render_errors_total, and the poller
goes on sweeping."""

from __future__ import annotations

import http.client
import re
import time
import urllib.request
from dataclasses import replace

import pytest

from exporter.attribution.context import AttributionContext
from exporter.exposition.renderer import Renderer
from exporter.exposition.store import ExpositionStore
from exporter.exposition.text_format import escape_label_value, label_body
from exporter.podresources.allocations import PodResourcesSnapshot
from tests.conftest import LABELS, joined_with, render, unexpected_lint_findings
from tests.fake_kube_api import FakeKubeApi, write_kubeconfig
from tests.test_process import scrape_until, start_exporter

LONE_SURROGATES = "\udcff\ud800"


def _uuid(series: str) -> str:
    found = re.search(r'UUID="([^"]+)"', series)
    assert found is not None, series
    return found.group(1)


def test_a_lone_surrogate_in_a_label_value_becomes_the_replacement_character() -> None:
    escaped = escape_label_value(f'team "{LONE_SURROGATES}"\n')
    assert escaped == 'team \\"\ufffd\ufffd\\"\\n'
    escaped.encode()  # would raise UnicodeEncodeError with the surrogates left in
    assert label_body((("a", "ok"), ("b", "x\udcffy"))) == 'a="ok",b="x\ufffdy"'


def test_one_gpu_whose_value_cannot_render_costs_only_its_own_series(make_poller, sim) -> None:
    snapshot = make_poller(sim).sweep()
    broken = snapshot.gpus[3]
    assert broken.readings is not None
    gpus = list(snapshot.gpus)
    # A value no formatter knows, in one GPU's readings only.
    gpus[3] = replace(broken, readings=replace(broken.readings, temperature_c="hot"))
    text = render(replace(snapshot, gpus=tuple(gpus)))
    temps = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    uuids = {_uuid(line) for line in temps}
    healthy = {g.identity.uuid for g in snapshot.gpus if g.identity and g.readings} - {
        broken.identity.uuid
    }
    assert healthy <= uuids and broken.identity.uuid not in uuids
    assert 'kube_gpu_exporter_render_errors_total{part="DCGM_FI_DEV_GPU_TEMP"} 1' in text
    assert "DCGM_FI_DEV_POWER_USAGE{" in text
    assert unexpected_lint_findings(text) == []


def test_a_pod_join_that_fails_leaves_the_device_series_without_pods(make_poller, sim) -> None:
    snapshot = make_poller(sim).sweep()
    # An allocations list that is not one: the join fails as a whole.
    pods = PodResourcesSnapshot(None, None, (), 0.0)  # type: ignore[arg-type]
    text = render(snapshot, context=AttributionContext(pods=pods))
    plain = render(snapshot)
    assert text.count("DCGM_FI_DEV_GPU_TEMP{") == plain.count("DCGM_FI_DEV_GPU_TEMP{") > 0
    assert 'kube_gpu_exporter_render_errors_total{part="pod join"} 1' in text
    assert "kube_gpu_exporter_build_info{" in text


class _Exploding(Renderer):
    def render_body(self, node):
        raise RuntimeError("boom")


def test_a_renderer_that_raises_does_not_reach_the_poller(make_poller, sim, caplog) -> None:
    store = ExpositionStore(_Exploding(LABELS), joined_with())
    poller = make_poller(sim, publish=store.publish)
    for _ in range(3):
        store.publish(poller.sweep())  # raised into the poller's loop before
    assert store.latest is not None and store.current is None
    assert sum("rendering the exposition failed" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(RuntimeError):
        store.render_latest()  # a scrape still sees the failure and answers 500 itself


@pytest.mark.process
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
