"""The simulated node's control API (`/-/simulator/...` on an exporter run with --simulate):
what the GPUs and their pods are, and faults to inject into them."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


class SimulatorControl:
    def __init__(self, exporter_url: str) -> None:
        self._base = f"{exporter_url.rstrip('/')}/-/simulator"

    def gpus(self) -> list[dict[str, Any]]:
        """The simulated GPUs, with the pods that hold them."""
        with urllib.request.urlopen(f"{self._base}/gpus", timeout=10) as response:
            return json.load(response)

    def inject(self, gpu: int, action: str, /, **body: Any) -> dict[str, Any]:
        """POST a fault (or its cure), e.g. inject(3, "xid", xid=79). Positional-only, so a body
        may name a field `action` (recovery-action's)."""
        request = urllib.request.Request(
            f"{self._base}/gpus/{gpu}/{action}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)
