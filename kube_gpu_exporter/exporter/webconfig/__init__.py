"""`--web.config.file`: TLS and basic auth in the Prometheus exporter-toolkit format.

parse.py reads and checks the file, tls.py turns its TLS part into an SSLContext, reload.py
re-reads the file when it changes or on SIGHUP (rotated certificates for new connections, users
through live_users.py for the next request), and basic_auth.py is the aiohttp middleware that
checks bcrypt passwords off the event loop.
"""
