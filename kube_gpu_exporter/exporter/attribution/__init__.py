"""The attribution join: one NVML snapshot with who holds each device (pod-resources, the
Kubernetes view, DRA, time-slicing) and who uses it (process accounting), joined once per
snapshot before rendering. `model` and `devices` import none of those sources, so the renderer
can read their output without them. `pod_energy` is the one part with state between snapshots:
the per-pod energy counters, run on each joined node after the join."""
