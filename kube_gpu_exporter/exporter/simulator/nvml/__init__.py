"""The simulated NVML's parts, one NVML area per module;
`kube_gpu_exporter.exporter.simulator.fake_nvml` composes them into FakeNvml, and `api.py` turns its
calls into the object the poller is handed."""
