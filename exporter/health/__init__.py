"""One health verdict per GPU: the reason table (reasons.py), the pure function that applies it
to a snapshot (verdict.py), the DCGM_EXP_GPU_HEALTH_STATUS row a collectors file may list
(rows.py), and docs/health.md's reason table (docs_table.py). docs/health.md, 'The GPU health
verdict', says what each action asks of an operator."""
