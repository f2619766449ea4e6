"""`--web.config.file`: TLS and basic auth in the Prometheus exporter-toolkit format.

parse.py reads and checks the file, tls.py turns its TLS part into an SSLContext, reload.py
serves rotated certificates without a restart (and re-reads the file on SIGHUP), and
basic_auth.py is the aiohttp middleware that checks bcrypt passwords off the event loop.
"""
