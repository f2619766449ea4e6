"""Snapshot to Prometheus text format 0.0.4, rendered once per snapshot and served as bytes."""
