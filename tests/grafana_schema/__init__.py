"""Grafana's own dashboard schema, run over the bundle's dashboards by the TypeScript compiler.

The npm packages are pinned by package.json and package-lock.json here and installed into
build/grafana-schema by `make grafana-schema-deps`; check.py drives the compiler."""
