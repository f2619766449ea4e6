"""The node agent: reads NVML, joins the readings with the pods that hold each device, and serves
them as Prometheus metrics with dcgm-exporter's names and labels."""
