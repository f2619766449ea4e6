"""Shared pieces of the monitoring bundle: the one config and the PromQL vocabulary built on it."""
