"""The DCGM field table (one row per exported DCGM field, table.py), what a dcgm-exporter
collectors file selects from it (collectors_file.py, selection.py), DCGM's own field names
(dcgm_catalogue.py), and the rows of dcgm-exporter's own families that the exporter computes
(health_status_row.py, p2p_status_row.py). The docs tables generated from it are
kube_gpu_exporter/exporter/docs_table.py, outside: they also show the compatibility profiles
(dcgm_compat.py), which are made from the table."""
