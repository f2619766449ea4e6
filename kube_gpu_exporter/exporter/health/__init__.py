"""One health verdict per GPU: the reason table (reasons.py), the pure function that applies it
to a snapshot (verdict.py), and docs/health.md's reason table (docs_table.py). The
DCGM_EXP_GPU_HEALTH_STATUS row a collectors file may list is the field table's side
(kube_gpu_exporter/exporter/fields/health_status_row.py). docs/health.md, 'The GPU health verdict',
says what each action asks of an operator."""
