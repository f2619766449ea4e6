"""The exporter's own error for bad start-up input, in a module of its own: the config, the web
config and the node backends all raise it, and none of them should import the others for it."""

from __future__ import annotations


class ConfigurationError(Exception):
    """Bad input found while starting up (e.g. the fleet file); str() is a one-line message."""
