"""The DCGM field table (one row per exported DCGM field, table.py), what a dcgm-exporter
collectors file selects from it (collectors_file.py, selection.py), DCGM's own field names
(dcgm_catalogue.py), and the docs tables generated from it (docs_table.py)."""
